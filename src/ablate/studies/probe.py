"""`python -m ablate.studies.probe experiment=<study> [testbed=<name>] [key=value ...]`: measure a study's
preconditions on a testbed without running the study.

A study preset declares, for each claim whose mechanism may not occur on a given model and task, a
precondition: a metric of one condition compared with a threshold (`study.claims[].precondition`).
This command trains that condition only (`--seeds` seeds, default 1) with the study's own settings
plus the given overrides (a `testbed=` option of `conf/testbed/`, or any key=value), reads the
metric exactly as `python -m ablate.stats` does, and says whether the precondition holds:

    python -m ablate.studies.probe experiment=curriculum_study testbed=ladder23
    python -m ablate.studies.probe experiment=tool_annealing_study testbed=mixed_sft --claim anneal_keeps_skill
    python -m ablate.studies.probe experiment=threshold_study ++curriculum.difficulty.bins=10 --claim no_gain

A key=value other than the model, the testbed and the thread count is part of the testbed's name
(`tiny + ++curriculum.difficulty.bins=10`): its runs and its row are its own. A key the study's sweep sets
(the curriculum of a curriculum study) takes `++` (add or set), since the preset alone does not have it.
Runs go to `probes/<study>/<testbed>/<condition>/seed_<k>/` (run again, a finished run is reused and
an interrupted one resumes); each measured precondition replaces its row in `--csv`
(default docs/testbed/probes.csv), which the repository's `python -m tools.testbed_doc` turns into docs/testbed.md's
table.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra_plugins.ablate_sweeper.grid_sweeper import sweep_jobs
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, plain
from ablate.config.scale import DEFAULT, scale_of, scaled_block
from ablate.metrics import REGIME_NO_TOOL
from ablate.rundir import RunDir
from ablate.rundir.atomic import write_text
from ablate.rundir.cache import models_dir
from ablate.rundir.status import git_sha
from ablate.upstream import upstream_key

DEFAULT_CSV = Path("docs/testbed/probes.csv")
COLUMNS = ["study", "testbed", "check", "claims", "metric", "condition", "op", "threshold", "value", "status",
           "seeds", "wall_s", "overrides", "commit"]


def compose(overrides: list[str]):
    """The composed run config (with hydra's sweeper settings) of `overrides`."""
    # heavy: torch/transformers (every part's schema, needed before Hydra composes) off probe's --help
    import ablate.parts  # noqa: F401

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=overrides, return_hydra_config=True)


def preconditions(cfg, claim_ids: list[str]) -> list[tuple]:
    """(precondition, [claim ids]) of the study's measured preconditions, one per distinct check."""
    from ablate.stats.claims.declared import parse_declared  # heavy: scipy (~1 s), off probe's --help

    problems: list[str] = []
    study = plain(cfg.study) if cfg.get("study") else None  # the block as ablate.stats reads it
    declared = parse_declared(study, problems) if study else None
    if declared is None or problems or not declared.claims:
        raise SystemExit(f"error: the config declares no study claims to probe ({'; '.join(problems) or 'study: null'}); "
                         "name a study preset, e.g. experiment=curriculum_study")
    unknown = sorted(set(claim_ids) - {c.id for c in declared.claims})
    if unknown:
        raise SystemExit(f"error: --claim {', '.join(unknown)}: no such claim; the study declares "
                         f"{', '.join(c.id for c in declared.claims)}")
    found: dict[tuple, tuple] = {}
    for c in declared.claims:
        for pre in c.gates:
            if pre.metric is None:
                continue
            resolved = (pre.check, pre.metric, pre.condition or c.condition, pre.regime or c.regime, pre.op,
                        pre.threshold)
            found.setdefault(resolved, (resolved, []))[1].append(c.id)
    # every claim a check serves is listed, even when --claim picked the check by one of them
    return [entry for entry in found.values() if not claim_ids or set(entry[1]) & set(claim_ids)]


def condition_overrides(cfg, base: list[str], condition: str) -> list[str]:
    """The overrides of the study's first sweep job whose composed config is `condition`
    (`study.names`), without its seed: the condition exactly as the study runs it."""
    names = plain(cfg.study.get("names")) or {}
    if condition not in names:
        raise SystemExit(f"error: condition {condition!r} is not in study.names ({', '.join(names)}); "
                         "a probe runs named conditions")
    sweeper = plain(cfg.hydra.sweeper)
    params = {k: v for k, v in (sweeper.get("params") or {}).items() if k != "seed"}
    for job in sweep_jobs(params, sweeper.get("grids"), []) or [[]]:
        job_cfg = compose(base + job)
        if all(OmegaConf.select(job_cfg, k) == v for k, v in names[condition].items()):
            return list(job)
    raise SystemExit(f"error: no job of the study's sweep is condition {condition!r} ({names[condition]})")


