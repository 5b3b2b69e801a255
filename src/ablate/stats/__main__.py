"""`python -m ablate.stats`: significance report for a sweep of runs."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

# The matrix products here are small and the rest is memory-bound numpy, so BLAS threads only
# contend with each other (1.6x slower on a busy 2-core machine). Must precede numpy's import;
# a user's own setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

DESCRIPTION = """\
Significance report across seeds and conditions of a Hydra sweep.

Finds every run below SWEEP_DIR (a directory holding .hydra/overrides.yaml), groups runs into
conditions (their overrides minus seed=... and where the run ran: trainer.accelerator, .devices,
.num_threads; plus a data-parallel run's effective_batch=; order-insensitive), and reports per condition and
eval regime (eval/<regime>/) the mean over seeds of every metric with confidence intervals, then
compares each condition with the baseline. Failed, running and eval-less runs are listed with
their path and reason, never dropped silently.

Runs of a study preset (`python -m ablate.train -m experiment=curriculum_study`) carry a `study:`
block in .hydra/config.yaml: the report then opens with the study's declared claims (study.claims),
each decided by the rules of docs/stats.md (replicated / not replicated / inconclusive / not
testable) from Welch's interval over per-seed values at the claim's share of alpha and its look's
level under the seed plan (study.plan); then it describes: the deciding metrics (study.metrics), each
condition against its family's baseline (study.baselines). Continue a study to its plan's next look
with `python -m ablate.studies.next_look SWEEP_DIR`.
"""

EPILOG = """\
labels: a condition is labelled by the overrides that distinguish it, unless a name picks it: the
study's study.names (label -> dotted config values, like a baseline) or --name (label -> overrides).

baseline rule (without --baseline): with a study block, the baseline of the first study.baselines
entry whose `family` (dotted config paths, e.g. stage.name: rloo; and `regime`, if given) matches the
condition; otherwise the condition whose overrides are a subset of every other condition's (e.g.
the run with no extra override); else the one condition whose distinguishing overrides all have
values like none/off/uniform/baseline; else the first condition in sorted order. --baseline
overrides all of this. Runs of different studies need --baseline or --metric.

power: under each comparison not significant across seeds the report prints e.g.
  inconclusive: 3 seeds detect >= 0.058; 11 seeds would detect 0.030
