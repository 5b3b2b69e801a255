"""Config groups with a schema (each beside its part, stored by @config_schema): wrong types and unknown keys
fail at composition with Hydra's message naming the key, and each schema holds exactly its yaml's keys with
the yaml's types (so composed configs, and the cache keys hashed from them, are what they were without
schemas)."""

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, group_options, load_group_config
from ablate.config.schemas import SCHEMAS, EvalConfig, ModelConfig, RewardConfig, TinyModelConfig, ToolConfig
from ablate.curriculum.replay import ReplayConfig
from ablate.curriculum.dots import DotsCurriculum
from ablate.curriculum.samplers import (SAMPLERS, FrontierCurriculum, FrontierReplayCurriculum, StaticCurriculum,
                                        StaticThirdsCurriculum, ThresholdCurriculum, UniformCurriculum)
from ablate.fit import TrainerConfig
from ablate.loggers import LoggerConfig, MLflowLoggerConfig, WandbLoggerConfig
from ablate.rollout.engines import ENGINES, HFRolloutConfig, VLLMRolloutConfig
from ablate.rollout.schedules import AnnealedToolConfig, SteppedToolConfig
from ablate.stages import STAGES
from ablate.stages.preference import PreferenceStageConfig
from ablate.stages.rloo import DynamicSamplingConfig, RLOOStageConfig
from ablate.stages.sft import SFTStageConfig
from ablate.stages.wiring import CheckpointConfig
from ablate.tasks import TASKS
from ablate.tasks.countdown.schema import CountdownTaskConfig, OracleToolConfig, VerdictRewardConfig
from ablate.tasks.reasoning_gym import ReasoningGymTaskConfig

# (group, option) -> schema, and the overrides that select the option (a curriculum needs stage=rloo)
GROUPS = {("eval", "default"): EvalConfig, ("rollout", "hf"): HFRolloutConfig,
          ("rollout", "vllm"): VLLMRolloutConfig, ("task", "countdown"): CountdownTaskConfig,
          ("task", "chain_sum"): ReasoningGymTaskConfig,
          ("stage", "sft"): SFTStageConfig, ("stage", "rloo"): RLOOStageConfig,
          ("stage", "dpo"): PreferenceStageConfig,
          ("tool", "off"): ToolConfig, ("tool", "on"): ToolConfig,
          ("tool", "anneal_linear"): AnnealedToolConfig, ("tool", "anneal_log"): AnnealedToolConfig,
          ("tool", "anneal_step"): SteppedToolConfig, ("tool", "oracle"): OracleToolConfig,
          ("curriculum", "none"): UniformCurriculum, ("curriculum", "static"): StaticCurriculum,
          ("curriculum", "static_thirds"): StaticThirdsCurriculum,
          ("curriculum", "threshold"): ThresholdCurriculum,
          ("curriculum", "frontier"): FrontierCurriculum,
          ("curriculum", "frontier_replay"): FrontierReplayCurriculum,
          ("curriculum", "dots"): DotsCurriculum,
          ("reward", "tinyzero"): VerdictRewardConfig, ("reward", "binary"): VerdictRewardConfig,
          ("reward", "partial"): VerdictRewardConfig, ("reward", "score_answer"): RewardConfig,
          ("model", "tiny"): TinyModelConfig, ("model", "small"): TinyModelConfig,
          ("model", "qwen2.5-0.5b-shape"): TinyModelConfig, ("model", "hf"): ModelConfig,
          ("model", "qwen2.5-0.5b"): ModelConfig, ("trainer", "default"): TrainerConfig,
          ("logger", "csv"): LoggerConfig, ("logger", "tensorboard"): LoggerConfig,
          ("logger", "wandb"): WandbLoggerConfig, ("logger", "mlflow"): MLflowLoggerConfig}
# shared by several yamls: the defaults are one yaml's values (the first named), the others differ
SHARED = (ToolConfig, AnnealedToolConfig, VerdictRewardConfig, TinyModelConfig, ModelConfig, LoggerConfig)
# blocks of config.yaml with a schema (no group: `- schema_<key>_<name>@<key>` in config.yaml's defaults)
BLOCKS = {"replay": ReplayConfig, "dynamic_sampling": DynamicSamplingConfig, "checkpoint": CheckpointConfig}


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def plain_of(group, option):
    plain = load_group_config(group, option)
    return plain["curriculum"] if group == "curriculum" else plain  # `@package _global_`: under `curriculum:`


