"""The GPU step's levers, checked on the CPU (docs/gpu.md, "The papers' step"): the compiled decode step of a
grouped-query model without K/V expanded to the query heads, one graph across a rollout's chunks, the bf16
sampling copy, the host-sync cadence, the learner's compile reaching the decoder, and the fused vocabulary path."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ablate.config import CONF_DIR
from ablate.models import encode_prompt, load_model, load_tokenizer
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine

HEADS, KV_HEADS = 4, 2


@pytest.fixture(scope="module")
def gqa_policy():
    """A small random `model=tiny` policy with grouped-query attention (4 query heads over 2 key/value heads, as
    Qwen2.5's 14 over 2), and its tokenizer."""
    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.arch.hidden_size, cfg.arch.num_hidden_layers, cfg.arch.intermediate_size = 32, 2, 64
    cfg.arch.num_attention_heads, cfg.arch.num_key_value_heads = HEADS, KV_HEADS
    tokenizer = load_tokenizer(cfg)
    torch.manual_seed(0)
    return load_model(cfg, tokenizer), tokenizer


def _capture(monkeypatch):
    """Swap the compiled step's backend for one that records the graphs dynamo hands it and runs them as they are."""
    import ablate.rollout.decoders as decoders

    graphs = []
    monkeypatch.setattr(decoders, "COMPILE_BACKEND", lambda gm, inputs: graphs.append(gm) or gm.forward)
    torch._dynamo.reset()
    return graphs


def _shapes(graphs) -> set[tuple[int, ...]]:
    return {tuple(node.meta["example_value"].shape) for gm in graphs for node in gm.graph.nodes
            if isinstance(node.meta.get("example_value"), torch.Tensor)}


def _decode(decoder, steps: int) -> list[torch.Tensor]:
    logits = [decoder.prefill()]
    for _ in range(steps):
        logits.append(decoder.step(logits[-1].argmax(-1)))
    return logits


def _left_padded(tokenizer):
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n")]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, attention, (attention.cumsum(-1) - 1).clamp(min=0)


def test_the_compiled_decode_step_holds_no_key_or_value_expanded_to_the_query_heads(gqa_policy, monkeypatch):
    """transformers' sdpa expands K and V from 2 to 14 heads over the whole static cache under compile (~242 GB a
    step at the papers' size); the folded attention reads them as they are. With left padding, the compiled step's
    logits are the eager decoder's at every step."""
    from ablate.rollout.attention import FOLDED, use_folded
    from ablate.rollout.decoders import LENGTH_BUCKET, CompiledDecoder, CompiledSteps, EagerDecoder

    model, tokenizer = gqa_policy
    ids, attention, positions = _left_padded(tokenizer)
    rows, dim = ids.size(0), model.config.hidden_size // HEADS
    expanded = (rows, HEADS, LENGTH_BUCKET, dim)  # K or V copied to the query heads over the whole cache
    with torch.no_grad():
        eager = _decode(EagerDecoder(model, ids, attention, positions, 12, {}), 6)
        stock = _capture(monkeypatch)
        _decode(CompiledDecoder(CompiledSteps(model), ids, attention, positions, 12, {}), 6)
        assert expanded in _shapes(stock)  # what the issue found: the stock function expands under compile
        use_folded(model)
        try:
            folded = _capture(monkeypatch)
            compiled = _decode(CompiledDecoder(CompiledSteps(model), ids, attention, positions, 12, {}), 6)
            assert model.config._attn_implementation == FOLDED
        finally:
            model.set_attn_implementation("sdpa")
    assert len(folded) == 1 and expanded not in _shapes(folded)
    assert not any(len(s) == 4 and s[:2] == (rows, HEADS) and s[2] >= LENGTH_BUCKET for s in _shapes(folded))
    for got, want in zip(compiled, eager):
        assert torch.allclose(got, want, atol=1e-5)


def test_a_compiled_rollout_uses_one_graph_across_its_chunks_and_counts_it(gqa_policy, monkeypatch):
    """Two chunks of 6 rows, prompts of three widths within one length bucket, two calls: one graph, no recompile,
    and the step's metrics say so (`rollout/compiled_graphs`, `rollout/recompile_limit_hits`). The tokens are the
    eager engine's."""
    model, tokenizer = gqa_policy
    graphs = _capture(monkeypatch)
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n", "7 8 9 -> 1\n")]
    params = SamplingParams(temperature=1.0, top_k=30, max_new_tokens=16)
    eager = HFEngine(model, tokenizer, batch_size=6)
    compiled = HFEngine(model, tokenizer, batch_size=6, compile=True)
    try:
        for seed in (0, 1):
            want = eager.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
            got = compiled.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
            assert got.completion_ids == want.completion_ids
    finally:
        model.set_attn_implementation("sdpa")
    assert len(graphs) == 1
    assert got.stats["rollout/compiled_graphs"] >= 1 and got.stats["rollout/recompile_limit_hits"] == 0
    assert "rollout/compiled_graphs" not in want.stats


def test_the_bf16_sampling_copy_follows_the_learner_in_place_and_leaves_it_alone(gqa_policy):
    """rollout.dtype=bfloat16: a copy of the weights in bf16 (rotary frequencies kept in fp32), refreshed in place
    at each sync (same storage: a CUDA graph recorded on it stays valid); the learner's fp32 weights untouched."""
    import copy

    model, tokenizer = gqa_policy
    learner = copy.deepcopy(model)
    engine = HFEngine(learner, tokenizer, dtype="bfloat16")
    assert engine.sampler is None  # built on first use, where the model then is (not twice: CPU, then the GPU)
    sampler = engine._sampling()
    assert sampler is not learner and {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in learner.parameters()} == {torch.float32}
    assert all(b.dtype == torch.float32 for name, b in sampler.named_buffers() if "inv_freq" in name)
    addresses = [p.data_ptr() for p in sampler.parameters()]
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.5)
    engine.sync(learner)
    assert engine._sampling() is sampler and [p.data_ptr() for p in sampler.parameters()] == addresses
    for mine, theirs in zip(sampler.parameters(), learner.parameters()):
        assert torch.equal(mine, theirs.to(torch.bfloat16))
    prompts = [encode_prompt("44 19 35 -> 98\n", tokenizer)]
    out = engine.generate(prompts, 2, SamplingParams(max_new_tokens=8), torch.Generator().manual_seed(0))
    assert len(out.completion_ids) == 2 and all(len(c) >= 1 for c in out.completion_ids)


