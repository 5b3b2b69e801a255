"""The preference stage: pair construction, ordering, encoding, and the module's learning signal."""

import json
import random
from collections import Counter

import lightning as L
import pytest
import torch

from ablate.config import typed
from ablate.lit.dpo import PreferenceModule, collate_pairs, encode_pair, reference_logprobs
from ablate.pairs import Pair, check_stages, load_pairs, max_distance_pairs, order_pairs, quotas, sampled_pairs, save_pairs
from ablate.objectives import IGNORE
from ablate.stages.preference import PreferenceStageConfig
from ablate.tasks.countdown import Problem, Step, Verdict, generate, judge
from ablate.tasks.countdown.pairs import _substitution, random_path, solver_pair, solver_pairs
from ablate.tasks.countdown.traces import render_trace, sft_response

@pytest.fixture
def one_thread():
    """The tiny models gain nothing from a second thread, and on a loaded 2-core machine two threads
    make these fits ~15x slower (OpenMP workers waiting on each other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


MIX = {"wrong_value": 0.5, "wrong_numbers": 0.25, "substitution": 0.25}


def test_quotas_are_exact_by_largest_remainder():
    assert quotas(8, MIX) == {"wrong_value": 4, "wrong_numbers": 2, "substitution": 2}
    # 10 * (0.5, 0.25, 0.25) = (5, 2.5, 2.5): the tie goes to the earlier kind
    assert quotas(10, MIX) == {"wrong_value": 5, "wrong_numbers": 3, "substitution": 2}
    assert quotas(3, {"a": 1, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}
    with pytest.raises(ValueError):
        quotas(3, {"a": 0})


def test_substitution_error_is_the_last_operation_as_in_paper_004():
    # Paper 004, figure 8: [90, 63, 58, 52] -> 21 via 90-58=32, 52+32=84, 84-63=21; the model answers 84 - 63.
    problem = Problem((90, 63, 58, 52), 21)
    steps = [Step(90, "-", 58, 32), Step(52, "+", 32, 84), Step(84, "-", 63, 21)]
    chosen = render_trace(problem, steps)
    assert chosen == "<think>90-58=32 52+32=84 84-63=21</think><answer>(52+(90-58))-63</answer>"
    rejected = _substitution(problem, steps, chosen, compact=True)
    assert rejected == "<think>90-58=32 52+32=84 84-63=21</think><answer>84-63</answer>"
    assert judge(rejected, problem.numbers, problem.target).verdict is Verdict.SUBSTITUTION_ERROR
    spaced = render_trace(problem, steps, compact=False)
    assert _substitution(problem, steps, spaced, compact=False).endswith("<answer> 84 - 63 </answer>")


def test_random_paths_use_every_number_once_with_non_negative_integers():
    rng = random.Random(0)
    for problem in generate(50, seed=5, labels=False):
        steps = random_path(problem.numbers, rng)
        assert len(steps) == problem.n_numbers - 1
        assert all(s.result >= 0 and s.result.denominator == 1 for s in steps)
        text = render_trace(problem, steps)
        assert judge(text, problem.numbers, steps[-1].result).verdict is Verdict.CORRECT  # it reaches its own value


def test_solver_pairs_have_verified_verdicts_and_sft_style_chosen_traces():
    problems = generate(60, seed=11, labels=False)
    for index, problem in enumerate(problems[:20]):
        for kind, verdict in (("wrong_value", Verdict.WRONG_VALUE), ("wrong_numbers", Verdict.WRONG_NUMBERS),
                              ("substitution", Verdict.SUBSTITUTION_ERROR)):
            pair = solver_pair(problem, "p", kind, random.Random(f"{index}-{kind}"))
            if pair is None:  # possible for substitution when an intermediate equals a given number
                assert kind == "substitution"
                continue
            # chosen is exactly what SFT renders for the same random draw
            assert pair.chosen == sft_response(problem, random.Random(f"{index}-{kind}"))
            assert judge(pair.chosen, problem.numbers, problem.target).verdict is Verdict.CORRECT
            assert judge(pair.rejected, problem.numbers, problem.target).verdict is verdict
            assert pair.kind == kind and pair.n_numbers == problem.n_numbers and pair.problem_id == problem.id
    pairs = solver_pairs(problems, [f"prompt {i}" for i in range(60)], MIX, seed=0)
    assert len(pairs) == 60
    counts = Counter(p.kind for p in pairs)
    # exact quotas (15 substitution), except where a substitution could not be made and fell back
    assert counts["wrong_numbers"] == 15 and counts["substitution"] + counts["wrong_value"] == 45
    assert counts["substitution"] >= 13
    assert pairs == solver_pairs(problems, [f"prompt {i}" for i in range(60)], MIX, seed=0)  # seeded
    assert pairs != solver_pairs(problems, [f"prompt {i}" for i in range(60)], MIX, seed=1)
    with pytest.raises(ValueError, match="unknown kinds"):
        solver_pairs(problems, ["p"] * 60, {"typo": 1.0}, seed=0)


def test_max_distance_pairing_by_hand():
    rewards = [0.1, 1.0, 0.0, 1.0]
    # sorted by reward (ties by index): 1, 3, 0, 2 -> best with worst (1, 2), then (3, 0)
    assert max_distance_pairs(rewards, margin=0.5, max_pairs=2) == [(1, 2), (3, 0)]
    assert max_distance_pairs(rewards, margin=0.5, max_pairs=1) == [(1, 2)]
    assert max_distance_pairs(rewards, margin=0.95, max_pairs=2) == [(1, 2)]  # 1.0 - 0.1 < 0.95
    assert max_distance_pairs([0.1] * 4, margin=0.05, max_pairs=2) == []
    assert max_distance_pairs([1.0, 0.0, 0.5], margin=0.5, max_pairs=5) == [(0, 1)]  # the middle one is left over
    with pytest.raises(ValueError, match="margin"):
        max_distance_pairs(rewards, margin=0.0, max_pairs=1)


class ScriptedEngine:
    """Returns fixed texts, k per prompt, in the Rollouts shape the sampled strategy reads."""

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompt_ids, k, params, generator):
        from types import SimpleNamespace

        return SimpleNamespace(texts=[self.texts[i % len(self.texts)] for i in range(len(prompt_ids) * k)])


def test_sampled_pairs_keep_max_distance_pairs_above_the_margin():
    from ablate.config import load_group_config
    from ablate.tasks.countdown import CountdownTask, Reward

    problem = Problem((44, 19, 35), 98)
    texts = ["<answer>44+19+35</answer>", "<answer>44+19</answer>", "no answer", "<answer>19+35+44</answer>"]
    task = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # 1.0, 0.1, 0.0, 1.0
    pairs = sampled_pairs([problem, problem], ["a", "b"], [[1], [2]], ScriptedEngine(texts), None, 4, task,
                          margin=0.5, max_pairs=2, generator=None, chunk=1)
    assert [(p.chosen, p.rejected) for p in pairs[:2]] == [(texts[0], texts[2]), (texts[3], texts[1])]
    assert [(p.chosen_reward, p.rejected_reward) for p in pairs[:2]] == [(1.0, 0.0), (1.0, 0.1)]
    assert len(pairs) == 4 and [p.prompt for p in pairs] == ["a", "a", "b", "b"]
    assert all(p.kind == "sampled" and p.n_numbers == 3 for p in pairs)


def test_order_none_is_shuffled_epochs_and_static_goes_easy_to_hard_cumulatively():
    pairs = [Pair("p", "c", "r", "k", n) for n in (3, 4, 3, 4, 3, 4)]
    flat = order_pairs(pairs, [{"until": 1.0, "n_numbers": None}], 12, seed=0)
    assert sorted(flat[:6]) == list(range(6)) and sorted(flat[6:]) == list(range(6))  # each pair once per epoch
    assert flat != order_pairs(pairs, [{"until": 1.0, "n_numbers": None}], 12, seed=1)
    stages = [{"until": 0.5, "n_numbers": [3]}, {"until": 1.0, "n_numbers": [3, 4]}]
    order = order_pairs(pairs, stages, 12, seed=0)
    assert len(order) == 12
    assert sorted(order[:6]) == [0, 0, 2, 2, 4, 4]        # first half: 3-number pairs only, each twice
    assert sorted(order[6:]) == list(range(6))            # second half: all pairs, easy ones kept
    assert order == order_pairs(pairs, stages, 12, seed=0)
    with pytest.raises(ValueError, match=r"stages\[0\].*no pair has n_numbers in \[5\]"):
        order_pairs(pairs, [{"until": 0.5, "n_numbers": [5]}, {"until": 1.0, "n_numbers": None}], 12, seed=0)
    for bad, message in (([{"until": 0.5, "n_numbers": [3]}], "must be 1.0"),
                         ([{"until": 0.6, "n_numbers": [3]}, {"until": 0.4, "n_numbers": None}], "must increase"),
                         ([{"until": 1.0, "n_numbers": []}], "empty"), ([], "empty")):
        with pytest.raises(ValueError, match=message):
            check_stages(bad)


def test_pairs_file_round_trip_in_trls_format(tmp_path):
    pairs = [Pair("1 2 3 -> 6\n", "<answer>1+2+3</answer>", "<answer>1*2</answer>", "wrong_numbers", 3, "1-2-3_6")]
    path = save_pairs(tmp_path / "pairs.jsonl", pairs, [{"ref_chosen_logps": -1.5, "ref_rejected_logps": -2.0}])
    row = json.loads(path.read_text())
    assert {"prompt", "chosen", "rejected", "ref_chosen_logps"} <= set(row)
    assert load_pairs(path) == pairs
    user = tmp_path / "user.jsonl"
    user.write_text(json.dumps({"prompt": "x", "chosen": "a", "rejected": "b", "nums": [1, 2, 3, 4]}) + "\n\n")
    assert load_pairs(user) == [Pair("x", "a", "b", "file", 4)]
    user.write_text(json.dumps({"prompt": "x", "chosen": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"user.jsonl:1: missing \['rejected'\]"):
        load_pairs(user)
    user.write_text(json.dumps({"prompt": [{"role": "user", "content": "x"}], "chosen": "a", "rejected": "b"}) + "\n")
    with pytest.raises(ValueError, match="chat template"):
        load_pairs(user)
    with pytest.raises(FileNotFoundError, match="stage.pairs.file.path"):
        load_pairs(tmp_path / "missing.jsonl")


def test_encoding_masks_the_prompt_and_tool_output(tiny_policy):
    _, tokenizer = tiny_policy
    pair = Pair("1 2 -> 3\n", "<think><calc>1+2</calc><result>3</result></think><answer>1+2</answer>",
                "<answer>1</answer>", "k")
    item = encode_pair(pair, tokenizer, max_length=200)
    prompt = len(tokenizer("1 2 -> 3\n", add_special_tokens=False)["input_ids"]) + 1  # + bos
    chosen_response = tokenizer(pair.chosen, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert item["chosen"][prompt:] == chosen_response
    assert not any(item["chosen_loss"][:prompt]) and item["rejected_loss"][prompt:] == [True] * 4  # 3 tokens + eos
    loss_tokens = [t for t, keep in zip(item["chosen"], item["chosen_loss"]) if keep]
    expected = "<think><calc>1+2</calc></think><answer>1+2</answer>"  # the tool's <result>3</result> carries no loss
    assert tokenizer.decode(loss_tokens, skip_special_tokens=True) == expected
    batch = collate_pairs([item, item], tokenizer.pad_token_id)
    assert batch["input_ids"].shape[0] == 4 and batch["loss_mask"].shape[1] == batch["input_ids"].shape[1] - 1
    # the loss mask at t marks the target t+1: row 0 is the chosen, row 2 its rejected
    assert batch["loss_mask"][0].tolist()[: len(item["chosen"]) - 1] == [float(m) for m in item["chosen_loss"][1:]]
    assert batch["loss_mask"][2].sum() == sum(item["rejected_loss"])
    assert IGNORE not in batch["input_ids"]
    cut = encode_pair(pair, tokenizer, max_length=prompt + 3)
    assert len(cut["chosen"]) == prompt + 3 and sum(cut["chosen_loss"]) == 3


def fit_module(model, pairs, tokenizer, stage, steps):
    stage = {**stage, "max_steps": steps}
    encoded = [encode_pair(p, tokenizer, 64) for p in pairs]
    reference = reference_logprobs(model, encoded, tokenizer.pad_token_id, bool(stage["average_logps"]))
    module = PreferenceModule(model, encoded, reference, lambda length: [i % len(pairs) for i in range(length)],
                              typed(PreferenceStageConfig, stage), tokenizer.pad_token_id)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    model.train()
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(range(steps), batch_size=None))
    return module, encoded, reference


STAGE = {"name": "dpo", "beta": 0.5, "label_smoothing": 0.0, "average_logps": False, "batch_size": 1,
         "max_steps": 20, "lr": 1e-2, "weight_decay": 0.0, "warmup_steps": 0, "min_lr_ratio": 1.0}


def margin_after(model, encoded, reference, pad_id, average):
    from ablate.lit.dpo import pair_logprobs

    with torch.no_grad():
        chosen, rejected = pair_logprobs(model.eval(), collate_pairs(encoded, pad_id), average)
    return ((chosen - reference[:, 0]) - (rejected - reference[:, 1])).tolist()


def test_dpo_steps_raise_the_chosen_over_the_rejected(tiny_policy, one_thread):
    model, tokenizer = tiny_policy
    pair = Pair("44 19 35 -> 98\n", "<answer>44+19+35</answer>", "<answer>44-19</answer>", "k")
    module, encoded, reference = fit_module(model, [pair], tokenizer, STAGE, steps=20)
    assert margin_after(model, encoded, reference, tokenizer.pad_token_id, False)[0] > 5.0


def test_ipo_regresses_the_margin_to_its_target(tiny_policy, one_thread):
    model, tokenizer = tiny_policy
    pair = Pair("44 19 35 -> 98\n", "<answer>44+19+35</answer>", "<answer>44-19</answer>", "k")
    stage = {**STAGE, "name": "ipo", "beta": 2.5, "average_logps": True, "lr": 3e-3}  # target h = 0.2 per token
    module, encoded, reference = fit_module(model, [pair], tokenizer, stage, steps=40)
    assert margin_after(model, encoded, reference, tokenizer.pad_token_id, True)[0] == pytest.approx(0.2, abs=0.05)


def test_reference_log_probs_are_summed_response_token_log_probs(tiny_policy):
    model, tokenizer = tiny_policy
    pairs = [Pair("44 19 35 -> 98\n", "<answer>44+19+35</answer>", "<answer>4</answer>", "k"),
             Pair("1 2 -> 3\n", "<answer>1+2</answer>", "<think>1*2=2</think><answer>1*2</answer>", "k")]
    encoded = [encode_pair(p, tokenizer, 64) for p in pairs]
    together = reference_logprobs(model, encoded, tokenizer.pad_token_id, average=False, batch_size=2)
    alone = reference_logprobs(model, encoded, tokenizer.pad_token_id, average=False, batch_size=1)
    assert torch.allclose(together, alone, atol=1e-5)  # right padding changes nothing
    ids = torch.tensor([encoded[1]["rejected"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    keep = torch.tensor(encoded[1]["rejected_loss"][1:])
    assert together[1, 1] == pytest.approx(float(logp[keep].sum()), abs=1e-4)
    averaged = reference_logprobs(model, encoded, tokenizer.pad_token_id, average=True)
    assert averaged[1, 1] == pytest.approx(float(logp[keep].mean()), abs=1e-5)
