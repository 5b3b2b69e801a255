"""A tidy table of runs (CSV, Parquet or JSON lines) read into ablate's own run records.

One row per run (or, with a `step` column, one row per run and logged step): the condition's columns,
`seed`, and metric columns. The condition columns are those the study names (its claims' `condition:
algo=dapo` / `baseline: algo=grpo`, its baselines and names) or `--conditions COL,...`; every other numeric
column is a metric; anything else is descriptive (kept, never compared). Optional columns: `step` (curves;
a plain metric name then means the run's last logged value), `look` (which look of the seed plan a run
belongs to, 1 first), `run` (its name in messages), and where it ran: `machine`, `torch_version`,
`started_at` (ISO time; a verdict whose arms these separate is refused, ablate.external.decide).

What comes out is the same `Run`/`Sweep` that ablate's run directories load into (ablate.stats.read.runs): a
run's condition is its condition columns as overrides (`algo=dapo`), its config holds them (dotted names
nest, so a study's `baselines: {family: {}, baseline: {algo: grpo}}` matches as for a preset) and the study
block, its status the state and start time, `metrics` the curve by step. Every problem in the table is one
line: fatal ones (no `seed` column, a duplicated run, a column the study names that the table lacks) raise
`TidyError` with all of them; a bad value is a data problem on the run, and that value is not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.stats.read.runs import Run, StatsInputError, Sweep, split_overrides
from ablate.stats.read.samples import short

TABLE_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl",
                  ".ndjson": "jsonl", ".json": "jsonl"}
BLOCK_COLUMNS = ("machine", "torch_version", "started_at")  # where and when a run ran: never its condition
RESERVED = {"seed", "step", "look", "run", *BLOCK_COLUMNS}
MAX_LINES = 40  # bad cells listed one line each up to this many, then counted in one line
RUNS_REGIME = "runs"  # a table's metrics have no eval regime: this neutral label stands for one (summary, claims)


class TidyError(StatsInputError):
    """The table cannot be read as runs: every reason, one line each."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


def is_table(path: Path | str) -> bool:
    p = Path(path)
    return p.is_file() and p.suffix.lower() in TABLE_SUFFIXES


def read_table(path: Path | str) -> pd.DataFrame:
    """The table at `path` as its suffix says (.csv/.tsv, .parquet, .jsonl/.json one object a line)."""
    p = Path(path)
    kind = TABLE_SUFFIXES.get(p.suffix.lower())
    if kind is None:
        raise TidyError([f"{p}: not a table ablate reads (.csv, .tsv, .parquet, .jsonl); convert trainer logs "
                         f"with python -m ablate.external.convert"])
    try:
        if kind == "csv":
            return pd.read_csv(p, sep="\t" if p.suffix.lower() == ".tsv" else ",")
        if kind == "parquet":
            return pd.read_parquet(p)
        return pd.read_json(p, lines=True)
    except FileNotFoundError:
        raise TidyError([f"{p}: no such file"]) from None
    except Exception as exc:  # noqa: BLE001 - each reader raises its own types for a malformed file
        raise TidyError([f"{p}: unreadable as {kind} ({short(exc)})"]) from None


def study_columns(block: dict) -> list[str]:
    """The condition columns a study block names: the keys of its claims' conditions and baselines
    (`algo=dapo,lr=1e-3`), of its preconditions' conditions, of its baselines' rules and of its names."""
    keys: list[str] = []

    def add(spec) -> None:
        if isinstance(spec, str):
            for part in spec.split(","):
                if "=" in part:
                    keys.append(part.partition("=")[0].strip().lstrip("+"))
        elif isinstance(spec, dict):
            keys.extend(str(k) for k in spec)

    for claim in block.get("claims") or []:
        if isinstance(claim, dict):
            add(claim.get("condition"))
            add(claim.get("baseline"))
            pres = claim.get("precondition")
            for pre in pres if isinstance(pres, list) else [pres]:
                if isinstance(pre, dict):
                    add(pre.get("condition"))
    for rule in block.get("baselines") or []:
        if isinstance(rule, dict):
            add(rule.get("family"))
            add(rule.get("baseline"))
    for where in (block.get("names") or {}).values():
        add(where)
    return list(dict.fromkeys(k for k in keys if k))


@dataclass
class TidyRuns:
    """The table as ablate's runs, and what the reader found."""

    sweep: Sweep
    values: dict[str, dict[str, float]]  # run -> metric -> its value (finite values only; the last logged with `step`)
    batches: dict[str, int]  # run -> its look (0 first)
    blocks: dict[str, dict[str, str]]  # run -> machine / torch_version / started_at as given
    condition_columns: list[str]
    metric_columns: list[str]
    descriptive: list[str]
    problems: list[str] = field(default_factory=list)


