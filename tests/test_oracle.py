"""The solver oracle (paper 004): its format, its answers, the rollout loop with it, synthetic
trajectories for SFT, and evaluation counting its errors and substitution errors."""

import random
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, load_group_config
from ablate.models import encode_prompt, prompt_text
from ablate.models.tokenizer import load_tiny_tokenizer
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine
from ablate.rollout.tools import build_tool
from ablate.tasks.countdown import CountdownTask, Problem, Reward, generate, judge, oracle
from ablate.tasks.countdown.oracle_traces import all_steps, is_pruned, legal_steps, operation_key, oracle_trajectory
from ablate.tasks.countdown.prompts import OracleFormat, parse_oracle_problem
from ablate.tasks.countdown.solver import Step
from ablate.tasks.countdown.tools import Oracle


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # the task the prompts render

F = Fraction
FULL, COMPACT = OracleFormat(compact=False), OracleFormat(compact=True)


def test_both_wordings_of_the_paper_example():
    # Paper 004, figure 4: [17, 2, 49] -> 83.
    assert FULL.step([17, 2, 49], [], 49, "+", 2) == "Available: [17, 2, 49]. Right steps: []. Try: 49 + 2\n"
    assert FULL.step([49, 34], [Step(F(17), "*", F(2), F(34))], 49, "+", 34) == \
        "Available: [49, 34]. Right steps: [17 * 2 => 34]. Try: 49 + 34\n"
    assert FULL.reply(oracle([17, 2, 49], 49, "+", 2, 83), 49, "+", 2) == "Tool: BAD. 49 + 2 does not lead to a solution.\n"
    assert FULL.reply(oracle([17, 2, 49], 17, "*", 2, 83), 17, "*", 2) == \
        "Tool: GOOD. 17 * 2 leads to target. New available: [49, 34]\n"
    assert FULL.reply(oracle([49, 34], 49, "+", 34, 83), 49, "+", 34) == "Tool: END. 49 + 34 reached the target!\n"
    assert FULL.answer("49 + (17 * 2)") == "<answer>49 + (17 * 2)</answer>"

    assert COMPACT.step([17, 2, 49], [], 49, "+", 2) == "17 2 49||49+2\n"
    assert COMPACT.step([49, 34], [Step(F(17), "*", F(2), F(34))], 49, "+", 34) == "49 34|17*2=34|49+34\n"
    assert COMPACT.reply(oracle([17, 2, 49], 17, "*", 2, 83), 17, "*", 2) == "GOOD 49 34\n"
    assert COMPACT.reply(oracle([17, 2, 49], 49, "+", 2, 83), 49, "+", 2) == "BAD\n"
    assert COMPACT.reply(oracle([49, 34], 49, "+", 34, 83), 49, "+", 34) == "END\n"
    assert COMPACT.reply(oracle([17, 2, 49], 5, "+", 2, 83), 5, "+", 2) == "ERR\n"
    assert COMPACT.answer("49 + (17 * 2)") == "<answer>49+(17*2)</answer>"
    # A fraction is parenthesised in the compact wording, so the step reads one way.
    assert COMPACT.step([F(7, 2), 3], [], F(7, 2), "/", 3) == "(7/2) 3||(7/2)/3\n"


@pytest.mark.parametrize("fmt, line, expected", [
    (COMPACT, "17 2 49||49+2\n", (F(49), "+", F(2))),
    (COMPACT, "5 3||5--3", (F(5), "-", F(-3))),
    (COMPACT, "(7/2) 3||(7/2)/3\n", (F(7, 2), "/", F(3))),
    (COMPACT, "17 2 49||49+", None),
    (COMPACT, "GOOD 49 34", None),
    (FULL, "Available: [17, 2, 49]. Right steps: []. Try: 17 * 2\n", (F(17), "*", F(2))),
    (FULL, "Available: [7/2, 3]. Right steps: []. Try: 7/2 / 3", (F(7, 2), "/", F(3))),
    (FULL, "Try: seventeen", None),
])
def test_steps_are_read_back(fmt, line, expected):
    assert fmt.parse_try(line) == expected


def test_problem_is_read_from_either_prompt():
    assert parse_oracle_problem("<|im_start|>user\nAvailable: [17, 2, 49]. Target: 83.<|im_end|>") == ([17, 2, 49], 83)
    assert parse_oracle_problem("<bos>17 2 49 -> 83\n") == ([17, 2, 49], 83)
    assert parse_oracle_problem("no problem here") is None


