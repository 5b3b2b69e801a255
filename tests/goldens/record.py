"""Goldens for refactors that must not change numbers (issue 16's guard).

    python tests/goldens/record.py            # (re)record this CPU's goldens with the current code
                                              # (recorded/, or recorded/<capability>/ on another instruction set)
    python tests/goldens/record.py --stamp    # re-run, and if this machine reproduces its instruction set's
                                              # recording bit for bit, write its fingerprint beside it
    python -m pytest -q tests/test_goldens.py # re-run the same runs and compare

Bit for bit only on a machine whose fingerprint (CPU model and ISA flags, torch's CPU capability, torch,
MKL, oneDNN, Python and the numeric packages' versions) equals the recording's: MKL and oneDNN pick
kernels by the CPU model, not by torch's capability level, so two AVX512 CPUs differ in the last bits
(issue 45). Elsewhere within RTOL/ATOL (measured: bench/bench_goldens_spread.py, docs/training.md).

A fixed set of short runs (SFT smoke, RLOO 10 steps from the shipped SFT, DPO smoke, the annealed
calculator, DOTS with replay) and a stats report on a small sweep, each in a fresh process with one
torch thread. What is kept: every metrics.csv column but wall-clock ones, eval summaries and
per-prompt samples (completions included), the report's summary and comparison tables.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import re
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
# The tolerance off a recording's fingerprint, measured (bench/bench_goldens_spread.py, AMD EPYC AVX2, load ~4
# on 2 cores): the AVX2 recording against the AVX512 one differs in at most 2.6e-5 relative where values are
# not near 0 (rloo is_weight_max, a max of exp(logp - old logp) ~1) and 1.9e-6 absolute near 0 (dpo margin
# -3.3e-3; kl ~1e-6 differs by 7e-4 relative but 1e-9 absolute); torch's kernels pinned to
# ATEN_CPU_CAPABILITY=default 2.9e-5, and with MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 4.6e-5; two AVX512
# CPUs ~7e-8 (issue 45). RTOL is ~2-4x those, ATOL ~2.5x. A real change is far outside: lr x1.01 or
# kl_coef x2 moved 2,200-2,800 numbers of rloo_10_steps beyond it and changed its sampled completions,
# which are compared exactly (tests/test_goldens_tolerance.py perturbs a golden by 2e-4 and fails).
# An AMD family 26 AVX512 CPU (2026-11-28) differs from the first AVX512 recording by 7.6e-6 absolute in dpo
# margin[1] (-1.377e-3 vs -1.369e-3: a difference of summed log-probs, so its error scales with them, not with
# it), beyond ATOL; rather than widen the tolerance for every number it has its own stamped recording
# (recorded/avx512-amd-family26/, record.py --folder), compared bit for bit there.
RTOL = 1e-4
ATOL = 5e-6
PACKAGES = ("transformers", "tokenizers", "safetensors", "numpy", "lightning", "scipy", "pandas", "statsmodels")
ISA_FLAG = re.compile(r"^(sse|ssse|avx|amx|fma|f16c|bmi|vaes|vpclmul|gfni|sha)")


def cpuinfo() -> tuple[str, list[str]]:
    """The CPU's model (name, vendor, family/model/stepping: a virtual machine's name can be generic)
    and its instruction-set flags, from Linux's /proc/cpuinfo; elsewhere what platform knows and no
    flags, which never matches a Linux recording: the tolerant check."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), []
    field = {key: (m.group(1).strip() if (m := re.search(rf"^{key}\s*:\s*(.*)$", text, re.M)) else "?")
             for key in ("model name", "vendor_id", "cpu family", "model", "stepping", "flags")}
    isa = sorted(f for f in field["flags"].split() if ISA_FLAG.match(f))
    return (f"{field['model name']} ({field['vendor_id']} family {field['cpu family']} model {field['model']} "
            f"stepping {field['stepping']})"), isa


def fingerprint() -> dict:
    """What decides the last bits of a CPU run: the kernels (CPU model and flags, torch's capability,
    MKL and oneDNN) and the code around them (torch, Python, the numeric packages)."""
    import torch

    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version (\S+)", config)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)", config)
    model, isa = cpuinfo()
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"cpu_model": model, "cpu_flags": isa, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "mkl": mkl.group(1) if mkl else None,
            "onednn": onednn.group(1) if onednn else None, "python": platform.python_version(), **versions}


def fingerprint_differences(recorded: dict | None, here: dict) -> list[str]:
    """The fields in which this machine differs from a recording's fingerprint (all, if it has none)."""
    if not recorded:
        return ["the recording has no fingerprint (stamp it on its machine: record.py --stamp)"]
    return [f"{key}: {recorded.get(key)!r} here {here.get(key)!r}" if key != "cpu_flags" else
            f"cpu_flags: {sorted(set(recorded.get(key) or []) ^ set(here[key]))} differ"
            for key in sorted(recorded.keys() | here.keys()) if recorded.get(key) != here.get(key)]


