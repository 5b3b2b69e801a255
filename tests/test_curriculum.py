"""Curriculum samplers and rollout replay, driven with synthetic success rates."""

import math

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from scipy.stats import pearsonr

from ablate.config import CONF_DIR, group_options, load_group_config, typed
from ablate.curriculum import (DotsSampler, FrontierReplaySampler, FrontierSampler, Levels, ReplayBuffer, Sampler,
                               StaticSampler, ThresholdSampler, build_sampler, check_curriculum, difficulty_levels)
from ablate.curriculum.dots import attention_difficulty, calibrate, fit_platt, pearson, selection_weights
from ablate.rollout import Rollouts
from ablate.stages.rloo import RLOOStageConfig
from ablate.tasks.countdown import CountdownTask, Problem, Reward, generate
from step_stubs import without_trainer


def levels_of(*level_per_prompt, names=("easy", "hard")):
    return Levels(torch.tensor(level_per_prompt), names)


def group_rewards(successes, k=8):
    """[prompts, k] rewards with round(s * k) ones per row."""
    return torch.tensor([[1.0] * round(s * k) + [0.0] * (k - round(s * k)) for s in successes])


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "binary")))


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


# ---- difficulty levels -------------------------------------------------------------------------------------------

def test_levels_by_operand_count_and_by_hardness_thirds():
    problems = generate(300, seed=1)
    by_count = difficulty_levels(COUNTDOWN.difficulty(problems, "n_numbers"), "levels")
    assert by_count.names == ("n3", "n4")
    assert by_count.of.tolist() == [p.n_numbers - 3 for p in problems]
    thirds = difficulty_levels(COUNTDOWN.difficulty(problems, "hardness"), "quantiles", bins=3)
    assert thirds.names == ("easy", "medium", "hard")
    hardness = torch.tensor([p.hardness for p in problems], dtype=torch.float)
    means = [hardness[thirds.of == level].mean().item() for level in range(3)]
    assert means == sorted(means)  # level 0 is the easiest
    for level in range(3):  # equal-count bins up to ties at the edges
        assert 0.15 < (thirds.of == level).float().mean().item() < 0.55
    assert thirds.mix([0, 1, 2, 3]) == pytest.approx(
        {name: sum(int(thirds.of[i]) == j for i in range(4)) / 4 for j, name in enumerate(thirds.names)})


# ---- samplers ----------------------------------------------------------------------------------------------------

def test_static_samples_the_listed_levels_on_a_clock():
    levels = levels_of(*([0] * 50 + [1] * 50))
    sampler = StaticSampler(levels, seed=0, stages=[{"until": 0.5, "levels": [0]}, {"until": 1.0, "levels": [0, 1]}],
                            max_steps=10)
    early = [i for step in range(5) for i in sampler.sample(16, step)]
    assert all(i < 50 for i in early)
    assert sampler.metrics()["curriculum/stage"] == 0
    late = [i for step in range(5, 10) for i in sampler.sample(16, step)]
    assert any(i < 50 for i in late) and any(i >= 50 for i in late)  # cumulative: easy prompts stay
    assert sampler.metrics()["curriculum/stage"] == 1


def test_static_thirds_preset_is_not_cumulative():
    c = compose_cfg("curriculum=static_thirds").curriculum  # typed by its own schema (StaticThirdsCurriculum)
    problems = generate(300, seed=2)
    sampler = build_sampler(c, problems, seed=0, max_steps=9, task=COUNTDOWN)
    for step, level in [(0, 0), (2, 0), (3, 1), (5, 1), (6, 2), (8, 2)]:
        assert set(sampler.levels.of[sampler.sample(20, step)].tolist()) == {level}, step


