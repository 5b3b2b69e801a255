"""Config-group schemas (Hydra structured configs) and the one way a part stores its own.

Each part's schema is a dataclass beside the part (a sampler's in its module, an engine's with its builder,
a stage's with the stage, a task's with the task), decorated with `@config_schema(group, name)`, which stores
it in Hydra's ConfigStore at the root as `schema_<group>_<name>` (no group's option, so `--help` and Hydra's
"Available options" list only the real options); the group's yaml lists `/schema_<group>_<name>@_here_` first
in its `defaults`, so a value of the wrong type or a key the schema lacks fails at composition, with Hydra's own
message naming the key. The part's registry entry carries the class (`Stage.schema`, `Sampler.schema`, `EngineEntry.schema`,
`Task.schema`), and the part reads its config as an instance of it (`typed`). `ablate.parts` imports every
part, so everything that composes a run config imports it first. Range checks stay with each part.

Here: the decorator, `typed`, and the schemas no single part owns (`eval`, read by the final and the periodic
evaluation; the tool config's common keys, read by the tool seam, the schedules, the stages and the tasks;
`model`, read by the model loader, the stages, the rollout engines, evaluation and the upstream cache; the
reward's common key, which a task's reward schema extends beside the task).

Each schema's fields are exactly its yaml's keys with the yaml's types, so a composed config holds the
same values as before schemas (the upstream cache keys hash them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Type, TypeVar, Union

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

T = TypeVar("T")



def schema_config(group: str, name: str) -> str:
    """Where the schema `name` of `group` is stored: at the ConfigStore's root, beside config.yaml, so it is
    no option of any group (`--help` and Hydra's "Available options" list the groups' options only)."""
    return f"schema_{group}_{name}"


# (group, name in the group, schema), in the order the parts stored them: what a `+key` override may add
SCHEMAS: list[tuple[str, str, type]] = []


def config_schema(group: str, name: str) -> Callable[[Type[T]], Type[T]]:
    """Class decorator on a part's schema dataclass: store it as `schema_<group>_<name>` (a yaml of `group`
    lists `/schema_<group>_<name>@_here_` first in its `defaults`). Storing a name again replaces the schema
    (a test's re-registration)."""
    def store(schema: Type[T]) -> Type[T]:
        ConfigStore.instance().store(name=schema_config(group, name), node=schema)
        SCHEMAS[:] = [entry for entry in SCHEMAS if entry[:2] != (group, name)] + [(group, name, schema)]
        return schema
    return store


def typed(schema: Type[T], values: Union[T, Mapping[str, Any]]) -> T:
    """`values` (a composed group config, a plain dict, or already a `schema`) as a `schema` instance,
    which a part reads by attribute (`stage.kl_coef`): keys it lacks take the schema's defaults (the
    shipped values), a wrong type or an unknown key raises (omegaconf's ValidationError or ConfigKeyError).
    A composed config typed by a subclass of `schema` (a user's stage extending a shipped one) stays its own."""
    if isinstance(values, schema):
        return values
    kind = OmegaConf.get_type(values) if isinstance(values, DictConfig) else None
    if isinstance(kind, type) and issubclass(kind, schema):
        return OmegaConf.to_object(values)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))


@config_schema("eval", "eval_schema")
@dataclass
class EvalConfig:
    enabled: bool = True
    n: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 96
    batch_size: int = 512
    ks: List[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    save_completions: int = 4
    regimes: Optional[List[str]] = None
    limit: Optional[int] = None
    every: Optional[int] = None
    val_size: int = 200
    val_n: int = 4
    val_regime: str = "auto"


@config_schema("tool", "tool_schema")
@dataclass
class ToolConfig:
    """A tool condition's keys (conf/tool/off.yaml, on.yaml); a schedule or a tool with keys of its own
    extends it beside itself (ablate.rollout.schedules, the countdown task's oracle)."""

    name: str = "off"
    kind: str = "calculator"
    schedule: str = "off"
    prompt: str = "when_available"
    max_calls: int = 8


@config_schema("model", "hf_schema")
@dataclass
class ModelConfig:
    """A model (conf/model/hf.yaml, qwen2.5-0.5b.yaml): its kind, weights and prompt template."""

    kind: str = "hf"
    name_or_path: Optional[str] = MISSING  # model=hf needs model.name_or_path=<Hub id or local directory>
    template: str = "tinyzero"


@config_schema("model", "tiny_schema")
@dataclass
class TinyModelConfig(ModelConfig):
    """A model built locally (conf/model/tiny.yaml, small.yaml, qwen2.5-0.5b-shape.yaml): `arch` holds
    transformers.Qwen2Config fields, passed on as they are (a free-form mapping: any field of it is read)."""

    kind: str = "tiny"
    name_or_path: Optional[str] = None
    template: str = "compact"
    arch: Dict[str, Any] = field(default_factory=lambda: {
        "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 4, "max_position_embeddings": 192, "tie_word_embeddings": True,
        "rope_theta": 10000.0})


@config_schema("reward", "reward_schema")
@dataclass
class RewardConfig:
    """A reward's common key (conf/reward/score_answer.yaml: a task's own scorer); a task whose rewards have
    keys of their own extends it beside the task (the countdown task's values per verdict)."""

    name: str = "score_answer"
