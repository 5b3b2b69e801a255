import pytest
import torch

from ablate.config import load_group_config
from ablate.models import encode_prompt
from ablate.objectives import token_logprobs
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine, filter_logits
from ablate.tasks.countdown import CountdownTask, Reward
from ablate.tasks.countdown.tools import Calculator
from hf_baseline import BaselineHFEngine


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # the task the prompts render


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0)[0, 2:]).all() and torch.isfinite(filter_logits(logits, 2, 1.0)[0, :2]).all()
    kept = torch.isfinite(filter_logits(logits, 0, 0.7))[0].tolist()
    assert kept == [True, True, False, False]  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7: the second token is still needed
    assert torch.isfinite(filter_logits(logits, 0, 0.1))[0].tolist() == [True, False, False, False]


def test_behaviour_logprobs_match_a_teacher_forced_forward_and_are_seeded(tiny_policy):
    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer, batch_size=5)  # 3 prompts x 3 samples: two chunks
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n")]
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    out = engine.generate(prompts, 3, params, torch.Generator().manual_seed(0))
    again = engine.generate(prompts, 3, params, torch.Generator().manual_seed(0))
    assert out.completion_ids == again.completion_ids and out.n_prompts == 3
    assert out.prompt_ids[3] == prompts[1]
    for prompt, completion, behaviour in zip(out.prompt_ids, out.completion_ids, out.behaviour_logprobs):
        assert 1 <= len(completion) == len(behaviour) <= 12
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        forced = token_logprobs(logits[:, len(prompt) - 1:-1], ids[:, len(prompt):])[0]
        assert torch.allclose(forced, torch.tensor(behaviour), atol=1e-4)
        if tokenizer.eos_token_id in completion:
            assert completion.index(tokenizer.eos_token_id) == len(completion) - 1


def test_sequences_that_finish_early_leave_the_batch_without_changing_the_others():
    """Finished rows are dropped from the batch and its KV cache mid-decoding; greedy decoding of the
    shipped SFT model (answers of different lengths) must equal decoding each prompt on its own."""
    from ablate.models import load_model, load_tokenizer

    tokenizer = load_tokenizer({"kind": "tiny"})
    model = load_model({"kind": "tiny", "name_or_path": "builtin:tiny-sft"}, tokenizer).eval()
    engine = HFEngine(model, tokenizer)
    prompts = [encode_prompt(t, tokenizer) for t in ("3 7 -> 21\n", "44 19 35 -> 98\n", "25 5 60 -> 17\n", "2 -> 2\n")]
    greedy = SamplingParams(temperature=1e-6, max_new_tokens=60)
    batched = engine.generate(prompts, 1, greedy, torch.Generator().manual_seed(0))
    lengths = sorted(map(len, batched.completion_ids))
    assert lengths[0] < lengths[-1] and tokenizer.eos_token_id in batched.completion_ids[0]  # rows did finish early
    for i, prompt in enumerate(prompts):
        alone = engine.generate([prompt], 1, greedy, torch.Generator().manual_seed(0))
        assert batched.completion_ids[i] == alone.completion_ids[0]
        assert batched.behaviour_logprobs[i] == pytest.approx(alone.behaviour_logprobs[0], abs=1e-4)


def assert_same_as_the_old_loop(model, tokenizer, prompts, k, params, batch_size, tool=None, tool_available=None):
    """The engine against the frozen pre-optimisation loop (tests/hf_baseline.py), same seed: the same
    draws, bit-identical behaviour log-probs (float lists compared exactly), tool masks and calls."""
    outs = [engine(model, tokenizer, batch_size=batch_size, tool=tool).generate(
        prompts, k, params, torch.Generator().manual_seed(7), tool_available) for engine in (HFEngine, BaselineHFEngine)]
    new, old = outs
    assert new.completion_ids == old.completion_ids
    assert new.behaviour_logprobs == old.behaviour_logprobs
    assert new.tool_mask == old.tool_mask and new.tool_calls == old.tool_calls and new.texts == old.texts
    return new


SAMPLING = {"rl": SamplingParams(max_new_tokens=48),
            "eval": SamplingParams(temperature=0.6, top_k=20, top_p=0.95, max_new_tokens=48)}


@pytest.fixture(scope="module")
def shipped():
    from ablate.models import load_model, load_tokenizer, prompt_text
    from ablate.tasks.countdown import generate

    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = load_model({"kind": "tiny", "name_or_path": "builtin:tiny-sft"}, tokenizer).eval()
    prompts = [encode_prompt(prompt_text(COUNTDOWN, p, "compact", tokenizer), tokenizer) for p in generate(6, seed=3, labels=False)]
    return model, tokenizer, prompts


@pytest.mark.parametrize("sampling, batch_size", [
    # two rows a batch under evaluation sampling: the longest case (12 batches of both loops), slow-marked
    pytest.param("eval", 2, marks=pytest.mark.slow), ("rl", 2), ("eval", 7), ("rl", 7), ("eval", 64), ("rl", 64)])
