"""Losses as pure tensor functions: no Lightning, no engine. Each is tested by hand computation.

The interchangeable pieces are registered under the config value that selects them (`ablate.registry`):
`@ADVANTAGES.register("rloo")` on an estimator makes `stage.advantage=rloo` select it, and the config check
of `stage=rloo` accepts exactly the registered keys; so do the advantage scales, aggregations, policy losses,
KL estimators and preference losses."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ablate.registry import Registry

IGNORE = -100


def sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy averaged over the labelled tokens.

    logits [B, T, V] predict position t+1 from position t; labels [B, T] hold token ids, or
    IGNORE (-100) for prompt, padding and tool-output tokens, which never contribute.
    """
    shifted_logits = logits[:, :-1].reshape(-1, logits.size(-1)).float()
    shifted_labels = labels[:, 1:].reshape(-1)
    return F.cross_entropy(shifted_logits, shifted_labels, ignore_index=IGNORE)


# ---------------------------------------------------------------------------------------------
# Online RL (RLOO). Shapes: rewards [P, k] (P prompts, k samples each); per-token tensors
# [N, T] with N = P * k sequences in prompt-major order and a float/bool `mask` that is 1 only
# on response tokens the policy wrote (not prompt, padding or tool output).

# `stage.advantage` -> group rewards [prompts, k] -> advantages [prompts, k]. Register an estimator here
# and `stage.advantage=<its key>` selects it; the config check reads these keys.
ADVANTAGES = Registry("stage.advantage")


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = R_i - mean of the other k-1 rewards = k/(k-1) * (R_i - mean). Equal rewards give 0."""
    k = rewards.size(-1)
    if k < 2:
        raise ValueError("RLOO needs at least 2 samples per prompt")
    return (rewards - rewards.mean(dim=-1, keepdim=True)) * (k / (k - 1))


@ADVANTAGES.register("grpo")
def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(R_i - mean) / (std + eps) within each group (sample std); equal rewards give exactly 0."""
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    return centered / (rewards.std(dim=-1, keepdim=True, unbiased=True) + eps)


@ADVANTAGES.register("group_mean")
def group_mean_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """R_i - mean of the group (GRPO's baseline without its std division: Dr. GRPO, Liu et al. 2025, eq. 3;
    scale it with `stage.advantage_scale`)."""
    return rewards - rewards.mean(dim=-1, keepdim=True)


# `stage.advantage_scale` -> (advantages [prompts, k], rewards [prompts, k], eps) -> scaled advantages: a
# division independent of the baseline (TRL's `scale_rewards`: "group" / "batch" / "none", trl/trainer/
# grpo_trainer.py). group_std: each group's sample std; batch_std: the std of every reward of the batch
# (Hu et al.'s REINFORCE++ argument, TRL's "batch"); none: unscaled (Dr. GRPO). A group or batch of
# equal rewards keeps advantages of exactly 0.
ADVANTAGE_SCALES = Registry("stage.advantage_scale")


@ADVANTAGE_SCALES.register("none")
def _unscaled(adv: torch.Tensor, rewards: torch.Tensor, eps: float) -> torch.Tensor:
    return adv


@ADVANTAGE_SCALES.register("group_std")
def _group_std(adv: torch.Tensor, rewards: torch.Tensor, eps: float) -> torch.Tensor:
    return adv / (rewards.std(dim=-1, keepdim=True, unbiased=True) + eps)


@ADVANTAGE_SCALES.register("batch_std")
def _batch_std(adv: torch.Tensor, rewards: torch.Tensor, eps: float) -> torch.Tensor:
    return adv / (rewards.std(unbiased=True) + eps)


def scaled_advantages(rewards: torch.Tensor, estimator: str = "rloo", scale: str = "none",
                      eps: float = 1e-6) -> torch.Tensor:
    """Advantages [prompts, k] from group rewards [prompts, k]: the baseline of `estimator` (rloo: leave-one-out;
    group_mean; grpo: group mean over group std, one key for GRPO's eq. 3), then the division `scale`."""
    return ADVANTAGE_SCALES[scale](ADVANTAGES[estimator](rewards), rewards, eps)