def types(value):
    if isinstance(value, dict):
        return {k: types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [types(v) for v in value]
    return type(value)


def test_every_schema_group_option_has_a_schema():
    for group in ("eval", "rollout", "task", "stage", "tool", "curriculum", "reward", "model", "trainer", "logger"):
        for option in group_options(group):
            if (group, option) == ("trainer", "ddp"):  # default.yaml's keys and schema, other values
                assert OmegaConf.get_type(cfg_of("trainer=ddp").trainer) is TrainerConfig
                continue
            assert (group, option) in GROUPS or (group, option) == ("stage", "ipo"), (group, option)


@pytest.mark.parametrize("group, option", list(GROUPS))
def test_a_schema_has_its_yaml_keys_types_and_values(group, option):
    plain = plain_of(group, option)
    schema = GROUPS[group, option]
    assert [f.name for f in dataclasses.fields(schema)] == list(plain)
    if schema not in SHARED or (group, option) in (("tool", "off"), ("tool", "anneal_linear"),
                                                     ("reward", "tinyzero"), ("model", "tiny"), ("model", "hf"),
                                                     ("logger", "csv")):
        assert OmegaConf.to_container(OmegaConf.structured(schema)) == plain  # defaults: the shipped values
    selection = ("model.name_or_path=x",) if (group, option) == ("model", "hf") else ()
    composed = OmegaConf.to_container(cfg_of("stage=rloo", f"{group}={option}", *selection)[group])
    plain = {**plain, "name_or_path": "x"} if selection else plain
    assert composed == plain and types(composed) == types(plain)


@pytest.mark.parametrize("key", list(BLOCKS))
def test_a_block_of_config_yaml_has_its_keys_types_and_values(key):
    plain = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))[key]
    assert [f.name for f in dataclasses.fields(BLOCKS[key])] == list(plain)
    assert OmegaConf.to_container(OmegaConf.structured(BLOCKS[key])) == plain
    composed = cfg_of("stage=rloo")[key]
    assert OmegaConf.get_type(composed) is BLOCKS[key]
    assert OmegaConf.to_container(composed) == plain and types(OmegaConf.to_container(composed)) == types(plain)


def test_ipo_is_the_preference_schema_with_its_own_values():
    composed = cfg_of("stage=ipo").stage
    assert OmegaConf.get_type(composed) is PreferenceStageConfig
    assert composed.name == "ipo" and composed.beta == 0.5


@pytest.mark.parametrize("override", ["eval.n=abc", "eval.every=soon", "rollout.batch_size=1.5",
                                      "eval.ks=[1,x]"])
def test_a_wrong_type_fails_at_composition_naming_the_key(override):
    with pytest.raises(ConfigCompositionException) as err:
        cfg_of("stage=rloo", override)
    assert override.split("=")[0] in str(err.value) + str(err.value.__cause__)


# One wrong type and one unknown key in each group with a schema: (selection, override, the key named)
WRONG = [
    (["stage=sft"], "stage.batch_size=eight", "stage.batch_size"),
    (["stage=sft"], "stage.batch_prompts=4", "stage.batch_prompts"),
    (["stage=rloo"], "stage.kl_coef=lots", "stage.kl_coef"),
    (["stage=rloo"], "stage.sampling.top_k=0.5", "stage.sampling.top_k"),
    (["stage=rloo"], "stage.kl_cof=0.1", "stage.kl_cof"),
    (["stage=dpo"], "stage.average_logps=maybe", "stage.average_logps"),
    (["stage=ipo"], "stage.pairs.n_prompts=many", "stage.pairs.n_prompts"),
    (["stage=dpo"], "stage.pairs.solver.mix.typo=0.5", "stage.pairs.solver.mix.typo"),
    (["stage=dpo"], "stage.k=4", "stage.k"),
    ([], "tool.max_calls=x", "tool.max_calls"),
    (["tool=anneal_linear"], "tool.anneal_ratio=most", "tool.anneal_ratio"),
    (["tool=on"], "tool.anneal_ratio=0.5", "tool.anneal_ratio"),
    (["tool=oracle"], "tool.max_mesages=10", "tool.max_mesages"),
    (["curriculum=frontier"], "curriculum.floor=low", "curriculum.floor"),
    (["curriculum=static"], "curriculum.stages=[{until:x,levels:[0]}]", "until"),
    (["curriculum=dots"], "curriculum.temperature=1", "curriculum.temperature"),
    (["curriculum=threshold"], "curriculum.difficulty.bnis=3", "curriculum.difficulty.bnis"),
    ([], "task.test_size=half", "task.test_size"),
    ([], "task.generator.counts=[3,four]", "task.generator.counts"),
    ([], "task.hub.revision=main", "task.hub.revision"),
    ([], "reward.values.correct=yes", "reward.values.correct"),
    ([], "reward.valus.correct=1", "reward.valus"),
    ([], "model.kind_=tiny", "model.kind_"),
    ([], "trainer.num_nodes=two", "trainer.num_nodes"),
    ([], "logger.wandb=maybe", "logger.wandb"),
    ([], "replay.capacity=lots", "replay.capacity"),
    ([], "dynamic_sampling.max_gen_batches=x", "dynamic_sampling.max_gen_batches"),
    ([], "checkpoint.keep_evaluated=often", "checkpoint.keep_evaluated"),
]


