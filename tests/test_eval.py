import json

import pytest
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, load_group_config
from ablate.eval import summarize, write_eval
from ablate.metrics import pass_at_k
from ablate.tasks.countdown import VERDICTS


def row(n_numbers, n, correct, answered, length=10.0, verdicts=None):
    return {"id": f"p{n_numbers}-{correct}", "n_numbers": n_numbers, "n": n, "n_correct": correct,
            "n_answered": answered, "mean_length": length,
            "verdicts": verdicts or {"correct": correct, "no_answer": n - answered, "wrong_value": answered - correct}}


def test_summary_metrics_by_hand():
    rows = [row(3, 4, 4, 4), row(3, 4, 2, 4), row(4, 4, 0, 2, length=20.0), row(4, 4, 1, 3)]
    s = summarize(rows, ks=[1, 2, 4, 8], verdicts=VERDICTS)
    assert s["pass@1"] == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert s["pass@2"] == pytest.approx((1 + pass_at_k(4, 2, 2) + 0 + pass_at_k(4, 1, 2)) / 4)
    assert s["pass@4"] == pytest.approx(3 / 4) == s["best_of_n"]
    assert "pass@8" not in s  # not estimable from 4 samples
    # pass^k: all k correct, C(c, k) / C(4, k): 1, C(2, 2)/6 = 1/6, 0, 0 for k = 2; only the 4/4 prompt at k = 4
    assert s["pass^1"] == s["pass@1"]
    assert s["pass^2"] == pytest.approx((1 + 1 / 6 + 0 + 0) / 4)
    assert s["pass^4"] == pytest.approx(1 / 4) and "pass^8" not in s
    assert s["by_operands"]["3"]["pass^2"] == pytest.approx((1 + 1 / 6) / 2)
    assert s["by_operands"]["4"]["pass^4"] == 0.0
    assert s["exact_pass@1"] == pytest.approx(7 / 16)
    assert s["coverage"] == pytest.approx(13 / 16) and s["precision"] == pytest.approx(7 / 13)
    assert s["mixed_fraction"] == pytest.approx(2 / 4)
    assert s["mean_response_length"] == pytest.approx(12.5)
    assert s["verdicts"]["correct"] == 7 and s["verdicts"]["no_answer"] == 3 and s["verdicts"]["bad_format"] == 0
    assert s["by_operands"]["3"]["pass@1"] == pytest.approx(0.75)
    assert s["by_operands"]["4"]["pass@1"] == pytest.approx(0.125)
    assert s["n_samples"] == 4 and s["n_prompts"] == 4
    assert "tool" not in s  # rows without tool counts get no tool block
    for r, (calc, calls, errors) in zip(rows, [(4, 6, 1), (2, 2, 0), (0, 0, 0), (1, 1, 1)]):
        r.update(n_calc=calc, tool_calls=calls, tool_errors=errors)
    tool = summarize(rows, ks=[1])["tool"]
    assert tool == {"calls_per_rollout": pytest.approx(9 / 16), "calc_emission_rate": pytest.approx(7 / 16),
                    "tool_errors": 2}


def test_write_eval_follows_the_contract(tmp_path):
    rows = [row(3, 2, 1, 2)]
    out = write_eval(tmp_path, "no_tool", summarize(rows, [1]), rows)
    assert out == tmp_path / "eval" / "no_tool"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["regime"] == "no_tool" and summary["pass@1"] == 0.5
    assert [json.loads(line)["id"] for line in (out / "samples.jsonl").read_text().splitlines()] == ["p3-1"]


def test_evaluation_is_seeded_and_reports_tool_metrics(tiny_policy):
    from ablate.eval import evaluate
    from ablate.tasks.countdown import CountdownTask, Problem, Reward

    model, tokenizer = tiny_policy
    problems = [Problem((1, 2), 3), Problem((44, 19, 35), 98), Problem((5, 5), 25)]
    task = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))
    cfg = {"n": 3, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8, "batch_size": 6, "ks": [1, 2],
           "save_completions": 3}
    a = evaluate(model, tokenizer, problems, "compact", task, cfg, seed=1)
    b = evaluate(model, tokenizer, problems, "compact", task, cfg, seed=1)
    c = evaluate(model, tokenizer, problems, "compact", task, cfg, seed=2)
    assert a == b and [r["completions"] for r in a[1]] != [r["completions"] for r in c[1]]
    summary, rows = a
    assert [r["id"] for r in rows] == [p.id for p in problems] and all(r["n"] == 3 for r in rows)
    assert all(1 <= r["mean_length"] <= 8 for r in rows)
    assert set(summary["tool"]) == {"calls_per_rollout", "calc_emission_rate", "tool_errors"}