# `stage.aggregation` -> (per-token values [N, T], mask [N, T], fixed length L or None) -> scalar. verl's names
# (verl/trainer/ppo/core_algos.py `agg_loss`): token_mean = "token-mean", sequence_mean = "seq-mean-token-mean",
# sum = "seq-mean-token-sum"; token_sum_norm = Dr. GRPO's constant normaliser (TRL's loss_type="dr_grpo": sum
# over the tokens / (N * max_completion_length); verl's "seq-mean-token-sum-norm").
AGGREGATIONS = Registry("stage.aggregation")


@AGGREGATIONS.register("token_mean")
def _token_mean(values: torch.Tensor, mask: torch.Tensor, length: Any) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


@AGGREGATIONS.register("sequence_mean")
def _sequence_mean(values: torch.Tensor, mask: torch.Tensor, length: Any) -> torch.Tensor:
    return ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


@AGGREGATIONS.register("sum")
def _sum(values: torch.Tensor, mask: torch.Tensor, length: Any) -> torch.Tensor:
    return (values * mask).sum(-1).mean()


@AGGREGATIONS.register("token_sum_norm")
def _token_sum_norm(values: torch.Tensor, mask: torch.Tensor, length: Any) -> torch.Tensor:
    return (values * mask).sum(-1).mean() / length


# aggregations whose normaliser is a fixed length (`aggregate(..., length=)`), not the batch's tokens
FIXED_LENGTH = ("token_sum_norm",)


def aggregate(values: torch.Tensor, mask: torch.Tensor, how: str, length: int | None = None) -> torch.Tensor:
    """Reduce per-token values [N, T] to a scalar.

    token_mean: mean over all unmasked tokens of the batch (long answers weigh more);
    sequence_mean: mean over tokens within each sequence, then over sequences (each answer
    weighs the same); sum: sum over tokens, mean over sequences (the REINFORCE estimator of the
    sequence log-probability gradient); token_sum_norm: sum over tokens divided by a fixed `length`
    (the generation budget), mean over sequences (Dr. GRPO: no length bias, a constant scale).
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; expected one of {tuple(AGGREGATIONS)}")
    if how in FIXED_LENGTH and not length:
        raise ValueError(f"aggregation {how!r} divides by a fixed length: pass length= (the generation budget)")
    return AGGREGATIONS[how](values, mask.to(values.dtype), length)


IS_MODES = ("truncate", "mask")

# `stage.is_level` -> (logprobs, delta = (log pi - log mu) * mask, advantages [N, 1], mask, **options)
# -> (per-token loss, mean ratio, max ratio, clipped fraction, extra diagnostics). Register a policy loss
# here and `stage.is_level=<its key>` selects it; the config check reads these keys. A loss whose ratio
# diagnostics are means over tokens, not sequences, says so with `token_level = True` (`token_level`).
POLICY_LOSSES = Registry("stage.is_level")


def _sequence_weighted(logprobs, delta, adv, mask, *, geometric: bool, clip, low, mode, **_):
    """Per-token loss -w * A * log pi_t with one importance weight per sequence, a constant:
    w = exp(sum_t (log pi - log mu)), or with `geometric` its per-token geometric mean."""
    extra: dict[str, torch.Tensor] = {}
    log_w = delta.sum(-1).detach()
    if geometric:
        log_w = log_w / mask.sum(-1).clamp(min=1)
    ratio = log_w.exp()
    if mode == "truncate":
        weight = ratio.clamp(max=clip)
        if low > 0:
            weight = weight.clamp(min=low)
    else:
        keep = (ratio >= low) & (ratio <= clip)
        weight = torch.where(keep, ratio, torch.zeros_like(ratio))
        extra["mask_fraction"] = (~keep).float().mean()
    per_token = -(weight.unsqueeze(-1) * adv * logprobs)
    return per_token, ratio.mean(), ratio.max(), (ratio > clip).float().mean(), extra


@POLICY_LOSSES.register("sequence")
def _sequence(*args, **options):
    return _sequence_weighted(*args, geometric=False, **options)


def _bounds_fractions(ratio, adv, mask, tokens, eps_low, eps_high, *, signed: bool) -> dict[str, torch.Tensor]:
    """Fractions of response tokens below 1 - eps_low and above 1 + eps_high. signed (PPO): only where the clip
    binds, below with A < 0 and above with A > 0 (TRL's clip_ratio/low_mean, high_mean); else wherever it moves
    the ratio (CISPO's weight is clipped whatever the advantage's sign)."""
    low, high = ratio < 1 - eps_low, ratio > 1 + eps_high
    if signed:
        low, high = low & (adv < 0), high & (adv > 0)
    return {"clip_low_fraction": (low.float() * mask).sum() / tokens,
            "clip_high_fraction": (high.float() * mask).sum() / tokens}


def _ppo_clipped(ratio, adv, mask, *, eps_low, eps_high, clip, low, mode, dual_clip):
    """PPO's per-token clipped objective on per-token ratios [N, T] (asymmetric: [1 - eps_low, 1 + eps_high],
    DAPO's clip-higher), with the dual clip and token masking options."""
    extra: dict[str, torch.Tensor] = {}
    unclipped = ratio * adv
    clipped_term = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped_term)
    tokens = mask.sum().clamp(min=1)
    clipped = ((clipped_term < unclipped).float() * mask).sum() / tokens
    extra.update(_bounds_fractions(ratio.detach(), adv, mask, tokens, eps_low, eps_high, signed=True))
    if dual_clip is not None:
        capped = (adv < 0) & (per_token > -dual_clip * adv)
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)
        extra["dual_clip_fraction"] = (capped.float() * mask).sum() / tokens
    if mode == "mask":
        keep = ((ratio >= low) & (ratio <= clip)).to(per_token.dtype)
        per_token = per_token * keep
        extra["mask_fraction"] = ((1 - keep) * mask).sum() / tokens
    return per_token, (ratio * mask).sum() / tokens, (ratio * mask).max(), clipped, extra


