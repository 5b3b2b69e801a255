"""Planted tables through the real entry point: how often `python -m ablate.stats RUNS --study` replicates a
claim when the arms share one law (the null: at most the claim's level) and when one arm is shifted by a
planted effect (its power). bench/bench_external.py prints the rates; tests/test_external_calibration.py
holds a few replications to them."""

from __future__ import annotations

import contextlib
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ablate.stats.__main__ import main as stats_main


def planted_study(seeds: int, alpha: float = 0.05, test: str = "welch") -> dict:
    return {"name": "planted", "question": "Does the treatment raise the metric?", "metrics": ["score"], "alpha": alpha,
            "baselines": [{"family": {}, "baseline": {"arm": "control"}}],
            "claims": [{"id": "raises", "claim": "treatment raises score", "metric": "score", "condition": "arm=treatment",
                        "baseline": "arm=control", "direction": "higher", "effect": 0.05}],
            "plan": {"looks": [seeds]}, "test": test}


def planted_table(effect: float, seeds: int, rng: np.random.Generator, sd: float = 0.05,
                  n_metrics: int = 1) -> pd.DataFrame:
    """Interleaved runs of two arms, `score` ~ N(0.5 (+ effect for the treatment), sd) per seed, plus
    n_metrics - 1 noise metrics."""
    rows = []
    for s in range(seeds):
        for arm, shift in (("control", 0.0), ("treatment", effect)):
            row = {"arm": arm, "seed": s, "score": 0.5 + shift + sd * rng.standard_normal()}
            row.update({f"m{j}": rng.standard_normal() for j in range(1, n_metrics)})
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Rates:
    effect: float
    replications: int
    replicated: int
    not_replicated: int
    inconclusive: int

    @property
    def rate(self) -> float:
        return self.replicated / self.replications


def verdict_of(table: pd.DataFrame, study: dict, work: Path) -> str:
    """The claim's verdict from the CLI on this table (written as CSV beside the study)."""
    work.mkdir(parents=True, exist_ok=True)
    table.to_csv(work / "runs.csv", index=False)
    (work / "study.yaml").write_text(yaml.safe_dump({"study": study}))
    with contextlib.redirect_stdout(io.StringIO()):  # --quiet still prints the report's path
        rc = stats_main([str(work / "runs.csv"), "--study", str(work / "study.yaml"), "--out", str(work / "report"),
                         "--no-plots", "--quiet", "--resamples", "200"])
    if rc != 0:
        raise RuntimeError(f"ablate.stats exited {rc} on a planted table")
    return str(pd.read_csv(work / "report" / "claims.csv").iloc[0]["verdict"])


def rejection_rates(effect: float, replications: int, seeds: int = 6, seed: int = 0, alpha: float = 0.05,
                    test: str = "welch") -> Rates:
    rng = np.random.default_rng([seed, int(round(effect * 1e6))])
    counts = {"replicated": 0, "not replicated": 0, "inconclusive": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(replications):
            verdict = verdict_of(planted_table(effect, seeds, rng), planted_study(seeds, alpha, test), Path(tmp) / str(i))
            counts[verdict] = counts.get(verdict, 0) + 1
    return Rates(effect, replications, counts["replicated"], counts["not replicated"], counts["inconclusive"])