def session_dialogue(tool: Oracle, prompt: str, lines: list[str]) -> list[str | None]:
    """Feed model lines to one session as the engine would (replies appended); the replies' texts."""
    tokenizer = tool.tokenizer
    session = tool.session(encode_prompt(prompt, tokenizer))
    generated, replies = [], []
    for line in lines:
        generated += tokenizer(line, add_special_tokens=False)["input_ids"]
        reply = session.reply(generated)
        replies.append(None if reply is None else tokenizer.decode(reply, skip_special_tokens=False))
        generated += reply or []
    return replies


def test_oracle_answers_good_bad_end_and_rejects_invalid_steps():
    tool = Oracle(load_tiny_tokenizer(), compact=True, max_messages=20)
    replies = session_dialogue(tool, "17 2 49 -> 83\n", [
        "17 2 49||49+2\n",      # BAD: 51 and 17 cannot make 83
        "17 2 49||5+2\n",       # 5 is not available
        "17 2 49 5||49/0\n",    # division by zero (and the claimed 5 changes nothing)
        "let me think\n",       # no step on the line
        "17 2 49||17*2\n",      # GOOD: 49 + 34 = 83
        "49 34|17*2=34|17+34\n",  # 17 is used up
        "49 34|17*2=34|49+34\n",  # END
        "<answer>49+(17*2)</answer>",  # the answer is not a step
    ])
    assert replies == ["BAD\n", "ERR\n", "ERR\n", "ERR\n", "GOOD 49 34\n", "ERR\n", "END\n", None]
    assert tool.errors("".join(r for r in replies if r)) == 4


def test_oracle_full_wording_and_error_message():
    tool = Oracle(load_tiny_tokenizer(), compact=False)
    replies = session_dialogue(tool, "Available: [17, 2, 49]. Target: 83.\n", [
        "Available: [17, 2, 49]. Right steps: []. Try: 5 + 2\n",
        "Available: [17, 2, 49]. Right steps: []. Try: 17 * 2\n",
    ])
    assert replies == ["Tool: ERROR. 5 + 2 is not allowed: 5 is not available.\n",
                       "Tool: GOOD. 17 * 2 leads to target. New available: [49, 34]\n"]
    assert tool.errors(replies[0] + replies[1]) == 1


def test_message_limit_ends_the_search():
    tokenizer = load_tiny_tokenizer()
    tool = Oracle(tokenizer, compact=True, max_messages=4)  # two steps
    assert tool.max_calls == 2
    replies = session_dialogue(tool, "17 2 49 -> 83\n", ["17 2 49||49+2\n", "17 2 49||49+17\n"])
    assert replies == ["BAD\n", "BAD\n<eos>"]  # the second answer is the last: the solver ends the rollout
    # ...unless the last answer is END: the model still writes its answer.
    replies = session_dialogue(Oracle(tokenizer, compact=True, max_messages=4), "4 5 -> 9\n", ["4 5||5*4\n", "4 5||5+4\n"])
    assert replies == ["BAD\n", "END\n"]
    with pytest.raises(ValueError, match="oracle format"):
        tool.session(encode_prompt("what is 2 + 2?", tokenizer))


class ScriptModel(torch.nn.Module):
    """Writes `script` after a prompt of `prompt_len` tokens whatever it is fed: the logits at
    position q point at script[q + 1 - prompt_len] (eos past its end)."""

    def __init__(self, tokenizer, prompt_len: int, script: list[int]):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.vocab, self.prompt_len, self.script, self.eos = len(tokenizer), prompt_len, script, tokenizer.eos_token_id

    def forward(self, input_ids, position_ids=None, **_):
        if position_ids is None:
            position_ids = torch.arange(input_ids.size(1)).expand_as(input_ids)
        logits = torch.full((*input_ids.shape, self.vocab), -1e4)
        for b in range(input_ids.size(0)):
            for q in range(input_ids.size(1)):
                index = int(position_ids[b, q]) + 1 - self.prompt_len
                token = self.script[index] if 0 <= index < len(self.script) else self.eos
                logits[b, q, token] = 0.0
        return SimpleNamespace(logits=logits)