def test_threshold_moves_down_below_low_up_above_high_and_holds_between():
    # window = 2 groups: the mean of the last two groups' success rates
    sampler = ThresholdSampler(levels_of(0, 0, 1, 1, 2, 2, names=("e", "m", "h")), seed=0, window=2,
                               low=0.24, high=0.30)
    assert sampler.sample(4, 0) and sampler.level == 0  # empty window: no move
    assert math.isnan(sampler.metrics()["curriculum/in_band"])  # nothing to judge yet
    sampler.update([0], group_rewards([1.0], k=10))       # window mean 1.0 > high
    sampler.sample(4, 1)
    assert sampler.level == 1 and set(sampler.last) <= {2, 3}
    sampler.update([2], group_rewards([1.0], k=10))
    sampler.sample(4, 2)
    assert sampler.level == 2
    sampler.update([4], group_rewards([1.0], k=10))
    sampler.sample(4, 3)
    assert sampler.level == 2                             # clamped at the hardest level
    sampler.update([4, 5], group_rewards([0.3, 0.3], k=10))  # last two groups: 0.30, not > 0.30
    sampler.sample(4, 4)
    assert sampler.level == 2 and sampler.window_mean() == pytest.approx(0.3)
    sampler.update([4], group_rewards([0.1], k=10))       # (0.3 + 0.1) / 2 = 0.2 < 0.24: one level down
    sampler.sample(4, 5)
    assert sampler.level == 1 and sampler.window_mean() == pytest.approx(0.2)
    assert sampler.metrics()["curriculum/in_band"] == 0.0  # below low
    sampler.update([2, 3], group_rewards([0.3, 0.24], k=50))  # (0.3 + 0.24) / 2 = 0.27: inside 0.24..0.30
    sampler.sample(4, 6)
    assert sampler.level == 1 and sampler.metrics()["curriculum/in_band"] == 1.0  # held: the window in the band
    # format credit (reward 0.1) is not success
    sampler.update([2, 3], torch.full((2, 10), 0.1))
    assert sampler.window_mean() == 0.0


def test_threshold_window_counts_groups_not_samples():
    """Paper 001 counted 10 samples; one group of k = 8 would then fill most of the window. Here one
    window entry is one prompt's success rate, however many samples the group has."""
    sampler = ThresholdSampler(levels_of(0, 1, 2, names=("e", "m", "h")), seed=0, window=3, low=0.2, high=0.3)
    sampler.update([0, 1], group_rewards([1.0, 0.0], k=8))
    assert len(sampler.window) == 2 and sampler.window_mean() == pytest.approx(0.5)
    sampler.update([2], group_rewards([0.25], k=8))
    assert len(sampler.window) == 3 and sampler.window_mean() == pytest.approx(1.25 / 3)


def test_samplers_that_end_as_uniform_are_flagged():
    import pandas as pd

    from ablate.curriculum import engagement_warnings

    steps = pd.DataFrame({"step": range(40), "curriculum/explore_frac": [1.0] * 30 + [0.95] * 10})
    assert "frontier" in engagement_warnings("frontier", steps)[0]
    engaged = steps.assign(**{"curriculum/explore_frac": [1.0] * 20 + [0.1] * 20})
    assert engagement_warnings("frontier_replay", engaged) == []
    assert engagement_warnings("frontier", steps.head(8)) == []  # too short to judge
    flipping = pd.DataFrame({"step": range(40), "curriculum/level": [0, 1] * 20})
    assert "flips" in engagement_warnings("threshold", flipping)[0]
    tracking = flipping.assign(**{"curriculum/level": [0] * 10 + [1] * 20 + [2] * 10})
    assert engagement_warnings("threshold", tracking) == []
    assert engagement_warnings("none", steps) == []


def test_a_flipping_controller_names_the_jump_its_band_falls_in():
    """Paper 001 on Countdown: success ~0.6 at one level, ~0.15 at the next, the band 0.24..0.30 between them:
    no level can be held, whatever the window; the warning names each level's success and the band."""
    import pandas as pd

    from ablate.curriculum import engagement_warnings

    band = {"low": 0.24, "high": 0.30}
    cycle = pd.DataFrame({"step": range(40), "curriculum/level": [0, 1, 2, 2, 1] * 8,
                          "train/verdict/correct": [0.62, 0.44, 0.15, 0.13, 0.44] * 8})
    warning = engagement_warnings("threshold", cycle, band)[0]
    assert "success by level: 0: 0.62, 1: 0.44, 2: 0.14" in warning
    assert "curriculum.low..high = 0.24..0.3" in warning and "window" not in warning
    held = cycle.assign(**{"train/verdict/correct": [0.62, 0.27, 0.15, 0.13, 0.27] * 8})  # level 1 in the band
    assert "a longer curriculum.window" in engagement_warnings("threshold", held, band)[0]
    assert "a longer curriculum.window" in engagement_warnings("threshold", cycle)[0]  # no config: no band to name


