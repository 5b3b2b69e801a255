"""External studies (issue 60): the tidy-table CLI's error rates on planted tables, and its speed.

    PYTHONPATH=src python bench/bench_external.py                      # both parts
    PYTHONPATH=src python bench/bench_external.py --part calibration --replications 400
    PYTHONPATH=src python bench/bench_external.py --part speed --runs 1000 --metrics 20

calibration: two arms x 6 seeds, score ~ N(0.5, 0.05), the treatment shifted by 0 (the null), 0.05 and 0.1;
each table through `python -m ablate.stats RUNS --study` (in process), one superiority claim at alpha 0.05
(one-sided 0.025, Welch; and the default randomization guard); prints how often it is replicated.
speed: one table of RUNS runs (two arms, interleaved) x METRICS metrics, the report's wall time, stage by
stage (read, analyse, write). Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from ablate.external.calibrate import planted_study, planted_table, rejection_rates  # noqa: E402


def calibration(replications: int) -> None:
    print(f"planted tables, 6 vs 6 seeds, sd 0.05, {replications} replications each (one-sided level 0.025)\n")
    print("| test | planted effect | replicated | not replicated | inconclusive | rate [95% Wilson] |")
    print("|---|---|---|---|---|---|")
    from ablate.stats.maths.intervals import wilson_interval

    for test in ("welch", "randomization"):
        for effect in (0.0, 0.05, 0.1):
            r = rejection_rates(effect, replications, test=test)
            lo, hi = wilson_interval(r.replicated, r.replications, 0.95)
            print(f"| {test} | {effect:g} | {r.replicated} | {r.not_replicated} | {r.inconclusive} | "
                  f"{r.rate:.3f} [{lo:.3f}, {hi:.3f}] |", flush=True)


def speed(runs: int, metrics: int) -> None:
    from ablate.external.report import analyze_table, read_runs
    from ablate.stats.__main__ import main as stats_main
    from ablate.stats.render.report import write_report
    from ablate.stats.stages.settings import Settings

    seeds = runs // 2
    table = planted_table(0.05, seeds, np.random.default_rng(0), n_metrics=metrics)
    with tempfile.TemporaryDirectory() as tmp:
        path, spec = Path(tmp) / "runs.csv", Path(tmp) / "study.yaml"
        table.to_csv(path, index=False)
        study = planted_study(seeds)
        study["plan"] = {"looks": [seeds]}
        spec.write_text(yaml.safe_dump({"study": study}))
        t0 = time.perf_counter()
        tr, _ = read_runs(path, spec)
        t1 = time.perf_counter()
        analysis = analyze_table(tr, Settings(report_dir=Path(tmp) / "r"))
        t2 = time.perf_counter()
        write_report(analysis, Path(tmp) / "r", {"md"}, plots=True)
        t3 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = stats_main([str(path), "--study", str(spec), "--out", str(Path(tmp) / "cli"), "--quiet"])
        t4 = time.perf_counter()
    print(f"{len(table)} runs x {metrics} metrics: read {t1 - t0:.2f} s, analyse {t2 - t1:.2f} s, write (with figures) "
          f"{t3 - t2:.2f} s; the whole CLI (exit {rc}) {t4 - t3:.2f} s; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("calibration", "speed", "both"), default="both")
    p.add_argument("--replications", type=int, default=200)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--metrics", type=int, default=20)
    args = p.parse_args()
    if args.part in ("speed", "both"):
        speed(args.runs, args.metrics)
    if args.part in ("calibration", "both"):
        calibration(args.replications)


if __name__ == "__main__":
    main()