def scripted(tokenizer, prompt: list[int], pieces: list[tuple[str, str | None]]):
    """A ScriptModel writing the model pieces, with junk tokens where the tool's answers go (as
    many as the answer has), so that the answers can only come from the tool; and the expected
    completion text."""
    junk = tokenizer("x", add_special_tokens=False)["input_ids"][0]
    script, expected = [], ""
    for model_text, tool_text in pieces:
        script += tokenizer(model_text, add_special_tokens=False)["input_ids"]
        expected += model_text
        if tool_text:
            script += [junk] * len(tokenizer(tool_text, add_special_tokens=False)["input_ids"])
            expected += tool_text
    return ScriptModel(tokenizer, len(prompt), script + [tokenizer.eos_token_id]), expected


PAPER_EXAMPLE = [("17 2 49||49+2\n", "BAD\n"), ("17 2 49||17*2\n", "GOOD 49 34\n"),
                 ("49 34|17*2=34|49+34\n", "END\n"), ("<answer>49+(17*2)</answer>", None)]


def test_rollout_splices_oracle_answers_masked_by_token_ids():
    tokenizer = load_tiny_tokenizer()
    prompt = encode_prompt(prompt_text(COUNTDOWN, Problem((17, 2, 49), 83), "compact", tokenizer, oracle=True), tokenizer)
    model, expected = scripted(tokenizer, prompt, PAPER_EXAMPLE)
    engine = HFEngine(model, tokenizer, tool=Oracle(tokenizer, compact=True))
    out = engine.generate([prompt], 1, SamplingParams(max_new_tokens=120), torch.Generator().manual_seed(0))
    ids, mask, logprobs = out.completion_ids[0], out.tool_mask[0], out.behaviour_logprobs[0]
    assert out.texts[0] == expected and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "BAD\nGOOD 49 34\nEND\n"
    assert len(ids) == len(mask) == len(logprobs) and all(lp == 0.0 for lp, m in zip(logprobs, mask) if m)
    assert out.tool_calls == [3]
    assert judge(out.texts[0], [17, 2, 49], 83).verdict.value == "correct"
    # Unavailable: nothing answers, the model's own junk stays, unmasked.
    off = engine.generate([prompt], 1, SamplingParams(max_new_tokens=120), torch.Generator().manual_seed(0),
                          tool_available=[False])
    assert "xxxx" in off.texts[0] and not any(off.tool_mask[0]) and off.tool_calls == [0]


