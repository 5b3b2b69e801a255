"""Loading run directories into `Run`s and a `Sweep`. Loading never raises on bad data: every
problem becomes a note on the run (or the sweep) so the report can name it; only a bad path given
by the user raises `StatsInputError`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

from ablate.rundir import RunDir
from ablate.rundir.status import State, interrupted
from ablate.stats.read import validate
from ablate.stats.read.archive import PROMPTS_FILE, RUNS_FILE, is_archive, load_archive
from ablate.stats.read.multirun import check_sweep_record
from ablate.stats.read.runs import RegimeEval, Run, StatsInputError, Sweep, find_run_dirs, split_overrides, \
    task_level
from ablate.stats.read.samples import MAX_SMALL_FILE, load_samples, short, whole
from ablate.tasks.base import OPERANDS


def _read(path: Path, issues: list[str], what: str, parse=json.loads):
    """`parse` of a file's text; None when it is absent, and named in `issues` when it is unreadable
    or far larger than ablate ever writes it (a damaged file, not worth a minute of parsing)."""
    try:
        if path.stat().st_size > MAX_SMALL_FILE:
            issues.append(f"{what} {path.stat().st_size / 2**20:.0f} MB, far larger than ablate writes it; not read")
            return None
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, yaml.YAMLError) as exc:  # JSON and Unicode errors are ValueErrors
        issues.append(f"{what} unreadable ({short(exc)}); not used")
        return None


def _yaml(text: str):
    data = yaml.safe_load(text)
    return () if data is None else data  # an empty file: no overrides


def load_regime(run: RunDir, regime: str, rel: str, level: tuple[str, str] = OPERANDS) -> RegimeEval:
    issues: list[str] = []
    summary = _read(run.summary_file(regime), issues, f"{rel}/summary.json:")
    prompts = None
    samples = run.samples_file(regime)
    if not run.evaluated(regime):
        # evaluation writes summary.json last: without it, samples.jsonl may be half written
        issues.append(f"{rel}: no summary.json (evaluation unfinished?); regime not used")
    elif samples.is_file():
        prompts = load_samples(samples, issues, f"{rel}/samples.jsonl", level)
    else:
        issues.append(f"{rel}/samples.jsonl: missing (needed for per-prompt statistics)")
    summary = validate.check_summary(summary, f"{rel}/summary.json", issues, prompts is not None)
    if prompts is not None and summary is not None:
        declared = whole(summary.get("n_prompts"))
        if declared is not None and declared != len(prompts):
            issues.append(f"{rel}: summary.json says {declared} prompts, samples.jsonl has "
                          f"{len(prompts)} usable lines")
    return RegimeEval(regime, run.eval_dir(regime), prompts, summary, issues)


def load_metrics_csv(path: Path, issues: list[str], what: str):
    """metrics.csv by step (Lightning's CSVLogger: empty or nan cells are steps a column was not logged at).
    A cut last line is dropped and cells that are not finite numbers read as not logged, each named."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        if raw and not raw.endswith(b"\n"):
            if "\n" not in text:
                issues.append(f"{what}: cut off inside its header (a truncated file); training curves skipped")
                return None
            text = text[: text.rindex("\n") + 1]
            issues.append(f"{what}: its last line is cut off (a truncated file); that row dropped")
        df = pd.read_csv(io.StringIO(text))  # the numbers as pandas' own parser reads them (the goldens')
        texts = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]  # only these can hold text
        cells = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, usecols=texts) if texts else None
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - pandas and the decoder raise many types for malformed files
        issues.append(f"{what}: unreadable ({short(exc)}); training curves skipped")
        return None
    if "step" not in df.columns:
        issues.append(f"{what}: no `step` column; training curves skipped")
        return None
    numeric = df.apply(pd.to_numeric, errors="coerce") if texts else df
    wrong = pd.DataFrame(np.isinf(numeric.to_numpy(dtype=np.float64)), columns=df.columns, index=df.index)
    for name in texts:  # "nan" is Lightning's own "not defined at this step"; other text is damage
        cell = cells[name].str.strip()
        wrong[name] |= numeric[name].isna() & (cell != "") & (cell.str.lower() != "nan")
    bad = {str(k): int(v) for k, v in wrong.sum().items() if v and not str(k).startswith("Unnamed")}
    numeric = numeric.mask(wrong)
    step = numeric["step"]
    cols = {str(name): numeric[name] for name in numeric.columns
            if name not in ("step", "epoch") and not str(name).startswith("Unnamed") and numeric[name].notna().any()}
    if not len(df):
        issues.append(f"{what}: no rows; training curves skipped")
        return None
    if bad:
        shown = ", ".join(f"{k} ({v})" for k, v in list(bad.items())[:4]) + (" and more" if len(bad) > 4 else "")
        issues.append(f"{what}: {sum(bad.values())} cell(s) not a finite number in {shown}; read as not logged")
    if not cols:
        return None
    frame = pd.DataFrame(cols)
    frame["step"] = step
    frame = frame[frame["step"].notna()]
    # Lightning's CSVLogger writes one row per log call, so a step may span several sparse rows.
    return frame.groupby("step", sort=True).mean()


