import math

import pytest
import torch

from ablate.objectives import IGNORE, sft_loss


def test_sft_loss_is_mean_cross_entropy_over_labelled_next_tokens():
    # Vocabulary of 3; position t predicts label t+1.
    logits = torch.tensor([[[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0]]])
    labels = torch.tensor([[IGNORE, 0, 1, IGNORE]])
    expected = (math.log(3) + math.log(math.exp(2) + 2)) / 2  # -log(1/3), -log(e^0 / (e^2 + 2))
    assert torch.isclose(sft_loss(logits, labels), torch.tensor(expected))


def test_ignored_positions_do_not_change_the_loss():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[IGNORE, 1, 2, IGNORE, IGNORE], [IGNORE, IGNORE, 3, 4, 5]])
    base = sft_loss(logits, labels)
    changed = logits.clone()
    changed[0, 3:] = 100.0  # predicts positions 4.. which are ignored (and the last position predicts nothing)
    changed[1, 0] = -50.0   # predicts position 1, ignored
    assert torch.isclose(base, sft_loss(changed, labels))


import pytest

from ablate.objectives import (aggregate, entropy_from_logits, grpo_advantages, kl_penalty, policy_gradient_loss,
                               rloo_advantages, token_logprobs)


def test_rloo_advantages_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1]])
    a = rloo_advantages(rewards)
    # R_0 = 1, others mean 1/3 -> 2/3; R_1 = 0, others mean 2/3 -> -2/3
    assert torch.allclose(a[0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    assert torch.equal(a[1], torch.zeros(4))  # a group with equal rewards gives exactly zero
    with pytest.raises(ValueError):
        rloo_advantages(torch.ones(3, 1))


def test_grpo_advantages_by_hand():
    a = grpo_advantages(torch.tensor([[1.0, 0.0], [0.5, 0.5]]), eps=0.0)
    assert torch.allclose(a[0], torch.tensor([1 / 2 ** 0.5, -1 / 2 ** 0.5]))
    assert torch.equal(grpo_advantages(torch.tensor([[0.5, 0.5]])), torch.zeros(1, 2))


def test_aggregations_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(values, mask, "token_mean") == pytest.approx(10 / 4)
    assert aggregate(values, mask, "sequence_mean") == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "sum") == pytest.approx((6 + 4) / 2)
    with pytest.raises(ValueError):
        aggregate(values, mask, "median")


def test_sequence_level_weight_is_truncated_and_constant():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mu = torch.tensor([[-1.5, -2.5]])  # log w = 1 -> w = e > clip 2
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 2), level="sequence", clip=2.0,
                                      aggregation="sum")
    assert loss.item() == pytest.approx(-2.0 * (-3.0))
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -2.0]]))  # d/dlogp of -w*A*sum(logp), w constant
    assert info["clip_fraction"] == 1.0 and info["ratio_mean"].item() == pytest.approx(2.718281828)
    assert info["ratio_max"].item() == pytest.approx(2.718281828)


def test_on_policy_token_level_is_reinforce():
    logp = torch.tensor([[-0.5, -1.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, info = policy_gradient_loss(logp, logp.detach(), torch.tensor([2.0]), mask, level="token",
                                      aggregation="token_mean")
    assert loss.item() == pytest.approx(-2.0)  # ratio 1: -A per token, averaged
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, -1.0, 0.0]]))  # masked token gets no gradient
    assert info["clip_fraction"] == 0.0


def test_token_level_clipping_stops_the_gradient_beyond_the_trust_region():
    logp = torch.tensor([[0.0]], requires_grad=True)
    mu = torch.tensor([[-1.0]])  # ratio e > 1.2 with a positive advantage: clipped, no gradient
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 1), level="token", clip_eps=0.2)
    assert loss.item() == pytest.approx(-1.2)
    loss.backward()
    assert logp.grad.abs().sum() == 0 and info["clip_fraction"] == 1.0


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    log_r = ref - logp  # [-0.5, 1.0]
    assert torch.allclose(kl_penalty(logp, ref, "k1"), -log_r)
    assert torch.allclose(kl_penalty(logp, ref, "k2"), 0.5 * log_r ** 2)
    assert torch.allclose(kl_penalty(logp, ref, "k3"), log_r.exp() - 1 - log_r)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert torch.equal(kl_penalty(logp, logp, "k3"), torch.zeros(2))
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k4")


