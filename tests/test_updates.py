"""Updates per batch (stage.ppo_epochs x stage.ppo_mini_batches, ablate.lit.updates): the plan of rows, the
metrics' mean, and by hand: the second update of a batch sees ratios away from 1, and the clip fractions it logs
are those the moved policy's log-probs give."""

import copy

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.lit.updates import mean_metrics, update_plan
from ablate.objectives import token_logprobs


def test_the_plan_cuts_whole_groups_in_order_each_epoch():
    plan = update_plan(groups=3, k=2, epochs=2, mini_batches=2)
    assert [p.tolist() for p in plan] == [[0, 1, 2, 3], [4, 5], [0, 1, 2, 3], [4, 5]]
    assert [p.tolist() for p in update_plan(2, 3, 1, 1)] == [[0, 1, 2, 3, 4, 5]]
    # more mini-batches than groups: one group each
    assert [p.tolist() for p in update_plan(2, 2, 1, 16)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="epochs"):
        update_plan(2, 2, 0, 1)


def test_the_step_metrics_are_the_mean_over_updates_and_one_update_passes_through():
    one = {"train/loss": -0.0, "train/is_weight_max": 1.5}
    assert mean_metrics([one], maxima=("train/is_weight_max",)) == one
    two = mean_metrics([{"a": 1.0, "m": 2.0}, {"a": 3.0, "m": 5.0}], maxima=("m",))
    assert two == {"a": 2.0, "m": 5.0}


def test_updates_per_batch_are_checked_before_any_compute():
    from ablate.checks import ConfigError, check_config

    for key in ("ppo_epochs", "ppo_mini_batches"):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=["stage=rloo", "stage.init=scratch", f"stage.{key}=0"])
        with pytest.raises(ConfigError, match=f"stage.{key}=0 must be >= 1"):
            check_config(cfg)


def token_ratios(model, state, prompts, completions, behaviour):
    """Per-token ratios pi_state / mu of each completion (a list of 1-D tensors), computed one sequence at a time."""
    moved = copy.deepcopy(model)
    moved.load_state_dict(state)
    out = []
    for prompt, completion, mu in zip(prompts, completions, behaviour):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = moved(input_ids=ids).logits
        lp = token_logprobs(logits[:, len(prompt) - 1:-1], ids[:, len(prompt):])[0]
        out.append((lp - torch.tensor(mu)).exp())
    return out


def test_the_second_pass_sees_ratios_away_from_one_and_the_clip_binds_where_the_hand_computation_says(tiny_policy):
    from test_rloo import one_step

    model, tokenizer = tiny_policy
    start = copy.deepcopy(model.state_dict())
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]  # rewards 1, 0: RLOO advantages +1, -1
    states = []

    def record_each_update(module):
        optimizer = module.optimizers()
        optimizer.param_groups[0]["lr"] = 3e-3  # one_step's lr is 0; this one moves the ratios past the clips
        step = optimizer.step

        def recorded(*args, **kwargs):
            states.append(copy.deepcopy(model.state_dict()))  # the weights this update's loss was computed with
            return step(*args, **kwargs)

        optimizer.step = recorded

    try:
        logged, _, module = one_step(model, tokenizer, texts, before_step=record_each_update, is_level="token",
                                     clip_eps_low=0.2, clip_eps_high=0.28, ppo_epochs=2, kl_coef=0.0,
                                     entropy_coef=0.0)
        rollouts = module.collected.rollouts
        assert len(states) == 2  # two optimizer steps on the one batch
        assert module.collected.rewards.tolist() == [[1.0, 0.0]]
        tokens = sum(len(c) for c in rollouts.completion_ids)
        by_hand = []
        for state in states:
            ratios = token_ratios(model, state, rollouts.prompt_ids, rollouts.completion_ids,
                                  rollouts.behaviour_logprobs)
            by_hand.append({"high": float((ratios[0] > 1.28).sum()) / tokens,  # A = +1: the upper clip binds above
                            "low": float((ratios[1] < 0.8).sum()) / tokens,    # A = -1: the lower one below
                            "mean": float(torch.cat(ratios).sum()) / tokens})
    finally:
        model.load_state_dict(start)  # the session's tiny policy, as it was
    first, second = by_hand
    assert first == {"high": 0.0, "low": 0.0, "mean": pytest.approx(1.0, abs=1e-5)}  # on-policy: ratio 1
    assert abs(second["mean"] - 1.0) > 1e-2 and second["high"] > 0 and second["low"] > 0
    assert logged["train/is_clip_frac_high"] == pytest.approx((first["high"] + second["high"]) / 2, abs=1e-6)
    assert logged["train/is_clip_frac_low"] == pytest.approx((first["low"] + second["low"]) / 2, abs=1e-6)
    assert logged["train/is_weight_mean"] == pytest.approx((first["mean"] + second["mean"]) / 2, rel=1e-4)