def test_asking_for_the_end_every_few_steps_gives_the_same_completions(gqa_policy, monkeypatch):
    """A GPU asks the host whether rows ended every END_CHECK steps (fewer syncs); finished rows decode a few
    tokens more, cut at their first eos. With a deterministic draw (top-k 1) the completions are the per-step
    loop's, for rows ending at many different steps."""
    import ablate.rollout.hf as hf

    model, tokenizer = gqa_policy
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n", "7 8 9 -> 1\n")]
    params = SamplingParams(temperature=1.0, top_k=1, max_new_tokens=20)
    engine = HFEngine(model, tokenizer, batch_size=16)
    want = engine.generate(prompts, 2, params, torch.Generator().manual_seed(0))
    monkeypatch.setattr(hf, "_end_check", lambda device, splice: 3)
    got = engine.generate(prompts, 2, params, torch.Generator().manual_seed(0))
    assert got.completion_ids == want.completion_ids
    assert got.behaviour_logprobs == want.behaviour_logprobs


def test_the_learners_compile_reaches_the_decoder_of_a_large_vocabulary_model(tiny_policy, monkeypatch):
    """trainer.compile=true with a large vocabulary (the threshold lowered): log-probs come from the decoder's
    hidden states, and it is the decoder that is compiled (compiling the model's wrapper left `get_decoder()`
    uncompiled: nothing at the papers' shape ran compiled). The step's numbers equal the eager learner's."""
    import ablate.lit as lit
    import ablate.lit.rloo as rloo
    from test_rloo import one_step

    monkeypatch.setattr(rloo, "CHUNKED_VOCAB", 16)
    graphs = []
    monkeypatch.setattr(lit, "COMPILE_BACKEND", lambda gm, inputs: graphs.append(gm) or gm.forward)
    torch._dynamo.reset()
    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35+44</answer>", "<answer>1</answer>"]
    eager, eager_grads, _ = one_step(model, tokenizer, texts, micro_batch=2)
    compiled, compiled_grads, module = one_step(model, tokenizer, texts, micro_batch=2,
                                                before_step=lambda m: m.compile_learner())
    assert module._learner[0]._orig_mod is module.model.get_decoder()
    assert module._frozen[-1]._orig_mod is module.reference.get_decoder()
    assert graphs  # the decoder's forward went through dynamo
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
    for name, grad in eager_grads.items():
        assert torch.allclose(compiled_grads[name], grad, rtol=1e-3, atol=1e-5), name


def test_a_compiled_rollout_run_logs_its_compile_counters(tmp_path, monkeypatch):
    """rollout.compile=true through the real entry point: metrics.csv holds `rollout/compiled_graphs` (>= 1) and
    `rollout/recompile_limit_hits` (0) at every step (the recording backend stands in for inductor)."""
    import pandas as pd
    from hydra import compose, initialize_config_dir

    from ablate.train import run

    _capture(monkeypatch)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=smoke", "stage=rloo", "rollout.compile=true",
                                                       "stage.max_steps=2", "stage.warmup_steps=1"])
    run(cfg, tmp_path / "run")
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    rows = metrics.dropna(subset=["rollout/compiled_graphs"])
    assert len(rows) == 2 and rows["rollout/compiled_graphs"].ge(1).all()
    assert rows["rollout/recompile_limit_hits"].eq(0).all()