def test_decoding_is_bit_identical_to_the_old_loop(shipped, sampling, batch_size):
    """The preallocated KV cache changes no number: the shipped SFT model (answers of
    different lengths, so rows leave the batch at different steps), 6 prompts of different lengths x 4."""
    model, tokenizer, prompts = shipped
    out = assert_same_as_the_old_loop(model, tokenizer, prompts, 4, SAMPLING[sampling], batch_size)
    assert len({len(c) for c in out.completion_ids}) > 2  # rows did finish at different steps


def test_decoding_one_sequence_at_a_time_is_bit_identical_to_the_old_loop(shipped):
    model, tokenizer, prompts = shipped
    assert_same_as_the_old_loop(model, tokenizer, prompts[:3], 1, SAMPLING["eval"], 1)


class CalcHappy(torch.nn.Module):
    """A transformer policy nudged (logit biases) to open and close `<calc>` often, so that the calculator
    answers mid-batch, and to end at scattered steps; its KV cache is the engine's as for any model."""

    def __init__(self, model, tokenizer, calc: float = 2.0, eos: float = 1.0):
        super().__init__()
        self.model, vocab = model, tokenizer.get_vocab()
        self.bias = torch.zeros(model.config.vocab_size)
        self.bias[[vocab["<calc>"], vocab["</calc>"]]] = calc
        self.bias[tokenizer.eos_token_id] = eos

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        out.logits = out.logits + self.bias
        return out


@pytest.mark.parametrize("sampling", sorted(SAMPLING))
@pytest.mark.parametrize("batch_size", [5, 64])
def test_decoding_with_the_calculator_is_bit_identical_to_the_old_loop(tiny_policy, sampling, batch_size):
    """With the calculator answering mid-batch (its reply forced token by token), unavailable for some
    sequences, and rows ending at different steps."""
    model, tokenizer = tiny_policy
    policy = CalcHappy(model, tokenizer).eval()
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n")]
    available = [i % 3 != 2 for i in range(3 * 8)]
    out = assert_same_as_the_old_loop(policy, tokenizer, prompts, 8, SAMPLING[sampling], batch_size,
                                      tool=Calculator(tokenizer, max_calls=2), tool_available=available)
    assert sum(out.tool_calls) > 3 and len({len(c) for c in out.completion_ids}) > 2  # the tool did answer


def test_decoding_passes_the_kv_cache_by_the_installed_transformers_name(tiny_policy):
    """transformers >= 5.24 calls it `cache` and warns on `past_key_values`: no warning on the console."""
    import inspect
    import warnings

    from ablate.rollout.hf import cache_kwarg

    model, tokenizer = tiny_policy
    assert cache_kwarg(model) in inspect.signature(model.forward).parameters
    engine = HFEngine(model, tokenizer, batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        engine.generate([encode_prompt("1 2 -> 3\n", tokenizer)], 2, SamplingParams(max_new_tokens=4),
                        torch.Generator().manual_seed(0))


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (3, 1.0), (0, 0.7), (3, 0.6), (50, 0.95)])
def test_sampling_on_the_device_draws_from_the_filtered_distribution(top_k, top_p):
    """The large-vocabulary / GPU sampler: each row's draws follow softmax(filter_logits(...)) (a chi-square
    test over 40,000 draws, and never a token the filter removed); its log-prob is log_softmax's, unfiltered."""
    from scipy.stats import chisquare

    from ablate.rollout.hf import sample_on_device

    scaled = torch.log(torch.tensor([[0.4, 0.25, 0.15, 0.1, 0.06, 0.04], [0.05, 0.05, 0.1, 0.2, 0.3, 0.3]]))
    expected = torch.softmax(filter_logits(scaled, top_k, top_p), dim=-1)
    draws = 40_000
    rows = scaled.repeat_interleave(draws, 0)
    token, logp = sample_on_device(rows.clone(), top_k, top_p, torch.Generator().manual_seed(0))
    assert torch.allclose(logp, torch.log_softmax(rows, -1).gather(-1, token[:, None]).squeeze(-1), atol=1e-6)
    for r in range(2):
        counts = torch.bincount(token[r * draws:(r + 1) * draws], minlength=6).double()
        assert (counts[expected[r] == 0] == 0).all()
        kept = expected[r] > 0
        if int(kept.sum()) > 1:
            shares = expected[r][kept].double()
            assert chisquare(counts[kept].numpy(), (shares / shares.sum() * counts.sum()).numpy()).pvalue > 1e-4
    again, _ = sample_on_device(rows.clone(), top_k, top_p, torch.Generator().manual_seed(0))
    assert torch.equal(token, again)  # same seed, same tokens


