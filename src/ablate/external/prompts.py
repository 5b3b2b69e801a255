"""The optional second table: per-prompt results of each run (`--prompts PROMPTS.csv`), for the describing
tests. Columns: the condition columns and `seed` (naming a run of RUNS), `id` (the prompt), `n` (samples)
and `n_correct`, optionally `n_answered` and `regime` (default `no_tool`). Each run's rows become its
`eval/<regime>` per-prompt counts, exactly what ablate reads from samples.jsonl, so the report's per-prompt
statistics (pass@k, Wilson intervals, the paired prompt test that describes the models in hand) and any
claim on such a metric (`pass@1`) are ablate's own. A bad row (no id, n not a whole number >= 1,
n_correct outside [0, n], n_answered outside [n_correct, n], a run RUNS does not have, a prompt twice) is
one line and is not used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ablate.external.tidy import MAX_LINES, TidyError, TidyRuns, _text, read_table
from ablate.metrics import REGIME_NO_TOOL
from ablate.stats.read.runs import PromptTable, RegimeEval


def _bad_rows(frame: pd.DataFrame) -> pd.Series:
    """Why each row is unusable ('' when it is fine)."""
    num = {c: pd.to_numeric(frame[c], errors="coerce") for c in ("n", "n_correct", "n_answered") if c in frame}
    why = pd.Series("", index=frame.index)
    whole = {c: v.notna() & np.isfinite(v) & (v % 1 == 0) for c, v in num.items()}
    why[frame["id"].isna() | (frame["id"].astype(str).str.strip() == "")] = "no id"
    why[(why == "") & ~(whole["n"] & (num["n"] >= 1))] = "n is not a whole number >= 1"
    why[(why == "") & ~(whole["n_correct"] & (num["n_correct"] >= 0) & (num["n_correct"] <= num["n"]))] = \
        "n_correct is not a whole number in [0, n]"
    if "n_answered" in num:
        ok = whole["n_answered"] & (num["n_answered"] >= num["n_correct"]) & (num["n_answered"] <= num["n"])
        why[(why == "") & ~ok] = "n_answered is not a whole number in [n_correct, n]"
    return why


def attach_prompts(tr: TidyRuns, path: Path) -> None:
    """Each run's per-prompt counts from the table at `path` into `run.evals`; problems into `tr.problems`;
    TidyError when the table lacks a column it needs."""
    frame = read_table(path)
    keys = ["seed", *tr.condition_columns]
    lacking = [c for c in [*keys, "id", "n", "n_correct"] if c not in frame.columns]
    if lacking:
        raise TidyError([f"{path.name}: no {', '.join(f'`{c}`' for c in lacking)} column(s): a per-prompt table needs "
                         f"the condition columns, seed, id, n and n_correct"])
    regime = frame["regime"].astype(str) if "regime" in frame.columns else pd.Series(REGIME_NO_TOOL, index=frame.index)
    runs = {tuple(r.config.get("seed") if k == "seed" else _lookup(r.config, k) for k in keys): r for r in tr.sweep.runs}
    key_text = frame[keys].map(_text)
    why = _bad_rows(frame)
    of_run = [runs.get(tuple(row)) for row in key_text.itertuples(index=False)]
    why[(why == "") & pd.Series([r is None for r in of_run], index=frame.index)] = "no such run in the runs table"
    dup = frame.assign(_r=regime, _k=[id(r) for r in of_run]).duplicated(["_k", "_r", "id"], keep="first")
    why[(why == "") & dup] = "the same prompt of the run twice (the first kept)"
    lines = [f"{path.name} row {i + 2}: {w}; not used" for i, w in zip(range(len(why)), why) if w]
    tr.problems += lines[:MAX_LINES] + ([f"{path.name}: ... and {len(lines) - MAX_LINES} more bad row(s)"]
                                        if len(lines) > MAX_LINES else [])
    good = frame[why == ""].assign(_regime=regime[why == ""])
    good_runs = [r for r, ok in zip(of_run, why == "") if ok]
    good = good.assign(_run=[r.rel for r in good_runs])
    by_rel = {r.rel: r for r in tr.sweep.runs}
    for (rel, name), part in good.groupby(["_run", "_regime"], sort=False):
        cols = {c: pd.to_numeric(part[c]).to_numpy(dtype=np.float64) for c in ("n", "n_correct", "n_answered")
                if c in part}
        table = PromptTable(part["id"].astype(str).to_numpy(dtype=object), cols)
        by_rel[rel].evals[name] = RegimeEval(name, path, table, None)


def _lookup(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