def test_frontier_logs_the_fraction_of_never_seen_prompts_it_draws():
    problems = generate(40, seed=1)
    sampler = build_sampler({"kind": "frontier", "floor": 0.05, "w_explore": 4.0, "ema": 0.5}, problems, 0, 10,
                            task=COUNTDOWN)
    first = sampler.sample(8, 0)
    assert sampler.metrics()["curriculum/explore_frac"] == 1.0
    sampler.update(first, torch.ones(8, 4))
    # every unseen prompt outweighs a solved one (4 vs 0.05): all 8 draws are new while 32 remain
    sampler.sample(8, 1)
    assert sampler.metrics()["curriculum/explore_frac"] == 1.0
    sampler.update(list(range(40)), torch.ones(40, 4))  # all 40 seen
    sampler.sample(8, 2)
    assert sampler.metrics()["curriculum/explore_frac"] == 0.0


def test_threshold_falls_back_to_the_whole_pool_on_an_empty_level():
    levels = Levels(torch.tensor([0] * 20), ("easy", "medium", "hard"))  # no medium or hard prompts
    sampler = ThresholdSampler(levels, seed=0, window=4, low=0.2, high=0.3)
    sampler.update(list(range(4)), group_rewards([1.0], k=4))
    drawn = sampler.sample(200, 1)
    assert sampler.level == 1 and sampler.fell_back
    assert sampler.metrics()["curriculum/fell_back"] == 1.0
    assert set(drawn) == set(range(20))


def test_frontier_weights_and_ema_by_hand():
    sampler = FrontierSampler(levels_of(0, 0, 0, 1), seed=0, floor=0.05, w_explore=4.0, ema=0.5)
    assert sampler.weights().tolist() == [4.0] * 4
    sampler.update([0, 1, 2], group_rewards([1.0, 0.5, 0.0]))
    assert sampler.weights().tolist() == pytest.approx([0.05, 0.05 + 0.25, 0.05, 4.0])
    sampler.update([0], group_rewards([0.0]))  # EMA: 0.5 * 1.0 + 0.5 * 0.0
    assert sampler.p_hat[0].item() == pytest.approx(0.5)
    sampler.update([0], group_rewards([0.25]))  # 0.5 * 0.5 + 0.5 * 0.25
    assert sampler.p_hat[0].item() == pytest.approx(0.375)


def test_frontier_collapses_solved_prompts_to_the_floor_and_targets_the_frontier():
    true_rate = torch.tensor([1.0] * 50 + [0.5] * 50 + [0.0] * 50)  # solved, frontier, hopeless
    sampler = FrontierSampler(Levels(torch.zeros(150, dtype=torch.long), ("all",)), seed=0)
    counts = torch.zeros(150)
    generator = torch.Generator().manual_seed(0)
    for step in range(200):
        indices = sampler.sample(16, step)
        assert len(set(indices)) == 16  # without replacement
        counts[indices] += 1
        rewards = (torch.rand(16, 8, generator=generator) < true_rate[indices, None]).float()
        sampler.update(indices, rewards)
    assert sampler.weights()[:50].max().item() == pytest.approx(0.05)  # solved: exactly the floor
    late = counts  # dominated by the steps after every prompt was seen
    assert late[50:100].sum() > 2.5 * late[:50].sum()
    assert late[50:100].sum() > 2.5 * late[100:].sum()
    m = sampler.metrics()
    assert m["curriculum/seen_frac"] == 1.0 and 0.3 < m["curriculum/mean_p_hat"] < 0.7


def test_frontier_replay_rehearses_a_fixed_share_of_solved_prompts():
    sampler = FrontierReplaySampler(Levels(torch.zeros(100, dtype=torch.long), ("all",)), seed=0, rehearsal=0.25,
                                    solved_at=0.75)
    first = sampler.sample(16, 0)
    assert sampler.rehearsed == 0  # nothing solved yet: all frontier
    sampler.update(list(range(10)), group_rewards([1.0] * 10))    # prompts 0-9 solved
    sampler.update(list(range(10, 20)), group_rewards([0.5] * 10))  # 10-19 on the frontier
    for step in range(1, 20):
        batch = sampler.sample(16, step)
        assert len(set(batch)) == 16
        assert sum(i < 10 for i in batch) >= 4  # round(0.25 * 16) solved prompts, at least
        assert sampler.rehearsed == 4
    plain = FrontierSampler(Levels(torch.zeros(100, dtype=torch.long), ("all",)), seed=0)
    assert plain.sample(16, 0) == first  # same draws as the frontier when nothing is solved


@pytest.mark.parametrize("name", ["none", "static", "static_thirds", "threshold", "frontier", "frontier_replay",
                                  "dots"])
