"""Writing an `Analysis`: report.md / report.json, csv tables, PNG figures; the terminal summary is
ablate.stats.render.console's. Each table is written as its stage computed it, and every file a reader
trusts (the repository's tools.findings, a later `ablate.stats` pooling this report) atomically: a reader sees
the previous file or the new one, never half of one."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ablate.rundir.atomic import write_bytes, write_text
from ablate.stats.read.archive import RUNS_FILE, root_of, write_runs
from ablate.stats.read.runs import Sweep
from ablate.stats.render.console import print_summary  # noqa: F401  (re-exported: the CLI prints through it)
from ablate.stats.render.figures import make_figures
from ablate.stats.render.markdown import render_markdown
from ablate.stats.stages.analysis import Analysis


# ---------------------------------------------------------------------------------------------
# csv and json


def _records(df: pd.DataFrame) -> list[dict]:
    return [_clean(r) for r in df.to_dict("records")]


def _clean(x):
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if x is pd.NA:
        return None
    return x


PROMPT_COLUMNS = ["run", "seed", "condition", "regime", "id", "n_numbers", "n", "n_correct", "n_answered"]


def per_prompt_table(sweep: Sweep, labels: dict) -> pd.DataFrame:
    """Every completed run's per-prompt counts in every regime (no completions): run, seed, condition
    (its label in `labels`, condition -> label), regime, prompt id, operand count, samples, correct,
    answered, and one column per verdict."""
    parts = []
    for run in sweep.runs:
        if not run.ok:
            continue
        for regime, ev in run.evals.items():
            if not ev.usable:
                continue
            cols = dict(ev.prompts.cols)  # every count the run has: the archive reads them back (ablate.stats.read.archive)
            frame = pd.DataFrame({k: np.asarray(v, dtype=np.int64) if np.all(np.mod(v, 1) == 0) else v
                                  for k, v in cols.items()})
            frame.insert(0, "id", ev.prompts.ids)
            frame.insert(0, "regime", regime)
            frame.insert(0, "condition", labels.get(run.condition, run.label))
            frame.insert(0, "seed", run.seed)
            frame.insert(0, "run", run.rel)
            parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=PROMPT_COLUMNS)
    table = pd.concat(parts, ignore_index=True)
    return table.rename(columns=lambda c: c.replace("verdict/", "verdict_"))


def report_json(a: Analysis, figures: list[tuple[str, str]], command: str = "") -> dict:
    """report.json: every stage's tables as records (NaN as null), the settings and what was compared."""
    c, s = a.conditions, a.conditions.settings
    return _clean({
        "sweep": {"name": c.sweep.name, "roots": [str(p) for p in c.sweep.roots]},
        "command": command,
        "settings": {"resamples": s.resamples, "confidence": s.confidence, "alpha": s.alpha, "seed": s.seed,
                     "metrics": list(s.metrics), "smooth": s.smooth, "effect": s.effect},
        "baseline": None if c.baseline is None else {"condition": c.labels[c.baseline],
                                                     "overrides": list(c.baseline), "rule": c.baseline_rule},
        "common_overrides": c.common,
        "regimes": c.regimes,
        "conditions": _records(c.table),
        "runs": _records(c.inventory),
        "summary": _records(a.summary.table),
        "comparisons": _records(a.comparisons.table),
        "reach": _records(a.curves.reach),
        "curves": _records(a.curves.table),
        "figures": [{"title": t, "file": f} for t, f in figures],
        "problems": a.problems,
        "notes": a.notes,
        **({} if c.study is None else {"study": {
            "name": c.study.name, "question": c.study.question, "metrics": list(c.study.metrics),
            "effect": c.study.effect, "baselines": c.families}}),
        **({} if a.comparisons.power is None else {"power": _records(a.comparisons.power)}),
        "robust": _records(a.summary.robust),
        **({} if a.claims is None else {"claims": _records(a.claims.table), "claims_looks": _records(a.claims.looks)}),
    })


def csv_tables(a: Analysis) -> dict[str, pd.DataFrame]:
    """The report's csv files: file name -> the stage's table."""
    tables = {"summary.csv": a.summary.table, "comparisons.csv": a.comparisons.table,
              "runs.csv": a.conditions.inventory, "curves.csv.gz": a.curves.table, "reach.csv": a.curves.reach}
    if a.comparisons.power is not None:
        tables["power.csv"] = a.comparisons.power
    tables["robust.csv"] = a.summary.robust
    if a.claims is not None:
        tables["claims.csv"] = a.claims.table
        tables["claims_looks.csv"] = a.claims.looks
    if a.mechanisms.table is not None:
        tables["mechanisms.csv"] = a.mechanisms.table
    return tables


GZIP = {"method": "gzip", "mtime": 0}  # no timestamp (nor file name) in the header: the same table, the same bytes


def write_csv(path: Path, df: pd.DataFrame) -> Path:
    """`df` as csv at `path` (gzip'd where it ends in .gz), atomically. Rendered in memory first: a
    gzip header written to the temporary file would name it, and the bytes would differ per process."""
    buf = io.BytesIO()
    df.to_csv(buf, index=False, compression=GZIP if path.name.endswith(".gz") else None)
    return write_bytes(path, buf.getvalue())


def write_archive(sweep: Sweep, labels: dict, out: Path) -> dict[str, Path]:
    """prompts.csv.gz and runs.jsonl.gz under `out` (ablate.stats.read.archive): compact, so any later method
    re-analyses the runs without their directories; {} when no run has per-prompt counts."""
    prompts = per_prompt_table(sweep, labels)
    if not len(prompts):
        return {}
    Path(out).mkdir(parents=True, exist_ok=True)
    return {"prompts.csv.gz": write_csv(Path(out) / "prompts.csv.gz", prompts),
            RUNS_FILE: write_runs([(run, root_of(run.path, sweep.roots)) for run in sweep.runs], out)}


def write_report(a: Analysis, out: Path, formats: Iterable[str] = ("md",), plots: bool = True,
                 command: str = "") -> dict[str, Path]:
    """Every file of the report under `out`: the csv tables, prompts.csv.gz and the runs' archive, the
    figures (unless `plots` is False), report.md and/or report.json (`formats`); file name -> path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, df in csv_tables(a).items():
        written[name] = write_csv(out / name, df)
    written.update(write_archive(a.conditions.sweep, a.conditions.labels, out))
    figures = make_figures(out, a.conditions, a.summary, a.comparisons, a.curves, a.claims) \
        if plots else []
    for _, name in figures:
        written[name] = out / name
    formats = set(formats)
    if "md" in formats:
        written["report.md"] = write_text(out / "report.md", render_markdown(a, figures, command))
    if "json" in formats:
        written["report.json"] = write_text(out / "report.json",
                                            json.dumps(report_json(a, figures, command), indent=1, allow_nan=False))
    return written


def write_and_print(analysis, out: Path, args, command: str, out_console, err, heading: str | None = None) -> int:
    """The report in the formats `args.format` names (figures unless `args.no_plots`) under `out`, then its path
    (`args.quiet`) or `heading` and the summary: 0, or 2 when the report cannot be written. The one ending of
    `python -m ablate.stats` for run directories and for tables of runs (ablate.external.cli)."""
    formats = {"md", "json"} if args.format == "both" else {args.format}
    try:
        written = write_report(analysis, out, formats, plots=not args.no_plots, command=command)
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot write the report to {out}: {exc}", highlight=False)
        return 2
    if args.quiet:
        print(written.get("report.md") or written.get("report.json"))
        return 0
    if heading:
        print(heading)
    print_summary(analysis, written, out_console)
    return 0
