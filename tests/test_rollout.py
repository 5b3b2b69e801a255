import pytest
import torch

from ablate.models import encode_prompt
from ablate.objectives import token_logprobs
from ablate.rollout import SamplingParams
from ablate.rollout.hf import HFEngine, filter_logits




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