def test_sampler_state_round_trip_continues_the_same_curriculum(name):
    problems = generate(120, seed=3)
    c = compose_cfg(f"curriculum={name}").curriculum
    if name == "dots":
        c.every, c.reference_size = 2, 16
    embeddings = torch.randn(len(problems), 8, generator=torch.Generator().manual_seed(0))
    build = lambda seed: build_sampler(c, problems, seed, max_steps=6, embed=lambda: embeddings, task=COUNTDOWN)  # noqa: E731
    generator = torch.Generator().manual_seed(1)

    def step(sampler, t):
        reference = getattr(sampler, "reference_prompts", lambda t: [])(t)
        if reference:
            sampler.observe_reference(reference, (torch.rand(len(reference), 4, generator=generator) < 0.5).float())
        indices = sampler.sample(8, t)
        sampler.update(indices, (torch.rand(len(indices), 4, generator=generator) < 0.4).float())
        return indices

    a = build(0)
    for t in range(3):
        step(a, t)
    state = a.state_dict()
    rng = generator.get_state()
    expected = [step(a, t) for t in range(3, 6)]
    b = build(99)
    b.load_state_dict(state)
    generator.set_state(rng)
    assert [step(b, t) for t in range(3, 6)] == expected


def test_every_curriculum_preset_composes_with_rloo_and_validates():
    assert set(group_options("curriculum")) == {"none", "static", "static_thirds", "threshold", "frontier",
                                                 "frontier_replay", "dots"}
    for name in group_options("curriculum"):
        cfg = compose_cfg(f"curriculum={name}")
        assert cfg.stage.name == "rloo" and cfg.curriculum.name == name
        check_curriculum(OmegaConf.to_container(cfg.curriculum))
    assert "curriculum" not in compose_cfg()  # the default run (SFT) has none


def test_curriculum_config_errors_name_the_bad_value():
    from ablate.checks import ConfigError, check_config

    with pytest.raises(ConfigError, match="stage=sft"):
        check_config(compose_cfg("curriculum=static", "stage=sft"))
    with pytest.raises(ConfigError, match=r"until.*1\.0"):
        check_config(compose_cfg("curriculum=static", "curriculum.stages=[{until: 0.5, levels: [0]}]"))
    with pytest.raises(ConfigError, match="curriculum.ema=0"):
        check_config(compose_cfg("curriculum=frontier", "curriculum.ema=0"))
    with pytest.raises(ConfigError, match="difficulty.field='digits'"):
        check_config(compose_cfg("curriculum=threshold", "curriculum.difficulty.field=digits"))
    with pytest.raises(ConfigError, match="replay.fresh_fraction=0"):
        check_config(compose_cfg("stage=rloo", "replay.enabled=true", "replay.fresh_fraction=0"))


# ---- DOTS --------------------------------------------------------------------------------------------------------

def test_attention_difficulty_by_hand():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([0.2, 0.8])
    query = torch.tensor([[2.0, 0.0]])
    a = torch.softmax(torch.tensor([2.0, 0.0]) / math.sqrt(2), 0)
    assert attention_difficulty(query, keys, d).item() == pytest.approx((a * d).sum().item())
    loo = attention_difficulty(keys, keys, d, exclude_self=True)
    assert loo.tolist() == pytest.approx([0.8, 0.2])  # each reference prompt sees only the other


def test_platt_fit_recovers_a_known_calibration():
    x = torch.linspace(0.05, 0.95, 40)
    y = calibrate(x, 2.0, -0.5)
    w, b = fit_platt(x, y)
    assert (w, b) == pytest.approx((2.0, -0.5), abs=1e-3)


def test_pearson_matches_scipy_and_is_nan_on_constant_input():
    x, y = torch.randn(30), torch.randn(30)
    assert pearson(x, y) == pytest.approx(pearsonr(x.numpy(), y.numpy())[0], abs=1e-6)
    assert math.isnan(pearson(torch.ones(5), torch.arange(5.0)))


def test_selection_weights_peak_at_alpha():
    w = selection_weights(torch.tensor([0.0, 0.5, 0.7, 1.0]), alpha=0.5, tau=0.1)
    assert w.tolist() == pytest.approx([math.exp(-5), 1.0, math.exp(-2), math.exp(-5)])