def test_entropy_and_token_logprobs():
    logits = torch.tensor([[[0.0, 0.0], [100.0, 0.0]]])
    assert torch.allclose(entropy_from_logits(logits), torch.tensor([[math.log(2), 0.0]]), atol=1e-6)
    assert torch.allclose(token_logprobs(logits, torch.tensor([[1, 0]])), torch.tensor([[math.log(0.5), 0.0]]), atol=1e-6)


from ablate.objectives import dpo_loss, ipo_loss, preference_margin, sequence_logprobs  # noqa: E402


def test_sequence_logprobs_sum_or_mean_over_response_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    mask = torch.tensor([[0, 1, 1], [0, 0, 0]])
    assert sequence_logprobs(logp, mask).tolist() == [-5.0, 0.0]
    assert sequence_logprobs(logp, mask, average=True).tolist() == [-2.5, 0.0]  # an empty response is 0, not nan


def pair_logps():
    # Pair 0: policy log-ratios chosen -1 - (-2) = 1, rejected -3 - (-2) = -1, so h = 2.
    # Pair 1: policy equals the reference, h = 0.
    policy_chosen = torch.tensor([-1.0, -7.0], requires_grad=True)
    policy_rejected = torch.tensor([-3.0, -4.0], requires_grad=True)
    return policy_chosen, policy_rejected, torch.tensor([-2.0, -7.0]), torch.tensor([-2.0, -4.0])


def test_dpo_loss_by_hand():
    pc, pr, rc, rr = pair_logps()
    assert preference_margin(pc, pr, rc, rr).tolist() == [2.0, 0.0]
    losses = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # -log sigma(0.5 * 2) = log(1 + e^-1); -log sigma(0) = log 2
    assert losses.tolist() == pytest.approx([math.log(1 + math.exp(-1)), math.log(2)])
    losses.sum().backward()
    # d/d pc of -log sigma(beta h) = -beta * sigma(-beta h); d/d pr is its negative
    assert pc.grad.tolist() == pytest.approx([-0.5 / (1 + math.e), -0.25])
    assert pr.grad.tolist() == pytest.approx([0.5 / (1 + math.e), 0.25])


def test_conservative_dpo_label_smoothing_by_hand():
    pc, pr, rc, rr = pair_logps()
    losses = dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=0.1)
    expected0 = 0.9 * math.log(1 + math.exp(-1)) + 0.1 * math.log(1 + math.e)
    assert losses.tolist() == pytest.approx([expected0, math.log(2)])  # at h = 0 both terms are log 2
    # cDPO's minimum is at beta h = log((1 - eps) / eps), not at infinity
    h = torch.linspace(0, 20, 2001)
    smoothed = dpo_loss(h, torch.zeros_like(h), torch.zeros_like(h), torch.zeros_like(h), 0.5, 0.1)
    assert float(h[smoothed.argmin()]) == pytest.approx(2 * math.log(9), abs=0.01)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=0.5)


def test_ipo_loss_by_hand():
    pc, pr, rc, rr = pair_logps()
    # target 1 / (2 beta) = 1 for beta = 0.5: (2 - 1)^2, (0 - 1)^2
    losses = ipo_loss(pc, pr, rc, rr, beta=0.5)
    assert losses.tolist() == pytest.approx([1.0, 1.0])
    losses.sum().backward()
    assert pc.grad.tolist() == pytest.approx([2.0, -2.0])  # 2 (h - target): pair 0 overshoots, pair 1 falls short
    assert pr.grad.tolist() == pytest.approx([-2.0, 2.0])
    # beta = 0.25 puts the target at h = 2, which pair 0 meets exactly
    assert ipo_loss(*pair_logps(), beta=0.25).tolist() == pytest.approx([0.0, 4.0])
    with pytest.raises(ValueError, match="beta"):
        ipo_loss(pc, pr, rc, rr, beta=0.0)


