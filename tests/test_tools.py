import torch

from ablate.models.tokenizer import load_tiny_tokenizer
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine
from ablate.tasks.countdown.tools import Calculator


class Bigram(torch.nn.Module):
    """A scripted 'policy': the next token is a fixed function of the last one (greedy-certain)."""

    def __init__(self, tokenizer, table: dict[str, str], default: str = "<eos>"):
        super().__init__()
        vocab = tokenizer.get_vocab()
        logits = torch.full((len(vocab), len(vocab)), -1e4)
        logits[:, vocab[default]] = 0.0
        for last, nxt in table.items():
            logits[vocab[last]] = -1e4
            logits[vocab[last], vocab[nxt]] = 0.0
        self.table = torch.nn.Parameter(logits, requires_grad=False)

    def forward(self, input_ids, **_):
        return type("Out", (), {"logits": self.table[input_ids]})()


SCRIPT = {"\n": "<think>", "<think>": "<calc>", "<calc>": "4", "4": "+", "+": "5", "5": "</calc>",
          "</calc>": "</think>", "</result>": "</think>", "</think>": "<answer>", "<answer>": "9", "9": "</answer>"}


def run(tokenizer, table, tool_available=True, max_calls=8, max_new_tokens=40):
    engine = HFEngine(Bigram(tokenizer, table), tokenizer, tool=Calculator(tokenizer, max_calls=max_calls))
    prompt = [tokenizer.bos_token_id] + tokenizer("4 5 -> 9\n", add_special_tokens=False)["input_ids"]
    out = engine.generate([prompt], 1, SamplingParams(max_new_tokens=max_new_tokens), torch.Generator().manual_seed(0),
                          tool_available=[tool_available])
    return out, tokenizer


def test_calculator_result_is_spliced_in_and_masked_by_token_ids():
    out, tok = run(load_tiny_tokenizer(), SCRIPT)
    ids, mask, logprobs = out.completion_ids[0], out.tool_mask[0], out.behaviour_logprobs[0]
    assert out.texts[0] == "<think><calc>4+5</calc><result>9</result></think><answer>9</answer>"
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "<result>9</result>"
    assert len(mask) == len(ids) == len(logprobs)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m)
    assert out.stats["tool/calls_per_rollout"] == 1


def test_unavailable_tool_passes_calc_through_as_text():
    out, _ = run(load_tiny_tokenizer(), SCRIPT, tool_available=False)
    assert out.texts[0] == "<think><calc>4+5</calc></think><answer>9</answer>"
    assert not any(out.tool_mask[0]) and out.stats["tool/calls_per_rollout"] == 0


def test_max_calls_bounds_tool_use():
    looping = {**SCRIPT, "</result>": "<calc>"}  # calls again after every result
    out, _ = run(load_tiny_tokenizer(), looping, max_calls=2, max_new_tokens=60)
    assert out.texts[0].count("<result>") == 2 and out.stats["tool/calls_per_rollout"] == 2


def test_calculator_answers_and_errors():
    assert Calculator.answer("44 + 19") == "<result>63</result>"
    assert Calculator.answer("7/2") == "<result>7/2</result>"
    for bad in ("4/0", "2**3", "import os", "", "(1+"):
        assert Calculator.answer(bad) == "<result>ERR</result>"