@POLICY_LOSSES.register("token")
def _token_clipped(logprobs, delta, adv, mask, **options):
    """PPO: r_t = exp(log pi_t - log mu_t) per token."""
    return _ppo_clipped(delta.exp(), adv, mask, **_clip_options(options))


@POLICY_LOSSES.register("geometric")
def _geometric(*args, **options):
    return _sequence_weighted(*args, geometric=True, **options)


@POLICY_LOSSES.register("gspo")
def _gspo(logprobs, delta, adv, mask, **options):
    """GSPO (Zheng et al. 2025, eqs. 5-7): PPO's clipped objective on the sequence ratio
    s_i = exp(mean_t log pi/mu). Per token its value is s_i and its gradient s_i * grad log pi_t (verl's
    `compute_policy_loss_gspo`, verl/trainer/ppo/core_algos.py; TRL's importance_sampling_level="sequence"), so
    with `sequence_mean` aggregation a sequence's gradient is s_i * A * mean_t grad log pi_t, and zero once s_i is
    clipped in the direction of A."""
    log_s = delta.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    ratio = (logprobs - logprobs.detach() + log_s.detach()).exp()
    return _ppo_clipped(ratio, adv, mask, **_clip_options(options))


@POLICY_LOSSES.register("cispo")
def _cispo(logprobs, delta, adv, mask, *, eps_low, eps_high, **_):
    """CISPO (MiniMax-M1, Chen et al. 2025, eqs. 4-5): REINFORCE weighted by the clipped ratio under a stop
    gradient, -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A * log pi_t: a clipped token keeps its gradient
    (verl's `compute_policy_loss_cispo`; TRL's loss_type="cispo" writes the cap as the ratio itself)."""
    ratio = delta.exp().detach()
    per_token = -(ratio.clamp(1 - eps_low, 1 + eps_high) * adv * logprobs)
    tokens = mask.sum().clamp(min=1)
    extra = _bounds_fractions(ratio, adv, mask, tokens, eps_low, eps_high, signed=False)
    clipped = extra["clip_low_fraction"] + extra["clip_high_fraction"]
    return per_token, (ratio * mask).sum() / tokens, (ratio * mask).max(), clipped, extra


