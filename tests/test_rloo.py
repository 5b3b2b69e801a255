import json

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, load_group_config, typed
from ablate.curriculum import Sampler, build_sampler
from ablate.lit.collector import Collector
from ablate.lit.rloo import RLOOModule
from ablate.lit.rollout_batch import pad_rollouts
from ablate.models import encode_prompt, prompt_text
from ablate.objectives import token_logprobs
from ablate.rollout import Rollouts
from ablate.stages.rloo import DynamicSamplingConfig, RLOOStageConfig
from ablate.tasks.countdown import CountdownTask, Problem, Reward
from crash import assert_resume_reproduces
from step_stubs import without_trainer


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # the task the prompts render




class FixedEngine:
    """The same completions over and over: sequence i gets texts[i % len(texts)] (on-policy log-probs).
    RLOO asks for one sample per (already repeated) prompt, so a group of k = len(texts) gets them all."""

    def __init__(self, model, tokenizer, texts):
        self.model, self.tokenizer, self.texts = model, tokenizer, texts
        self.synced = 0

    def sequence_logprobs(self, prompt, completion):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits
        return token_logprobs(logits[:, len(prompt) - 1:-1], ids[:, len(prompt):])[0].tolist()

    def generate(self, prompt_ids, k, params, generator, tool_available=None):
        self.prompts = [list(p) for p in prompt_ids for _ in range(k)]
        texts = [self.texts[i % len(self.texts)] for i in range(len(self.prompts))]
        completions = [self.tokenizer(t, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                       for t in texts]
        return Rollouts(self.prompts, completions,
                        [self.sequence_logprobs(p, c) for p, c in zip(self.prompts, completions)],
                        [[False] * len(c) for c in completions], texts, k=k, tool_calls=[0] * len(texts))

    def sync(self, model):
        self.synced += 1


def test_one_step_prefers_the_rewarded_completion(tiny_policy):
    model, tokenizer = tiny_policy
    problem = Problem((44, 19, 35), 98)
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]
    engine = FixedEngine(model, tokenizer, texts)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        stage = OmegaConf.to_container(compose(config_name="config", overrides=["stage=rloo"]).stage)
    stage.update(batch_prompts=1, k=2, lr=1e-2, kl_coef=0.0, entropy_coef=0.0, micro_batch=1)
    task = CountdownTask({}, Reward.from_config(load_group_config("reward", "binary")))
    stage = typed(RLOOStageConfig, stage)
    module = RLOOModule(model, tokenizer, Collector([problem], engine, task, build_sampler(None, [problem], 0, 1, task=task),
                                                    stage, 0, tokenizer, "compact"), stage)
    without_trainer(module)
    prompt = encode_prompt(prompt_text(COUNTDOWN, problem, "compact", tokenizer), tokenizer)
    before = [sum(engine.sequence_logprobs(prompt, tokenizer(t, add_special_tokens=False)["input_ids"])) for t in texts]
    module.training_step(None, 0)
    after = [sum(engine.sequence_logprobs(prompt, tokenizer(t, add_special_tokens=False)["input_ids"])) for t in texts]
    # Shared tokens get opposite pushes from the two samples; what must move is the preference.
    assert after[0] - after[1] > before[0] - before[1] + 0.5
    assert engine.synced == 1
    assert module.reference is None  # kl_coef=0: no reference built


def test_the_reference_is_a_frozen_copy_of_the_starting_policy(tiny_policy):
    model, tokenizer = tiny_policy
    start = {name: p.detach().clone() for name, p in model.state_dict().items()}
    _, _, module = one_step(model, tokenizer, ["<answer>44+19+35</answer>", "<answer>1</answer>"])
    assert not any(p.requires_grad for p in module.reference.parameters())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # whatever the policy does, the reference keeps the starting weights
    for name, p in module.reference.state_dict().items():
        assert torch.equal(p, start[name]), name