# overrides that say where or how fast a probe runs, not what it measures: left out of the testbed's name
NEUTRAL = ("experiment=", "testbed=", "model=", "trainer.num_threads=", "hydra.")


def testbed_of(cfg, overrides: list[str] = ()) -> str:
    """The testbed the composed config runs on (the preset's or the command line's); none: the model's scale
    (`tiny`, `small`); a testbed at another scale than tiny names both (`ladder23 (small)`). Any other
    override changes what is measured, so it is part of the name (`tiny + curriculum.difficulty.bins=10`):
    a probe of another setting gets its own runs and its own row, never the default's."""
    choice = OmegaConf.select(cfg, "hydra.runtime.choices.testbed")
    scale = scale_of(plain(cfg.model))
    name = scale if choice in (None, "null", "None") else str(choice) if scale == DEFAULT else f"{choice} ({scale})"
    extra = [o for o in overrides if not o.lstrip("+~").startswith(NEUTRAL)]
    return " + ".join([name, *extra])


def study_of(cfg) -> str:
    """The study's name as its runs carry it: at a scale other than tiny, `<study>_<scale>` (ablate.config.scale),
    so a probe at `model=small` never replaces the tiny study's rows."""
    return str(scaled_block(plain(cfg.study), plain(cfg.model))["name"])


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def train(overrides: list[str], run_dir: Path) -> None:
    """One run, as its own process (a run owns its directory; a finished one returns at once)."""
    cmd = [sys.executable, "-m", "ablate.train", *overrides, f"hydra.run.dir={run_dir}"]
    print("+ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"error: the probe run {run_dir} failed; its status.json and log say why")


def measure(run_dirs: list[Path], pre: tuple) -> tuple[float, str, float]:
    """(value, status, wall seconds) of precondition `pre` on the probe's runs."""
    # heavy: the analysis pipeline (scipy: ~1 s), off probe's --help
    from ablate.stats.claims.engine import components, condition_values
    from ablate.stats.maths.verdicts import compare
    from ablate.stats.read.load import load_sweep
    from ablate.stats.stages.conditions import label_sweep, usable_regimes
    from ablate.stats.values.table import sweep_values

    check, metric, condition, regime, op, threshold = pre
    sweep = load_sweep(run_dirs)
    _, _, _, labels, _ = label_sweep(sweep, (), False, [])
    labels = {cond: condition for cond in labels}  # every probe run is the one condition
    table = sweep_values(sweep, labels, components(metric), usable_regimes(sweep))
    rows = condition_values(table, condition, regime, metric)
    wall = sum(float((r.status or {}).get("total_duration_s") or 0.0) for r in sweep.runs)
    if rows.empty:
        return math.nan, "not measured", wall
    value = float(rows["value"].mean())
    return value, ("held" if compare(op, value, threshold) else "failed"), wall


def commit() -> str:
    """The commit of the code the probe runs (the checkout `ablate` is imported from, as a run's status.json
    records it), not of the working directory: a worktree with an editable install elsewhere runs that code."""
    return (git_sha() or "unknown")[:7]


def record(csv: Path, rows: list[dict]) -> None:
    """Replace the rows of the same (study, testbed, check) in `csv`, atomically."""
    old = pd.read_csv(csv) if csv.is_file() else pd.DataFrame(columns=COLUMNS)
    new = pd.DataFrame(rows, columns=COLUMNS)
    key = ["study", "testbed", "check"]
    keep = old[~old.set_index(key).index.isin(new.set_index(key).index)]
    both = pd.concat([keep, new], ignore_index=True) if len(keep) else new
    write_text(csv, both.sort_values(key, kind="stable").to_csv(index=False, float_format="%.6g"))


def probe(overrides: list[str], claim_ids: list[str], seeds: int, root: Path, csv: Path | None) -> list[dict]:
    cfg = compose(overrides)
    found = preconditions(cfg, claim_ids)
    study, testbed = study_of(cfg), testbed_of(cfg, overrides)
    rows = []
    for pre, claims in found:
        check, metric, condition, regime, op, threshold = pre
        job = condition_overrides(cfg, overrides, condition)
        run_dirs = [root / study / slug(testbed) / slug(condition) / f"seed_{s}" for s in range(seeds)]
        start = time.time()
        for s, run_dir in enumerate(run_dirs):
            train([*overrides, *job, f"seed={s}"], run_dir)
        value, status, wall = measure(run_dirs, pre)
        rows.append(dict(study=study, testbed=testbed, check=check, claims=" ".join(claims), metric=metric,
                         condition=condition, op=op, threshold=threshold, value=value, status=status, seeds=seeds,
                         wall_s=round(wall or time.time() - start), overrides=" ".join([*overrides, *job]),
                         commit=commit()))
        print(f"{study} on {testbed}: {check}: {metric} of {condition} = {value:.4g} "
              f"(needs {op} {threshold:g}) -> {status}", flush=True)
    if csv is not None and rows:
        record(csv, rows)
    return rows


def probe_eval(name: str, overrides: list[str], root: Path, out_dir: Path) -> dict:
    """Evaluate a saved model (default the shipped SFT) under `overrides` (another task ladder, a
    generation budget): what a testbed does to the starting point, in seconds, before any training.
    The summary and the command go to `<out_dir>/<name>.json`."""
    if not any(o.startswith("model_dir=") for o in overrides):
        overrides = ["model_dir=builtin:tiny-sft", *overrides]
    run_dir = root / "evals" / slug(name)
    cmd = [sys.executable, "-m", "ablate.eval", *overrides, f"hydra.run.dir={run_dir}"]
    print("+ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"error: the evaluation {run_dir} failed")
    evaluated = RunDir(run_dir)
    regime = next(r for r in evaluated.regimes() if evaluated.evaluated(r))
    summary = json.loads(evaluated.summary_file(regime).read_text())
    record_ = {"name": name, "overrides": " ".join(overrides), "commit": commit(), "summary": summary}
    write_text(out_dir / f"{slug(name)}.json", json.dumps(record_, indent=1, sort_keys=True) + "\n")
    return record_


def upstream_summary(name: str, overrides: list[str], out_dir: Path) -> dict:
    """The no-tool evaluation of the SFT a study config starts from (the cached upstream, evaluated
    once when it was trained): a testbed's own starting point. It is never trained here: a study's
    first job trains it (or `python -m ablate.train <overrides>`)."""
    cfg = compose(overrides)
    key = upstream_key(cfg, "sft")
    upstream = RunDir(models_dir() / key)
    path = upstream.summary_file(REGIME_NO_TOOL)
    if not path.is_file():
        raise SystemExit(f"error: no evaluated upstream SFT {key} in {models_dir()}; train it first: "
                         f"python -m ablate.train {' '.join(overrides)} (its first job trains it)")
    # heavy: torch/transformers, to fingerprint the weights, off probe's --help and its other paths
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from ablate.models import weights_sha256

    hf_logging.disable_progress_bar()  # a record, not a run: no per-file "Loading weights" bar

    trained_at = (json.loads(upstream.status_file.read_text()).get("git_sha") or "")[:7]
    # the commit that trained it, and its weights' fingerprint: the same cache key can hold other
    # weights on another machine (a re-trained upstream), which status.json's init_sha256 tells apart
    record_ = {"name": name, "overrides": f"upstream SFT of {' '.join(overrides)} ({key})",
               "commit": trained_at or commit(), "summary": json.loads(path.read_text()),
               "weights_sha256": weights_sha256(AutoModelForCausalLM.from_pretrained(str(upstream.model_dir)))}
    write_text(out_dir / f"{slug(name)}.json", json.dumps(record_, indent=1, sort_keys=True) + "\n")
    return record_


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", help="Hydra overrides: experiment=<study preset> (required), testbed=..., key=value")
    p.add_argument("--claim", action="append", default=[], help="probe only this claim's precondition (repeatable)")
    p.add_argument("--seeds", type=int, default=1, help="seeds of the probed condition (default 1)")
    p.add_argument("--root", type=Path, default=Path("probes"), help="where the probe runs go (default probes/)")
    p.add_argument("--csv", type=Path, default=DEFAULT_CSV, help=f"the table of measurements (default {DEFAULT_CSV})")
    p.add_argument("--no-record", action="store_true", help="print only; leave the CSV alone")
    p.add_argument("--eval", default=None, metavar="NAME",
                   help="evaluate a saved model (default model_dir=builtin:tiny-sft) under the overrides instead "
                        "of training; the summary goes to <csv's folder>/evals/NAME.json")
    p.add_argument("--upstream", action="store_true",
                   help="with --eval: record the cached upstream SFT's own evaluation for the overrides' config "
                        "(a testbed's starting point) instead of evaluating a saved model")
    args = p.parse_intermixed_args(argv)  # overrides before or after the options
    if args.eval:
        if args.upstream:
            upstream_summary(args.eval, args.overrides, args.csv.parent / "evals")
        else:
            probe_eval(args.eval, args.overrides, args.root, args.csv.parent / "evals")
        return 0
    if not any(o.startswith("experiment=") for o in args.overrides):
        p.error("name the study: experiment=<preset>, e.g. experiment=curriculum_study")
    if args.seeds < 1:
        p.error(f"--seeds {args.seeds}: must be >= 1")
    probe(args.overrides, args.claim, args.seeds, args.root, None if args.no_record else args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
