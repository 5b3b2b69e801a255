"""How the RL step and the stats report scale (figures printed, not asserted).

    PYTHONPATH=src python bench/bench_scaling.py                     # k 4/8/16, B 8/16/32, stats 5 sizes
    PYTHONPATH=src python bench/bench_scaling.py --quick             # k 4/8, B 8/16, 3 stats sizes
    PYTHONPATH=src python bench/bench_scaling.py --part rl --steps 6 --threads 1

RL: each (B prompts, k samples) point is a fresh `python -m ablate.train stage=rloo` process (the shipped
SFT model, 64 new tokens) timed from its metrics.csv: median wall seconds per step after `--warmup`
steps, and the generate / learn split. The k series holds B=16, the B series holds k=8; the points run
in one order and then in the reverse order (`--passes 2`), so drift on a shared machine hits both
ends. Step cost should follow B*k (the number of sequences); per-token decoding overhead is shared by
the whole batch, so small batches cost more per sequence.

Stats: wall time of a full `ablate.stats` report (load the run directories, 10,000 bootstrap resamples,
write report.md, csv and plots) on synthetic sweeps of 3 conditions x seeds x prompts x 16 samples,
as runs and prompts double; single-threaded BLAS as `python -m ablate.stats` runs it.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy: as ablate.stats does
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import RLOO_BASE, fmt, machine, markdown_table, median, read_metrics, step_seconds  # noqa: E402


def rl_point(batch_prompts: int, k: int, steps: int, threads: int) -> list[dict[str, float]]:
    """metrics.csv rows of one fresh RL run with B prompts x k samples."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "ablate.train", *RLOO_BASE, f"stage.batch_prompts={batch_prompts}",
                   f"stage.k={k}", f"stage.max_steps={steps}", f"trainer.num_threads={threads}",
                   f"stage.micro_batch={min(64, batch_prompts * k)}", f"hydra.run.dir={tmp}/run"]
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                                 "MKL_NUM_THREADS")}  # set above for stats only
        env["PYTHONWARNINGS"] = "ignore"
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"), env.get("PYTHONPATH", "")])
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            raise SystemExit(f"RL run B={batch_prompts} k={k} failed ({done.returncode})")
        return read_metrics(Path(tmp) / "run" / "metrics.csv")


def rl_scaling(args) -> tuple[str, list[dict]]:
    ks = [4, 8] if args.quick else [4, 8, 16]
    bs = [8, 16] if args.quick else [8, 16, 32]
    points = [(16, k) for k in ks] + [(b, 8) for b in bs if (b, 8) != (16, 8)]
    runs: dict[tuple[int, int], list] = {pt: [] for pt in points}
    order = points + points[::-1] if args.passes >= 2 else points
    for b, k in order:
        rows = rl_point(b, k, args.steps, args.threads)[args.warmup:]
        runs[(b, k)].append(rows)
        print(f"  B={b:>3} k={k:>3}: {median(step_seconds(rows)):.2f} s/step", flush=True)
    results, table = [], []
    base = None
    for series, pts in (("k", [(16, k) for k in ks]), ("B", [(b, 8) for b in bs])):
        for b, k in pts:
            rows = [r for run in runs[(b, k)] for r in run]
            # step_seconds needs consecutive rows of one run, so per run, then pooled
            steps = [s for run in runs[(b, k)] for s in step_seconds(run)]
            res = {"series": series, "B": b, "k": k, "sequences": b * k, "step_s": median(steps),
                   "generate_s": median(r["time/generate_s"] for r in rows),
                   "learn_s": median(r["time/learn_s"] for r in rows),
                   "tokens_per_s": median(r["time/generate_tokens_per_s"] for r in rows)}
            if (b, k) == (16, 8):
                base = res["step_s"]
            results.append(res)
    for res in results:
        table.append([res["series"], res["B"], res["k"], res["sequences"], fmt(res["step_s"]),
                      f"{res['step_s'] / base:.2f}x" if base else "", fmt(res["step_s"] / res["sequences"] * 1e3, 1),
                      fmt(res["generate_s"]), fmt(res["learn_s"]), fmt(res["tokens_per_s"], 0)])
    text = markdown_table(["series", "B", "k", "B*k", "s/step", "vs B=16 k=8", "ms/sequence", "generate s",
                           "learn s", "rollout tok/s"], table)
    return text, results


def stats_scaling(args) -> tuple[str, list[dict]]:
    from bench_stats import run_once

    # (conditions, seeds, prompts): runs = conditions x seeds double, then prompts double
    sizes = ([(3, 1, 250), (3, 2, 250), (3, 2, 500)] if args.quick else
             [(3, 1, 250), (3, 2, 250), (3, 4, 250), (3, 2, 500), (3, 2, 1000)])
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_once(tmp / "warm", 2, 1, 50, 200, ("default",))  # imports, matplotlib's font cache
        for conds, seeds, prompts in sizes:
            t = run_once(tmp / f"{conds}_{seeds}_{prompts}", conds, seeds, prompts, args.resamples, ("default",))
            runs = conds * seeds
            results.append({"runs": runs, "prompts": prompts, **t})
            rows.append([runs, prompts, runs * prompts, fmt(t["load"]), fmt(t["stats"]), fmt(t["write"]),
                         fmt(t["total"]), fmt(t["total"] / (runs * prompts) * 1e3, 2)])
            print(f"  runs={runs:>3} prompts={prompts:>5}: {t['total']:.2f} s", flush=True)
    text = markdown_table(["runs", "prompts", "runs x prompts", "load s", "stats s", "write s", "total s",
                           "ms per run x prompt"], rows)
    return text, results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("rl", "stats", "all"), default="all")
    p.add_argument("--quick", action="store_true", help="2 points per series, 3 stats sizes")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--passes", type=int, default=2, help="1: one order; 2: forward then reverse order")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    print(f"machine: {machine()}")
    out = {}
    if args.part in ("rl", "all"):
        start = time.perf_counter()
        text, out["rl"] = rl_scaling(args)
        print(f"\nRL step, rollout=hf, {args.steps} steps per run ({args.warmup} warm-up left out), "
              f"{args.passes} pass(es), threads {args.threads} ({time.perf_counter() - start:.0f} s)\n\n{text}\n")
    if args.part in ("stats", "all"):
        text, out["stats"] = stats_scaling(args)
        print(f"\nablate.stats report, {args.resamples} resamples, 16 samples per prompt\n\n{text}\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
