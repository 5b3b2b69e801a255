"""Wall time of the headline sweep (issue 17's "a study sweep in a quarter of an hour on 2 cores").

    python bench/bench_sweep.py                            # the default launcher (parallel jobs), ~15-20 min
    python bench/bench_sweep.py --launcher basic           # one job after another, for the comparison
    python bench/bench_sweep.py --from multirun/x          # only summarise a sweep that already ran
    python bench/bench_sweep.py -- trainer.num_threads=1   # extra overrides for every job

Runs `python -m ablate.train -m curriculum=static,frontier,none seed=0,1,2` (the README's headline sweep,
default settings) into a fresh directory and prints the wall time from the first job's start to the last
job's end (from each job's status.json), the jobs' own durations and the torch threads each used.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402

HEADLINE = ["curriculum=static,frontier,none", "seed=0,1,2"]


def summarise(sweep: Path) -> dict:
    jobs = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/status.json"))]
    if not jobs:
        raise SystemExit(f"{sweep}: no job status.json found")
    start = min(datetime.datetime.fromisoformat(j["started_at"]) for j in jobs)
    end = max(datetime.datetime.fromisoformat(j["finished_at"]) for j in jobs if j.get("finished_at"))
    durations = [j["duration_s"] for j in jobs if j.get("duration_s")]
    return {"jobs": len(jobs), "completed": sum(j["state"] == "completed" for j in jobs),
            "wall_s": (end - start).total_seconds(), "job_s_median": statistics.median(durations),
            "job_s_sum": sum(durations), "threads": sorted({j.get("threads") for j in jobs}, key=str)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=None, help="hydra/launcher option (default: the config's, local)")
    p.add_argument("--from", dest="existing", type=Path, help="summarise this sweep directory instead of running")
    p.add_argument("overrides", nargs="*", help="extra overrides for every job (after --)")
    args = p.parse_args()
    if args.existing:
        sweep, command = args.existing, "(an existing sweep)"
    else:
        sweep = Path(tempfile.mkdtemp(prefix="bench_sweep_")) / "sweep"
        launcher = [f"hydra/launcher={args.launcher}"] if args.launcher else []
        cmd = [sys.executable, "-m", "ablate.train", "-m", *HEADLINE, *launcher, *args.overrides,
               f"hydra.sweep.dir={sweep}"]
        command = " ".join(["python"] + cmd[1:-1])
        clock = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True)
        print(f"process wall time {time.monotonic() - clock:.0f} s (exit {done.returncode})")
        if done.returncode != 0:
            print(done.stderr[-3000:])
    s = summarise(sweep)
    print(f"machine: {machine()}")
    print(f"sweep: {command} -> {sweep}")
    print(f"jobs {s['jobs']} ({s['completed']} completed), torch threads per job {s['threads']}")
    print(f"wall time, first start to last end: {s['wall_s'] / 60:.1f} min; per job median {s['job_s_median']:.0f} s, "
          f"sum {s['job_s_sum'] / 60:.1f} min (one after another at the same threads: about the sum)")


if __name__ == "__main__":
    main()