the minimum detectable difference (80% power of the report's seed-level Welch test, at alpha/m
for m comparisons: Holm's first step) and the seeds per condition needed for --effect, from the
seeds' own variance. --power also writes power.csv with every metric.

outputs (in --out, default ./stats/<sweep dir name>/):
  report.md        the claims first, then tables, comparisons, figures   (--format md, default)
  claims.csv       with declared claims: each claim's estimate, deciding interval, look and verdict
  claims_looks.csv every look of every claim (seeds per arm, planned or not, nominal alpha, verdict)
  prompts.csv.gz   every run's per-prompt counts and verdicts (no completions), for later re-analysis
  report.json      the same content, machine readable            (--format json)
  summary.csv      per condition and per run: metric, mean, CI, Wilson CI, summary.json value
  comparisons.csv  each condition vs the baseline: difference, paired and seed-level p-values
                   (raw and Holm-corrected), probability of improvement, power plan
  runs.csv         every run found: condition, seed, state, outcome, reason, and the warnings the
                   run wrote into status.json (also in report.md and printed)
  curves.csv.gz, reach.csv, *.png   training and held-out (val/) curves, steps/seconds to reach, figures
  robust.csv       IQM over runs (rliable: 25% trimmed mean, stratified-bootstrap CI) of the compared
                   metrics; profile_<regime>.png: performance profiles (fraction of runs above tau)
  power.csv        every metric: MDD at the current seeds, seeds needed for --effect  (--power)

exit status: 0 report written; 1 nothing to report (no runs, or no completed run with eval;
the run inventory is still written when runs exist); 2 usage error (bad path or option).

examples:
  python -m ablate.stats                                   # newest sweep under ./multirun/
  python -m ablate.stats multirun/curriculum --baseline curriculum=none --metric pass@1,exact_pass@1
  python -m ablate.stats multirun/2025-01-01/12-00-00 --reach train/reward_mean>=0.4 --format both
  python -m ablate.stats multirun/curriculum_study --power --effect 0.05
  python -m ablate.stats multirun/oracle_tool_study --name 'oracle SFT:stage.trace=oracle' --name 'DPO:stage=dpo'
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ablate.stats", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep_dirs", nargs="*", metavar="SWEEP_DIR",
                   help="sweep directories (or single run directories); several are pooled. "
                        "Default: the newest sweep under ./multirun/")
    p.add_argument("--baseline", metavar="KEY=VALUE[,KEY=VALUE]",
                   help="the condition to compare against: the one whose overrides include all of these "
                        "(default: see 'baseline rule' below)")
    p.add_argument("--metric", action="append", metavar="NAME",
                   help="metric(s) to compare, repeatable or comma-separated (default: the study's "
                        "study.metrics, else pass@1). Any metric in summary.csv works, e.g. exact_pass@1, "
                        "pass^4 (all 4 of 4 samples correct), by_operands/4/pass@1")
    p.add_argument("--name", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                   help="show the condition whose overrides include these (of several, the one with the fewest) as "
                        "LABEL in every table and figure, "
                        "e.g. --name 'oracle SFT:stage.trace=oracle'; repeatable; wins over the study's "
                        "study.names. Labels only: no number changes")
    p.add_argument("--out", type=Path, metavar="DIR", help="report directory (default ./stats/<sweep name>/)")
    p.add_argument("--format", choices=["md", "json", "both"], default="md",
                   help="write report.md, report.json or both (csv and png are always written)")
    p.add_argument("--resamples", type=int, default=10_000, metavar="N", help="bootstrap/permutation resamples (default 10000)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="C", help="interval confidence level (default 0.95)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="A", help="significance level after Holm correction (default 0.05)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every resampling generator (default 0)")
    p.add_argument("--reach", action="append", default=[], metavar="METRIC>=VALUE",
                   help="steps (and seconds) until a metrics.csv column reaches a value (>=, <=, or = "
                        "meaning >=); repeatable. Default: the baseline's final held-out val/pass@1 (runs "
                        "trained with eval.every; each study family's own baseline), else its final "
                        "train/reward_mean, which is labelled as training reward, not a skill measure")
    p.add_argument("--smooth", type=int, default=5, metavar="W",
                   help="running-mean window (logged values) for --reach and the default threshold on "
                        "per-step columns; held-out val/ columns are never smoothed (default 5)")
    p.add_argument("--effect", type=float, metavar="D",
                   help="difference (in the metric's units) the seeds-needed plan is for (default: the "
                        "study's study.effect, else 0.03)")
    p.add_argument("--power", action="store_true",
                   help="also write power.csv: for every metric and comparison, the minimum detectable "
                        "difference at the current seeds and the seeds needed to detect --effect")
    p.add_argument("--registration", type=Path, metavar="PATH",
                   help="the study's registration.yaml (or its directory), written by python -m ablate.studies.register "
                        "before the first run; default: beside the report (--out), else docs/findings/<study>/. "
                        "Claims are decided as registered; without one every verdict is exploratory")
    p.add_argument("--hold", action="store_true",
                   help="only keep the runs under --out (runs.jsonl.gz, prompts.csv.gz): the seeds of a look run "
                        "over several sessions, held unanalysed until the look is complete, then pooled like a "
                        "report (name each part <study>_look<N>_<first seed> so the parts are one look)")
    p.add_argument("--study", type=Path, metavar="STUDY.yaml",
                   help="runs trained with any trainer: SWEEP_DIR is then one table of runs (CSV, Parquet or JSON "
                        "lines: condition columns, seed, metrics) and STUDY.yaml its study block (docs/any_runs.md)")
    p.add_argument("--conditions", metavar="COL[,COL]",
                   help="with --study: the table's condition columns (default: those the study names)")
    p.add_argument("--prompts", type=Path, metavar="PROMPTS",
                   help="with --study: each run's per-prompt results (condition columns, seed, id, n, n_correct), for "
                        "the describing tests")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="print only the report path")
    return p


def relative_path(arg: str) -> str:
    """An absolute path on the command line (`/x/sweep`, `--out=/x/report`) relative to where the command
    runs, so that a committed report does not carry the machine that rendered it."""
    flag, equals, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    return flag + equals + os.path.relpath(value) if os.path.isabs(value) else arg


def _check_args(parser: argparse.ArgumentParser, args) -> None:
    if args.resamples < 100:
        parser.error("--resamples must be at least 100")
    if not 0.5 <= args.confidence < 1.0:
        parser.error("--confidence must be in [0.5, 1)")
    if not 0.0 < args.alpha < 1.0:
        parser.error("--alpha must be in (0, 1)")
    if args.smooth < 1:
        parser.error("--smooth must be at least 1")
    if args.effect is not None and not (args.effect > 0 and args.effect < float("inf")):
        parser.error("--effect must be a positive number")
    if args.hold and args.out is None:
        parser.error("--hold needs --out: the directory that keeps the runs until their look is complete")


