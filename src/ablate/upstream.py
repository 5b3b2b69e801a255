"""Upstream stages: the model a stage starts from (`stage.init=sft|dpo|ipo`), trained once and cached.

A stage with `init=<upstream>` starts from the model that stage produces when run with the config
`upstream.<upstream>` (a copy of `conf/stage/<upstream>.yaml`, overridable as `upstream.sft.max_steps=...`)
on the same model, task (and, for stages that use them, reward and tool), with seed `upstream.seed`.
That run is a full run directory under `<cache>/models/<key>/` (`ABLATE_CACHE`, default
`~/.cache/ablate`), where the key hashes exactly those inputs and the key of its own upstream, never
the downstream run's seed: the seeds of a sweep share one upstream model, and the first job trains
it while the others wait on a file lock. An interrupted upstream run resumes from its checkpoint.
Upstreams chain: `stage=rloo init=ipo` starts from the cached IPO model, which started from the SFT one.

For `model=tiny` the SFT of the shipped defaults (conf/stage/sft.yaml, conf/model/tiny.yaml,
conf/task/countdown.yaml, upstream.seed=0) is the checkpoint in the package, `builtin:tiny-sft`;
any change to those trains and caches a new one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from ablate.config import load_group_config, plain, require
from ablate.models.source import PLAIN_SFT
from ablate.rundir import RunDir
from ablate.rundir.atomic import model_exported, write_text
from ablate.rundir.cache import models_dir
from ablate.rundir.status import State, read_status

log = logging.getLogger("ablate.upstream")

KEY_VERSION = 1


def upstream_stages(cfg: DictConfig) -> tuple[str, ...]:
    """The stages `stage.init` may name: registered stages that others may start from (their `upstream`
    spec says what their model depends on) and that the config gives an `upstream.<name>` (config.yaml)."""
    # cycle: ablate.stages (its __init__ imports ablate.stages.wiring, which imports this module)
    from ablate.stages.registry import upstream_names

    return tuple(name for name in upstream_names() if name in cfg.upstream)


def inits(cfg: DictConfig) -> tuple[str, ...]:
    """What `stage.init` may be: an upstream stage, scratch (a random init) or model (model.name_or_path)."""
    return (*upstream_stages(cfg), "scratch", "model")


def upstream_config(cfg: DictConfig, name: str) -> DictConfig:
    """The full run config of upstream stage `name` for run config `cfg`."""
    if name not in upstream_stages(cfg):
        raise ValueError(f"stage.init={name!r} is not an upstream stage; expected one of {upstream_stages(cfg)}")
    up = cfg.copy()
    OmegaConf.set_struct(up, False)
    up.stage = cfg.upstream[name].copy()
    up.seed = int(cfg.upstream.seed)
    up.resume = "auto"  # a half-trained upstream continues where it stopped
    up.eval.enabled = bool(cfg.upstream.eval)
    # No validation during an upstream's training: validation keeps its prompts out of the training
    # pool, so an upstream trained inside a run with eval.every would be another model under the same
    # key (which one a sweep got depended on which job trained it first).
    if "every" in up.eval:
        up.eval.every = None
    if up.get("curriculum"):  # RL prompt selection belongs to the downstream RL stage
        up.curriculum = None
    if "replay" in up:
        up.replay.enabled = False
    if "dynamic_sampling" in up:
        up.dynamic_sampling.enabled = False
    # One device: an upstream is trained inside the downstream's process before its fit, and DDP
    # would re-launch the whole command per rank at that point. The key does not depend on it.
    up.trainer.devices, up.trainer.strategy, up.trainer.num_nodes = 1, "auto", 1
    # Nor compiled: compiled kernels round differently, and the cached model (the shipped one for the
    # tiny default) must be the one its key names whatever the downstream run sets.
    if "compile" in up.trainer:
        up.trainer.compile = False
    OmegaConf.set_struct(up, True)
    return up


def upstream_spec(cfg: DictConfig, name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """What upstream stage `name`'s model depends on (hashed into its cache key): its stage config and
    seed, what its registered `Stage.upstream` says its training reads, and its own upstream's key."""
    from ablate.stages.registry import stage_of  # cycle: ablate.stages -> ablate.stages.wiring -> this module

    if name in _seen:
        raise ValueError(f"upstream stages form a cycle: {' -> '.join((*_seen, name))}; "
                         f"set upstream.{name}.init to sft, scratch or model")
    up = upstream_config(cfg, name)
    spec: dict[str, Any] = {"version": KEY_VERSION, "seed": int(up.seed),
                            "stage": plain(up.stage)}
    spec.update(stage_of(name).upstream(up))
    init = up.stage.get("init")
    if init in upstream_stages(cfg):
        spec["parent"] = upstream_key(cfg, init, (*_seen, name))
    model = spec.get("model")
    if isinstance(model, dict) and model.get("name_or_path") == PLAIN_SFT:  # its key, never a machine's path
        spec["model"] = {**model, "name_or_path": plain_sft_name(cfg)}
    return spec