def test_dots_predicts_difficulty_from_embeddings_and_samples_near_alpha():
    generator = torch.Generator().manual_seed(0)
    n, clusters = 600, torch.tensor([0.05, 0.5, 0.95])  # three kinds of prompt: easy, frontier, hard
    kind = torch.arange(n) % 3
    centres = torch.randn(3, 16, generator=generator) * 3
    embeddings = centres[kind] + torch.randn(n, 16, generator=generator)
    true_difficulty = clusters[kind]
    sampler = DotsSampler(Levels(kind, ("a", "b", "c")), seed=0, embeddings=embeddings, every=5, reference_size=64)
    assert sampler.reference_prompts(1) == []
    reference = sampler.reference_prompts(0)
    assert len(reference) == 64 and len(set(reference)) == 64
    fails = (torch.rand(64, 8, generator=generator) < true_difficulty[reference, None]).float()
    sampler.observe_reference(reference, 1.0 - fails)
    assert pearson(sampler.predicted, true_difficulty) > 0.9
    assert sampler.reference_pearson > 0.7
    batch = sampler.sample(64, 1)
    assert (kind[batch] == 1).float().mean() > 0.8  # the 50% prompts
    sampler.update(batch, 1.0 - (torch.rand(64, 8, generator=generator) < true_difficulty[batch, None]).float())
    assert math.isfinite(sampler.metrics()["curriculum/dots_reference_pearson"])


# ---- replay ------------------------------------------------------------------------------------------------------

def rollouts_for(prompts, k, tag):
    n = prompts * k
    return Rollouts([[1, 2]] * n, [[tag, i] for i in range(n)], [[-0.5 * tag, -0.1 * i] for i in range(n)],
                    [[False, False]] * n, [f"{tag}-{i}" for i in range(n)], k=k, tool_calls=[0] * n)


def test_rollout_groups_and_concat():
    a, b = rollouts_for(3, 2, tag=1), rollouts_for(1, 2, tag=2)
    picked = a.groups([2, 0])
    assert picked.texts == ["1-4", "1-5", "1-0", "1-1"] and picked.k == 2
    joined = Rollouts.concat([picked, b])
    assert joined.n_prompts == 3 and joined.completion_ids[-1] == [2, 1]
    assert joined.behaviour_logprobs[4] == b.behaviour_logprobs[0]
    with pytest.raises(ValueError, match="different k"):
        Rollouts.concat([a, rollouts_for(1, 3, tag=3)])


def test_replay_stores_only_mixed_groups_evicts_oldest_and_round_trips():
    buffer = ReplayBuffer(capacity=3, fresh_fraction=0.5, seed=0)
    assert buffer.replay_count(8) == 0  # empty
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.1, 0.0]])
    stored = buffer.add([10, 11, 12, 13], rollouts_for(4, 2, tag=1), rewards, ["x"] * 8, step=0)
    assert stored == 2 and [g.index for g in buffer.groups] == [10, 13]  # all-equal groups carry no gradient
    assert buffer.groups[1].rollouts.texts == ["1-6", "1-7"] and buffer.groups[1].rewards == pytest.approx([0.1, 0.0])
    buffer.add([20, 21], rollouts_for(2, 2, tag=2), torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ["x"] * 4, step=1)
    assert [g.index for g in buffer.groups] == [13, 20, 21]  # capacity 3: the oldest went
    assert buffer.replay_count(8) == 3 and buffer.replay_count(4) == 2  # 8 - ceil(4), capped by the buffer
    state = buffer.state_dict()
    torch.save(state, "/dev/null")  # plain containers
    expected = [g.index for g in buffer.take(2)]
    other = ReplayBuffer(capacity=1, fresh_fraction=0.5, seed=5)
    other.load_state_dict(state)
    assert [g.index for g in other.take(2)] == expected and len(other) == 3