def _attended_lengths(graphs, rows: int, dim: int, length: int) -> list[int]:
    """Per graph, the key/value length its attention reads: the [rows, KV_HEADS, n, dim] tensors in it are the
    step's own key (n = 1), the folded query (n = HEADS / KV_HEADS), the cache's storage (n = length) and what
    attention reads of it."""
    found = []
    for gm in graphs:
        lengths = {s[2] for s in _shapes([gm]) if len(s) == 4 and s[:2] == (rows, KV_HEADS) and s[3] == dim}
        lengths -= {1, HEADS // KV_HEADS, length}
        assert len(lengths) <= 1, lengths
        found.append(lengths.pop() if lengths else length)
    return sorted(found)


def test_the_compiled_step_attends_the_filled_part_by_bucket_with_one_graph_per_bucket(gqa_policy, monkeypatch):
    """Lever 2: each step attends the filled part of the static cache rounded up to LENGTH_BUCKET (2 here, so a
    20-step decode crosses ~10 buckets: more than dynamo's default recompile limit of 8, which the step raises to
    MAX_GRAPHS), not the whole cache. With left padding its logits are the unbucketed compiled step's and the
    eager decoder's; one graph per attended length, none sent back to eager."""
    import ablate.rollout.decoders as decoders
    from ablate.rollout.attention import use_folded
    from ablate.rollout.decoders import CompiledDecoder, CompiledSteps, EagerDecoder, attended, compile_counters

    model, tokenizer = gqa_policy
    monkeypatch.setattr(decoders, "LENGTH_BUCKET", 2)
    ids, attention, positions = _left_padded(tokenizer)
    (rows, width), steps, dim = ids.shape, 20, model.config.hidden_size // HEADS
    length = -(-(width + 24) // 2) * 2
    want = sorted({attended(width + s, length) for s in range(1, steps + 1)})
    assert len(want) > 8 and want[-1] < length  # the last steps still attend less than the whole cache
    hits = compile_counters()["rollout/recompile_limit_hits"]
    use_folded(model)
    try:
        with torch.no_grad():
            eager = _decode(EagerDecoder(model, ids, attention, positions, 24, {}), steps)
            bucketed_graphs = _capture(monkeypatch)
            bucketed = _decode(CompiledDecoder(CompiledSteps(model), ids, attention, positions, 24, {}), steps)
            with monkeypatch.context() as m:
                m.setattr(decoders, "attended", lambda filled, length: length)
                full_graphs = _capture(monkeypatch)
                full = _decode(CompiledDecoder(CompiledSteps(model), ids, attention, positions, 24, {}), steps)
    finally:
        model.set_attn_implementation("sdpa")
    assert _attended_lengths(bucketed_graphs, rows, dim, length) == want
    assert _attended_lengths(full_graphs, rows, dim, length) == [length]
    assert compile_counters()["rollout/recompile_limit_hits"] == hits
    for got, whole, reference in zip(bucketed, full, eager):
        assert torch.allclose(got, whole, atol=1e-5) and torch.allclose(got, reference, atol=1e-5)
    assert torch.equal(torch.stack(bucketed).argmax(-1), torch.stack(full).argmax(-1))


def test_a_compiled_rollout_frees_its_cache_before_learning_and_rebuilds_it_without_recompiling(gqa_policy,
                                                                                                monkeypatch):
    """Lever 3: the static cache is dropped at the end of each rollout (before the learner runs), the next rollout
    allocates a new one and gives the eager engine's tokens again; the graphs are one per (rows, cache length,
    attended length) met in the first rollout, and the second adds none (the new cache's tensors are not guarded:
    a GPU records the CUDA graph again at most, counted in rollout/cudagraph_records, zero on a CPU)."""
    import gc
    import weakref

    import ablate.rollout.decoders as decoders
    from ablate.rollout.decoders import CompiledSteps

    model, tokenizer = gqa_policy
    monkeypatch.setattr(decoders, "LENGTH_BUCKET", 8)
    graphs = _capture(monkeypatch)
    caches, shapes = [], []
    cache, step = CompiledSteps.cache, CompiledSteps.step

    def keep_cache(self, rows, length):
        made = cache(self, rows, length)
        caches.append(weakref.ref(made))
        return made

    def note_shape(self, ids, attention, positions, made):
        shapes.append((ids.size(0), made.layers[0].max_cache_len, attention.size(1)))
        return step(self, ids, attention, positions, made)

    monkeypatch.setattr(CompiledSteps, "cache", keep_cache)
    monkeypatch.setattr(CompiledSteps, "step", note_shape)
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n", "7 8 9 -> 1\n")]
    params = SamplingParams(temperature=1.0, top_k=30, max_new_tokens=24)
    eager = HFEngine(model, tokenizer, batch_size=6)
    compiled = HFEngine(model, tokenizer, batch_size=6, compile=True)
    try:
        for seed in (0, 1):
            want = eager.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
            got = compiled.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
            assert got.completion_ids == want.completion_ids
            gc.collect()
            assert compiled.compiled.caches == {} and caches and all(ref() is None for ref in caches)
            if seed == 0:
                first, met = len(graphs), set(shapes)
    finally:
        model.set_attn_implementation("sdpa")
    assert len({attend for _, _, attend in met}) > 1  # the rollout crossed buckets
    assert first == len(met) and len(graphs) == first and set(shapes) <= met
    assert got.stats["rollout/cudagraph_records"] == 0