def bpe_tokenizer():
    """A small byte-level BPE tokenizer (GPT-2 style pre-tokenization, as Hub models have), trained
    on oracle dialogues so that words and numbers are merged tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = [oracle_trajectory(p, rng).text(FULL) for p in generate(200, seed=1)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["<eos>", "<pad>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<pad>")


def test_full_wording_through_a_bpe_tokenizer():
    tokenizer = bpe_tokenizer()
    assert len(tokenizer("Tool: GOOD.", add_special_tokens=False)["input_ids"]) < len("Tool: GOOD.")  # merges
    prompt = tokenizer("Available: [17, 2, 49]. Target: 83.\n", add_special_tokens=False)["input_ids"]
    step = "Available: [17, 2, 49]. Right steps: []. Try: "
    pieces = [(step + "49 + 2\n", "Tool: BAD. 49 + 2 does not lead to a solution.\n"),
              (step + "5 + 2\n", "Tool: ERROR. 5 + 2 is not allowed: 5 is not available.\n"),
              (step + "17 * 2\n", "Tool: GOOD. 17 * 2 leads to target. New available: [49, 34]\n"),
              ("Available: [49, 34]. Right steps: [17 * 2 => 34]. Try: 49 + 34\n", "Tool: END. 49 + 34 reached the target!\n"),
              ("<answer>49 + (17 * 2)</answer>", None)]
    model, expected = scripted(tokenizer, prompt, pieces)
    tool = Oracle(tokenizer, compact=False)
    out = HFEngine(model, tokenizer, tool=tool).generate([prompt], 1, SamplingParams(max_new_tokens=200),
                                                         torch.Generator().manual_seed(0))
    ids, mask = out.completion_ids[0], out.tool_mask[0]
    assert out.texts[0] == expected and out.tool_calls == [4]
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "".join(t for _, t in pieces if t)
    assert judge(out.texts[0], [17, 2, 49], 83).verdict.value == "correct"


def test_rollout_ends_when_the_messages_run_out():
    tokenizer = load_tiny_tokenizer()
    prompt = encode_prompt("17 2 49 -> 83\n", tokenizer)
    model, _ = scripted(tokenizer, prompt, [("17 2 49||49+2\n", "BAD\n"), ("17 2 49||49+17\n", "BAD\n"),
                                            ("17 2 49||17*2\n", None)])
    out = HFEngine(model, tokenizer, tool=Oracle(tokenizer, compact=True, max_messages=4)).generate(
        [prompt], 1, SamplingParams(max_new_tokens=80), torch.Generator().manual_seed(0))
    ids = out.completion_ids[0]
    assert out.texts[0] == "17 2 49||49+2\nBAD\n17 2 49||49+17\nBAD\n"  # stopped by the solver's eos
    assert ids[-1] == tokenizer.eos_token_id and out.tool_mask[0][-1] and out.tool_calls == [2]


def test_evaluation_counts_substitution_errors_and_oracle_errors():
    from ablate.eval import evaluate

    tokenizer = load_tiny_tokenizer()
    problem = Problem((90, 63, 58, 52), 21)
    prompt = encode_prompt(prompt_text(COUNTDOWN, problem, "compact", tokenizer, oracle=True), tokenizer)
    # Paper 004, figure 8: the target is reached but 32 is not substituted back.
    model, _ = scripted(tokenizer, prompt, [("90 63 58 52||90*58\n", "BAD\n"), ("90 63 58 52||99-58\n", "ERR\n"),
                                            ("90 63 58 52||90-58\n", "GOOD 63 52 32\n"),
                                            ("63 52 32|90-58=32|52+32\n", "GOOD 63 84\n"),
                                            ("63 84|90-58=32 52+32=84|84-63\n", "END\n"),
                                            ("<answer>52+32-63</answer>", None)])
    task = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))
    cfg = {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 160, "batch_size": 2, "ks": [1]}
    tool = build_tool({"kind": "oracle", "max_messages": 20}, tokenizer, "compact")
    summary, rows = evaluate(model, tokenizer, [problem], "compact", task, cfg, seed=0, tool=tool,
                             tool_cfg={"kind": "oracle", "prompt": "never"})
    assert summary["verdicts"]["substitution_error"] == 2 and summary["exact_pass@1"] == 0
    assert summary["tool"] == {"calls_per_rollout": 5.0, "calc_emission_rate": 0.0, "tool_errors": 2}
    assert rows[0]["completions"][0].endswith("END\n<answer>52+32-63</answer>")


def test_trajectories_end_at_a_correct_answer_with_legal_steps():
    problems = generate(150, seed=4)
    rng = random.Random(0)
    mistakes = turns = 0
    for problem in problems:
        t = oracle_trajectory(problem, rng, mistake_rate=0.2, max_messages=20)
        assert judge(COMPACT.answer(t.answer), problem.numbers, problem.target).verdict.value == "correct"
        assert judge(FULL.answer(t.answer), problem.numbers, problem.target).verdict.value == "correct"
        assert t.turns[-1].answer.verdict == "END" and len(t.turns) <= 10
        assert steps_replayed(problem, t)
        bad: set = set()
        for turn in t.turns:
            # Invalid answers are exactly the recorded mistakes, and each names an unavailable number.
            assert (turn.answer.verdict == "INVALID") == turn.mistake
            if turn.mistake:
                left, _, right = turn.operation
                assert left not in turn.available or right not in turn.available
                continue
            assert not is_pruned(turn.operation, bad), (problem, turn)
            bad = bad | {operation_key(turn.operation)} if turn.answer.verdict == "BAD" else set()
        mistakes += t.mistakes
        turns += len(t.turns)
    assert 0.1 < mistakes / turns < 0.25  # about the rate asked for (fewer when the budget is tight)
    assert all(oracle_trajectory(p, random.Random(1), mistake_rate=0.0).mistakes == 0 for p in problems[:30])
    again = [oracle_trajectory(p, random.Random(5)).text(COMPACT) for p in problems[:10]]
    assert again == [oracle_trajectory(p, random.Random(5)).text(COMPACT) for p in problems[:10]]  # seeded


def steps_replayed(problem, trajectory) -> bool:
    """Each turn shows the true state: the problem's numbers, changed only by GOOD/END steps."""
    available, right = [F(n) for n in problem.numbers], []
    for turn in trajectory.turns:
        if list(turn.available) != available or list(turn.right_steps) != right:
            return False
        if turn.answer.verdict in ("GOOD", "END"):
            left, op, r = turn.operation
            available = list(turn.answer.available)
            right.append(Step(left, op, r, turn.answer.result))
    return list(trajectory.right_steps) == right


