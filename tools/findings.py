"""`python -m tools.findings` (from the repository root): each published study's claims table, re-decided by the verdict
engine from the committed per-run values, and rendered into docs/findings.md between markers.

A study directory under docs/findings/ holds the report `ablate.stats` wrote (summary.csv: every
run's value of every metric), the study's mechanism checks (mechanisms.csv, per run) and
`committed.yaml`, the bridge from the preset's claims to those files:

    preset: curriculum_study            # conf/experiment/<preset>.yaml declares the claims and plan
    reports: {., look3: curriculum_study_look3}   # optional: reports to pool (a later look's, in a
                                        # subdirectory, and the sweep directory its runs came from)
    order: [curriculum_study, ...]      # optional: the sweep directories in the order they ran (the looks)
    labels: {old label: preset name}    # optional: conditions the report labelled otherwise
    base: curriculum_study              # optional: the study this one re-runs on another testbed (the
                                        # side-by-side table, `<!-- claims:testbeds -->`, pairs their claims)
    metrics:                            # a claim metric (or component) read from mechanisms.csv
      "mean:curriculum/explore_frac@50:": explore_2nd_half
      "reach:val/pass@1>=baseline": {column: reach_step, reached: reached, horizon: 100}

No number is typed: the tables are rendered from those files, and `--check` fails when
docs/findings.md's tables differ from what this renders (a test runs it in CI).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from ablate.stats.claims.declared import parse_declared
from ablate.stats.claims.engine import evaluate
from ablate.stats.render.claims import claims_markdown, claims_tables, plan_sentence
from ablate.stats.render.formatting import fmt_ci
from ablate.stats.stages.mechanisms import per_condition
from ablate.stats.values.reach import reach_metric
from ablate.stats.values.table import CURVE_REGIME, VALUE_COLUMNS, is_curve_metric, summary_values
from tools.confirmatory import WAITS, arm_not_run, confirmatory_rows, deciding as _deciding, side_by_side
from tools.realisations import realisations_block
from tools.scale_table import scale_block

BRIDGE = "committed.yaml"
_BLOCK = re.compile(r"(<!-- (?P<kind>claims|mechanisms):(?P<study>[\w-]+) -->\n)(?P<body>.*?)(<!-- /(?P=kind) -->)", re.S)


def conf_dir() -> Path:
    from ablate.config import CONF_DIR

    return CONF_DIR


def archived_curves(report_dir: Path, sweep: str | None = None) -> dict[str, pd.DataFrame]:
    """run -> its training curves (metrics.csv as the run wrote it), from the report's runs.jsonl.gz."""
    from ablate.stats.read.archive import RUNS_FILE, _metrics_frame

    path = report_dir / RUNS_FILE
    if not path.is_file():
        return {}
    import gzip
    import json

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    runs = _prefixed(pd.DataFrame({"run": [r["rel"] for r in records]}), sweep)["run"]
    return {run: _metrics_frame(r["metrics"]) for run, r in zip(runs, records) if r.get("metrics")}


def _declared_rows(report_dir: Path, bridge: dict, info: pd.DataFrame, sweep: str | None) -> tuple[list[dict], set]:
    """A bridged curve metric (`AGG:COLUMN@...`) computed as declared, from the runs' own curves where the
    report archived them: a claim renders from its declared metric, not from a mechanisms.csv stand-in."""
    from ablate.stats.values.table import curve_value

    wanted = [m for m in (bridge.get("metrics") or {}) if is_curve_metric(m) and reach_metric(m) is None]
    curves = archived_curves(report_dir, sweep) if wanted else {}
    rows, done = [], set()
    for metric in wanted:
        for run, frame in curves.items():
            if run not in info.index or not math.isfinite(value := curve_value(frame, metric)):
                continue
            meta = info.loc[run]
            rows.append({"run": run, "batch": meta["batch"], "condition": meta["condition"], "seed": meta["seed"],
                         "regime": CURVE_REGIME, "metric": metric, "value": value})
            done.add((run, metric))
    return rows, done