def _status_warnings(status: dict | None, issues: list[str]) -> list[str]:
    raw = (status or {}).get("warnings")
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        issues.append("status.json: `warnings` is not a list of strings; ignored")
        return []
    return [str(w) for w in raw if str(w).strip()]


def _coverage_gap(run: "Run", expected: int | None) -> str | None:
    """Why a run's evaluation does not cover its test prompts: fewer usable samples.jsonl lines than
    its summary.json declares, or than the run's config evaluates (`_expected_prompts`)."""
    for name, regime in sorted(run.evals.items()):
        if not regime.usable:
            continue
        have = len(regime.prompts)
        declared = whole((regime.summary or {}).get("n_prompts"))
        want = max(v for v in (declared, expected, 0) if v is not None)
        if have < want:
            return f"incomplete: eval/{name}/samples.jsonl covers {have} of {want} test prompts; left out"
    return None


def mark_incomplete(runs: Sequence["Run"]) -> None:
    """Within a condition, every run should be evaluated on the same prompts (the test split does not
    depend on the seed): a run covering fewer prompts of a regime than another is left out."""
    by_condition: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        if run.ok:
            by_condition.setdefault(run.condition, []).append(run)
    for group in by_condition.values():
        regimes = {name for run in group for name, ev in run.evals.items() if ev.usable}
        for name in sorted(regimes):
            sizes = {id(run): len(run.evals[name].prompts) for run in group
                     if name in run.evals and run.evals[name].usable}
            most = max(sizes.values(), default=0)
            for run in group:
                have = sizes.get(id(run))
                if have is not None and have < most and run.ok:
                    run.outcome = "missing"
                    run.reason = (f"incomplete: eval/{name}/samples.jsonl covers {have} prompts, other seeds of "
                                  f"the condition {most}; left out")


def load_run(path: Path, root: Path | None = None) -> Run:
    path = Path(path)
    try:
        rel = str(path.relative_to(root)) if root is not None and path != root else path.name
    except ValueError:
        rel = str(path)
    issues: list[str] = []
    rd = RunDir(path)
    overrides = _hydra_file(rd, rd.OVERRIDES, issues, lambda d, w, i: validate.check_overrides(d, w, i))
    config = _hydra_file(rd, rd.CONFIG, issues, lambda d, w, i: validate.check_mapping(
        d, w, i, "not used (seed from the overrides, the task's level Countdown's)"))
    status = validate.check_status(_read(rd.status_file, issues, "status.json:"), issues)
    condition, seed = split_overrides(overrides or (), status)  # a data-parallel run's effective batch too
    if seed is None and config is not None and config.get("seed") is not None:
        seed = str(config["seed"])
    if not rd.status_file.exists():
        issues.append("status.json: missing; the run's state is unknown")
    warnings = _status_warnings(status, issues)
    state = str(status.get("state", "unknown")) if status else "unknown"

    evals: dict[str, RegimeEval] = {}
    for name in rd.regimes():
        regime = load_regime(rd, name, f"eval/{name}", task_level(config))
        evals[name] = regime
        issues.extend(regime.issues)
    metrics = load_metrics_csv(rd.metrics_file, issues, "metrics.csv")
    if state == State.COMPLETED and not rd.metrics_file.exists():
        issues.append("metrics.csv: missing from a completed run; training curves skipped")

    run = Run(path, rel, overrides or (), condition, seed, state, status, evals, metrics, issues,
              config=config, warnings=warnings, sweeper_params=_sweeper_params(rd.hydra_file("hydra.yaml"), issues))
    run.outcome, run.reason = _outcome(run, overrides is not None, rd.eval_root.is_dir())
    return run


def _hydra_file(rd: RunDir, name: str, issues: list[str], check):
    """A `.hydra/` file, checked; when it is missing or damaged, the run's own copy in `.ablate/`
    (ablate.rundir.record), and the problem says which was read."""
    first: list[str] = []
    data = check(_read(rd.hydra_file(name), first, f".hydra/{name}", _yaml), f".hydra/{name}", first)
    copy = rd.record_file(name)
    spare: list[str] = []
    backup = check(_read(copy, spare, f"{rd.RECORD}/{name}", _yaml), f"{rd.RECORD}/{name}", spare) \
        if copy.is_file() else None
    if data is not None and not first and (backup is None or backup == data):
        return data
    if data is not None and not first:  # both readable, and they differ: the copy is the run's own
        first = [f".hydra/{name}: differs from the run's own copy (edited or cut short?)"]
    if backup is not None and not spare:
        issues.extend(f"{line}; read the run's own copy {rd.RECORD}/{name} instead" for line in first or
                      [f".hydra/{name}: missing"])
        return backup
    if data is None and not first and not copy.is_file() and name == "config.yaml":
        first = [f".hydra/{name}: missing; seed from the overrides, the task's level Countdown's"]
    issues.extend(first + spare)
    return data