def _hold(sweep, settings, out: Path) -> int:
    """--hold: the runs' archive only, no analysis (a look's verdicts wait for all of its seeds)."""
    # heavy: the analysis pipeline (pandas, scipy), after the arguments: --help and a bad argument answer at once
    from ablate.stats.render.report import write_archive
    from ablate.stats.stages.conditions import group_conditions

    written = write_archive(sweep, group_conditions(sweep, settings).labels, out)
    done = sum(r.ok for r in sweep.runs)
    if not written:
        print(f"error: no completed run with per-prompt counts under {sweep.name}: nothing held", file=sys.stderr)
        return 1
    print(f"held {len(sweep.runs)} run(s) ({done} completed) in {out}: nothing analysed; pool it with the "
          f"look's other parts: python -m ablate.stats {out} <other parts> --out <report>")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    metrics = [m.strip() for item in args.metric for m in item.split(",") if m.strip()] if args.metric else None
    # heavy: the analysis pipeline (pandas, scipy), after the arguments: --help and a bad argument answer at once
    from ablate.external.tidy import is_table

    if args.study is not None or any(is_table(p) for p in args.sweep_dirs):  # runs of any trainer, as a table
        from ablate.external.cli import report_table  # heavy: the table pipeline (pandas, scipy)

        shown = [relative_path(a) for a in (argv if argv is not None else sys.argv[1:])]
        return report_table(args, "python -m ablate.stats " + " ".join(shlex.quote(a) for a in shown), metrics)

    # heavy: the analysis pipeline (pandas, scipy), after the arguments: --help and a bad argument answer at once
    from rich.console import Console

    from ablate.stats.read.load import load_sweep
    from ablate.stats.read.runs import StatsInputError, newest_sweep

    # a pipe or log file gets a wide table rather than rich's 80-column default
    out_console = Console() if sys.stdout.isatty() else Console(width=160)
    err = Console(stderr=True, soft_wrap=True)
    try:
        if args.baseline is not None and not args.baseline.strip():
            raise StatsInputError("--baseline is empty")
        from ablate.stats.values.reach import parse_reach  # heavy: the analysis pipeline (pandas)

        for spec in args.reach:  # a bad --reach fails before any run is read
            parse_reach(spec)
        roots = [Path(p) for p in args.sweep_dirs] or [newest_sweep(Path("multirun"))]
        sweep = load_sweep(roots)
        if not sweep.runs:
            err.print(f"[red]error:[/red] no runs found under {', '.join(map(str, roots))} "
                      "(a run is a directory containing .hydra/overrides.yaml)", highlight=False)
            return 1

        # heavy: the analysis (scipy), once runs are found: an empty sweep is told at once
        from ablate.stats.stages.analysis import analyze
        from ablate.stats.stages.settings import Settings

        settings = Settings(resamples=args.resamples, confidence=args.confidence, alpha=args.alpha,
                            seed=args.seed, metrics=metrics, baseline=args.baseline, reach=args.reach,
                            smooth=args.smooth, effect=args.effect, power=args.power, names=args.name,
                            registration=args.registration, report_dir=args.out or Path("stats") / sweep.name)
        if args.hold:
            return _hold(sweep, settings, args.out)
        analysis = analyze(sweep, settings)
    except StatsInputError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2

    return _report(args, argv, analysis, sweep.name, out_console, err)


def _report(args, argv: list[str] | None, analysis, name: str, out_console, err) -> int:
    """Write the analysis's report under --out (or stats/<sweep>) and print its summary (its path alone with
    --quiet); 1 when no run could be compared, 2 when the report cannot be written."""
    shown = [relative_path(a) for a in (argv if argv is not None else sys.argv[1:])]
    command = "python -m ablate.stats " + " ".join(shlex.quote(a) for a in shown)
    from ablate.stats.render.report import write_and_print  # heavy: the renderer (pandas, scipy)

    rc = write_and_print(analysis, args.out or Path("stats") / name, args, command.strip(), out_console, err)
    if rc == 0 and analysis.conditions.n_ok == 0:
        err.print("[red]error:[/red] no completed run with a readable eval/: nothing to compare; "
                  "the run inventory is in the report", highlight=False)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
