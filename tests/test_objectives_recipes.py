"""The parts of the field's recipes (GRPO, Dr. GRPO, DAPO, GSPO, CISPO) in ablate.objectives: each against a
hand computation and, where TRL or verl has it, against their formula re-implemented here as they write it
(trl/trainer/grpo_trainer.py `_compute_loss` and `_generate_and_score_completions`; verl/trainer/ppo/core_algos.py
`agg_loss`, `compute_policy_loss_vanilla`, `compute_policy_loss_cispo`; verl/workers/reward_manager/dapo.py) on
the same tensors."""

import math

import pytest
import torch

from ablate.objectives import aggregate, overlong_penalty, policy_gradient_loss, scaled_advantages


def masked_mean(values, mask):  # verl.utils.torch_functional.masked_mean
    return (values * mask).sum() / (mask.sum() + 1e-8)


def random_batch(seed=0, n=6, t=5):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g) * 2).requires_grad_(True)
    old = logp.detach() + torch.randn(n, t, generator=g) * 0.5
    adv = torch.randn(n, generator=g)
    mask = torch.ones(n, t)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    return logp, old, adv, mask


# --- clip-higher --------------------------------------------------------------------------------------------

def test_clip_higher_widens_the_upper_clip_only():
    mu = torch.tensor([[-0.25, -0.2]])  # ratios e^0.25 = 1.284 (above 1.28) and e^0.2 = 1.221 (inside)
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 2), level="token",
                                      clip_eps_low=0.2, clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-(1.28 + math.exp(0.2)) / 2)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1].item() == pytest.approx(-math.exp(0.2) / 2)
    assert info["clip_high_fraction"].item() == 0.5 and info["clip_low_fraction"].item() == 0.0
    symmetric, info = policy_gradient_loss(logp.detach(), mu, torch.tensor([1.0]), torch.ones(1, 2), level="token")
    assert symmetric.item() == pytest.approx(-1.2) and info["clip_high_fraction"].item() == 1.0
    # a negative advantage below 1 - eps_low is the low side
    _, info = policy_gradient_loss(logp.detach(), torch.tensor([[0.5, 0.0]]), torch.tensor([-1.0]), torch.ones(1, 2),
                                   level="token", clip_eps_low=0.2, clip_eps_high=0.28)
    assert info["clip_low_fraction"].item() == 0.5 and info["clip_high_fraction"].item() == 0.0


def test_clip_higher_agrees_with_verl_vanilla_policy_loss_and_trl_clip_ratios():
    logp, old, adv, mask = random_batch()
    low, high, c = 0.2, 0.28, 3.0
    # verl compute_policy_loss_vanilla, verbatim
    advantages = adv[:, None].expand_as(logp)
    negative_approx_kl = torch.clamp(logp - old, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), mask)
    pg_losses3 = -advantages * c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    verl_loss = masked_mean(pg_losses, mask)  # agg_loss token-mean
    verl_grad, = torch.autograd.grad(verl_loss, logp)
    # TRL's clip ratios
    is_low = ((ratio < 1 - low) & (advantages < 0)).float()
    is_high = ((ratio > 1 + high) & (advantages > 0)).float()

    ours, info = policy_gradient_loss(logp, old, adv, mask, level="token", clip_eps_low=low, clip_eps_high=high,
                                      dual_clip=c, aggregation="token_mean")
    grad, = torch.autograd.grad(ours, logp)
    assert ours.item() == pytest.approx(verl_loss.item(), rel=1e-6)
    assert torch.allclose(grad, verl_grad, atol=1e-7)
    assert info["clip_fraction"].item() == pytest.approx(pg_clipfrac.item(), rel=1e-6)
    assert info["clip_low_fraction"].item() == pytest.approx(masked_mean(is_low, mask).item(), rel=1e-6)
    assert info["clip_high_fraction"].item() == pytest.approx(masked_mean(is_high, mask).item(), rel=1e-6)
    assert 0 < info["clip_high_fraction"] and 0 < info["clip_low_fraction"]  # both sides engage on this batch


def test_default_clip_is_symmetric_clip_eps():
    logp, old, adv, mask = random_batch(1)
    a, _ = policy_gradient_loss(logp.detach(), old, adv, mask, level="token", clip_eps=0.1)
    b, _ = policy_gradient_loss(logp.detach(), old, adv, mask, level="token", clip_eps=0.5, clip_eps_low=0.1,
                                clip_eps_high=0.1)
    assert a.item() == b.item()


# --- aggregations -------------------------------------------------------------------------------------------