# ---- importance correction: masking (is_mode=mask), geometric sequence weight, dual-clip ----------------


def test_sequence_mask_drops_sequences_outside_the_bounds_and_keeps_the_true_weight_of_the_others():
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    # log w: 1 (e > clip 2: dropped), log 1.5 (kept at 1.5, not truncated), log 0.25 (< low 0.5: dropped)
    mu = torch.tensor([[-1.5, -2.5], [-1.0 - math.log(1.5), -1.0], [-1.0 + math.log(4.0), -1.0]])
    adv = torch.tensor([1.0, 2.0, -1.0])
    loss, info = policy_gradient_loss(logp, mu, adv, torch.ones(3, 2), level="sequence", clip=2.0, low=0.5,
                                      mode="mask", aggregation="sum")
    # only sequence 1 contributes: -1.5 * 2 * (-2); "sum" averages the per-sequence sums over all 3 rows
    assert loss.item() == pytest.approx(-1.5 * 2.0 * -2.0 / 3)
    loss.backward()
    assert torch.equal(logp.grad[0], torch.zeros(2)) and torch.equal(logp.grad[2], torch.zeros(2))
    assert torch.allclose(logp.grad[1], torch.full((2,), -1.5 * 2.0 / 3))
    assert info["mask_fraction"].item() == pytest.approx(2 / 3)
    assert info["clip_fraction"].item() == pytest.approx(1 / 3)  # above is_clip, whatever the mode


def test_truncate_with_a_lower_bound_raises_small_weights_and_is_the_default_path_without_one():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    mu = torch.tensor([[-1.0 + math.log(10.0)]])  # w = 0.1
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 1), clip=2.0, low=0.5,
                                      aggregation="sum")
    assert loss.item() == pytest.approx(-0.5 * -1.0)  # raised to 0.5
    assert "mask_fraction" not in info  # truncation reports no masked fraction
    plain, _ = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 1), clip=2.0, aggregation="sum")
    assert plain.item() == pytest.approx(-0.1 * -1.0)


