"""findings.md's scale table (issue 59): each claim a study registered at a second model scale, beside its
verdict at the tiny model's, rendered from the committed reports (`<!-- claims:scales -->`).

A study run at `model=small` is its own study, `<study>_small` (ablate.config.scale), with its own
registration and report under docs/findings/. A row per claim of every such registration: the verdict
and interval the tiny model's committed report gives (its deciding row), the one the second scale's report
gives once its runs are committed (until then, when it was registered), and the papers' 0.5B scale, which
this project cannot run (no pretrained weights offline), with the command that would."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.config.scale import DEFAULT, EMBEDDED, base_name
from ablate.stats.claims.registration import read_registration
from ablate.stats.render.formatting import fmt_ci
from tools.confirmatory import deciding

PRETRAINED = ("qwen2.5-0.5b", "Qwen2.5-0.5B")  # (conf/model/ option, label): the papers' scale
HEADER = ["| study | claim | 1M (`model=tiny`) | ~5M (`model=small`) | 0.5B (`model=qwen2.5-0.5b`) |",
          "|---|---|---|---|---|"]


def cell(row: dict | None) -> str:
    """A deciding row as `**verdict** estimate [low, high] (n vs m)`; '–' without one."""
    if row is None:
        return "–"
    m = row.get("n_baseline")
    n = f"{int(row['n'])}" + (f" vs {int(m)}" if pd.notna(m) else "")  # one-sample rows have no baseline
    return f"**{row['verdict']}** {fmt_ci(row['estimate'], row['ci_low'], row['ci_high'])} ({n})"


def scaled_studies(findings_dir: Path) -> list[Path]:
    """The study directories registered at a scale other than the default one."""
    labels = set(EMBEDDED.values()) - {DEFAULT}
    return sorted(d for d in Path(findings_dir).iterdir() if d.is_dir() and (d / "registration.yaml").is_file()
                  and any(d.name.endswith(f"_{label}") for label in labels))


def _deciding(result) -> dict[str, dict]:
    return {} if result is None else {r["id"]: r for r in deciding(result.table)}


def scale_block(findings_dir: Path, results: dict) -> str:
    """The table: one row per claim (descriptive ones left out) of every second-scale registration."""
    rows, commands = list(HEADER), []
    by_name = {d.name: r for d, r in results.items()}
    for study_dir in scaled_studies(findings_dir):
        base = base_name(study_dir.name)
        reg = read_registration(study_dir / "registration.yaml")
        tiny, small = _deciding(by_name.get(base)), _deciding(by_name.get(study_dir.name))
        waiting = f"registered {reg.original.at[:10]} (commit {str(reg.original.commit)[:7]}), not run yet"
        commands.append(f"- {base} at {PRETRAINED[1]}: `python -m ablate.train -m experiment={base} "
                        f"model={PRETRAINED[0]} trainer.accelerator=gpu rollout=hf`")
        command = "not run here (no pretrained weights offline)"
        for claim in reg.records[-1].block.get("claims") or []:
            if claim.get("type") == "descriptive":
                continue
            cid = claim["id"]
            rows.append(f"| {base} | {cid}: {claim.get('claim', '')} | {cell(tiny.get(cid))} | "
                        f"{cell(small.get(cid)) if small else waiting} | {command} |")
    if len(rows) == len(HEADER):
        rows.append("| – | no study is registered at a second scale yet | – | – | – |")
    tail = ["", "The papers' scale, for a user with a GPU and the model hub:", "", *commands] if commands else []
    return "\n".join(rows + tail) + "\n"