def _mechanism_rows(study_dir: Path, bridge: dict, runs: pd.DataFrame, sweep: str | None = None) -> list[dict]:
    """The bridge's metrics, as rows of the values table (joined to summary.csv's runs by the `run`
    column): computed as declared from the archived curves where there are some, else read from
    mechanisms.csv (the column the bridge names)."""
    path = study_dir / "mechanisms.csv"
    mapping = bridge.get("metrics") or {}
    info = runs.drop_duplicates("run").set_index("run")
    declared, done = _declared_rows(study_dir, bridge, info, sweep)
    if not mapping or not path.is_file():
        return declared
    mech = _prefixed(pd.read_csv(path, dtype={"run": str}), sweep)
    if "regime" in mech.columns:  # one row per run and regime: the run-level columns repeat
        mech = mech.drop_duplicates("run")
    rows = declared
    for metric, spec in mapping.items():
        spec = {"column": spec} if isinstance(spec, str) else dict(spec)
        if "column" not in spec:
            continue
        for r in mech.itertuples(index=False):
            r = r._asdict()
            if str(r["run"]) not in info.index or (str(r["run"]), metric) in done:
                continue
            value = r.get(spec["column"])
            if "reached" in spec and not _true(r.get(spec["reached"])):
                # never reached: censored at the horizon (restricted mean), a number or a column
                value = r.get(spec["horizon"]) if isinstance(spec["horizon"], str) else spec["horizon"]
            meta = info.loc[str(r["run"])]
            rows.append({"run": str(r["run"]), "batch": meta["batch"], "condition": meta["condition"],
                         "seed": meta["seed"], "regime": CURVE_REGIME, "metric": metric, "value": float(value)})
    return rows


def _curve_rows(study_dir: Path, bridge: dict) -> list[dict]:
    """Bridge metrics read from curves.csv.gz at one step: the condition's mean over seeds (one row per
    condition) with its t band (`band_low` / `band_high`). For preconditions only, which decide on that
    interval: as a claim's metric a condition mean would count as one seed."""
    specs = {m: s for m, s in (bridge.get("metrics") or {}).items() if isinstance(s, dict) and "curve" in s}
    path = study_dir / "curves.csv.gz"
    if specs and not path.is_file() and path.with_suffix("").is_file():  # read nowhere since reports gzip it
        raise ValueError(f"{path.with_suffix('')}: reports now write curves.csv.gz; gzip it "
                         f"(gzip -n {path.with_suffix('')}) so its preconditions are read")
    if not specs or not path.is_file():
        return []
    curves = pd.read_csv(path)
    curves["condition"] = curves["condition"].replace(bridge.get("labels") or {})
    rows = []
    for metric, spec in specs.items():
        at = curves[(curves["metric"] == spec["curve"]) & (curves["step"] == spec["step"])]
        rows += [{"run": f"{r.condition}: curves.csv.gz mean", "batch": 0, "condition": r.condition, "seed": "",
                  "regime": CURVE_REGIME, "metric": metric, "value": float(r.mean),
                  "band_low": float(getattr(r, "ci_low", math.nan)), "band_high": float(getattr(r, "ci_high", math.nan))}
                 for r in at.itertuples()]
    return rows


def _true(x) -> bool:
    return str(x).strip().lower() in ("true", "1", "1.0", "yes")


def _reports(bridge: dict) -> dict[str, str | None]:
    """report directory (relative to the study's) -> the sweep directory its runs came from, which
    prefixes their `run` where the report read one sweep (its runs then carry no directory)."""
    reports = bridge.get("reports") or ["."]
    return dict(reports) if isinstance(reports, dict) else {r: None for r in reports}


def _prefixed(frame: pd.DataFrame, sweep: str | None) -> pd.DataFrame:
    if sweep:
        runs = frame["run"].astype(str)
        frame["run"] = runs.where(runs.str.contains("/"), sweep + "/" + runs)
    return frame