class TwoAnswerEngine:
    """One right and one wrong completion per prompt; behaviour log-probs are a marker (-step) that the
    learner must get back for replayed samples."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def generate(self, prompt_ids, k, params, generator, tool_available=None):
        self.calls += 1
        # The module repeats each prompt k = 2 times itself (one sample per rollout prompt).
        prompts = [list(p) for p in prompt_ids for _ in range(k)]
        texts = [("<answer>44+19+35</answer>", "<answer>44+19-35</answer>")[i % 2] for i in range(len(prompts))]
        completions = [self.tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        marker = -float(self.calls)
        return Rollouts(prompts, completions, [[marker] * len(c) for c in completions],
                        [[False] * len(c) for c in completions], texts, k=k, tool_calls=[0] * len(texts))

    def sync(self, model):
        pass


def test_rloo_step_with_replay_reuses_groups_against_their_own_behaviour_policy(tiny_policy, monkeypatch):
    import ablate.lit.rloo as rloo
    from ablate.lit.collector import Collector

    model, tokenizer = tiny_policy
    problems = [Problem((44, 19, 35), 98)] * 4
    stage = OmegaConf.to_container(compose_cfg("stage=rloo").stage)
    stage.update(batch_prompts=4, k=2, micro_batch=8)
    buffer = ReplayBuffer(capacity=16, fresh_fraction=0.5, seed=0)
    stage = typed(RLOOStageConfig, stage)
    collector = Collector(problems, TwoAnswerEngine(tokenizer), COUNTDOWN,
                          Sampler(Levels(torch.zeros(4, dtype=torch.long), ("all",)), 0), stage, 0, tokenizer, "compact",
                          replay=buffer)
    module = rloo.RLOOModule(model, tokenizer, collector, stage)
    logged = without_trainer(module)
    seen_behaviour = []
    real_loss = rloo.policy_gradient_loss
    monkeypatch.setattr(rloo, "policy_gradient_loss",
                        lambda logp, behaviour, *a, **k: (seen_behaviour.append(behaviour), real_loss(logp, behaviour, *a, **k))[1])
    module.training_step(None, 0)
    assert logged["replay/replayed_frac"] == 0 and len(buffer) == 4  # nothing to replay yet; 4 mixed groups stored
    seen_behaviour.clear()
    module.training_step(None, 1)
    assert logged["replay/replayed_frac"] == 0.5 and logged["replay/buffer_size"] == 6  # 2 fresh groups added
    rows = torch.cat(seen_behaviour)  # [8 sequences, L]: 2 fresh groups then 2 replayed, k=2
    markers = [row[row != 0][0].item() for row in rows]
    assert markers == [-2.0] * 4 + [-1.0] * 4  # replayed samples keep the first step's behaviour log-probs


def test_dots_with_a_tiny_tau_still_fills_the_batch():
    sampler = DotsSampler(Levels(torch.zeros(50, dtype=torch.long), ("all",)), seed=0,
                          embeddings=torch.randn(50, 4, generator=torch.Generator().manual_seed(0)), tau=1e-4)
    sampler.observe_reference(list(range(10)), group_rewards([1.0] * 5 + [0.0] * 5))
    assert len(set(sampler.sample(32, 1))) == 32


def test_static_curriculum_orders_preference_pairs():
    from ablate.pairs import order_pairs
    from ablate.checks import ConfigError, check_config
    from ablate.stages import pair_stages

    cfg = compose_cfg("curriculum=static", "stage=ipo")
    check_config(cfg)  # a static curriculum on n_numbers is an ordering of the pairs
    problems = generate(60, seed=4)
    stages = pair_stages(OmegaConf.to_object(cfg.curriculum), problems, COUNTDOWN)  # its schema's instance
    assert stages == [{"until": 0.5, "n_numbers": [3]}, {"until": 1.0, "n_numbers": [3, 4]}]

    class Pair:
        def __init__(self, n):
            self.n_numbers = n

    pairs = [Pair(p.n_numbers) for p in problems]
    order = order_pairs(pairs, stages, 40, seed=0)
    assert all(pairs[i].n_numbers == 3 for i in order[:20]) and any(pairs[i].n_numbers == 4 for i in order[20:])
    with pytest.raises(ConfigError, match="curriculum=frontier"):
        check_config(compose_cfg("curriculum=frontier", "stage=ipo"))


def test_a_sampler_receives_its_config_typed_by_its_schema():
    """build_sampler types the config by the sampler's own schema: keys left out take the schema's defaults
    (the shipped values, in one place), and a key the schema lacks is refused naming it."""
    from omegaconf.errors import ConfigKeyError

    from ablate.curriculum.samplers import ThresholdCurriculum

    problems = generate(60, seed=4)
    sampler = build_sampler({"kind": "threshold", "window": 5}, problems, 0, max_steps=4, task=COUNTDOWN)
    defaults = ThresholdCurriculum()
    assert isinstance(sampler, ThresholdSampler) and sampler.window.maxlen == 5
    assert (sampler.low, sampler.high, sampler.success_reward) == (defaults.low, defaults.high, defaults.success_reward)
    with pytest.raises(ConfigKeyError, match="flor"):
        build_sampler({"kind": "frontier", "flor": 0.1}, problems, 0, max_steps=4, task=COUNTDOWN)