def close(a: float, b: float) -> bool:
    """The tolerant comparison of one number: NaN only matches NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def differences(a, b, exact: bool, where: str = "") -> list[str]:
    """Every place where two goldens' JSON differ: bit for bit, or numbers within RTOL/ATOL."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys differ: {sorted(a.keys() ^ b.keys())}"]
        return [d for key in a for d in differences(a[key], b[key], exact, f"{where}/{key}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, exact, f"{where}[{i}]")]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        same = (a == b or (math.isnan(a) and math.isnan(b))) if exact else close(a, b)
        return [] if same else [f"{where}: {a!r} != {b!r}" + (" (bit-identity)" if exact else
                                                             f" (beyond rtol {RTOL:g}, atol {ATOL:g})")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


SMALL_EVAL = ["eval.n=4", "eval.ks=[1,2,4]"]
RUNS = {
    "sft_smoke": ["experiment=smoke"],
    "rloo_10_steps": ["stage=rloo", "stage.max_steps=10", "stage.checkpoint_every=5", *SMALL_EVAL],
    "dpo_smoke": ["experiment=smoke_dpo"],
    "tool_anneal_linear": ["experiment=smoke_rloo", "tool=anneal_linear", "stage.max_steps=4"],
    "dots_replay": ["experiment=smoke_rloo", "curriculum=dots", "curriculum.every=2", "curriculum.reference_size=6",
                    "replay.enabled=true", "stage.max_steps=4"],
}
# hydra/sweeper=basic: the recorded sweep ran arm-major (Hydra's product order); the default sweeper now runs seed-major,
# and a report's per-prompt bootstrap draws follow the run order, so the recording keeps the order it was made in
SWEEP = ["experiment=smoke_rloo", "curriculum=none,static", "seed=0,1", "hydra/sweeper=basic"]
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


def recordings() -> list[Path]:
    """Every recording's folder: recorded/ and recorded/<capability>/."""
    return [d for d in (DATA, *sorted(p for p in DATA.iterdir() if p.is_dir())) if (d / "recorded.json").is_file()]


def choose(here: dict) -> tuple[Path, bool]:
    """The recording to compare with and whether bit for bit: the one whose fingerprint is this
    machine's, else the one of this instruction set (or the first) within RTOL/ATOL."""
    for folder in recordings():
        if not fingerprint_differences(json.loads((folder / "recorded.json").read_text()).get("fingerprint"), here):
            return folder, True
    return data_dir(here["cpu_capability"]) if (data_dir(here["cpu_capability"]) / "recorded.json").is_file() \
        else DATA, False


def stamp(results: dict) -> None:
    """Write this machine's fingerprint beside its instruction set's recording, if it reproduces it bit
    for bit (the recording's fingerprint field; nothing else changes)."""
    here = fingerprint()
    folder = data_dir(here["cpu_capability"])
    found = [d for name, numbers in results.items()
             for d in differences(json.loads(json.dumps(numbers, sort_keys=True, allow_nan=True)),
                                  json.loads((folder / f"{name}.json").read_text()), True, name)]
    if found:
        sys.exit(f"not stamped: {len(found)} numbers differ from {folder} bit for bit, e.g. {found[0]}")
    meta = json.loads((folder / "recorded.json").read_text())
    (folder / "recorded.json").write_text(json.dumps({**meta, "fingerprint": here}, indent=1) + "\n")
    print(f"{folder}: bit-identical here; fingerprint written")


def main() -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ABLATE_CACHE", str(Path(tmp) / "cache"))
        results = produce(Path(tmp))
    if "--stamp" in sys.argv[1:]:
        return stamp(results)
    # --folder NAME: a second recording of an instruction set, for a CPU whose kernels differ from the first's
    # in more than the tolerance (AMD family 26 AVX512 against the first AVX512 recording: dpo margin 7.6e-6)
    args = sys.argv[1:]
    out = DATA / args[args.index("--folder") + 1] if "--folder" in args else data_dir(torch.backends.cpu.get_cpu_capability())
    out.mkdir(parents=True, exist_ok=True)
    for name, numbers in results.items():
        (out / f"{name}.json").write_text(json.dumps(numbers, sort_keys=True, allow_nan=True) + "\n")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    (out / "recorded.json").write_text(json.dumps({"commit": commit, "torch": torch.__version__,
                                                   "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                                   "fingerprint": fingerprint()}, indent=1) + "\n")
    print(f"goldens written to {out}")


if __name__ == "__main__":
    main()
