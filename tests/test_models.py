import random

from omegaconf import OmegaConf

from ablate.config import CONF_DIR, load_group_config
from ablate.lit.sft_data import TraceDataset, pad_batch, tool_output_mask
from ablate.models import encode_prompt, load_model, load_tokenizer, prompt_text
from ablate.models.tokenizer import TAGS, build_tokenizer, load_tiny_tokenizer
from ablate.objectives import IGNORE
from ablate.tasks.countdown import CountdownTask, Problem, Reward, generate, judge
from ablate.tasks.countdown.traces import render_trace, sft_response


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # the task the prompts render


def test_shipped_tokenizer_is_the_built_one_and_round_trips():
    shipped, built = load_tiny_tokenizer(), build_tokenizer()
    assert shipped.get_vocab() == built.get_vocab()
    text = "44 19 35 -> 98\n<think>44+19=63 63+35=98</think><answer>(44+19)+35</answer>"
    ids = shipped(text, add_special_tokens=False)["input_ids"]
    assert shipped.decode(ids) == text
    assert all(shipped.convert_tokens_to_ids(tag) in ids for tag in ("<think>", "</answer>"))
    assert len(ids) == len(text) - sum(text.count(t) * (len(t) - 1) for t in TAGS)  # one token per character
    assert shipped.decode(ids + [shipped.eos_token_id, shipped.pad_token_id], skip_special_tokens=True) == text


def test_tiny_model_from_config_and_hf_path_from_a_local_directory(tmp_path):
    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.arch.hidden_size, cfg.arch.num_hidden_layers, cfg.arch.intermediate_size = 32, 1, 64
    tokenizer = load_tokenizer(cfg)
    model = load_model(cfg, tokenizer)
    assert model.config.vocab_size == len(tokenizer) and model.config.model_type == "qwen2"
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    saved = OmegaConf.create({"kind": "tiny", "name_or_path": str(tmp_path), "template": "compact"})
    text = "44 19 35 -> 98\n<answer>(44+19)+35</answer>"
    assert load_tokenizer(saved)(text)["input_ids"] == tokenizer(text)["input_ids"]  # spaces and newlines kept
    hf = OmegaConf.create({"kind": "hf", "name_or_path": str(tmp_path), "template": "tinyzero"})
    again = load_model(hf, load_tokenizer(hf))
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_prompts_for_each_template():
    tokenizer = load_tiny_tokenizer()
    p = Problem((44, 19, 35), 98)
    assert prompt_text(COUNTDOWN, p, "compact", tokenizer) == "44 19 35 -> 98\n"
    assert encode_prompt("1", tokenizer)[0] == tokenizer.bos_token_id


def test_traces_verify_and_vary():
    rng = random.Random(0)
    for p in generate(40, seed=9, labels=False):
        for style in ("plain", "calc"):
            for compact in (True, False):
                text = sft_response(p, rng, style, compact)
                assert judge(text, p.numbers, p.target).verdict.value == "correct", text
    p = Problem((1, 2, 3, 4), 10)
    assert len({sft_response(p, random.Random(s)) for s in range(30)}) > 3


def test_tool_output_mask_is_built_from_ids():
    tokenizer = load_tiny_tokenizer()
    text = "<think><calc>4+5</calc><result>9</result> 9</think>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    mask = tool_output_mask(ids, tokenizer.convert_tokens_to_ids("<result>"), tokenizer.convert_tokens_to_ids("</result>"))
    assert len(mask) == len(ids)
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "<result>9</result>"


