"""Run every bench script and write one markdown report (figures, never assertions).

    python bench/run_all.py                              # all sections -> bench/results.md
    python bench/run_all.py --threads 1                  # on a busy machine: 1 torch thread per run
    python bench/run_all.py --only vs_trl,limits         # re-run some; the others keep their last output
    python bench/run_all.py --trl-python /work/trl-venv/bin/python

Each section is one script in its own process with modest sizes (about 10-15 minutes in all on a quiet
2-core machine; several times that when the cores are shared). Its stdout is kept in
`bench/results/<section>.md` (git-ignored) and `bench/results.md` is assembled from those files with
the machine's description, the date, the commit and the load average around each section, so a
section that is re-run with `--only` replaces just its part. bench_vs_trl needs an interpreter that
can import `trl` (its own environment: see bench_vs_trl.py); without one the section says it was
skipped. bench_rl_step.py (seconds per RL step by phase for rollout=hf and rollout=vllm) runs when
the file exists.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import machine  # noqa: E402


def sections(args) -> list[dict]:
    """(name, title, command, whether its output is already markdown) in the order they run."""
    py = sys.executable
    threads = ["--threads", str(args.threads)]
    step_json = HERE / "results" / "step_profile.json"
    trl_python = args.trl_python or find_trl_python()

    def vs_trl(name: str, title: str, *options: str) -> dict:
        """A bench_vs_trl.py section: the same paired rounds, ablate run with `options`."""
        command = [trl_python, "bench/bench_vs_trl.py", "--steps", str(args.trl_steps), "--warmup", "2",
                   "--rounds", str(args.trl_rounds), "--eval-prompts", "96", *threads, *options]
        return {"name": name, "title": title, "markdown": True, "command": command if trl_python else None,
                "skip": "no interpreter with `trl` found (pass --trl-python; see bench_vs_trl.py for the environment)"}

    return [
        {"name": "step_profile", "title": "Where one RL step's time goes (rollout=hf)", "markdown": True,
         "command": [py, "bench/bench_step_profile.py", "--steps", "8", "--warmup", "2", *threads,
                     "--json", str(step_json)]},
        {"name": "limits", "title": "Against the machine's limit", "markdown": True,
         "command": [py, "bench/bench_limits.py", "--from-json", str(step_json), *threads]},
        {"name": "step_options", "title": "What cheaper layouts of the step would save", "markdown": True,
         "command": [py, "bench/bench_step_options.py", "--repeats", "5", *threads]},
        vs_trl("vs_trl", "ablate vs TRL RLOOTrainer, same RL step", "--profile"),
        vs_trl("vs_trl_bf16", "ablate with its reference in bf16 (stage.reference_dtype) vs TRL",
               "--ablate", "stage.reference_dtype=bfloat16"),
        vs_trl("vs_trl_compile", "ablate with its learner compiled (trainer.compile) vs TRL",
               "--ablate", "trainer.compile=true"),
        vs_trl("vs_trl_compile_bf16", "ablate with both opt-in levers (compile, bf16 reference) vs TRL",
               "--ablate", "trainer.compile=true", "stage.reference_dtype=bfloat16"),
        {"name": "compile", "title": "trainer.compile against eager: RL step and oracle SFT, whole runs", "markdown": False,
         "command": [py, "bench/bench_compile.py", "--rounds", "2", *threads]},
        {"name": "decode", "title": "The decoding loop against the issue's loop (tests/hf_baseline.py)", "markdown": False,
         "command": [py, "bench/bench_decode.py", "--rounds", "6", *threads]},
        {"name": "reference_dtype", "title": "The reference in bf16: KL drift and forward time", "markdown": False,
         "command": [py, "bench/bench_reference_dtype.py", "--steps", "100", *threads]},
        {"name": "rl_step", "title": "Seconds per RL step by phase, rollout=hf and rollout=vllm", "markdown": False,
         "command": [py, "bench/bench_rl_step.py", "--steps", "6", "--warmup", "2", "--",
                     f"trainer.num_threads={args.threads}"] if (HERE / "bench_rl_step.py").is_file() else None,
         "skip": "bench/bench_rl_step.py is not in this checkout yet"},
        {"name": "sweep", "title": "The headline sweep's wall time (default launcher; only with --with-sweep or --only sweep)",
         "markdown": False, "command": [py, "bench/bench_sweep.py"]},
        {"name": "scaling", "title": "Scaling: k and B, and the stats report", "markdown": True,
         "command": [py, "bench/bench_scaling.py", "--quick", "--steps", "5", "--warmup", "2", "--passes", "1",
                     *threads]},
        {"name": "tiny_model", "title": "Tiny-model SFT and sampling throughput", "markdown": False,
         "command": [py, "bench/bench_tiny_model.py", "--steps", "5", *threads]},
        {"name": "stats", "title": "ablate.stats report time (fixed sizes)", "markdown": False,
         "command": [py, "bench/bench_stats.py", "--quick"]},
        {"name": "external", "title": "External studies: planted tables' verdicts through the CLI, a 1,000-run table's "
                                      "report time", "markdown": True,
         "command": [py, "bench/bench_external.py", "--replications", "50"]},
        {"name": "countdown", "title": "Countdown generator, solver and verifier", "markdown": False,
         "command": [py, "bench/bench_countdown.py", "--n", "5000"]},
        {"name": "hostile", "title": "Verifier and calculator on hostile input (worst case per function, up to 5 MB)",
         "markdown": False, "command": [py, "bench/bench_hostile.py"]},
    ]


def find_trl_python() -> str | None:
    """An interpreter that imports trl: this one, $TRL_PYTHON, or the documented /work/trl-venv."""
    candidates = [sys.executable, os.environ.get("TRL_PYTHON"), "/work/trl-venv/bin/python"]
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run([python, "-c", "import trl"], capture_output=True)
            if probe.returncode == 0:
                return python
    return None


def git_sha() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True)
        return sha.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def run_section(section: dict, out_dir: Path) -> None:
    path = out_dir / f"{section['name']}.md"
    if section["command"] is None:
        path.write_text(f"_skipped: {section['skip']}_\n")
        print(f"[{section['name']}] skipped: {section['skip']}", flush=True)
        return
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    print(f"[{section['name']}] {' '.join(section['command'][1:])}", flush=True)
    done = subprocess.run(section["command"], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    body = done.stdout.strip()
    if not section["markdown"]:
        body = f"```\n{body}\n```"
    if done.returncode != 0:
        (out_dir / f"{section['name']}.stderr").write_text(done.stderr)
        body += f"\n\n**failed with exit code {done.returncode}** (stderr in bench/results/{section['name']}.stderr)"
    command = " ".join(["python"] + section["command"][1:]).replace(str(ROOT) + "/", "")
    path.write_text(f"`{command}` ({seconds:.0f} s, load average {load_before:.1f} -> "
                    f"{os.getloadavg()[0]:.1f})\n\n{body}\n")
    print(f"[{section['name']}] done in {seconds:.0f} s (exit {done.returncode})", flush=True)


def assemble(all_sections: list[dict], out_dir: Path, target: Path, args) -> None:
    parts = ["# Benchmark results", "",
             f"Written by `python bench/run_all.py` on {datetime.datetime.now():%Y-%m-%d %H:%M} at commit "
             f"{git_sha()}; torch threads per run: {args.threads}.", "",
             f"Machine: {machine()}. The cores were shared with other jobs unless the load average says "
             f"otherwise: absolute seconds vary with that, the A/B ratios (interleaved runs) much less.", ""]
    for section in all_sections:
        path = out_dir / f"{section['name']}.md"
        parts += [f"## {section['title']}", "", path.read_text().strip() if path.is_file() else "_not run yet_", ""]
    target.write_text("\n".join(parts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads in every run")
    p.add_argument("--only", help="comma-separated sections to run (the others keep their last output)")
    p.add_argument("--trl-python", help="interpreter that can import trl (default: this one, $TRL_PYTHON, "
                                        "/work/trl-venv/bin/python)")
    p.add_argument("--trl-steps", type=int, default=16)
    p.add_argument("--trl-rounds", type=int, default=2)
    p.add_argument("--with-sweep", action="store_true", help="also time the headline sweep (15-20 min on 2 cores)")
    p.add_argument("--out", type=Path, default=HERE / "results.md")
    p.add_argument("--list", action="store_true", help="print the sections and exit")
    p.add_argument("--assemble", action="store_true", help="only re-assemble the report from bench/results/")
    args = p.parse_args()
    all_sections = sections(args)
    if args.list:
        width = max(len(s["name"]) for s in all_sections)
        for s in all_sections:
            print(f"{s['name']:<{width}}  {s['title']}")
        return
    chosen = set(args.only.split(",")) if args.only else {s["name"] for s in all_sections
                                                          if s["name"] != "sweep" or args.with_sweep}
    unknown = chosen - {s["name"] for s in all_sections}
    if unknown:
        raise SystemExit(f"--only: unknown sections {sorted(unknown)}; see --list")
    import torch

    torch.set_num_threads(args.threads)  # so the report's machine line states the runs' thread count
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    if args.assemble:
        assemble(all_sections, out_dir, args.out, args)
        return
    if shutil.which("git") is None:
        print("git not found: the report will not name the commit")
    start = time.perf_counter()
    for section in all_sections:
        if section["name"] in chosen:
            run_section(section, out_dir)
            assemble(all_sections, out_dir, args.out, args)  # after each: a partial report survives a stop
    print(f"all done in {time.perf_counter() - start:.0f} s; report: {args.out}")


if __name__ == "__main__":
    main()
