"""The second task (issue 30): reasoning-gym's chain_sum behind the Task seam, end to end and in its parts.
Skipped as a whole when reasoning-gym (the optional extra) is not installed."""

import json
import random
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

pytest.importorskip("reasoning_gym", reason="reasoning-gym is an optional extra: pip install 'ablate-rl[reasoning-gym]'")

from ablate.checks import ConfigError, check_config  # noqa: E402
from ablate.config import CONF_DIR  # noqa: E402
from ablate.tasks import build_task  # noqa: E402


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["task=chain_sum", *overrides])


def test_the_task_comes_from_the_registry_with_its_own_scorer():
    cfg = cfg_of("experiment=smoke")
    check_config(cfg)
    assert cfg.reward.name == "score_answer"  # chain_sum's yaml selects reasoning-gym's scorer
    task = build_task(cfg)
    splits = task.splits(pool_size=300, val_size=8)
    assert len(splits.test) == 12 and len(splits.val) == 8
    questions = [{p.question for p in part} for part in (splits.train, splits.test, splits.val)]
    assert not (questions[0] & questions[1]) and not (questions[0] & questions[2]) and not (questions[1] & questions[2])
    again = build_task(cfg_of("experiment=smoke", "task.pool_size=200")).splits(pool_size=200, val_size=8)
    assert [p.id for p in again.test] == [p.id for p in splits.test]  # the held-out splits do not move with the pool
    assert {task.level(p) for p in splits.train} == {2, 3}  # operands: chain_sum's num_terms
    problem = splits.test[0]
    assert task.render(problem, "compact") == problem.metadata["expression"] + " =\n"
    assert task.score(problem, f"<think>x</think><answer>{problem.answer}</answer>") == (1.0, "correct")
    assert task.score(problem, f"<answer>{int(problem.answer) + 1}</answer>")[1] == "wrong_answer"
    assert task.score(problem, "no tags") == (0.0, "no_answer")
    # the reward is reasoning-gym's own: its scorer on its extraction, with its partial credit
    assert task.score(problem, f"<answer>{problem.answer}0</answer>")[0] == task.dataset.score_answer(
        problem.answer + "0", problem.as_entry())


def test_worked_traces_reach_the_answer_and_verify():
    task = build_task(cfg_of("experiment=smoke"))
    for problem in task.splits(pool_size=300).train[:50]:
        (text, by_tool), = task.sft_segments(problem, random.Random(0), "plain", compact=True)
        assert not by_tool and text.endswith(f"<answer>{problem.answer}</answer>")
        steps = text[len("<think>"):text.index("</think>")].split(" ")
        assert len(steps) == problem.n_numbers - 1 and steps[-1].endswith(f"={problem.answer}")
        assert task.score(problem, text) == (1.0, "correct")
        assert task.sft_segments(problem, random.Random(0), "answer", True) == [(f"<answer>{problem.answer}</answer>", False)]


@pytest.mark.parametrize("overrides, message", [
    (["reward=binary"], "reward=binary: .* use reward=score_answer"),
    (["tool=on", "stage=rloo"], "offers no tools; use tool=off"),
    (["task.dataset=no_such_generator"], "task.dataset='no_such_generator': no such reasoning-gym dataset"),
    (["task.config.min_terms=0"], "chain_sum refuses it"),
    (["task.operands=num_things"], r"task.operands='num_things'.*\['num_digits', 'num_terms'"),
    (["task.prompt='{nope} ='"], "task.prompt='{nope} ='"),
    (["stage.trace=calc"], "stage.trace='calc': expected one of \\('plain', 'answer'\\)"),
    (["stage=dpo", "stage.pairs.source=solver"], "has no solver to make pairs"),
    (["curriculum=static_thirds"], r"curriculum.difficulty.field='hardness': expected one of \('n_numbers',\) "
                                   r"\(the difficulty fields of task=reasoning_gym\)"),
])
def test_bad_values_fail_at_start_up_naming_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(cfg_of("experiment=smoke", *overrides))


def test_a_curriculum_orders_its_prompts_by_operand_count():
    from ablate.curriculum import build_sampler

    cfg = cfg_of("experiment=smoke", "curriculum=static")
    check_config(cfg)
    task = build_task(cfg)
    train = task.splits(pool_size=300).train
    sampler = build_sampler({"kind": "static", "stages": [{"until": 0.5, "levels": [0]}, {"until": 1.0, "levels": [0, 1]}]},
                            train, seed=0, max_steps=4, task=task)
    assert all(train[i].n_numbers == 2 for i in sampler.sample(16, 0))  # level 0: the 2-term sums


def test_countdown_refuses_the_scorer_of_another_task():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["reward=score_answer"])
    with pytest.raises(ConfigError, match="reward=tinyzero, binary or partial"):
        check_config(cfg)


def run(args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_sft_then_rloo_then_eval_then_stats(tmp_path):
    """task=chain_sum end to end: SFT (the smoke preset), RLOO from that SFT (trained once as the cached
    upstream) for two seeds, evaluation, and the stats report over the sweep."""
    sft = run(["-m", "ablate.train", "task=chain_sum", "experiment=smoke", "trainer.num_threads=1",
               "hydra.run.dir=sft"], tmp_path)
    assert sft.returncode == 0, sft.stderr[-3000:]
    summary = json.loads((tmp_path / "sft" / "eval" / "no_tool" / "summary.json").read_text())
    assert set(summary["verdicts"]) == {"no_answer", "wrong_answer", "correct"} and set(summary["by_operands"]) == {"2", "3"}
    sweep = tmp_path / "sweep"
    rl = run(["-m", "ablate.train", "-m", "task=chain_sum", "experiment=smoke", "stage=rloo", "seed=0,1",
              "trainer.num_threads=1", "hydra/launcher=basic", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]
    for job in range(2):
        assert json.loads((sweep / str(job) / "status.json").read_text())["state"] == "completed"
        rows = [json.loads(line) for line in (sweep / str(job) / "eval" / "no_tool" / "samples.jsonl").open()]
        assert len(rows) == 12 and all(r["n_numbers"] in (2, 3) and "question" in r for r in rows)
    import pandas as pd

    metrics = pd.read_csv(sweep / "0" / "metrics.csv")
    assert {"train/reward_mean", "train/verdict/wrong_answer", "train/by_operands/3/reward_mean"} <= set(metrics.columns)
    stats = run(["-m", "ablate.stats", str(sweep), "--out", str(tmp_path / "report"), "--resamples", "200",
                 "--no-plots", "--quiet"], tmp_path)
    assert stats.returncode == 0, stats.stderr[-3000:]
    table = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert {"pass@1", "by_operands/2/pass@1", "verdict_rate/wrong_answer"} <= set(table["metric"])
