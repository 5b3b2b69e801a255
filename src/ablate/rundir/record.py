"""What config a run directory holds, kept where Hydra cannot overwrite it.

Hydra writes `<run>/.hydra/{config,hydra,overrides}.yaml` before the task function runs, so a
re-run of a directory with another config would rewrite them and the directory would misdescribe
the results it holds (and `ablate.stats` would group it wrongly). The first attempt of a run copies
the three files to `<run>/.ablate/`; a later attempt compares its composed config with that copy and,
when a key that shapes the results differs, restores Hydra's files from the copy and is refused
(exit code 2, the keys named), leaving the directory as it was.
"""

from __future__ import annotations

import shutil
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from ablate.rundir import atomic
from ablate.rundir.layout import RunDir, RunDirLike

# Keys that do not change what a run computes: a resume may change them.
IGNORED = ("resume", "trainer.num_threads", "logger")


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: obj}


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in IGNORED)


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`key: old -> new` for every key that differs (added and removed keys too), ignoring IGNORED."""
    a, b = _flat(old), _flat(new)
    diffs = []
    for key in sorted(set(a) | set(b)):
        if _ignored(key) or a.get(key, "<absent>") == b.get(key, "<absent>"):
            continue
        diffs.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return diffs


def _container(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    # as Hydra saves it: interpolations unresolved
    return OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)


def record_config(cfg: DictConfig, run_dir: RunDirLike) -> None:
    """On a run's first attempt (no record yet), copy Hydra's files (or the config) to `<run>/.ablate/`."""
    run = RunDir.of(run_dir)
    if run.record_file(run.CONFIG).is_file():
        return
    if run.hydra_file(run.CONFIG).is_file():
        for name in run.HYDRA_FILES:
            if run.hydra_file(name).is_file():
                atomic.write_text(run.record_file(name), run.hydra_file(name).read_text())
    else:
        atomic.write_text(run.record_file(run.CONFIG), OmegaConf.to_yaml(cfg))


def restore_hydra_files(run_dir: RunDirLike) -> None:
    """Put the run's own `.hydra/` files back from its record: a refused launch finds them already
    overwritten, as Hydra writes them before the task function runs."""
    run = RunDir.of(run_dir)
    for name in run.HYDRA_FILES:
        if run.record_file(name).is_file() and run.hydra_dir.is_dir():
            atomic.write_bytes(run.hydra_file(name), run.record_file(name).read_bytes())


def check_run_dir(cfg: DictConfig, run_dir: RunDirLike) -> str | None:
    """None when `run_dir` holds no started run or a run of this config; otherwise restore Hydra's
    files from the record and return the refusal message naming the keys that differ."""
    run = RunDir.of(run_dir)
    saved = run.record_file(run.CONFIG)
    if not saved.is_file() or not run.status_file.is_file():
        shutil.rmtree(run.record_dir, ignore_errors=True)  # a record of a run that never started (a config error)
        return None
    try:
        old = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    except Exception:  # noqa: BLE001 - an unreadable record says nothing
        return None
    diffs = config_differences(old, _container(cfg))
    if not diffs:
        return None
    restore_hydra_files(run)
    shown = "; ".join(diffs[:8]) + (f"; and {len(diffs) - 8} more" if len(diffs) > 8 else "")
    return (f"{run.root} already holds a run with another config ({shown}); it was left as it was. "
            "Run the new config in a new directory (another hydra.run.dir), or delete this one to redo it")
