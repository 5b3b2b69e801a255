"""Configuration, owned in one place: the config tree (`CONF_DIR`), how a part stores its schema and the
schemas no part owns (`ablate.config.schemas`; each part's own sits beside it, and `ablate.parts` imports
them all before anything composes), `ConfigError` (`ablate.config.errors`) and the checks that read only the
config or the outside world (`ablate.config.checks`). This package imports no other part of ablate:
every part imports it, never the reverse (each part's own range checks live with the part, and
`ablate.checks.check_config` runs them all).

`conf/` sits at the top of the repository; `src/ablate/conf` links to it, and a wheel copies it
into the package, so the same path works from a clone, an editable and a plain install.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from ablate.config import schemas  # noqa: F401 - stores the schemas no part owns (eval, the tool's common keys)
from ablate.config.errors import ConfigError, require
from ablate.config.schemas import typed
from ablate.device import cuda

__all__ = ["CONF_DIR", "ConfigError", "group_options", "load_group_config", "local_sweep_jobs", "plain", "require",
           "torch_threads", "typed"]

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
if not CONF_DIR.is_dir() and (CONF_DIR.parents[2] / "conf").is_dir():
    # A clone that did not follow the link (`core.symlinks=false`) has a text file in its place; an
    # editable install from it reads the top-level tree (a wheel copies it in: setup.py).
    CONF_DIR = CONF_DIR.parents[2] / "conf"
MAX_LOCAL_JOBS = 4  # beyond this, a job's memory (a model, its optimizer, the eval batch) matters more than cores


def local_sweep_jobs() -> int:
    """Parallel jobs of a sweep on this machine (hydra/launcher=local, the default): one per core up
    to MAX_LOCAL_JOBS on CPU, where a small model's step uses one core poorly; one with a GPU, which
    parallel jobs would share."""
    if cuda():
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_LOCAL_JOBS))


def torch_threads(num_threads: int | None) -> int:
    """`trainer.num_threads`, or by default all cores for one run and cores / jobs for each job of a
    parallel local sweep (jobs that each took every core would fight over them)."""
    if num_threads:
        return int(num_threads)
    cores, jobs = os.cpu_count() or 1, 1
    if local_sweep_worker():
        jobs = int(HydraConfig.get().launcher.n_jobs)
    return max(1, cores // max(1, jobs))


def local_sweep_worker() -> bool:
    """Whether this is a job of a joblib sweep (hydra/launcher=local): a worker process of its own."""
    if not HydraConfig.initialized():
        return False
    hydra = HydraConfig.get()
    return hydra.mode == RunMode.MULTIRUN and "joblib" in str(hydra.launcher.get("_target_", "")).lower()


OmegaConf.register_new_resolver("ablate_sweep_jobs", local_sweep_jobs, replace=True)


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def plain(node: Any) -> Any:
    """A config node as plain, resolved containers (None stays None): the one way config leaves the typed form,
    at the edges only, where plain data is what is wanted: what a cache key or a fingerprint hashes (the upstream
    keys, the study block's), the study block handed to ablate.stats (which reads saved runs as plain data), the
    hyperparameters a logger records, a shipped yaml's values. A part reads its config typed (`typed`)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def load_group_config(group: str, option: str) -> dict[str, Any]:
    """The plain dict of `conf/<group>/<option>.yaml`, e.g. ("reward", "tinyzero")."""
    path = CONF_DIR / group / f"{option}.yaml"
    if not path.is_file():
        raise ValueError(f"no {group} config {option!r}; choose one of {group_options(group)}")
    values = plain(OmegaConf.load(path))
    values.pop("defaults", None)  # a schema (@config_schema) or other group choices: not values
    return values
