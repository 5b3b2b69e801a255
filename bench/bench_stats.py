"""Wall time of a full `ablate.stats` report on synthetic sweeps (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_stats.py            # 9 runs x 1000 prompts x 16 samples, then scaling
    PYTHONPATH=src python bench/bench_stats.py --quick    # smaller sizes only

Each size is timed in stages: loading the run directories, the statistics (10,000 resamples),
and writing report.md + csv + PNGs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# as `python -m ablate.stats` does: single-threaded BLAS (see src/ablate/stats/__main__.py)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from stats_fixtures import write_sweep  # noqa: E402

from ablate.stats.read.load import load_sweep  # noqa: E402
from ablate.stats.render.report import write_report  # noqa: E402
from ablate.stats.stages.analysis import analyze  # noqa: E402
from ablate.stats.stages.settings import Settings  # noqa: E402


def run_once(tmp: Path, n_conditions: int, n_seeds: int, n_prompts: int, resamples: int, regimes) -> dict:
    conds = {f"c{i}": 0.3 + 0.05 * i for i in range(n_conditions)}
    sweep_dir = write_sweep(tmp / f"sweep_{n_conditions}x{n_seeds}x{n_prompts}", conds,
                            seeds=range(n_seeds), n_prompts=n_prompts, regimes=regimes)
    t0 = time.perf_counter()
    sweep = load_sweep(sweep_dir)
    t1 = time.perf_counter()
    analysis = analyze(sweep, Settings(resamples=resamples))
    t2 = time.perf_counter()
    write_report(analysis, tmp / "out", {"md"}, plots=True)
    t3 = time.perf_counter()
    return {"load": t1 - t0, "stats": t2 - t1, "write": t3 - t2, "total": t3 - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="only the small sizes")
    p.add_argument("--resamples", type=int, default=10_000)
    args = p.parse_args()
    sizes = [(3, 1, 200), (3, 3, 200), (3, 3, 1000)] if args.quick else [(3, 1, 200), (3, 3, 1000), (6, 3, 2000)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # warm-up: imports, matplotlib font cache
        run_once(tmp / "warm", 2, 1, 50, 200, ("default",))
        print(f"resamples={args.resamples}, 16 samples per prompt, one eval regime unless noted")
        print(f"{'runs':>5} {'prompts':>8} {'regimes':>8} {'load s':>8} {'stats s':>8} {'write s':>8} {'total s':>8}")
        rows = [(c, s, n, ("default",)) for c, s, n in sizes]
        rows.insert(2 if not args.quick else 3, (3, 3, 1000, ("no_tool", "tool")))
        for conds, seeds, prompts, regimes in rows:
            t = run_once(tmp / f"{conds}_{seeds}_{prompts}_{len(regimes)}", conds, seeds, prompts,
                         args.resamples, regimes)
            print(f"{conds * seeds:>5} {prompts:>8} {len(regimes):>8} {t['load']:>8.2f} {t['stats']:>8.2f} "
                  f"{t['write']:>8.2f} {t['total']:>8.2f}")


if __name__ == "__main__":
    main()