def study_values(study_dir: Path, bridge: dict) -> pd.DataFrame:
    """The values table of a study: every report it lists (`reports`, default the study directory
    itself: e.g. a later look's report in a subdirectory), pooled, with the bridge's metrics."""
    tables = []
    for sub, sweep in _reports(bridge).items():
        summary = pd.read_csv(study_dir / sub / "summary.csv", dtype={"run": str, "seed": str})
        summary["condition"] = summary["condition"].replace(bridge.get("labels") or {})
        tables.append(_prefixed(summary, sweep))
    table = summary_values(pd.concat(tables, ignore_index=True), bridge.get("order"))
    extra = []
    for sub, sweep in _reports(bridge).items():
        extra += _mechanism_rows(study_dir / sub, bridge, table, sweep)
    extra += _curve_rows(study_dir, bridge)
    extra = pd.DataFrame(extra, columns=VALUE_COLUMNS + ["band_low", "band_high"])
    if extra[["band_low", "band_high"]].isna().all().all():
        extra = extra[VALUE_COLUMNS]
    return pd.concat([table, extra], ignore_index=True)


def run_statuses(study_dir: Path, bridge: dict) -> list[dict]:
    """The status.json of every run the study's reports hold a record of (runs.jsonl.gz), for their start times."""
    import gzip
    import json

    out = []
    for sub in _reports(bridge):
        path = study_dir / sub / "runs.jsonl.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as f:
                out += [json.loads(line).get("status") or {} for line in f if line.strip()]
    return out


def study_claims(study_dir: Path, conf: Path | None = None):
    """The engine's ClaimsResult for one committed study directory, decided under its registration
    (registration.yaml beside the reports) when there is one, else every claim exploratory."""
    from ablate.stats.claims.registration import FILE, read_registration
    from ablate.stats.claims.standing import decide, first_start

    bridge = yaml.safe_load((study_dir / BRIDGE).read_text())
    preset = yaml.safe_load(((conf or conf_dir()) / "experiment" / f"{bridge['preset']}.yaml").read_text())
    block = preset["study"]
    problems: list[str] = []
    parse_declared(block, problems)
    if problems:
        raise ValueError(f"{bridge['preset']}: {'; '.join(problems)}")
    registration = read_registration(study_dir / FILE) if (study_dir / FILE).is_file() else None
    if registration is not None:  # named as findings.md names it, wherever the directory was read from
        registration.path = Path("findings") / study_dir.name / FILE
    values = study_values(study_dir, bridge)
    effect = float(block.get("effect") or 0.03)
    statuses = run_statuses(study_dir, bridge)
    return decide(block, registration, first_start(statuses), lambda declared: evaluate(declared, values, effect),
                  statuses=statuses if statuses else None)


def report_with_claims(text: str, result) -> str:
    """A committed report.md with its `## Claims` section rendered again from `result` (the rows
    claims.csv and findings.md render), the rest as `ablate.stats` wrote it."""
    start = text.find("## Claims\n")
    if start < 0:
        return text
    end = text.find("\n## ", start + 1)
    section = "\n".join(claims_markdown(result)) + "\n"
    return text[:start] + section + (text[end + 1:] if end >= 0 else "")


def claims_block(result, study: str | None = None) -> str:
    """The markdown tables findings.md embeds for a study (rendered, never typed: the same rows and
    cells as report.md's, ablate.stats.render.claims), and its forest."""
    picture = (f"\n![claims of {study}: estimate and deciding interval coloured by verdict, the paper's effect as ×, "
               f"margins shaded](findings/{study}/claims.png)\n" if study else "")
    return "\n".join(claims_tables(result)) + "\n" + plan_sentence(result) + "\n" + picture


def render(findings_dir: Path, conf: Path | None = None):
    """(study -> its markdown block, file -> its text, study dir -> ClaimsResult): the claims tables
    and the claims.csv / claims_looks.csv each study directory carries."""
    blocks, files, results = {}, {}, {}
    for study_dir in sorted(p for p in Path(findings_dir).iterdir() if (p / BRIDGE).is_file()):
        result = study_claims(study_dir, conf)
        files[study_dir / "claims.csv"] = result.table.to_csv(index=False, float_format="%.6g")
        files[study_dir / "claims_looks.csv"] = result.looks.to_csv(index=False, float_format="%.6g")
        report = study_dir / "report.md"
        if report.is_file():  # its claims section from the same rows as claims.csv and findings.md
            files[report] = report_with_claims(report.read_text(encoding="utf-8"), result)
        blocks[study_dir.name] = claims_block(result, study_dir.name)
        mech = mechanisms_block(study_dir, yaml.safe_load((study_dir / BRIDGE).read_text()))
        if mech is not None:
            blocks[f"mechanisms:{study_dir.name}"] = mech
        results[study_dir] = result
    blocks["preconditions"] = preconditions_block(results)
    blocks["testbeds"] = testbeds_block(findings_dir, results)
    blocks["confirmatory"] = side_by_side({d: r.table for d, r in results.items()}, Path(findings_dir))
    blocks["scales"] = scale_block(Path(findings_dir), results)
    blocks["realisations"] = realisations_block(Path(findings_dir))
    blocks["headline"] = headline_block(blocks["confirmatory"], blocks["realisations"])
    return blocks, files, results