def one_step(model, tokenizer, texts, before_step=None, **stage_overrides) -> tuple[dict, dict]:
    """One RLOO step on fixed completions: (logged metrics, gradients by parameter name, the module);
    `before_step(module)` may change the module first."""
    problem = Problem((44, 19, 35), 98)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        stage = OmegaConf.to_container(compose(config_name="config", overrides=["stage=rloo"]).stage)
    stage.update(batch_prompts=1, k=len(texts), lr=0.0, grad_clip=1e9, **stage_overrides)
    task = CountdownTask({}, Reward.from_config(load_group_config("reward", "binary")))
    stage = typed(RLOOStageConfig, stage)
    collector = Collector([problem], FixedEngine(model, tokenizer, texts), task,
                          build_sampler(None, [problem], 0, 1, task=task), stage, 0, tokenizer, "compact")
    module = RLOOModule(model, tokenizer, collector, stage)
    grads = {}

    def backward(loss):
        loss.backward()
        grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})

    logged = without_trainer(module, backward)
    if before_step is not None:
        before_step(module)
    module.training_step(None, 0)
    return logged, grads, module


def test_without_a_kl_term_the_reference_is_neither_built_nor_run_and_nothing_else_changes(tiny_policy):
    """kl_coef=0 skips the frozen reference (a fifth of a step): loss, metrics and gradient are bit for bit
    those of a step that runs the reference and multiplies its KL by zero; only train/kl is not logged."""
    import dataclasses

    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35+44</answer>", "<answer>1</answer>"]

    def zero_kl_coef(module):  # the reference is built (kl_coef > 0 at construction), then weighted by 0
        module.stage = dataclasses.replace(module.stage, kl_coef=0.0)

    computed, computed_grads, with_reference = one_step(model, tokenizer, texts, before_step=zero_kl_coef,
                                                        kl_coef=1e-3, micro_batch=2)
    skipped, skipped_grads, without = one_step(model, tokenizer, texts, kl_coef=0.0, micro_batch=2)
    assert with_reference.reference is not None and without.reference is None
    assert "time/reference_forward_s" in computed and "time/reference_forward_s" not in skipped
    assert "train/kl" in computed and "train/kl" not in skipped
    for key, value in computed.items():
        if key.startswith("train/") and key != "train/kl":
            assert skipped[key] == value, key
    assert skipped_grads.keys() == computed_grads.keys()
    for name, grad in computed_grads.items():
        assert torch.equal(skipped_grads[name], grad), name


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "sum"])
@pytest.mark.parametrize("level", ["sequence", "token", "geometric"])
def test_the_step_does_not_depend_on_how_the_batch_is_cut_into_micro_batches(tiny_policy, aggregation, level):
    """Micro-batches are grouped by length and cut to their longest sequence; each is weighted by its
    share of the batch's tokens (token_mean) or sequences, so loss, metrics and gradient equal the
    whole batch's."""
    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35+44+19-35+44</answer>", "<answer>1</answer>",
             "<answer>44-19+35-1</answer>"]
    whole, whole_grads, _ = one_step(model, tokenizer, texts, micro_batch=4, aggregation=aggregation, is_level=level)
    split, split_grads, _ = one_step(model, tokenizer, texts, micro_batch=1, aggregation=aggregation, is_level=level)
    # On-policy: the learner's log-probs of the padded batch equal the engine's of each lone sequence.
    assert whole["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/is_weight_mean"):
        assert split[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-5), key  # float rounding only
    for name, grad in whole_grads.items():
        assert torch.allclose(split_grads[name], grad, rtol=1e-4, atol=1e-6), name


def test_reference_in_bfloat16_keeps_the_kl_close(tiny_policy):
    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]
    exact, _, _ = one_step(model, tokenizer, texts, micro_batch=2, kl_estimator="k1")
    half, _, module = one_step(model, tokenizer, texts, micro_batch=2, kl_estimator="k1", reference_dtype="bfloat16")
    assert {p.dtype for p in module.reference.parameters()} == {torch.bfloat16}
    assert exact["train/kl"] == pytest.approx(0.0, abs=1e-6)  # the policy is its own reference
    assert 0 < abs(half["train/kl"]) < 0.05  # bf16 rounding only
    assert half["train/loss"] == pytest.approx(exact["train/loss"], abs=1e-3)