def test_pruned_steps_are_never_useful():
    """Over every state a legal walk can reach: a repeated BAD step is BAD again; a GOOD negative
    subtraction always has a GOOD mirror (larger minus smaller) among the legal steps; so pruning
    never leaves a solvable state without a legal GOOD step."""
    checked = 0
    for problem in generate(120, seed=9):
        stack, seen = [tuple(F(n) for n in problem.numbers)], set()
        while stack:
            state = stack.pop()
            if state in seen or len(state) < 2:
                continue
            seen.add(state)
            answers = {s: oracle(state, *s, target=problem.target) for s in all_steps(state)}
            good = {s for s, a in answers.items() if a.verdict in ("GOOD", "END")}
            legal = set(legal_steps(state, set()))
            assert not good or good & legal
            for left, op, right in good - legal:
                assert op == "-" and left < right and (right, "-", left) in good & legal
                checked += 1
            for s in legal - good:  # once BAD here, pruned from this state, and BAD again if tried
                assert s not in legal_steps(state, {operation_key(s)})
                assert oracle(state, *s, target=problem.target).verdict == "BAD"
            stack += [tuple(answers[s].available) for s in good & legal if answers[s].verdict == "GOOD"]
    assert checked > 50  # the property was exercised, not vacuous


def test_sft_oracle_traces_mask_exactly_the_solver_lines():
    from ablate.lit.sft_data import TraceDataset
    from ablate.objectives import IGNORE

    tokenizer = load_tiny_tokenizer()
    problems = generate(20, seed=2)
    data = TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "oracle", seed=0, max_length=1000,
                        tool_cfg={"kind": "oracle", "prompt": "never"}, oracle={"mistake_rate": 0.3, "max_messages": 20})
    for index in range(len(problems)):
        item = data[index]
        ids, labels = item["input_ids"], item["labels"]
        prompt = encode_prompt(prompt_text(COUNTDOWN, problems[index], "compact", tokenizer, oracle=True), tokenizer)
        assert ids[:len(prompt)] == prompt and ids[-1] == tokenizer.eos_token_id
        response, masked = ids[len(prompt):], [lab == IGNORE for lab in labels[len(prompt):]]
        text = tokenizer.decode(response, skip_special_tokens=True)
        solver = tokenizer.decode([t for t, m in zip(response, masked) if m])
        model = tokenizer.decode([t for t, m in zip(response, masked) if not m], skip_special_tokens=True)
        lines = text.split("\n")
        assert solver == "".join(line + "\n" for line in lines[1:-1:2])  # every second line is the solver's
        assert model == "".join(line + "\n" for line in lines[0:-1:2]) + lines[-1]
        assert all(line.split(" ")[0] in ("GOOD", "BAD", "END", "ERR") for line in lines[1:-1:2])
        assert judge(text, problems[index].numbers, problems[index].target).verdict.value == "correct"


@pytest.mark.slow
def test_oracle_sft_run_evaluates_in_both_regimes(tmp_path):
    import json

    from hydra import compose, initialize_config_dir

    from ablate.run import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=smoke", "stage.trace=oracle", "tool=oracle",
                                                       "stage.max_length=200", "eval.max_new_tokens=40"])
    run(cfg, tmp_path)
    no_tool, tool = (json.loads((tmp_path / "eval" / r / "summary.json").read_text()) for r in ("no_tool", "tool"))
    assert no_tool["tool"]["calls_per_rollout"] == 0 and no_tool["tool"]["tool_errors"] == 0
    # An untrained model writes lines the solver must answer (mostly with errors).
    assert tool["tool"]["calls_per_rollout"] > 0 and tool["tool"]["tool_errors"] > 0
    assert sum(tool["verdicts"].values()) == tool["n_prompts"] * tool["n_samples"]


@pytest.mark.slow
def test_a_chosen_final_regime_is_the_only_one_evaluated(tmp_path):
    import json

    from hydra import compose, initialize_config_dir

    from ablate.run import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=smoke", "stage.trace=oracle", "tool=oracle",
                                                       "stage.max_length=200", "eval.max_new_tokens=40",
                                                       "eval.regimes=[tool]"])
    run(cfg, tmp_path)
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["tool"]
    timings = json.loads((tmp_path / "status.json").read_text())["timings"]
    assert "eval_tool_s" in timings and "eval_no_tool_s" not in timings
    run(cfg, tmp_path)  # complete as configured: the second call finds nothing to do
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["tool"]