def _clip_options(options: dict) -> dict:
    return {key: options[key] for key in ("eps_low", "eps_high", "clip", "low", "mode", "dual_clip")}


for _loss in (_token_clipped, _gspo, _cispo):
    _loss.token_level = True  # type: ignore[attr-defined]

# policy losses that clip the ratio to [1 - clip_eps_low, 1 + clip_eps_high] (and report the low / high fractions)
CLIPPED_LOSSES = ("token", "gspo", "cispo")


def token_level(level: str) -> bool:
    """Whether policy loss `level` reports its ratio statistics (and masked fractions) over tokens: a
    micro-batch then weighs them by its tokens (ablate.lit.micro_batches.micro_batch_shares), not its sequences."""
    return bool(getattr(POLICY_LOSSES[level], "token_level", False))


@dataclass(frozen=True)
class PolicyLoss:
    """The policy loss's keys, one object an RL stage hands over whole (`RLOOStageConfig.policy_loss`; the
    stage's yaml keeps them flat, `stage.is_level`, `stage.clip_eps_high`, ..., because registered studies
    name their arms by those keys). Their meaning: `policy_gradient_loss`."""

    level: str = "sequence"
    clip: float = 2.0
    clip_eps: float = 0.2
    aggregation: str = "token_mean"
    mode: str = "truncate"
    low: float = 0.0
    dual_clip: float | None = None
    clip_eps_low: float | None = None
    clip_eps_high: float | None = None


