"""What `python -m ablate.stats` was asked for: one object every stage of the pipeline reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass
class Settings:
    resamples: int = 10_000
    confidence: float = 0.95
    alpha: float = 0.05
    seed: int = 0
    metrics: Sequence[str] | None = None  # None: the study's metrics, else pass@1
    baseline: str | None = None
    reach: Sequence[str] = ()
    smooth: int = 5
    effect: float | None = None  # None: the study's effect, else conditions.DEFAULT_EFFECT
    power: bool = False  # also plan every metric (power.csv)
    names: Sequence[str] = ()  # --name LABEL:KEY=VALUE[,KEY=VALUE]
    registration: Path | None = None  # --registration: registration.yaml or its directory (ablate.stats.claims.registration)
    report_dir: Path | None = None  # where the report goes: a registration beside it is found