def test_a_large_vocabulary_samples_on_the_device_seeded_with_true_behaviour_logprobs(tiny_policy, monkeypatch):
    """With the vocabulary over LARGE_VOCAB (here: the threshold lowered) the engine takes the device path:
    same seed, same completions; behaviour log-probs still equal a teacher-forced forward's."""
    import ablate.rollout.hf as hf

    monkeypatch.setattr(hf, "LARGE_VOCAB", 16)
    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer, batch_size=4)
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n")]
    params = SamplingParams(temperature=0.8, max_new_tokens=10, top_k=20, top_p=0.95)
    out = engine.generate(prompts, 3, params, torch.Generator().manual_seed(1))
    assert out.completion_ids == engine.generate(prompts, 3, params, torch.Generator().manual_seed(1)).completion_ids
    assert out.completion_ids != engine.generate(prompts, 3, params, torch.Generator().manual_seed(2)).completion_ids
    for prompt, completion, behaviour in zip(out.prompt_ids, out.completion_ids, out.behaviour_logprobs):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits / params.temperature
        forced = token_logprobs(logits[:, len(prompt) - 1:-1], ids[:, len(prompt):])[0]
        assert torch.allclose(forced, torch.tensor(behaviour), atol=1e-4)


def test_the_two_level_inverse_cdf_picks_what_one_cumulative_sum_picks():
    """inverse_cdf at the 0.5B vocabulary (64 blocks of 2,374): for 2,000 uniforms over [0, 1) on rows with
    zeros, spikes and a smooth tail, the same index as searchsorted over the whole row's cumulative sum."""
    from ablate.rollout.hf import inverse_cdf

    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(4, 151_936, generator=generator, dtype=torch.float64) ** 8
    weights[1, ::3] = 0.0
    weights[2] = 0.0
    weights[2, [5, 70_000, 151_935]] = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    weights[3, :100_000] = 0.0
    u = torch.linspace(0, 1, 2_001, dtype=torch.float64)[:-1]
    for row in weights:
        rows = row.expand(len(u), -1)
        two_level, total = inverse_cdf(rows, u[:, None])
        two_level = two_level.squeeze(-1)
        cumulative = row.cumsum(-1)
        one_level = torch.searchsorted(cumulative, (u * cumulative[-1]).contiguous(), right=True)
        assert torch.equal(two_level, one_level)
        assert (row[two_level] > 0).all()  # never a token of zero weight
        assert torch.allclose(total, row.sum().expand(len(u), 1))


def _compare_compiled_with_eager(model, tokenizer, params, seeds=(0, 1)):
    """The compiled engine (rollout.compile) against the eager one: the same completions and tool calls, and
    behaviour log-probs equal to float32 rounding (the compiled step attends over the whole static cache)."""
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n", "5 -> 5\n", "7 8 9 -> 1\n")]
    eager = HFEngine(model, tokenizer, batch_size=6, tool=Calculator(tokenizer, max_calls=2))
    compiled = HFEngine(model, tokenizer, batch_size=6, tool=Calculator(tokenizer, max_calls=2), compile=True)
    for seed in seeds:  # two calls of two 6-row chunks each: the one compiled step serves all four
        want = eager.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
        got = compiled.generate(prompts, 3, params, torch.Generator().manual_seed(seed))
        assert got.completion_ids == want.completion_ids and got.tool_mask == want.tool_mask
        assert len({len(c) for c in got.completion_ids}) > 1  # rows finished at different steps
        for a, b in zip(got.behaviour_logprobs, want.behaviour_logprobs):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)


@pytest.mark.slow
def test_rollout_compile_gives_the_eager_tokens_from_one_compiled_graph(tiny_policy, monkeypatch):
    """rollout.compile's fixed-shape step, traced by torch.compile (the "eager" backend here, counting the
    graphs it is handed: inductor's C++ build is the next test's) on the GPU's sampling path (the device
    sampler, the large-vocabulary threshold lowered, top-k): the eager engine's tokens, and one graph without
    breaks or recompiles for every step of every chunk."""
    import ablate.rollout.decoders as decoders
    import ablate.rollout.hf as hf

    monkeypatch.setattr(hf, "LARGE_VOCAB", 16)
    graphs = []
    monkeypatch.setattr(decoders, "COMPILE_BACKEND", lambda gm, inputs: graphs.append(gm) or gm.forward)
    torch._dynamo.reset()
    model, tokenizer = tiny_policy
    _compare_compiled_with_eager(model, tokenizer, SamplingParams(temperature=1.0, top_k=30, max_new_tokens=24))
    assert len(graphs) == 1


@pytest.mark.slow
def test_rollout_compile_with_inductor_gives_the_eager_tokens(tiny_policy):
    """The real thing on the CPU: inductor builds the step (C++), and the tokens (torch.multinomial's path)
    are still the eager engine's."""
    torch._dynamo.reset()
    model, tokenizer = tiny_policy
    _compare_compiled_with_eager(model, tokenizer, SamplingParams(temperature=1.0, max_new_tokens=24), seeds=(0,))