def test_a_compiled_learner_computes_the_same_step_up_to_rounding_and_leaves_the_weights_keys_alone(tiny_policy):
    """trainer.compile=true: the loss's forward goes through torch.compile (float rounding may differ);
    decoding and the checkpoint still see the plain model."""
    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35+44</answer>", "<answer>1</answer>"]
    keys = set(model.state_dict())
    eager, eager_grads, _ = one_step(model, tokenizer, texts, micro_batch=2)
    compiled, compiled_grads, module = one_step(model, tokenizer, texts, micro_batch=2,
                                                before_step=lambda m: m.compile_learner())
    assert module.learner is not module.model and module.collector.engine.model is module.model
    assert module._frozen[-1] is not module.reference  # the reference's forward is compiled too
    assert set(module.state_dict()) == {f"model.{k}" for k in keys}  # no _orig_mod, no second copy
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/is_weight_mean"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
    for name, grad in eager_grads.items():
        assert torch.allclose(compiled_grads[name], grad, rtol=1e-3, atol=1e-5), name


def test_auto_reference_dtype_is_bfloat16_only_where_the_hardware_multiplies_it(monkeypatch):
    from ablate.lit.micro_batches import reference_dtype

    assert reference_dtype("float32") is torch.float32 and reference_dtype("bfloat16") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for avx512_bf16, amx, expected in ((False, False, torch.float32), (True, False, torch.bfloat16),
                                       (False, True, torch.bfloat16)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        assert reference_dtype("auto") is expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
        assert reference_dtype("auto") is expected


def test_pad_rollouts_aligns_masks_with_next_token_targets():
    r = Rollouts(prompt_ids=[[1, 5, 6], [1, 7]], completion_ids=[[8, 9, 2], [10, 2]],
                 behaviour_logprobs=[[-0.1, -0.2, -0.3], [-0.4, -0.5]], tool_mask=[[False, True, False], [False, False]],
                 texts=["", ""], k=2)
    b = pad_rollouts(r, pad_id=0)
    assert b["input_ids"].tolist() == [[1, 5, 6, 8, 9, 2], [1, 7, 10, 2, 0, 0]]
    # Target t+1 predicted at t: completion of row 0 occupies targets 3..5 -> positions 2..4.
    assert b["loss_mask"].tolist() == [[0, 0, 1, 0, 1], [0, 1, 1, 0, 0]]
    assert b["behaviour"][0, 2:5].tolist() == pytest.approx([-0.1, -0.2, -0.3])


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    [],  # uniform prompts
    # a sampler with state (DOTS: reference rollouts, predictions) and a replay buffer, both in the checkpoint
    ["curriculum=dots", "curriculum.every=2", "curriculum.reference_size=6", "replay.enabled=true"],
    # dynamic sampling: extra generation batches draw from the sampler and the rollout generator
    ["dynamic_sampling.enabled=true", "dynamic_sampling.max_gen_batches=2", "stage.is_mode=mask"],
    # several updates per batch: Lightning still counts one step per batch (max_steps, schedules, checkpoints)
    ["stage.ppo_epochs=2", "stage.ppo_mini_batches=2", "stage.is_level=token"],
], ids=["uniform", "dots+replay", "dynamic", "updates"])
def test_rloo_smoke_run_and_resume_continue_exactly(tmp_path, monkeypatch, variant):
    from ablate.run import run

    def cfg():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            # Annealed calculator: the availability draws must resume exactly too.
            return compose(config_name="config", overrides=["experiment=smoke_rloo", "stage.max_steps=4",
                                                            "tool=anneal_linear", *variant])

    straight = tmp_path / "straight"
    run(cfg(), straight)
    metrics = pd.read_csv(straight / "metrics.csv")
    assert metrics["step"].tolist() == [0, 1, 2, 3]
    assert {"train/reward_mean", "train/reward_std", "train/effective_prompt_frac", "train/kl", "train/entropy",
            "train/loss", "train/is_weight_mean", "train/is_weight_max", "train/is_clip_frac", "train/lr",
            "train/verdict/correct", "train/verdict/no_answer", "time/generate_s", "time/score_s", "time/learn_s",
            "time/sync_s", "time/generate_tokens_per_s", "tool/p_available", "tool/available_frac",
            "tool/calls_per_rollout", "tool/calc_emission_rate"} <= set(metrics.columns)
    # T = 4, T_anneal = 2.668: p = 1, 0.625, 0.250, 0
    assert metrics["tool/p_available"].tolist() == pytest.approx([1, 1 - 1 / 2.668, 1 - 2 / 2.668, 0])
    verdict_columns = [c for c in metrics.columns if c.startswith("train/verdict/")]
    assert metrics[verdict_columns].sum(axis=1).tolist() == pytest.approx([1.0] * 4)
    assert json.loads((straight / "status.json").read_text())["state"] == "completed"
    assert (straight / "eval" / "no_tool" / "summary.json").is_file()
    assert (straight / "eval" / "tool" / "summary.json").is_file()  # a run that used the tool: both regimes

    resumed = tmp_path / "resumed"
    assert_resume_reproduces(RLOOModule, 3, lambda: run(cfg(), resumed), resumed, metrics,
                             ("train/loss", "train/response_length", "train/entropy", "tool/available_frac"), monkeypatch)


