"""The tidy-table branch of `python -m ablate.stats`: RUNS is a table and --study names its study block."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from ablate.external.report import analyze_table, read_runs
from ablate.external.tidy import TidyError
from ablate.stats.render.report import write_and_print
from ablate.stats.read.runs import StatsInputError
from ablate.stats.stages.settings import Settings


def report_table(args, command: str, metrics: list[str] | None) -> int:
    """Read, analyse and write the report of RUNS (one table) under --study; exit 0 / 1 / 2 as ablate.stats.
    `command`: the command line, shown in the report's header."""
    err = Console(stderr=True, soft_wrap=True)
    if len(args.sweep_dirs) != 1 or args.study is None:
        err.print("[red]error:[/red] a table of runs needs exactly one RUNS file and --study STUDY.yaml "
                  "(docs/any_runs.md)", highlight=False)
        return 2
    runs = Path(args.sweep_dirs[0])
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()] if args.conditions else None
    out = args.out or Path("stats") / runs.stem
    try:
        tr, _ = read_runs(runs, args.study, conditions, args.prompts)
        settings = Settings(resamples=args.resamples, confidence=args.confidence, alpha=args.alpha, seed=args.seed,
                            metrics=metrics, baseline=args.baseline, reach=args.reach, smooth=args.smooth,
                            effect=args.effect, power=False, names=args.name, registration=args.registration,
                            report_dir=out)
        analysis = analyze_table(tr, settings)
    except TidyError as exc:
        for line in exc.lines:
            err.print(f"[red]error:[/red] {line}", highlight=False)
        return 2
    except StatsInputError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    heading = (f"read {len(tr.sweep.runs)} run(s) of {len(analysis.conditions.labels)} condition(s) from {runs}; "
               f"metrics: {', '.join(tr.metric_columns) or 'none'}"
               + (f"; descriptive: {', '.join(tr.descriptive)}" if tr.descriptive else ""))
    return write_and_print(analysis, out, args, command, Console() if sys.stdout.isatty() else Console(width=160), err,
                           heading)