def headline_block(confirmatory: str, realisations: str) -> str:
    """What the document leads with: the counts heading the third edition's table and the later realisations'
    (decided on both seed sets first), the same sentences the two tables open with."""
    third, later = (b.split("\n\n", 1)[0] for b in (confirmatory, realisations))
    return f"- Third edition (fresh seeds against the earlier editions'): {third}\n- Claims re-declared since, " \
           f"registered again and run on fresh seeds (against the third edition): {later}\n"


def _cell(r: dict) -> str:
    est = fmt_ci(r["estimate"], r["ci_low"], r["ci_high"])
    pre = f"; precondition {r['precondition_status']}" if r["precondition_status"] not in ("none", "", None) else ""
    return f"**{r['verdict']}** {est}{pre}"


def testbeds_block(findings_dir: Path, results: dict) -> str:
    """Each claim a study re-ran on another testbed (committed.yaml `base:`), beside its verdict on the
    base study's testbed: does the verdict depend on the model's strength relative to the task?"""
    rows = ["| claim | base study (testbed) | verdict there | re-run (testbed) | verdict there |",
            "|---|---|---|---|---|"]
    by_name = {d.name: r for d, r in results.items()}
    for study_dir, result in results.items():
        bridge = yaml.safe_load((study_dir / BRIDGE).read_text())
        base = bridge.get("base")
        if not base or base not in by_name:
            continue
        before = {r["id"]: r for r in _deciding(by_name[base].table)}
        base_testbed = (yaml.safe_load((findings_dir / base / BRIDGE).read_text()) or {}).get("testbed", "tiny")
        for r in _deciding(result.table):
            if r["id"] in before:
                b = before[r["id"]]
                rows.append(f"| {r['id']}: {r['claim']} | {base} ({base_testbed}) | {_cell(b)} | "
                            f"{study_dir.name} ({bridge.get('testbed', '–')}) | {_cell(r)} |")
    return "\n".join(rows) + "\n"


def precondition_parts(text: str) -> tuple[str, str, str, str]:
    """(check, metric, condition, needs) of the engine's precondition text
    `CHECK: METRIC of CONDITION = VALUE (needs OP THRESHOLD)`; parts a declared one lacks are ''/'–'."""
    check, _, detail = str(text).partition(": ")
    metric, _, rest = detail.partition(" of ")
    needs = detail.rpartition("(needs ")[2].rstrip(")") if "(needs " in detail else "–"
    return check, metric, rest.partition(" = ")[0], needs


def preconditions_block(results: dict) -> str:
    """Every measured or declared precondition of every study, with its value on the testbed the
    committed runs used (the tiny model): the table a stronger testbed has to change."""
    rows = ["| study | claim | mechanism check | needs | measured | status |", "|---|---|---|---|---|---|"]
    for study_dir, result in results.items():
        for r in result.table.to_dict("records"):
            if r["precondition_status"] in ("none", "", None) or pd.isna(r["precondition_status"]):
                continue
            check, _, _, needs = precondition_parts(r["precondition"])
            detail = str(r["precondition"]).partition(": ")[2]
            # the engine's text: the mean and its interval (`= VALUE [LOW, HIGH] (needs ...)`)
            measured = detail.partition(" = ")[2].rpartition(" (needs ")[0] or "–"
            if r["precondition_status"] == "declared":
                needs, measured = "–", detail
            rows.append(f"| {study_dir.name} | {r['id']} | {check} | {needs} | {measured} | {r['precondition_status']} |")
    return "\n".join(rows) + "\n"