def test_geometric_weight_is_the_per_token_geometric_mean_of_the_ratio():
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0]], requires_grad=True)
    mu = torch.tensor([[-1.4, -2.2, -3.3, -5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last position is padding
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), mask, level="geometric", clip=2.0,
                                      aggregation="sum")
    w = math.exp((0.4 + 0.2 + 0.3) / 3)  # the sequence-level weight would be exp(0.9)
    assert info["ratio_mean"].item() == pytest.approx(w)
    assert loss.item() == pytest.approx(-w * (-6.0))
    # masked at clip 2: the sequence weight e^0.9 = 2.46 is dropped, the geometric one e^0.3 = 1.35 kept
    _, geo = policy_gradient_loss(logp, mu, torch.tensor([1.0]), mask, level="geometric", clip=2.0, mode="mask")
    _, sequence = policy_gradient_loss(logp, mu, torch.tensor([1.0]), mask, level="sequence", clip=2.0, mode="mask")
    assert geo["mask_fraction"].item() == 0.0 and sequence["mask_fraction"].item() == 1.0


def test_token_mask_gives_masked_tokens_no_gradient():
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    # ratios: 1, e^1.5 (> clip 3), e^-2 (< low 0.2), 1.1; the last token is padding
    mu = torch.tensor([[-1.0, -2.5, 1.0, -1.0 - math.log(1.1)]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), mask, level="token", clip=3.0, low=0.2,
                                      clip_eps=10.0, mode="mask", aggregation="token_mean")
    assert loss.item() == pytest.approx(-1.0 / 3)  # token 0 alone: -r A = -1, averaged over the 3 real tokens
    loss.backward()
    assert logp.grad[0, 0].item() == pytest.approx(-1.0 / 3)  # d(-r A)/dlogp = -r A
    assert torch.equal(logp.grad[0, 1:], torch.zeros(3))  # masked and padding tokens: no gradient at all
    assert info["mask_fraction"].item() == pytest.approx(2 / 3)
    truncated, plain = policy_gradient_loss(logp.detach(), mu, torch.tensor([1.0]), mask, level="token", clip=3.0,
                                            low=0.2, clip_eps=10.0, aggregation="token_mean")
    assert "mask_fraction" not in plain  # truncate at the token level is PPO clipping alone
    assert truncated.item() == pytest.approx(-(1 + math.exp(1.5) + math.exp(-2)) / 3)


def test_dual_clip_caps_the_loss_of_negative_advantages():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    mu = torch.tensor([[-2.0, -0.1]])  # ratios e^2 = 7.39 (beyond c = 3) and e^0.1
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([-1.0]), torch.ones(1, 2), level="token",
                                      clip_eps=0.2, dual_clip=3.0, aggregation="token_mean")
    # token 0: PPO gives max(r, clip(r)) * |A| = 7.39, dual-clip caps it at 3 (a constant: no gradient);
    # token 1: r = 1.105 inside [0.8, 1.2]: loss r * |A|
    assert loss.item() == pytest.approx((3.0 + math.exp(0.1)) / 2)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() == pytest.approx(math.exp(0.1) / 2)
    assert info["dual_clip_fraction"].item() == pytest.approx(0.5)
    unclipped, _ = policy_gradient_loss(logp.detach(), mu, torch.tensor([-1.0]), torch.ones(1, 2), level="token",
                                        clip_eps=0.2, aggregation="token_mean")
    assert unclipped.item() == pytest.approx((math.exp(2.0) + math.exp(0.1)) / 2)
    # positive advantages are untouched
    pos, _ = policy_gradient_loss(logp.detach(), mu, torch.tensor([1.0]), torch.ones(1, 2), level="token",
                                  clip_eps=0.2, dual_clip=3.0)
    ref, _ = policy_gradient_loss(logp.detach(), mu, torch.tensor([1.0]), torch.ones(1, 2), level="token", clip_eps=0.2)
    assert pos.item() == ref.item()


def test_unknown_importance_mode_or_level_is_an_error():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="mode"):
        policy_gradient_loss(x, x, torch.zeros(1), torch.ones(1, 1), mode="clip")
    with pytest.raises(ValueError, match="level"):
        policy_gradient_loss(x, x, torch.zeros(1), torch.ones(1, 1), level="chunk")


def test_a_policy_loss_registers_in_one_place(monkeypatch):
    """Adding a policy loss is one entry in objectives.POLICY_LOSSES: the loss dispatches to it and the
    config check accepts its key (a toy REINFORCE without importance weights)."""
    from ablate import objectives

    def reinforce(logprobs, delta, adv, mask, **_):
        one = torch.ones(())
        return -(adv * logprobs), one, one, torch.zeros(()), {}

    monkeypatch.setitem(objectives.POLICY_LOSSES, "reinforce", reinforce)
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, info = objectives.policy_gradient_loss(logprobs, logprobs + 5.0, torch.tensor([1.0, -2.0]), mask,
                                                 level="reinforce", aggregation="token_mean")
    # token mean of -(A * log pi) over the 3 unmasked tokens: (1 + 2 - 1) / 3
    assert loss.item() == pytest.approx(2.0 / 3.0) and info["ratio_mean"].item() == 1.0
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR
    from ablate.stages.rloo import check_rloo

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["stage=rloo", "stage.is_level=reinforce"])
    check_rloo(cfg)  # accepted: the check reads the registry


