"""`python -m tools.testbed_doc docs/testbed.md [--check]`: docs/testbed.md's tables, rendered from what the
probes wrote (never typed):

* `<!-- probes -->`: every precondition of every study, on the tiny testbed (the committed studies under
  docs/findings/, all their seeds) and on each probed testbed (docs/testbed/probes.csv, written by
  `python -m ablate.studies.probe`);
* `<!-- evals -->`: the shipped SFT evaluated under each probed task or budget (docs/testbed/evals/*.json,
  `python -m ablate.studies.probe --eval NAME ...`): what a testbed does to the starting point.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from ablate.rundir.atomic import write_text
from tools.findings import BRIDGE, precondition_parts, render

_BLOCK = re.compile(r"(<!-- (?P<name>probes|evals) -->\n)(?P<body>.*?)(<!-- /(?P=name) -->)", re.S)


def _num(x, fmt: str = ".3g") -> str:
    return "–" if x is None or pd.isna(x) else format(float(x), fmt)


def committed_rows(findings_dir: Path) -> list[dict]:
    """Each committed study's preconditions on its testbed (committed.yaml `testbed:`, default tiny),
    over every seed of every look."""
    if not findings_dir.is_dir():
        return []
    _, _, results = render(findings_dir)
    rows, seen = [], set()
    for study_dir, result in results.items():
        testbed = (yaml.safe_load((study_dir / BRIDGE).read_text()) or {}).get("testbed", "tiny")
        for r in result.table.to_dict("records"):
            status = r["precondition_status"]
            if status not in ("held", "failed", "undetermined", "not measured"):
                continue
            check, metric, condition, needs = precondition_parts(r["precondition"])
            key = (study_dir.name, check)
            if key in seen:
                continue
            seen.add(key)
            rows.append(dict(study=study_dir.name, testbed=f"{testbed} (committed study)", check=check, metric=metric,
                             condition=condition, needs=needs, value=r["precondition_value"], status=status,
                             seeds="all", wall="–", commit="docs/findings"))
    return rows


def probe_rows(csv: Path) -> list[dict]:
    if not csv.is_file():
        return []
    out = []
    for r in pd.read_csv(csv).to_dict("records"):
        out.append(dict(study=r["study"], testbed=r["testbed"], check=r["check"], metric=r["metric"],
                        condition=r["condition"], needs=f"{r['op']} {r['threshold']:g}", value=r["value"],
                        status=r["status"], seeds=str(int(r["seeds"])), wall=f"{float(r['wall_s']) / 60:.1f} min",
                        commit=str(r["commit"])))
    return out


def probes_block(rows: list[dict]) -> str:
    lines = ["| study | mechanism check | testbed | condition (seeds) | metric | needs | measured | status | wall | commit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["study"], r["check"], r["commit"] != "docs/findings", r["testbed"])):
        lines.append(f"| {r['study']} | {r['check']} | {r['testbed']} | {r['condition']} ({r['seeds']}) | "
                     f"`{r['metric']}` | {r['needs']} | {_num(r['value'])} | **{r['status']}** | {r['wall']} | "
                     f"{r['commit']} |")
    return "\n".join(lines) + "\n"


def evals_block(folder: Path) -> str:
    lines = ["| probe | overrides | pass@1 | pass@1 by operand count | coverage by operand count | mean length by "
             "operand count | substitution errors / failures | commit |", "|---|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        rec = json.loads(path.read_text(encoding="utf-8"))
        s = rec["summary"]
        by = s.get("by_operands") or {}
        cell = lambda key, fmt: ", ".join(f"{k}: {_num(v.get(key), fmt)}" for k, v in sorted(by.items()))  # noqa: E731
        verdicts = s.get("verdicts") or {}
        failures = sum(v for k, v in verdicts.items() if k != "correct")
        lines.append(f"| {rec['name']} | `{rec['overrides']}` | {_num(s.get('pass@1'))} | {cell('pass@1', '.3f')} | "
                     f"{cell('coverage', '.3f')} | {cell('mean_response_length', '.1f')} | "
                     f"{verdicts.get('substitution_error', 0)} / {failures} | {rec['commit']} |")
    return "\n".join(lines) + "\n"


def render_doc(csv: Path, doc: Path, check: bool = False, findings_dir: Path = Path("docs/findings")) -> int:
    """Write (or with `check`, compare) DOC's rendered blocks; exit status as for a command."""
    blocks = {"probes": probes_block(committed_rows(findings_dir) + probe_rows(csv)),
              "evals": evals_block(csv.parent / "evals")}
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    missing = [name for name in blocks if f"<!-- {name} -->" not in text]
    new = _BLOCK.sub(lambda m: m.group(1) + blocks[m.group("name")] + m.group(4), text)
    if missing:
        print(f"{doc}: no <!-- {' -->, <!-- '.join(missing)} --> block; add `<!-- NAME -->` and "
              f"`<!-- /NAME -->` lines where each table goes", file=sys.stderr)
    if check:
        if new != text:
            print(f"{doc} differs from what {csv} renders; run python -m tools.testbed_doc {doc}", file=sys.stderr)
        return 1 if new != text or missing else 0
    write_text(doc, new)
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.testbed_doc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("doc", type=Path, nargs="?", default=Path("docs/testbed.md"), help="the page (default docs/testbed.md)")
    p.add_argument("--csv", type=Path, default=Path("docs/testbed/probes.csv"),
                   help="the probes' measurements (default docs/testbed/probes.csv; their evals/ beside it)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if the page is stale")
    args = p.parse_args(argv)
    return render_doc(args.csv, args.doc, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