# ---- dynamic sampling (DAPO's filter-and-refill) ---------------------------------------------------------


class OutcomeEngine:
    """Planted outcomes by prompt: 44 19 35 -> 98 gets one right and k-1 wrong answers (informative),
    1 2 3 -> 6 all right, 2 3 4 -> 24 all wrong but with unequal shaped rewards (wrong value 0.1, no
    answer 0: the tinyzero reward's format credit), which the filter must still drop."""

    TEXTS = {"44 19 35": ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"],
             "1 2 3": ["<answer>1+2+3</answer>"],
             "2 3 4": ["<answer>2+3+4</answer>", "no answer"]}

    def __init__(self, tokenizer, k):
        self.tokenizer, self.k, self.batches = tokenizer, k, 0

    def generate(self, prompt_ids, k, params, generator, tool_available=None):
        self.batches += 1
        texts = []
        for i, prompt in enumerate(prompt_ids):
            options = next(v for key, v in self.TEXTS.items() if self.tokenizer.decode(prompt, skip_special_tokens=True).startswith(key))
            texts.append(options[min(i % self.k, len(options) - 1)])
        completions = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        return Rollouts([list(p) for p in prompt_ids], completions, [[-1.0] * len(c) for c in completions],
                        [[False] * len(c) for c in completions], texts, k=k, tool_calls=[0] * len(texts))

    def sync(self, model):
        pass


class ScriptedSampler(Sampler):
    """Hands out the scripted index lists in turn and records every update."""

    def __init__(self, script):
        self.script, self.updates = list(script), []

    def sample(self, batch, step):
        indices = self.script.pop(0)
        assert len(indices) == batch
        return indices

    def update(self, indices, rewards):
        self.updates.append((list(indices), rewards.clone()))

    def metrics(self):
        return {}


def dynamic_module(tiny_policy, script, max_gen_batches, replay=None):
    model, tokenizer = tiny_policy
    problems = [Problem((44, 19, 35), 98), Problem((1, 2, 3), 6), Problem((2, 3, 4), 24)]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["stage=rloo"])
    stage = OmegaConf.to_container(cfg.stage)
    stage.update(batch_prompts=4, k=2, micro_batch=16)
    task = CountdownTask({}, Reward.from_config(OmegaConf.to_container(cfg.reward)))  # tinyzero: format credit 0.1
    sampler = ScriptedSampler(script)
    engine = OutcomeEngine(tokenizer, 2)
    stage = typed(RLOOStageConfig, stage)
    collector = Collector(problems, engine, task, sampler, stage, 0, tokenizer, "compact", replay=replay,
                          dynamic_sampling=DynamicSamplingConfig(enabled=True, max_gen_batches=max_gen_batches))
    module = RLOOModule(model, tokenizer, collector, stage)
    return module, sampler, engine, without_trainer(module)


