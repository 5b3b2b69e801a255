"""How far the goldens' numbers move (issue 45): across CPUs, under pinned kernels, and under real changes.

    PYTHONPATH=src python bench/bench_goldens_spread.py [--runs rloo_10_steps]

Prints, for each variant of the goldens' runs against this instruction set's recording
(tests/goldens/record.py): how many numbers differ at all, how many lie beyond the tolerant check
(record.RTOL / record.ATOL) and the largest relative difference; then the two committed recordings (AVX2,
AVX512) against each other. The variants: the recording's own settings (bit for bit on its machine);
torch's kernels pinned lower (ATEN_CPU_CAPABILITY=default, what another instruction set does to torch's
own kernels); a reproducible-CPU mode (ATen default, MKL_CBWR=COMPATIBLE, ONEDNN_MAX_CPU_ISA=SSE41) and
its wall time; and real changes (lr x1.01, lr x1.1, kl_coef x2), which the tolerance must not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "goldens"))
import record  # noqa: E402

VARIANTS = {
    "as recorded": ({}, []),
    "ATEN_CPU_CAPABILITY=default": ({"ATEN_CPU_CAPABILITY": "default"}, []),
    "reproducible mode": ({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                           "ONEDNN_MAX_CPU_ISA": "SSE41"}, []),
    "lr x1.01": ({}, ["stage.lr=1.01e-4"]),
    "lr x1.1": ({}, ["stage.lr=1.1e-4"]),
    "kl_coef x2": ({}, ["stage.kl_coef=2e-3"]),
}


def compare(got: dict, golden: dict, name: str) -> str:
    exact = record.differences(got, golden, True, name)
    beyond = record.differences(got, golden, False, name)
    rel = 0.0
    for line in exact:
        try:
            a, b = (float(x) for x in line.split(": ", 1)[1].split(" (")[0].split(" != "))
            rel = max(rel, abs(a - b) / max(abs(a), abs(b)))
        except ValueError:  # a string or a structure: not a number
            rel = float("inf")
    return f"{len(exact):4d} differ, {len(beyond):4d} beyond tolerance, max rel {rel:.2e}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", nargs="+", default=["rloo_10_steps"], choices=list(record.RUNS))
    args = parser.parse_args()
    here = record.fingerprint()
    folder = record.data_dir(here["cpu_capability"])
    print(f"machine: {here['cpu_model']}, {here['cpu_capability']}; load average {os.getloadavg()[0]:.1f}; "
          f"tolerance rtol {record.RTOL:g}, atol {record.ATOL:g}; against {folder.relative_to(ROOT)}")
    saved = dict(os.environ)
    for name in args.runs:
        golden = json.loads((folder / f"{name}.json").read_text())
        for variant, (env, overrides) in VARIANTS.items():
            os.environ.clear()
            os.environ.update({**saved, **env})
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                record.train([*record.RUNS[name], *overrides, f"hydra.run.dir={Path(tmp) / name}"], Path(tmp))
                wall = time.perf_counter() - start
                got = json.loads(json.dumps(record.numbers_of_run(Path(tmp) / name), sort_keys=True))
            print(f"{name:15s} {variant:28s} {compare(got, golden, name)}  ({wall:.1f} s)", flush=True)
    os.environ.clear()
    os.environ.update(saved)
    for name in [*record.RUNS, "stats_report"]:
        a = json.loads((record.DATA / "avx2" / f"{name}.json").read_text())
        b = json.loads((record.DATA / f"{name}.json").read_text())
        print(f"{name:15s} {'AVX2 vs AVX512 recordings':28s} {compare(a, b, name)}")


if __name__ == "__main__":
    main()