def test_chunked_logprobs_match_the_whole_logits_and_their_gradients():
    """The learner's large-vocabulary path: log-probs and entropies from hidden states in chunks (checkpointed)
    equal token_logprobs / entropy_from_logits over the whole logits, and so do the gradients."""
    from ablate.objectives import chunked_logprobs, entropy_from_logits, token_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(3, 7, 16, requires_grad=True)
    tokens = torch.randint(0, 50, (3, 7))
    logits = head(hidden)
    whole_logp, whole_entropy = token_logprobs(logits, tokens), entropy_from_logits(logits)
    (whole_logp.sum() + whole_entropy.sum()).backward()
    grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    logp, entropy = chunked_logprobs(hidden, tokens, head, chunk=5)  # 21 positions: chunks of 5, 5, 5, 5, 1
    assert logp.shape == entropy.shape == (3, 7)
    assert torch.allclose(logp, whole_logp, atol=1e-5) and torch.allclose(entropy, whole_entropy, atol=1e-5)
    (logp.sum() + entropy.sum()).backward()
    assert torch.allclose(hidden.grad, grads[0], atol=1e-5) and torch.allclose(head.weight.grad, grads[1], atol=1e-5)
    with torch.no_grad():  # the reference's path: no checkpointing, the same numbers
        assert torch.allclose(chunked_logprobs(hidden, tokens, head, chunk=4)[0], whole_logp, atol=1e-5)


def test_micro_batches_by_token_budget():
    from ablate.lit.micro_batches import micro_batches

    lengths = torch.tensor([10, 40, 20, 40, 5, 20])
    order = torch.argsort(lengths, descending=True, stable=True)  # 1, 3, 2, 5, 0, 4
    assert [p.tolist() for p in micro_batches(order, lengths, 4, None)] == [[1, 3, 2, 5], [0, 4]]
    # 80 padded tokens: two rows of 40, then four of 20 (two 20s, then 10 and 5 at width 10)
    assert [p.tolist() for p in micro_batches(order, lengths, 4, 80)] == [[1, 3], [2, 5, 0, 4]]
    assert [p.tolist() for p in micro_batches(order, lengths, 4, 30)] == [[1], [3], [2], [5], [0, 4]]  # >= 1 row
    assert torch.equal(torch.cat(micro_batches(order, lengths, 4, 7)), order)  # every sequence, once, in order


def test_step_throughput_on_a_cpu_has_rates_and_no_mfu():
    from ablate.perf import peak_flops, step_throughput

    metrics = step_throughput(2.0, 4.0, 1000, 3000, 10_000, True, torch.device("cpu"))
    assert metrics == {"time/generate_tokens_per_s": 500.0, "time/learner_tokens_per_s": 750.0}
    assert peak_flops(torch.device("cpu")) is None


@pytest.mark.parametrize("autocast", [False, True])
def test_the_fused_vocabulary_path_equals_the_chunked_one_gradients_included(autocast):
    """ablate.fused_vocab (the learner's path for a large vocabulary: an analytic backward, no fp32 [tokens,
    vocabulary] tensor kept) against the checkpointed chunked log-softmax: log-probs, entropies and the gradients
    of both with respect to the hidden states and the head, chunks not dividing the positions; in fp32 to rounding,
    under bf16 autocast to bf16's. Without entropy (the reference) the log-probs are the same."""
    from ablate.fused_vocab import fused_logprobs
    from ablate.objectives import chunked_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(3, 7, 16, requires_grad=True)
    tokens = torch.randint(0, 300, (3, 7))
    weights = torch.randn(3, 7), torch.randn(3, 7)

    def run(fn):
        hidden.grad = head.weight.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logp, entropy = fn(hidden, tokens, head, 5)
            ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
        return logp.detach(), entropy.detach(), hidden.grad.clone(), head.weight.grad.clone()

    tolerance = dict(rtol=2e-2, atol=2e-2) if autocast else dict(rtol=1e-5, atol=1e-5)
    for got, want in zip(run(fused_logprobs), run(chunked_logprobs)):
        assert torch.allclose(got, want, **tolerance)
    with torch.no_grad():
        alone, none = fused_logprobs(hidden, tokens, head, 5, entropy=False)
    assert none is None and torch.allclose(alone, chunked_logprobs(hidden, tokens, head, 5)[0], atol=1e-6)
    with pytest.raises(ValueError, match="bias"):
        fused_logprobs(hidden, tokens, torch.nn.Linear(16, 300), 5)