def test_informative_groups_reads_correctness_not_reward():
    from ablate.lit.rollout_batch import informative_groups

    correct = torch.tensor([[True, False], [True, True], [False, False]])
    assert informative_groups(correct).tolist() == [True, False, False]


def test_dynamic_sampling_refills_a_batch_with_degenerate_groups_to_b_informative_ones(tiny_policy, monkeypatch):
    import ablate.objectives as objectives

    # 0: informative, 1: all correct, 2: all wrong with unequal shaped rewards
    script = [[1, 0, 2, 1], [2, 0, 1, 2], [0, 1, 1, 2], [0, 1, 1, 1]]
    module, sampler, engine, logged = dynamic_module(tiny_policy, script, max_gen_batches=5)
    trained = []
    real_rloo = objectives.ADVANTAGES["rloo"]
    monkeypatch.setitem(objectives.ADVANTAGES, "rloo", lambda r: (trained.append(r.clone()), real_rloo(r))[1])
    module.training_step(None, 0)
    # one informative group per batch: four batches
    assert engine.batches == 4 and len(sampler.updates) == 4  # the sampler saw every generated group
    assert logged["dynamic/gen_batches"] == 4.0 and logged["dynamic/kept_frac"] == pytest.approx(4 / 16)
    assert logged["dynamic/topped_up_frac"] == 0.0 and logged["dynamic/extra_generate_s"] >= 0
    rewards = trained[0]
    assert rewards.shape == (4, 2) and torch.equal(rewards, torch.tensor([[1.0, 0.1]] * 4))  # only prompt 0
    assert logged["train/effective_prompt_frac"] == 1.0
    # reward and verdict metrics describe everything generated (16 groups, 32 samples)
    assert logged["train/verdict/correct"] == pytest.approx((4 + 2 * 8) / 32)
    assert logged["train/reward_mean"] == pytest.approx((4 * 1.1 + 8 * 2.0 + 4 * 0.1) / 32)


def test_dynamic_sampling_stops_at_max_gen_batches_and_tops_up(tiny_policy):
    module, sampler, engine, logged = dynamic_module(tiny_policy, [[1, 0, 2, 1], [2, 1, 1, 2]], max_gen_batches=2)
    module.training_step(None, 0)
    assert engine.batches == 2 and logged["dynamic/gen_batches"] == 2.0
    assert logged["dynamic/kept_frac"] == pytest.approx(1 / 8)
    assert logged["dynamic/topped_up_frac"] == pytest.approx(3 / 4)  # 1 informative + 3 degenerate fillers
    assert logged["train/effective_prompt_frac"] == pytest.approx(2 / 4)  # prompt 0 and the first 2 3 4 group


def test_dynamic_sampling_with_replay_filters_the_fresh_part(tiny_policy):
    from ablate.curriculum import ReplayBuffer

    buffer = ReplayBuffer(capacity=8, fresh_fraction=0.5, seed=0)
    script = [[0, 1, 0, 2], [0, 0, 1, 2],  # step 0: nothing to replay, 4 fresh groups wanted
              [1, 2], [0, 1], [0, 2]]      # step 1: 2 replayed, 2 fresh wanted
    module, sampler, engine, logged = dynamic_module(tiny_policy, script, max_gen_batches=3, replay=buffer)
    module.training_step(None, 0)
    assert logged["dynamic/gen_batches"] == 2.0 and len(buffer) == 4  # the 4 kept (informative) groups stored
    module.training_step(None, 1)
    assert logged["dynamic/gen_batches"] == 3.0 and logged["dynamic/kept_frac"] == pytest.approx(2 / 6)
    assert logged["dynamic/topped_up_frac"] == 0.0
    assert logged["replay/replayed_frac"] == 0.5 and len(buffer) == 6 and not sampler.script