def _sweeper_params(path: Path, issues: list[str]) -> dict | None:
    data = validate.check_mapping(_read(path, issues, ".hydra/hydra.yaml", _yaml), ".hydra/hydra.yaml", issues,
                                  "its sweep's parameters unknown (only next_look needs them)")
    hydra = (data or {}).get("hydra")
    sweeper = hydra.get("sweeper") if isinstance(hydra, dict) else None
    params = sweeper.get("params") if isinstance(sweeper, dict) else None
    return dict(params) if isinstance(params, dict) else None


def _outcome(run: Run, overrides_read: bool, has_eval_dir: bool) -> tuple[str, str]:
    """(outcome, reason) of a loaded run: ok / failed / running / missing, and why."""
    status, state = run.status or {}, run.state
    if not overrides_read:
        return "missing", "unreadable .hydra/overrides.yaml"
    if state == State.FAILED:
        err = status.get("error")
        return "failed", "failed" + (f": {short(Exception(str(err)), 200)}" if err else " (no error recorded)")
    if state == State.INTERRUPTED:  # stopped by a signal, or found killed by the next attempt: resumable
        takeover = status.get("takeover") or {}
        return "failed", takeover.get("reason") or f"interrupted: {status.get('error') or 'stopped'}"
    if state == State.RUNNING and _interrupted(status):
        run.state = State.INTERRUPTED.value  # killed: its process is gone or its heartbeat stopped
        return "failed", _interrupted(status)
    if state == State.RUNNING:
        started = status.get("started_at")
        return "running", "still running" + (f" (started {started})" if started else "")
    if state not in (State.COMPLETED, "unknown"):
        return "failed", f"unrecognised state {state!r} in status.json"
    if not has_eval_dir:
        return "missing", "no eval/ directory"
    if not any(r.usable for r in run.evals.values()):
        return "missing", "eval/ has no regime directories" if not run.evals else "no readable eval/<regime>/samples.jsonl"
    reason = "no readable status.json; counted as completed because eval/ exists" if state == "unknown" else ""
    gap = _coverage_gap(run, _expected_prompts(run.config or {}))
    return ("missing", gap) if gap else ("ok", reason)


def _expected_prompts(config: dict) -> int | None:
    """The test prompts a run's config evaluates: `task.test_size`, or the first `eval.limit` of them."""
    task, ev = config.get("task"), config.get("eval")
    size = whole(task.get("test_size")) if isinstance(task, dict) else None
    limit = whole(ev.get("limit")) if isinstance(ev, dict) else None
    return min(size, limit) if size is not None and limit is not None else size


def _interrupted(status: dict | None) -> str | None:
    return interrupted(status or {})


def load_sweep(paths: Path | str | Sequence[Path | str]) -> Sweep:
    """Load every run below the given sweep directories (or run directories, or committed report
    directories that carry runs.jsonl.gz: ablate.stats.read.archive)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    roots = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise StatsInputError(f"sweep directory not found: {p}")
        if not p.is_dir():
            raise StatsInputError(f"not a directory: {p}")
        roots.append(p)
    problems: list[str] = []
    archived = {root: load_archive(root, problems) for root in roots if is_archive(root)}
    # a committed report directory stands for the sweep directories it read (ablate.stats.read.archive)
    expanded = [r for root in roots for r in (archived[root][0] if root in archived else [root])]
    for root in roots:
        if root not in archived and (root / PROMPTS_FILE).is_file():
            problems.append(f"{root.name}/{RUNS_FILE}: missing from a report directory (it has {PROMPTS_FILE}); "
                            "none of its runs can be read")
    sweep = Sweep(roots=expanded, runs=[], warnings=problems)
    seen = set()
    for root in roots:
        if root in archived:
            for run in archived[root][1]:
                run.rel = f"{run.path.parent.name}/{run.path.name}" if len(expanded) > 1 else run.path.name
                sweep.runs.append(run)
            continue
        for run_dir in find_run_dirs(root):
            key = run_dir.resolve()
            if key in seen:
                continue
            seen.add(key)
            rel_root = root if len(expanded) == 1 else root.parent
            sweep.runs.append(load_run(run_dir, rel_root))
        mark_incomplete(sweep.runs)
        check_sweep_record(root, sweep)
    return sweep
