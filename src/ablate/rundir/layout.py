"""Where each file of a run directory lives: the one place its names are spelled.

    <run>/.hydra/{config,hydra,overrides}.yaml     written by Hydra before the task function runs
    <run>/.ablate/{config,hydra,overrides}.yaml    the run's own copy, out of Hydra's reach (record.py)
    <run>/status.json                              state, attempts, timings, versions (status.py)
    <run>/metrics.csv                              Lightning's CSVLogger, one row per step (metrics_csv.py)
    <run>/checkpoints/{last.ckpt,epoch=*-step=*.ckpt}   Lightning checkpoints (resume)
    <run>/model/                                   the `save_pretrained` export (atomic.export_model)
    <run>/eval/<regime>/{summary.json,samples.jsonl}   evaluation; summary.json written last
    <run>/pairs.jsonl                              a preference stage's pairs
    <run>/run.lock                                 one live owner (ownership.py)

Training writes through a `RunDir`, `ablate.stats` reads through one: neither joins a name itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union


@dataclass(frozen=True)
class RunDir:
    root: Path

    HYDRA = ".hydra"
    RECORD = ".ablate"
    HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
    OVERRIDES = "overrides.yaml"
    CONFIG = "config.yaml"
    STATUS = "status.json"
    METRICS = "metrics.csv"
    METRICS_STASH = "metrics.resume.csv"  # metrics.csv moved aside during a resumed fit
    CHECKPOINTS = "checkpoints"
    LAST_CHECKPOINT = "last.ckpt"
    MODEL = "model"
    EVAL = "eval"
    SUMMARY = "summary.json"
    SAMPLES = "samples.jsonl"
    PAIRS = "pairs.jsonl"
    LOCK = "run.lock"
    # The directories a run writes inside itself: none of them holds another run.
    SUBDIRS = (HYDRA, CHECKPOINTS, MODEL, EVAL)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def of(cls, where: "RunDirLike") -> "RunDir":
        return where if isinstance(where, RunDir) else cls(Path(where))

    @property
    def hydra_dir(self) -> Path:
        return self.root / self.HYDRA

    def hydra_file(self, name: str) -> Path:
        return self.hydra_dir / name

    @property
    def record_dir(self) -> Path:
        return self.root / self.RECORD

    def record_file(self, name: str) -> Path:
        return self.record_dir / name

    @property
    def status_file(self) -> Path:
        return self.root / self.STATUS

    @property
    def metrics_file(self) -> Path:
        return self.root / self.METRICS

    @property
    def metrics_stash(self) -> Path:
        return self.root / self.METRICS_STASH

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / self.CHECKPOINTS

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoint_dir / self.LAST_CHECKPOINT

    @property
    def model_dir(self) -> Path:
        return self.root / self.MODEL

    @property
    def eval_root(self) -> Path:
        return self.root / self.EVAL

    def eval_dir(self, regime: str) -> Path:
        return self.eval_root / regime

    def summary_file(self, regime: str) -> Path:
        return self.eval_dir(regime) / self.SUMMARY

    def samples_file(self, regime: str) -> Path:
        return self.eval_dir(regime) / self.SAMPLES

    @property
    def pairs_file(self) -> Path:
        return self.root / self.PAIRS

    @property
    def lock_file(self) -> Path:
        return self.root / self.LOCK

    def regimes(self) -> list[str]:
        """The evaluated regimes' names (eval/'s subdirectories), sorted; [] without eval/."""
        if not self.eval_root.is_dir():
            return []
        return sorted(p.name for p in self.eval_root.iterdir() if p.is_dir())

    def evaluated(self, regime: str) -> bool:
        """The regime's evaluation finished: summary.json, written last, is there."""
        return self.summary_file(regime).is_file()

    def writable_dirs(self, regimes: Iterable[str]) -> list[Path]:
        """The directories a run writes files into atomically (their killed writers' leftovers are cleared)."""
        return [self.root, self.checkpoint_dir, *(self.eval_dir(r) for r in regimes)]

    def is_run(self) -> bool:
        """Hydra's overrides.yaml marks a run; so does the run's own copy of it (.ablate/), or a config with a
        status.json: a run whose marker was lost is read (and the loss named), not skipped unseen."""
        return (self.hydra_file(self.OVERRIDES).is_file() or self.record_file(self.OVERRIDES).is_file()
                or (self.hydra_file(self.CONFIG).is_file() and self.status_file.is_file()))


RunDirLike = Union[str, Path, RunDir]