def _text(value) -> str:
    """A condition or seed cell as an override value: 3.0 -> 3, 0.001 -> 0.001, 'dapo' -> dapo."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value).strip()


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""


def _classify(frame: pd.DataFrame, conds: list[str], named: set[str]) -> tuple[list[str], list[str]]:
    """(metric columns, descriptive columns): numeric columns are metrics, and so is a text column whose
    cells are mostly numbers (its other cells are bad values) or that the study names as a metric."""
    metrics, descriptive = [], []
    for col in frame.columns:
        name = str(col)
        if name in RESERVED or name in conds:
            continue
        s = frame[col]
        if pd.api.types.is_bool_dtype(s):
            descriptive.append(name)
        elif pd.api.types.is_numeric_dtype(s):
            metrics.append(name)
        else:
            cells = s[s.notna() & (s.astype(str).str.strip() != "")]
            parsed = pd.to_numeric(cells, errors="coerce")
            numeric_share = float(parsed.notna().mean()) if len(cells) else 0.0
            (metrics if name in named or numeric_share >= 0.5 else descriptive).append(name)
    return metrics, descriptive


def _structure_errors(frame: pd.DataFrame, source: str, conds: list[str], have_step: bool) -> list[str]:
    lines = []
    if "seed" not in frame.columns:
        lines.append(f"{source}: no `seed` column: the training seed is the unit of replication, each run must "
                     f"name its seed")
    for col in conds:
        if col not in frame.columns:
            lines.append(f"{source}: no `{col}` column, which the study names as a condition column "
                         f"(columns: {', '.join(map(str, frame.columns))})")
    if lines:
        return lines
    for i, row in frame.iterrows():
        empty = [c for c in ["seed", *conds] if _missing(row[c])]
        if empty:
            lines.append(f"{source} row {_row_no(i)}: no value for {', '.join(empty)}; every run needs its "
                         f"condition and seed")
    key = ["seed", *conds] + (["step"] if have_step else [])
    shown = frame[key].map(lambda v: "" if _missing(v) else _text(v))
    for _, group in shown[shown.duplicated(key, keep=False)].groupby(key, sort=False):
        rows = ", ".join(str(_row_no(i)) for i in group.index)
        what = ", ".join(f"{c}={group.iloc[0][c]}" for c in conds) or "(no condition columns)"
        lines.append(f"{source} rows {rows}: the same run twice ({what}, seed {group.iloc[0]['seed']}"
                     + (f", step {group.iloc[0]['step']}" if have_step else "") + "): which one counts is "
                     "ambiguous; keep one row per (condition, seed" + (", step" if have_step else "") + ")")
    return lines


def _row_no(index) -> int:
    return int(index) + 2 if isinstance(index, (int, np.integer)) else index  # a CSV's line: header is 1


def _nested(conds: dict[str, str]) -> dict:
    """{'trainer.lr': '1e-3', 'algo': 'dapo'} -> {'trainer': {'lr': '1e-3'}, 'algo': 'dapo'}: how a study's
    dotted baseline and name keys find them (ablate.stats.claims.study.lookup)."""
    out: dict = {}
    for key, value in conds.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[leaf] = value
    return out


def _cell_problems(frame: pd.DataFrame, numeric: pd.DataFrame, metrics: list[str], names: pd.Series,
                   source: str) -> list[str]:
    """One line per metric cell that is not a finite number (NaN, inf, text): that value is not used."""
    lines = []
    for col in metrics:
        raw, num = frame[col], numeric[col]
        bad = ~np.isfinite(num.to_numpy(dtype=np.float64))
        for i in np.flatnonzero(bad):
            cell = raw.iloc[i]
            what = "empty" if _missing(cell) else f"{cell!r}, not a finite number"
            lines.append(f"{source} row {_row_no(frame.index[i])} ({names.iloc[i]}): {col} is {what}; not used")
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"{source}: ... and {len(lines) - MAX_LINES} more metric cell(s) that are not "
                                     f"finite numbers; not used"]
    return lines


def tidy_runs(frame: pd.DataFrame, block: dict | None, source: Path | str, conditions: list[str] | None = None,
              ) -> TidyRuns:
    """The table's runs as ablate's `Run` records in one `Sweep` (see the module's docstring)."""
    source = Path(source)
    where = source.name
    block = block or {}
    conds = list(conditions) if conditions else study_columns(block)
    have_step = "step" in frame.columns
    errors = _structure_errors(frame, where, conds, have_step)
    if errors:
        raise TidyError(errors)
    named = {m for m in (block.get("metrics") or []) if isinstance(m, str)}
    metrics, descriptive = _classify(frame, conds, named)
    numeric = frame[metrics].apply(pd.to_numeric, errors="coerce") if metrics else pd.DataFrame(index=frame.index)
    cond_text = frame[conds].map(_text) if conds else pd.DataFrame(index=frame.index)
    seeds = frame["seed"].map(_text)
    labels = [",".join(f"{c}={cond_text.at[i, c]}" for c in conds) + f" seed {seeds.at[i]}" for i in frame.index]
    names = frame["run"].astype(str) if "run" in frame.columns else pd.Series(labels, index=frame.index)
    problems = _cell_problems(frame, numeric, metrics, names, where)
    if have_step:
        steps = pd.to_numeric(frame["step"], errors="coerce")
        for i in np.flatnonzero(steps.isna().to_numpy()):
            problems.append(f"{where} row {_row_no(frame.index[i])} ({names.iloc[i]}): step {frame['step'].iloc[i]!r} "
                            "is not a number; row not used")
    runs, values, batches, blocks = [], {}, {}, {}
    keyed = pd.concat([cond_text, seeds.rename("seed")], axis=1)
    for positions in keyed.groupby(["seed", *conds], sort=False).indices.values():
        rows = frame.index[np.sort(positions)]
        run, vals, look, block_of = _one_run(frame, numeric, rows, conds, cond_text, seeds, names, metrics, block,
                                            source, have_step, problems)
        runs.append(run)
        values[run.rel], batches[run.rel], blocks[run.rel] = vals, look, block_of
    sweep = Sweep(roots=[source], runs=runs)
    tr = TidyRuns(sweep, values, batches, blocks, conds, metrics, descriptive, problems)
    tr.problems += one_seed_arms(tr)
    return tr


def _one_run(frame, numeric, rows, conds, cond_text, seeds, names, metrics, block, source, have_step, problems):
    """One run's record from its row(s): (Run, metric -> value, look index, where it ran)."""
    first = rows[0]
    assignment = {c: cond_text.at[first, c] for c in conds}
    overrides = tuple(f"{c}={v}" for c, v in assignment.items()) + (f"seed={seeds.at[first]}",)
    condition, seed = split_overrides(overrides)
    rel = str(names.at[first]) if "run" in frame.columns else (",".join(condition) or "run") + f"/seed={seed}"
    where = {c: _text(frame.at[first, c]) for c in BLOCK_COLUMNS if c in frame.columns and not _missing(frame.at[first, c])}
    config = {**_nested(assignment), "seed": seed, "study": block or None}
    if "machine" in where:
        config["trainer"] = {"accelerator": where["machine"]}
    status = {"state": "completed", **({"started_at": where["started_at"]} if "started_at" in where else {}),
              **({"versions": {"torch": where["torch_version"]}} if "torch_version" in where else {})}
    curve = None
    if have_step:
        part = numeric.loc[rows].assign(step=pd.to_numeric(frame.loc[rows, "step"], errors="coerce"))
        part = part[part["step"].notna()].replace([np.inf, -np.inf], np.nan)
        curve = part.groupby("step", sort=True).mean() if len(part) else None
        vals = {} if curve is None else {m: float(curve[m].dropna().iloc[-1]) for m in metrics
                                         if curve[m].notna().any()}
    else:
        vals = {m: float(v) for m, v in numeric.loc[first].items() if np.isfinite(v)}
    look = _look(frame, first, rel, problems) if "look" in frame.columns else 0
    run = Run(path=source / rel, rel=rel, overrides=overrides, condition=condition, seed=seed, state="completed",
              status=status, evals={}, metrics=curve, outcome="ok", config=config)
    return run, vals, look, where


def _look(frame, row, rel: str, problems: list[str]) -> int:
    value = pd.to_numeric(pd.Series([frame.at[row, "look"]]), errors="coerce").iloc[0]
    if not (np.isfinite(value) and float(value).is_integer() and value >= 1):
        problems.append(f"{rel}: look {frame.at[row, 'look']!r} is not a whole number >= 1; counted in look 1")
        return 0
    return int(value) - 1


def one_seed_arms(tr: TidyRuns) -> list[str]:
    """One line per condition with a single seed: a claim on it has no seed-to-seed spread to decide by."""
    counts: dict[tuple, int] = {}
    for run in tr.sweep.runs:
        counts[run.condition] = counts.get(run.condition, 0) + 1
    return [f"{','.join(c) or '(no condition columns)'}: one seed only; a claim on this arm cannot be decided "
            f"(the training seed is the unit of replication: train at least 2, the seed plan says how many)"
            for c, n in counts.items() if n == 1]