@pytest.mark.parametrize("overrides, message", [
    (["stage.is_mode=clip"], "stage.is_mode='clip'"),
    (["stage.is_level=chunk"], "stage.is_level='chunk'"),
    (["stage.is_low=3.0"], "stage.is_low=3.0"),
    (["stage.dual_clip=3.0"], "needs stage.is_level=token"),
    (["stage.is_level=token", "stage.dual_clip=0.5"], "must be > 1"),
    (["dynamic_sampling.max_gen_batches=0", "dynamic_sampling.enabled=true"], "max_gen_batches=0"),
])
def test_importance_and_dynamic_sampling_options_are_checked(overrides, message):
    from ablate.checks import ConfigError, check_config

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["stage=rloo", "stage.init=scratch", *overrides])
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_config(cfg)


def test_dynamic_sampling_needs_an_rl_stage_and_the_good_options_pass():
    from ablate.checks import ConfigError, check_config

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        sft = compose(config_name="config", overrides=["dynamic_sampling.enabled=true"])
        good = compose(config_name="config", overrides=[
            "stage=rloo", "stage.init=scratch", "dynamic_sampling.enabled=true", "stage.is_mode=mask",
            "stage.is_level=token", "stage.dual_clip=3.0", "stage.is_low=0.5", "replay.enabled=true",
            "curriculum=frontier"])
    with pytest.raises(ConfigError, match="dynamic_sampling.enabled=true"):
        check_config(sft)
    check_config(good)


def test_masked_importance_fraction_is_logged_only_in_mask_mode(tiny_policy):
    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]
    default, _, _ = one_step(model, tokenizer, texts)
    assert "train/is_mask_frac" not in default and "train/is_dual_clip_frac" not in default
    masked, _, _ = one_step(model, tokenizer, texts, is_mode="mask", is_level="token", dual_clip=3.0)
    assert masked["train/is_mask_frac"] == 0.0 and masked["train/is_dual_clip_frac"] == 0.0  # on-policy: ratio 1


PHASES = ("reference", "generate", "score", "learn", "policy_forward", "reference_forward", "backward", "optimizer",
          "sync")


def test_a_step_logs_the_seconds_of_every_phase(tiny_policy):
    model, tokenizer = tiny_policy
    logged, _, _ = one_step(model, tokenizer, ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"])
    assert all(logged[f"time/{phase}_s"] >= 0 for phase in PHASES)
    inside = ("policy_forward", "reference_forward", "backward", "optimizer")
    assert sum(logged[f"time/{phase}_s"] for phase in inside) <= logged["time/learn_s"]


def test_collect_and_learn_run_on_their_own(tiny_policy):
    model, tokenizer = tiny_policy
    _, _, module = one_step(model, tokenizer, ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"])
    collected = module.collector.collect(step=1)
    assert collected.rewards.tolist() == [[1.0, 0.0]] and len(collected.rollouts.texts) == 2
    assert collected.seen.verdicts == ["correct", "wrong_value"]
    learned = module.learn(collected.rollouts, collected.rewards)
    assert {"train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/grad_norm", "train/lr"} <= set(learned)
    assert learned["train/kl"] == pytest.approx(0.0, abs=1e-6)  # lr=0: the policy is still the reference


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "sum"])
@pytest.mark.parametrize("level", ["sequence", "token", "geometric"])
def test_micro_batch_shares_sum_to_one_however_the_batch_is_cut(aggregation, level):
    from ablate.lit.micro_batches import micro_batch_shares

    tokens = torch.tensor([3.0, 5.0, 2.0, 6.0])
    for cut in ([[0, 1, 2, 3]], [[0], [1], [2], [3]], [[0, 1, 2], [3]]):
        shares = [micro_batch_shares(len(c), 4, tokens[c].sum(), tokens.sum(), aggregation, level) for c in cut]
        for kind in ("loss", "ratio", "fraction"):
            assert sum(getattr(s, kind) for s in shares) == pytest.approx(1.0)
