"""Goldens for refactors that must not change numbers (issue 16's guard).

    python tests/goldens/record.py            # (re)record this CPU's goldens with the current code
                                              # (recorded/, or recorded/<capability>/ on another instruction set)
    python -m pytest -q tests/test_goldens.py # re-run the same runs and compare

A fixed set of short runs (SFT smoke, RLOO 10 steps from the shipped SFT, DPO smoke, the annealed
calculator, DOTS with replay) and a stats report on a small sweep, each in a fresh process with one
torch thread. What is kept: every metrics.csv column but wall-clock ones, eval summaries and
per-prompt samples (completions included), the report's summary and comparison tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
DATA = HERE / "recorded"  # not "data/": .gitignore keeps data/ out of the repository


def data_dir(capability: str) -> Path:
    """The goldens recorded on a CPU with this instruction set (torch picks its kernels by it, and the
    last bits follow): recorded/ for the first recording's, recorded/<capability>/ for each other."""
    primary = json.loads((DATA / "recorded.json").read_text())["cpu_capability"] if (DATA / "recorded.json").is_file() else None
    return DATA if capability in (primary, None) else DATA / capability.lower()
SMALL_EVAL = ["eval.n=4", "eval.ks=[1,2,4]"]
RUNS = {
    "sft_smoke": ["experiment=smoke"],
    "rloo_10_steps": ["stage=rloo", "stage.max_steps=10", "stage.checkpoint_every=5", *SMALL_EVAL],
    "dpo_smoke": ["experiment=smoke_dpo"],
    "tool_anneal_linear": ["experiment=smoke_rloo", "tool=anneal_linear", "stage.max_steps=4"],
    "dots_replay": ["experiment=smoke_rloo", "curriculum=dots", "curriculum.every=2", "curriculum.reference_size=6",
                    "replay.enabled=true", "stage.max_steps=4"],
}
SWEEP = ["experiment=smoke_rloo", "curriculum=none,static", "seed=0,1"]
STATS = ["--resamples", "1000", "--no-plots", "--quiet"]


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def train(args: list[str], cwd: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "ablate.train", *args, "trainer.num_threads=1"], cwd=cwd, env=env(),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ablate.train {' '.join(args)} failed:\n{out.stderr[-3000:]}")


def numbers_of_run(run_dir: Path) -> dict:
    metrics = pd.read_csv(run_dir / "metrics.csv")
    metrics = metrics[[c for c in metrics.columns if not c.startswith("time/")]]
    evals = {}
    for summary in sorted((run_dir / "eval").glob("*/summary.json")):
        rows = [json.loads(line) for line in (summary.parent / "samples.jsonl").read_text().splitlines()]
        evals[summary.parent.name] = {"summary": json.loads(summary.read_text()), "samples": rows}
    return {"metrics": metrics.to_dict(orient="list"), "eval": evals}


def numbers_of_report(report: Path) -> dict:
    tables = {}
    for name in ("summary.csv", "comparisons.csv"):
        frame = pd.read_csv(report / name)
        tables[name] = frame.drop(columns=[c for c in frame.columns if c in ("path", "run")]).to_dict(orient="list")
    return tables


def produce(work: Path) -> dict:
    """Run everything under `work` and return the numbers (name -> JSON-able)."""
    results = {}
    for name, args in RUNS.items():
        train([*args, f"hydra.run.dir={work / name}"], work)
        results[name] = numbers_of_run(work / name)
    train(["-m", *SWEEP, f"hydra.sweep.dir={work / 'sweep'}", "hydra/launcher=basic"], work)
    out = subprocess.run([sys.executable, "-m", "ablate.stats", str(work / "sweep"), "--out", str(work / "report"),
                          *STATS], cwd=work, env=env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ablate.stats failed:\n{out.stderr[-3000:]}")
    results["stats_report"] = numbers_of_report(work / "report")
    return results


def main() -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ABLATE_CACHE", str(Path(tmp) / "cache"))
        results = produce(Path(tmp))
    out = data_dir(torch.backends.cpu.get_cpu_capability())
    out.mkdir(parents=True, exist_ok=True)
    for name, numbers in results.items():
        (out / f"{name}.json").write_text(json.dumps(numbers, sort_keys=True, allow_nan=True) + "\n")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    (out / "recorded.json").write_text(json.dumps({"commit": commit, "torch": torch.__version__,
                                                   "cpu_capability": torch.backends.cpu.get_cpu_capability()},
                                                  indent=1) + "\n")
    print(f"goldens written to {out}")


if __name__ == "__main__":
    main()