def test_dr_grpo_constant_normaliser_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(values, mask, "token_sum_norm", length=8) == pytest.approx((6 + 4) / (2 * 8))
    with pytest.raises(ValueError, match="length"):
        aggregate(values, mask, "token_sum_norm")


def test_aggregations_agree_with_verl_agg_loss_and_trl_dr_grpo():
    g = torch.Generator().manual_seed(3)
    loss_mat = torch.randn(5, 7, generator=g)
    loss_mask = (torch.rand(5, 7, generator=g) > 0.3).float()
    max_completion_length = 16
    # verl agg_loss
    assert aggregate(loss_mat, loss_mask, "token_mean") == pytest.approx(masked_mean(loss_mat, loss_mask).item(), rel=1e-6)
    seq_token_sum = torch.mean(torch.sum(loss_mat * loss_mask, dim=-1))
    assert aggregate(loss_mat, loss_mask, "sum") == pytest.approx(seq_token_sum.item(), rel=1e-6)
    seq_token_mean = torch.mean(torch.sum(loss_mat * loss_mask, dim=-1) / torch.sum(loss_mask, dim=-1))
    assert aggregate(loss_mat, loss_mask, "sequence_mean") == pytest.approx(seq_token_mean.item(), rel=1e-6)
    # TRL loss_type="dr_grpo"
    dr_grpo = (loss_mat * loss_mask).sum() / (loss_mat.size(0) * max_completion_length)
    assert aggregate(loss_mat, loss_mask, "token_sum_norm", max_completion_length) == pytest.approx(dr_grpo.item(), rel=1e-6)


# --- advantage scaling --------------------------------------------------------------------------------------

def test_advantage_scales_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    centred = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])
    assert torch.equal(scaled_advantages(rewards, "group_mean", "none"), centred)
    group_std = (1 / 3) ** 0.5  # sample std of [1, 0, 0, 1]
    assert torch.allclose(scaled_advantages(rewards, "group_mean", "group_std", eps=0.0)[0], centred[0] / group_std)
    assert torch.equal(scaled_advantages(rewards, "group_mean", "group_std")[1], torch.zeros(4))  # equal rewards: 0
    batch_std = ((6 * 0.25 ** 2 + 2 * 0.75 ** 2) / 7) ** 0.5  # sample std of 6 ones and 2 zeros (mean 0.75)
    assert torch.allclose(scaled_advantages(rewards, "group_mean", "batch_std", eps=0.0), centred / batch_std)
    # independent of the baseline: leave-one-out scaled by the group's std
    loo = scaled_advantages(rewards, "rloo", "none")
    assert torch.allclose(scaled_advantages(rewards, "rloo", "group_std", eps=0.0)[0], loo[0] / group_std)
    # grpo is the group mean over the group std, one key
    assert torch.equal(scaled_advantages(rewards, "grpo"), scaled_advantages(rewards, "group_mean", "group_std"))


@pytest.mark.parametrize("scale_rewards,ours", [("group", "group_std"), ("batch", "batch_std"), ("none", "none")])
def test_advantage_scales_agree_with_trl_scale_rewards(scale_rewards, ours):
    g = torch.Generator().manual_seed(5)
    num_generations = 4
    rewards = (torch.rand(12, generator=g) > 0.5).float() + 0.1 * torch.rand(12, generator=g)
    # TRL's GRPOTrainer._generate_and_score_completions, verbatim
    mean_grouped_rewards = rewards.view(-1, num_generations).mean(dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = rewards.view(-1, num_generations).std(dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = rewards.std().expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    mine = scaled_advantages(rewards.view(-1, num_generations), "group_mean", ours, eps=1e-4).flatten()
    assert torch.allclose(mine, advantages, atol=1e-6)


# --- overlong -------------------------------------------------------------------------------------------------

def test_soft_overlong_penalty_by_hand():
    lengths = torch.tensor([5, 6, 7, 9, 10, 12])
    # max 10, buffer 4: free up to 6, then -(L - 6) / 4, at most -1 (DAPO eq. 13)
    assert overlong_penalty(lengths, 10, 4).tolist() == [0.0, 0.0, -0.25, -0.75, -1.0, -1.0]
    assert overlong_penalty(lengths, 10, 4, factor=0.5).tolist() == [0.0, 0.0, -0.125, -0.375, -0.5, -0.5]
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, 10, 0)


def test_soft_overlong_penalty_agrees_with_verl_dapo_reward_manager():
    max_resp_len, overlong_buffer_len, overlong_penalty_factor = 64, 16, 1.0
    for valid_response_length in range(1, max_resp_len + 1):
        expected_len = max_resp_len - overlong_buffer_len
        exceed_len = valid_response_length - expected_len
        overlong_reward = min(-exceed_len / overlong_buffer_len * overlong_penalty_factor, 0)
        ours = overlong_penalty(torch.tensor([valid_response_length]), max_resp_len, overlong_buffer_len,
                                overlong_penalty_factor)
        assert ours.item() == pytest.approx(overlong_reward, abs=1e-7)


# --- CISPO ----------------------------------------------------------------------------------------------------

def test_cispo_by_hand_keeps_the_gradient_of_clipped_tokens():
    logp = torch.tensor([[0.0, -1.0]], requires_grad=True)
    mu = torch.tensor([[-1.0, -1.0]])  # ratios e (above 1 + 0.5) and 1
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([2.0]), torch.ones(1, 2), level="cispo",
                                      clip_eps_low=1.0, clip_eps_high=0.5, aggregation="token_mean")
    # -sg(w) * A * log pi per token: w = 1.5 (clipped) and 1
    assert loss.item() == pytest.approx(-(1.5 * 2 * 0.0 + 1.0 * 2 * -1.0) / 2)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.5, -1.0]]))  # the clipped token still moves (PPO: 0)
    assert info["clip_high_fraction"].item() == 0.5 and info["clip_fraction"].item() == 0.5