def test_sft_examples_mask_prompt_padding_and_tool_output():
    tokenizer = load_tiny_tokenizer()
    problems = generate(4, seed=1, labels=False)
    data = TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "calc", seed=0, max_length=128,
                        tool_cfg={"kind": "calculator", "prompt": "never"})
    item = data[0]
    prompt_len = len(encode_prompt(prompt_text(COUNTDOWN, problems[0], "compact", tokenizer), tokenizer))
    assert all(label == IGNORE for label in item["labels"][:prompt_len])
    learned = tokenizer.decode([t for t, label in zip(item["input_ids"], item["labels"]) if label != IGNORE])
    assert "<calc>" in learned and "<result>" not in learned and learned.endswith("</answer><eos>")
    assert item["labels"][-1] == tokenizer.eos_token_id
    batch = pad_batch([data[i] for i in range(4)], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert ((batch["attention_mask"] == 0) <= (batch["labels"] == IGNORE)).all()


def test_mixed_traces_pair_the_calculator_preamble_with_calc_and_its_absence_with_plain():
    tokenizer = load_tiny_tokenizer()
    problems = generate(64, seed=1, labels=False)
    tool = {"kind": "calculator", "prompt": "when_available"}
    mixed = TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "mixed", seed=0, max_length=128, tool_cfg=tool)
    plain = TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "plain", seed=0, max_length=128, tool_cfg=tool)
    bare = [len(encode_prompt(prompt_text(COUNTDOWN, p, "compact", tokenizer), tokenizer)) for p in problems]
    kinds = []
    for i in range(len(problems)):
        item = mixed[i]
        text = tokenizer.decode(item["input_ids"])
        calc = "<calc>" in text[text.index("<think>"):]
        prompt_len = next(k for k, label in enumerate(item["labels"]) if label != IGNORE)
        decorated = prompt_len > bare[i]
        assert calc == decorated, text  # the preamble exactly when the calculator answered the trace
        kinds.append(calc)
    assert 16 < sum(kinds) < 48  # about one half each
    again = TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "mixed", seed=0, max_length=128, tool_cfg=tool)
    assert [again[i]["input_ids"] for i in range(8)] == [
        TraceDataset(COUNTDOWN, problems, tokenizer, "compact", "mixed", seed=0, max_length=128, tool_cfg=tool)[i]["input_ids"]
        for i in range(8)]
    assert all("<calc>" not in tokenizer.decode(plain[i]["input_ids"]) for i in range(8))


def test_trace_rendering_compact_and_spaced():
    from ablate.tasks.countdown.solver import search

    p = Problem((44, 19, 35), 98)
    steps, _ = search(p.numbers, p.target)
    assert render_trace(p, steps) == "<think>19+35=54 44+54=98</think><answer>44+(19+35)</answer>"
    assert render_trace(p, steps, "calc", compact=False) == (
        "<think> <calc>19 + 35</calc><result>54</result> <calc>44 + 54</calc><result>98</result> </think>\n"
        "<answer> 44 + (19 + 35) </answer>")


def test_shipped_sft_checkpoint_loads_and_is_documented():
    import json

    from ablate.models import BUILTIN, resolve_path

    path = resolve_path("builtin:tiny-sft")
    cfg = OmegaConf.create({"kind": "tiny", "name_or_path": "builtin:tiny-sft", "template": "compact"})
    model = load_model(cfg, load_tokenizer(cfg))
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(load_tiny_tokenizer())
    summary = json.loads((BUILTIN["tiny-sft"] / "eval_summary.json").read_text())
    assert summary["pass@1"] >= 0.15 and summary["mixed_fraction"] >= 0.3
    assert summary["by_operands"]["3"]["pass@1"] > 2 * summary["by_operands"]["4"]["pass@1"]
    assert "python -m ablate.train" in (BUILTIN["tiny-sft"] / "README.md").read_text()
    assert path.endswith("tiny_sft")
    import pytest

    with pytest.raises(ValueError, match="no such shipped checkpoint"):
        resolve_path("builtin:nope")


def test_weights_fingerprint_tells_one_set_of_weights_from_another():
    import torch

    from ablate.models import load_model, load_tiny_tokenizer, weights_sha256

    tok = load_tiny_tokenizer()
    cfg = {"kind": "tiny", "name_or_path": None, "arch": {"hidden_size": 16, "intermediate_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 32}}
    torch.manual_seed(0)
    a = load_model(cfg, tok)
    torch.manual_seed(0)
    b = load_model(cfg, tok)
    assert weights_sha256(a) == weights_sha256(b) and len(weights_sha256(a)) == 64
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-6  # one weight, one ulp-scale change
    assert weights_sha256(a) != weights_sha256(b)
