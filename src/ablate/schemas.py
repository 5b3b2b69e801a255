"""Schemas of config groups (Hydra structured configs): a group's yaml lists its schema first in its
`defaults`, so a value of the wrong type or a key the schema lacks fails at composition, with Hydra's own
message naming the key. Range checks stay with each part (`ablate.eval.check_eval`,
`ablate.rollout.check_rollout`). Registered in Hydra's ConfigStore on import (`ablate.config` imports this).

Each schema's fields are exactly its yaml's keys with the yaml's types, so a composed config holds the
same values as before schemas (the upstream cache keys hash them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


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
    every: Optional[int] = None
    val_size: int = 200
    val_n: int = 4


@dataclass
class HFRolloutConfig:
    name: str = "hf"
    batch_size: int = 256


@dataclass
class VLLMRolloutConfig:
    name: str = "vllm"
    dtype: str = "float32"
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.3
    kv_cache_memory_bytes: Optional[int] = 268435456
    max_model_len: Optional[int] = None
    enable_prefix_caching: bool = True
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)


def register() -> None:
    store = ConfigStore.instance()
    store.store(group="eval", name="eval_schema", node=EvalConfig)
    store.store(group="rollout", name="hf_schema", node=HFRolloutConfig)
    store.store(group="rollout", name="vllm_schema", node=VLLMRolloutConfig)


register()