def policy_gradient_loss(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, advantages: torch.Tensor,
                         mask: torch.Tensor, loss: PolicyLoss | None = None, length: int | None = None,
                         **keys: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Importance-weighted policy gradient against the behaviour policy that sampled the tokens.

    `loss`: the keys below as one PolicyLoss (default: its defaults); `**keys` replace single ones
    (`level="token", clip_eps_high=0.28`), as a test or a one-off call writes them.

    logprobs [N, T] of the policy being trained, behaviour_logprobs [N, T] from the rollout
    engine, advantages [N] (one per sequence), mask [N, T]. Ratios are formed in log space.

    level="sequence" (paper 000): w = exp(sum_t (log pi - log mu)), treated as a constant; per-token
    loss -w * A * log pi_t. level="geometric": the same with the per-token geometric mean of the
    ratio, w = exp(mean_t (log pi - log mu)) (length-independent; verl's `seq_mean_k1` rejection
    statistic, GSPO's sequence ratio). mode="truncate": w cut to [low, clip] (low = 0: no lower
    bound, the default); mode="mask": sequences whose w leaves [low, clip] get weight 0 and the rest
    their untruncated w (TRL's `sequence_mask`, verl's rejection sampling).
    level="token" (PPO): r_t = exp(log pi_t - log mu_t); per-token loss
    -min(r_t * A, clip(r_t, 1 - eps, 1 + eps) * A); with `dual_clip` c > 1 the loss of a token with
    A < 0 is at most -c * A (Ye et al. 2020, verl's `clip_ratio_c`), so a huge ratio on a bad sample
    cannot blow the step up. mode="mask" also drops the tokens whose r_t leaves [low, clip] (TRL's
    `token_mask`); mode="truncate" is PPO clipping alone. `clip_eps_low` / `clip_eps_high` (None: `clip_eps`)
    make the clip asymmetric, [1 - eps_low, 1 + eps_high] (DAPO's clip-higher, eq. 10: 0.2 / 0.28).
    level="gspo": the same clipped objective on GSPO's sequence ratio; level="cispo": -sg(clip(r_t)) * A * log pi_t.
    `length`: the fixed normaliser of aggregation="token_sum_norm".
    A masked sequence or token keeps its place in the aggregation's denominator (as TRL, unlike
    verl, which also drops it from the denominator): the loss of the others is unchanged and a
    micro-batch's share of the batch does not depend on what was masked.
    Returns the aggregated loss and diagnostics: mean and max ratio, clipped fraction (sequences
    above `clip`, or tokens PPO clipped), and with mode="mask" the masked fraction (sequences or
    tokens), with `dual_clip` the fraction of tokens it capped, and for the clipped losses (token, gspo,
    cispo) the fractions of tokens below 1 - eps_low and above 1 + eps_high (clip_low_fraction,
    clip_high_fraction).
    """
    p = replace(loss or PolicyLoss(), **keys) if keys else loss or PolicyLoss()
    if p.mode not in IS_MODES:
        raise ValueError(f"unknown importance-sampling mode {p.mode!r}; expected one of {IS_MODES}")
    if p.level not in POLICY_LOSSES:
        raise ValueError(f"unknown importance-sampling level {p.level!r}; expected one of {tuple(POLICY_LOSSES)}")
    mask = mask.to(logprobs.dtype)
    delta = (logprobs - behaviour_logprobs) * mask
    per_token, mean_ratio, max_ratio, clipped, extra = POLICY_LOSSES[p.level](
        logprobs, delta, advantages.unsqueeze(-1), mask, clip=p.clip, clip_eps=p.clip_eps, low=p.low, mode=p.mode,
        dual_clip=p.dual_clip, eps_low=p.clip_eps if p.clip_eps_low is None else p.clip_eps_low,
        eps_high=p.clip_eps if p.clip_eps_high is None else p.clip_eps_high)
    value = aggregate(per_token, mask, p.aggregation, length)
    info = {"ratio_mean": mean_ratio.detach(), "ratio_max": max_ratio.detach(), "clip_fraction": clipped.detach()}
    info.update({key: v.detach() for key, v in extra.items()})
    return value, info


# `stage.kl_estimator` -> per-token KL from log r = log pi_ref - log pi (see `kl_penalty`).
KL_ESTIMATORS = Registry("stage.kl_estimator")


@KL_ESTIMATORS.register("k1")
def _k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return -log_ratio


@KL_ESTIMATORS.register("k2")
def _k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio.pow(2)


@KL_ESTIMATORS.register("k3")
def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio.exp() - 1 - log_ratio


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's k1, k2, k3).

    With log r = log pi_ref - log pi: k1 = -log r (unbiased, can be negative),
    k2 = (log r)^2 / 2 (low variance, biased), k3 = (r - 1) - log r (unbiased, never negative).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {tuple(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[estimator](ref_logprobs - logprobs)


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the reward: lengths [N] (response
    tokens) -> [N] penalties, 0 up to max_length - buffer, then falling linearly to -factor at max_length,
    -factor beyond. verl's DAPO reward manager (verl/workers/reward_manager/dapo.py: `overlong_buffer`, len,
    penalty_factor) computes min(-(L - (max - buffer)) / buffer * factor, 0), the same up to max_length."""
    if buffer < 1 or buffer > max_length:
        raise ValueError(f"overlong buffer={buffer} must be in [1, max_length={max_length}]")
    exceed = lengths.to(torch.float32) - (max_length - buffer)
    return (-exceed / buffer * factor).clamp(min=-factor, max=0.0)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution given by logits [..., V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(tokens[:, t]) under logits[:, t] (already aligned), [N, T]."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _logprob_entropy(hidden: torch.Tensor, tokens: torch.Tensor, head: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()  # [C, V]
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse
    entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


def chunked_logprobs(hidden: torch.Tensor, tokens: torch.Tensor, head: torch.nn.Module,
                     chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and `entropy_from_logits` from the last hidden states [N, T, H] and the output
    head, `chunk` positions at a time: the fp32 logits of one chunk [chunk, V] exist at once, never
    [N, T, V] (8 x 1,100 positions x 151,936 in fp32 is 5.3 GB), and under autograd each chunk is
    recomputed in backward (activation checkpointing) instead of stored. Returns ([N, T], [N, T])."""
    flat, targets = hidden.reshape(-1, hidden.size(-1)), tokens.reshape(-1)
    logps, entropies = [], []
    for start in range(0, flat.size(0), chunk):
        part = (flat[start:start + chunk], targets[start:start + chunk], head)
        logp, entropy = (checkpoint(_logprob_entropy, *part, use_reentrant=False)
                         if torch.is_grad_enabled() and flat.requires_grad else _logprob_entropy(*part))
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps).view(tokens.shape), torch.cat(entropies).view(tokens.shape)


# ---------------------------------------------------------------------------------------------
# Preference optimization (DPO, IPO). Inputs are sequence log-probs [P] of the chosen and the
# rejected response of P pairs under the policy and under the frozen reference; outputs are
# per-pair losses [P] (the caller averages). h is the implicit-reward margin:
#   h = (log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x)).


def sequence_logprobs(logprobs: torch.Tensor, mask: torch.Tensor, average: bool = False) -> torch.Tensor:
    """Per-sequence log-prob [N] from per-token log-probs [N, T]: the sum over the response tokens
    `mask` marks, or with `average=True` their mean (TRL's IPO: length-normalised log-probs)."""
    mask = mask.to(logprobs.dtype)
    total = (logprobs * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


def preference_margin(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                      ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor) -> torch.Tensor:
    """h per pair: how much more the policy (relative to the reference) prefers chosen over rejected."""
    return (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor, ref_chosen_logps: torch.Tensor,
             ref_rejected_logps: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """DPO (Rafailov et al., eq. 7): -log sigma(beta * h) per pair.

    With `label_smoothing` eps > 0, conservative DPO (cDPO, Mitchell 2023): the labels are taken
    to be flipped with probability eps, -(1 - eps) log sigma(beta h) - eps log sigma(-beta h),
    which no longer drives h to infinity (its minimum is at beta h = log((1 - eps) / eps)).
    """
    if beta <= 0:
        raise ValueError(f"beta={beta} must be > 0")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 0.5)")
    logits = beta * preference_margin(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


def ipo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor, ref_chosen_logps: torch.Tensor,
             ref_rejected_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """IPO (Azar et al., eq. 17; paper 000): (h - 1/(2 beta))^2 per pair: h is regressed to a finite
    target instead of pushed to infinity, so the policy cannot drift arbitrarily far from the
    reference on deterministic preferences. TRL feeds it token-averaged log-probs
    (`sequence_logprobs(..., average=True)`); that choice is the caller's."""
    if beta <= 0:
        raise ValueError(f"beta={beta} must be > 0")
    h = preference_margin(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return (h - 1 / (2 * beta)) ** 2


# stage.name -> the per-pair loss of a preference stage, from the policy's and the reference's sequence
# log-probs of the chosen and rejected responses and the stage config (beta, label_smoothing, ...). A new
# preference loss is one registered here and its `conf/stage/<name>.yaml` (`defaults: [dpo, _self_]`,
# `name: <name>`).
PreferenceLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
PREFERENCE_LOSSES = Registry("stage")


@PREFERENCE_LOSSES.register("dpo")
def _dpo(chosen, rejected, ref_chosen, ref_rejected, stage) -> torch.Tensor:
    return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, stage.beta, stage.label_smoothing)


@PREFERENCE_LOSSES.register("ipo")
def _ipo(chosen, rejected, ref_chosen, ref_rejected, stage) -> torch.Tensor:
    return ipo_loss(chosen, rejected, ref_chosen, ref_rejected, stage.beta)