def test_cispo_agrees_with_trl_and_verl():
    logp, old, adv, mask = random_batch(7)
    low, high = 1.0, 0.5
    advantages = adv[:, None]
    # TRL loss_type="cispo" (epsilon_high is its cap on the ratio itself), loss "dapo"-normalised: token mean
    coef_1 = torch.exp(logp - old)
    clamped_ratios = torch.clamp(coef_1, max=1 + high).detach()
    per_token_loss = -clamped_ratios * advantages * logp
    trl = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    # verl compute_policy_loss_cispo
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    pg_losses = -torch.clamp(ratio, 1 - low, 1 + high).detach() * advantages * logp
    verl = masked_mean(pg_losses, mask)
    ours, _ = policy_gradient_loss(logp, old, adv, mask, level="cispo", clip_eps_low=low, clip_eps_high=high)
    for theirs in (trl, verl):
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
        assert torch.allclose(torch.autograd.grad(ours, logp, retain_graph=True)[0],
                              torch.autograd.grad(theirs, logp, retain_graph=True)[0], atol=1e-7)


# --- GSPO -----------------------------------------------------------------------------------------------------

def test_gspo_clips_the_sequence_ratio_by_hand():
    logp = torch.zeros(1, 2, requires_grad=True)
    mu = torch.tensor([[-0.1, -0.3]])  # s = exp(mean 0.2) = 1.2214
    loss, info = policy_gradient_loss(logp, mu, torch.tensor([1.0]), torch.ones(1, 2), level="gspo",
                                      clip_eps_low=0.3, clip_eps_high=0.3, aggregation="sequence_mean")
    s = math.exp(0.2)
    assert loss.item() == pytest.approx(-s)
    loss.backward()
    assert torch.allclose(logp.grad, torch.full((1, 2), -s / 2))  # s * A * mean_t grad log pi
    clipped, info = policy_gradient_loss(logp.detach().requires_grad_(), mu, torch.tensor([1.0]), torch.ones(1, 2),
                                         level="gspo", clip_eps=0.1, aggregation="sequence_mean")
    assert clipped.item() == pytest.approx(-1.1) and info["clip_high_fraction"].item() == 1.0


def test_gspo_agrees_with_trl_sequence_level_importance_sampling():
    logp, old, adv, mask = random_batch(11)
    low, high = 3e-2, 4e-2
    advantages = adv[:, None]
    # TRL importance_sampling_level="sequence", loss_type="grpo"
    log_ratio = logp - old
    log_importance_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    coef_2 = torch.clamp(coef_1, 1 - low, 1 + high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    per_token_loss = per_token_loss.expand_as(logp)
    trl = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    ours, _ = policy_gradient_loss(logp, old, adv, mask, level="gspo", clip_eps_low=low, clip_eps_high=high,
                                   aggregation="sequence_mean")
    assert ours.item() == pytest.approx(trl.item(), rel=1e-6)
    assert torch.allclose(torch.autograd.grad(ours, logp, retain_graph=True)[0],
                          torch.autograd.grad(trl, logp)[0], atol=1e-6)