def upstream_key(cfg: DictConfig, name: str, _seen: tuple[str, ...] = ()) -> str:
    spec = upstream_spec(cfg, name, _seen)
    return f"{name}-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def plain_sft_config(cfg: DictConfig) -> DictConfig:
    """`cfg` with the model's plain SFT as its upstream SFT (what `model.name_or_path=upstream:sft` starts
    from): `upstream.plain_sft` (conf/stage/sft.yaml with the model's own recipe, conf/upstream/sft/<model>.yaml,
    as `upstream.sft` is composed without a testbed; `upstream.plain_sft.max_steps=...` shrinks it for a smoke
    run), from a random init. Its key is the one `stage.init=sft` gives with no testbed."""
    base = cfg.copy()
    OmegaConf.set_struct(base, False)
    base.upstream.sft = cfg.upstream.plain_sft.copy()
    base.model.name_or_path = None
    OmegaConf.set_struct(base, True)
    return base


def plain_sft_name(cfg: DictConfig) -> str:
    """What `upstream:sft` stands for in a cache key: builtin:tiny-sft (model=tiny) or the plain SFT's key."""
    base = plain_sft_config(cfg)
    return "builtin:tiny-sft" if is_shipped(base, "sft") else upstream_key(base, "sft")


def resolve_plain_sft(cfg: DictConfig, model: DictConfig, run: Callable[[DictConfig, Path], Any]) -> DictConfig:
    """`model` with `name_or_path=upstream:sft` replaced by the model's plain SFT (trained once by `run`)."""
    if model.get("name_or_path") == PLAIN_SFT:
        model.name_or_path = upstream_model(plain_sft_config(cfg), "sft", run)
    return model


def shipped_sft_spec() -> dict[str, Any]:
    """The spec of the SFT behind `builtin:tiny-sft`: the shipped config files, seed 0."""
    return {"version": KEY_VERSION, "seed": 0, "stage": load_group_config("stage", "sft"),
            "model": load_group_config("model", "tiny"), "task": load_group_config("task", "countdown")}


def is_shipped(cfg: DictConfig, name: str) -> bool:
    return (name == "sft" and cfg.model.kind == "tiny" and not cfg.model.get("name_or_path")
            and upstream_spec(cfg, name) == shipped_sft_spec())


def _finished(run: RunDir) -> bool:
    return (read_status(run) or {}).get("state") == State.COMPLETED and model_exported(run.model_dir)


def wait_for_lock(lock, message: str) -> None:
    """Acquire `lock`, logging `message` (a warning: it reaches the console) when another process
    holds it. FileLock's `is_locked` only tells whether this object holds it, so try first without
    waiting."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning(message)
        lock.acquire()


def upstream_model(cfg: DictConfig, name: str, run: Callable[[DictConfig, Path], Any]) -> str:
    """`name_or_path` of upstream stage `name`'s model: the shipped checkpoint, a cached one, or one
    trained now by `run(config, run_dir)` (the entry point's, passed in: this module never imports
    it) under a file lock, and cached."""
    if is_shipped(cfg, name):
        return "builtin:tiny-sft"
    key = upstream_key(cfg, name)
    folder = models_dir() / key
    cached = RunDir(folder)
    if _finished(cached):
        return str(cached.model_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder) + ".lock")
    wait_for_lock(lock, f"waiting for another job that is training upstream {name} ({folder})")
    try:
        if not _finished(cached):  # another job may have finished it while we waited
            log.info("training upstream stage %s once, cached at %s", name, folder)
            folder.mkdir(parents=True, exist_ok=True)
            up = upstream_config(cfg, name)
            write_text(folder / "upstream.json", json.dumps(upstream_spec(cfg, name), indent=1, sort_keys=True))
            write_text(folder / "config.yaml", OmegaConf.to_yaml(up, resolve=True))
            run(up, folder)
            shutil.rmtree(cached.checkpoint_dir, ignore_errors=True)  # optimizer state: only needed to resume
    finally:
        lock.release()
    return str(cached.model_dir)


def check_init(cfg: DictConfig) -> None:
    """`stage.init` of a stage that starts from a model: ConfigError naming the key and the fix."""
    require(cfg.stage.init in inits(cfg), f"stage.init={cfg.stage.init!r}: expected one of {inits(cfg)}")
    require(cfg.stage.init != "model" or bool(cfg.model.get("name_or_path")), "stage.init=model needs model.name_or_path")