@pytest.mark.parametrize("selection, override, key", WRONG, ids=[w[1] for w in WRONG])
def test_a_wrong_type_or_an_unknown_key_fails_at_composition_naming_it(selection, override, key):
    with pytest.raises(ConfigCompositionException) as err:
        cfg_of(*selection, override)
    message = str(err.value) + str(err.value.__cause__)
    assert key.rsplit(".", 1)[-1] in message and (key in message or key.rsplit(".", 1)[0] in message), message


def test_the_upstream_stages_are_typed_too():
    cfg = cfg_of("stage=rloo")
    assert OmegaConf.get_type(cfg.upstream.sft) is SFTStageConfig
    with pytest.raises(ConfigCompositionException):
        cfg_of("stage=rloo", "upstream.sft.max_steps=ten")


@pytest.mark.parametrize("stage", ["sft", "rloo", "dpo", "ipo"])
def test_the_smoke_size_fits_each_stage(stage):
    cfg = cfg_of("experiment=smoke", f"stage={stage}")
    assert cfg.stage.name == stage and cfg.stage.pool_size == 300 and cfg.stage.max_steps == 6


# An unknown key in a preset (a user's yaml): what the schemas add over Hydra's struct mode, which refuses
# unknown keys on the command line only.
PRESETS = {
    "stage": (["stage=rloo"], "stage:\n  kl_cof: 0.1\n", "kl_cof"),
    "tool": (["tool=on"], "tool:\n  anneal_ratio: 0.5\n", "anneal_ratio"),
    "curriculum": (["curriculum=frontier"], "curriculum:\n  flor: 0.1\n", "flor"),
    "task": ([], "task:\n  generator:\n    max_numbr: 50\n", "max_numbr"),
}


@pytest.mark.parametrize("group", list(PRESETS))
def test_an_unknown_key_in_a_preset_fails_at_composition_naming_it(tmp_path, group):
    selection, body, key = PRESETS[group]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\n" + body)
    with pytest.raises(ConfigCompositionException) as err:
        cfg_of(*selection, f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine")
    message = str(err.value) + str(err.value.__cause__)
    assert key in message and "not in" in message, message


def test_each_schema_is_stored_once_and_its_registry_entry_carries_it():
    """One store per (group, name), no schema twice; the registries' entries hold the schemas their yaml use."""
    names = [(group, name) for group, name, _ in SCHEMAS]
    assert len(names) == len(set(names)) and len(SCHEMAS) == len({schema for _, _, schema in SCHEMAS})
    assert set(GROUPS.values()) <= {schema for _, _, schema in SCHEMAS}
    assert STAGES["sft"].schema is SFTStageConfig and STAGES["rloo"].schema is RLOOStageConfig
    assert STAGES["preference"].schema is PreferenceStageConfig
    assert ENGINES["hf"].schema is HFRolloutConfig and ENGINES["vllm"].schema is VLLMRolloutConfig
    assert TASKS["countdown"].schema is CountdownTaskConfig and TASKS["reasoning_gym"].schema is ReasoningGymTaskConfig
    shipped = {"none": UniformCurriculum, "static": StaticCurriculum, "threshold": ThresholdCurriculum,
               "frontier": FrontierCurriculum, "frontier_replay": FrontierReplayCurriculum, "dots": DotsCurriculum}
    assert {kind: SAMPLERS[kind].schema for kind in shipped} == shipped