def embed(markdown: str, blocks: dict[str, str]) -> str:
    """findings.md with each `<!-- claims:STUDY -->...<!-- /claims -->` block replaced by its table."""
    def body(m) -> str:
        key = m.group("study") if m.group("kind") == "claims" else f"mechanisms:{m.group('study')}"
        return m.group(1) + blocks.get(key, m.group("body")) + m.group(5)

    return _BLOCK.sub(body, markdown)


def mechanisms_block(study_dir: Path, bridge: dict | None = None) -> str | None:
    """mechanisms.csv (per run) of every report the study lists (its looks), summarised per condition,
    and per regime where a condition was evaluated in several: mean [min, max] over its runs (n).
    The prose reads its mechanism figures here instead of typing them."""
    frames = [_prefixed(pd.read_csv(study_dir / sub / "mechanisms.csv", dtype={"run": str}), sweep)
              for sub, sweep in _reports(bridge or {}).items() if (study_dir / sub / "mechanisms.csv").is_file()]
    if not frames:
        return None
    frame = pd.concat(frames, ignore_index=True)
    key = "condition" if "condition" in frame else next(c for c in frame.columns if c not in ("run", "seed"))
    keys = [key] + (["regime"] if "regime" in frame and frame.groupby(key)["regime"].nunique().max() > 1 else [])
    table = per_condition(frame.drop_duplicates(["run", *keys[1:]]), keys)
    looks = f" of the {len(frames)} reports it lists (every look)" if len(frames) > 1 else ""
    return (table + f"\nmean [min, max] over the condition's runs, from `mechanisms.csv` (per run)"
            f"{looks}.\n")


KNOWN_CODE = "commit_code.json"  # commit -> code fingerprints (ablate.rundir.code), for clones without the history


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.findings", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("findings_dir", nargs="?", type=Path, default=Path("docs/findings"))
    p.add_argument("--doc", type=Path, default=None, help="the markdown to update (default: <findings_dir>.md)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if the document's tables differ")
    args = p.parse_args(argv)
    doc = args.doc or args.findings_dir.with_suffix(".md")
    if not args.findings_dir.is_dir():
        p.error(f"{args.findings_dir} is not a directory")
    from ablate.rundir import code

    code.KNOWN.clear(), code.RESOLVED.clear()  # only what these studies name
    code.use_known(args.findings_dir / KNOWN_CODE)  # the commits' code fingerprints, where git lacks them
    blocks, files, results = render(args.findings_dir)
    files[args.findings_dir / KNOWN_CODE] = code.known_text()
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    new = embed(text, blocks)
    missing = [s for s in blocks if f"<!-- claims:{s} -->" not in text and s not in ("preconditions", "testbeds", "confirmatory", "headline")
               and not s.startswith("mechanisms:")]
    if args.check:
        from tools.prose import check as prose_check

        stale = [str(doc)] if new != text else []
        stale += [str(f) for f, body in files.items() if not f.is_file() or f.read_text(encoding="utf-8") != body]
        for s in missing:
            print(f"{doc}: no <!-- claims:{s} --> block", file=sys.stderr)
        typed = prose_check(doc, args.findings_dir, conf_dir()) if doc.is_file() else []
        for line in typed:
            print(line, file=sys.stderr)
        if stale:
            print(f"differ from what the committed reports render: {', '.join(stale)}; run "
                  f"python -m tools.findings {args.findings_dir}", file=sys.stderr)
        return 1 if stale or missing or typed else 0
    from ablate.rundir.atomic import write_text

    from ablate.stats.render.figures import claims_figure

    for f, body in files.items():
        write_text(f, body)
    for study_dir, result in results.items():  # the forest (a picture: rendered, not checked byte for byte)
        conf = [{**r, "verdict": WAITS} if arm_not_run(r) else r for r in confirmatory_rows(study_dir)]
        claims_figure(result.table, study_dir / "claims.png", title=f"claims of {study_dir.name}"
                      + (": exploratory (hollow) and confirmatory" if conf else ""),
                      confirmatory=pd.DataFrame(conf) if conf else None)
    if new != text:
        write_text(doc, new)
    for study, block in blocks.items():
        print(f"## {study}\n\n{block}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
