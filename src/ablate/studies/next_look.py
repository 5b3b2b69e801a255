"""`python -m ablate.studies.next_look SWEEP_DIR...`: continue a study to its seed plan's next look.

Reads the sweep(s) as `python -m ablate.stats` does, decides the declared claims, and for the claims
still inconclusive whose plan has a next look (and whose declared futility rule does not stop them),
prints the training command that adds exactly the seeds their conditions lack (new seeds, numbered
after the existing ones, into a directory of their own); decided claims add nothing. `--run` runs
the command(s). Then report every directory pooled:

    python -m ablate.studies.next_look multirun/curriculum_study --run
    python -m ablate.stats multirun/curriculum_study multirun/curriculum_study_look2

Claims are decided as `ablate.stats` decides them: under the study's registration (`--registration
PATH`, else registration.yaml beside a committed report given as SWEEP_DIR, else
docs/findings/<study>/), so the plan, alpha and claims that say what is still open are the
registered ones, not whatever the preset says today.

A look held part way (its parts `<study>_look<k>_<first seed>`, one kept by `ablate.stats --hold` at the
end of a session) is finished first: the command adds the seeds its arms lack for that look, into one
more part, and nothing is decided until it is whole.

The report then records the new look (planned, since the seeds reach the plan's count) and applies
the plan's boundary to it. Arms that need different seed ranges get one command and one directory
each, `<study>_look<N>_<first seed>`; the report counts those directories as one look.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path


def _needs(result, labels_to_cond: dict, sweep, requires: dict[str, str | None] | None = None) -> dict[tuple, int]:
    """condition -> seeds per arm it must reach, for the inconclusive claims with a next look, and for the claims
    that wait on one of them (`requires`: claim id -> the claim it requires), so that a claim which becomes
    testable when its requirement replicates is decided on the same look's seeds (003's anneal_keeps_tool_gain
    on fixed_tool_beats_no_tool), not on the look before's."""
    need: dict[tuple, int] = {}
    t = result.table
    looks: dict[str, int] = {}  # claim id -> the next look it continues to
    for r in t[t["family_size"] > 0].to_dict("records"):
        if r["verdict"] == "inconclusive" and r["next_look"] == r["next_look"]:  # NaN: the plan has no further look
            looks[r["id"]] = int(r["next_look"])
        elif r["verdict"] == "not testable" and (requires or {}).get(r["id"]) in looks:
            looks[r["id"]] = looks[requires[r["id"]]]
        else:
            continue
        for label in (r["condition"], r["baseline"]):
            cond = labels_to_cond.get(label)
            if cond is not None:
                need[cond] = max(need.get(cond, 0), looks[r["id"]])
    return need


def _seeds(sweep, cond) -> list[int]:
    out = []
    for run in sweep.runs:
        if run.condition == cond and run.ok and run.seed is not None:
            try:
                out.append(int(run.seed))
            except ValueError:
                pass
    return sorted(out)


def _grid(cond: tuple) -> dict[str, str]:
    return {k: v for k, _, v in (o.partition("=") for o in cond) if k != "experiment"}


def _decided(sweep, study, labels: dict, sweep_dirs: list[Path], registration: Path | None):
    """The claims, decided under the registration `ablate.stats` would use (labels: the sweep's)."""
    # heavy: the analysis pipeline (pandas, scipy: ~1.5 s), after the arguments: --help answers at once
    from ablate.stats.claims.standing import sweep_decided
    from ablate.stats.read.archive import is_archive
    from ablate.stats.read.runs import StatsInputError
    from ablate.stats.stages.conditions import usable_regimes

    if study is None or not study.declared.claims:
        raise StatsInputError("the runs declare no claims (a study preset's study.claims): no plan to continue")
    beside = sweep_dirs[0] if is_archive(sweep_dirs[0]) else None
    return sweep_decided(sweep, study, labels, usable_regimes(sweep), study.effect or 0.03, registration, beside)


def _unfinished(sweep, looks: tuple[int, ...]) -> dict[tuple, tuple[str, int]]:
    """condition -> (its look's name, the seeds it must reach) for each arm stopped inside a look run over
    sessions: its latest seeds lie in a `<study>_look<k>_<first seed>` part (ablate.stats --hold) and
    their count is not one the plan looks at."""
    # heavy: the analysis pipeline (pandas, scipy: ~1.5 s), after the arguments: --help answers at once
    from ablate.stats.read.archive import root_of
    from ablate.stats.values.table import is_look_part, look_of

    out = {}
    for cond in {r.condition for r in sweep.runs if r.ok}:
        seeds = _seeds(sweep, cond)
        last = next((r for r in sweep.runs
                     if r.ok and r.condition == cond and seeds and str(r.seed) == str(seeds[-1])), None)
        part = root_of(last.path, sweep.roots).name if last else ""
        if is_look_part(part) and len(seeds) not in looks and len(seeds) < max(looks):
            out[cond] = (look_of(part), min(k for k in looks if k > len(seeds)))
    return out


def _finish(sweep, study, base: Path) -> list[list[str]]:
    """The commands that finish a look held part way (every arm to the look's seed count), or []."""
    if study is None or not study.declared.plan.declared:
        return []
    unfinished = _unfinished(sweep, study.declared.plan.looks)
    out = []
    for look, target in sorted(set(unfinished.values())):
        conds = sorted(c for c, v in unfinished.items() if v == (look, target))
        start = max(max(_seeds(sweep, c)) for c in conds) + 1
        count = target - min(len(_seeds(sweep, c)) for c in conds)
        out.append(_command(_preset(_experiments(conds), _runs_of(sweep, conds)), conds, start, start + count,
                            base.parent / f"{look}_{start}"))
    return out


def _experiments(conds) -> set[str]:
    return {o.partition("=")[2] for cond in conds for o in cond if o.startswith("experiment=")}


def _runs_of(sweep, conds) -> list:
    return [r for r in sweep.runs if r.condition in conds]


def _command(preset: dict, conds: list[tuple], a: int, b: int, sweep_dir: Path) -> list[str]:
    """The training command that runs seeds a..b-1 of `conds` into `sweep_dir`."""
    grids = "[" + ",".join("{" + ",".join(f"{k}:{_quote(v)}" for k, v in _grid(c).items()) + "}"
                           for c in conds) + "]"
    cmd = ["python", "-m", "ablate.train", "-m"]
    cmd += [f"experiment={preset['experiment']}"] if preset["experiment"] else []
    cmd += ["hydra/sweeper=grids"]
    cmd += [f"~hydra.sweeper.params.{k}" for k in preset["params"] if k != "seed"]
    return cmd + [f'hydra.sweeper.params.seed="range({a},{b})"', f"hydra.sweeper.grids={grids}",
                  f"hydra.sweep.dir={sweep_dir}"]


def commands(sweep_dirs: list[Path], registration: Path | None = None) -> list[list[str]]:
    # heavy: the analysis pipeline (pandas, scipy: ~1.5 s), after the arguments: --help answers at once
    from ablate.stats.read.archive import is_archive
    from ablate.stats.read.load import load_sweep
    from ablate.stats.stages.conditions import label_sweep

    sweep = load_sweep(sweep_dirs)
    # a committed report (ablate.stats.read.archive) continues into multirun/, named after its first sweep
    base = Path("multirun") / sweep.roots[0].name if is_archive(sweep_dirs[0]) else Path(sweep_dirs[0])
    study, _, _, labels, _ = label_sweep(sweep, (), False, [])
    if finish := _finish(sweep, study, base):  # a look held part way is finished before anything is decided
        return finish
    result = _decided(sweep, study, labels, sweep_dirs, registration)
    by_label = {label: cond for cond, label in labels.items()}
    need = _needs(result, by_label, sweep, {c.id: c.requires for c in study.declared.claims})
    preset = _preset(_experiments(need), _runs_of(sweep, need))
    groups: dict[tuple[int, int], list[tuple]] = {}
    for cond, target in sorted(need.items()):
        seeds = _seeds(sweep, cond)
        if len(seeds) >= target:
            continue
        start = (max(seeds) + 1) if seeds else 0
        groups.setdefault((start, start + target - len(seeds)), []).append(cond)
    look = 1 + int(result.looks["look"].max()) if len(result.looks) else 2
    # a first look named as one look's part (gpu_study.sh: <study>_look1_<first seed>) names the study once
    stem = re.sub(r"_look\d+(_\d+)?$", "", base.name)
    return [_command(preset, conds, a, b, base.parent / (f"{stem}_look{look}" + (f"_{a}" if len(groups) > 1 else "")))
            for (a, b), conds in groups.items()]


def _quote(v: str) -> str:
    """A grid value Hydra's parser keeps a string: the grids are Dict[str, str], and an unquoted True or 5
    would parse as a bool or an int and be refused."""
    try:
        float(v)
        typed = True
    except ValueError:
        typed = v.lower() in ("true", "false", "null", "none", "inf", "nan")
    return f"'{v}'" if typed or any(ch in v for ch in ",:[]{} ") else v


def _preset(experiments: set[str], runs) -> dict:
    """The experiment override the conditions share and the sweeper params their sweep ran with
    (from a run's .hydra/hydra.yaml): the keys the next look's grids replace."""
    from ablate.stats.read.runs import StatsInputError  # heavy: the stats readers (numpy), as in _decided

    if len(experiments) > 1:
        raise StatsInputError(f"the conditions to continue come from {len(experiments)} presets "
                              f"({', '.join(sorted(experiments))}); continue one study at a time")
    params = next((run.sweeper_params for run in runs if run.sweeper_params is not None), {})
    return {"experiment": next(iter(experiments), None), "params": params}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.next_look", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep_dirs", nargs="+", type=Path, metavar="SWEEP_DIR", help="the study's sweep directories")
    p.add_argument("--run", action="store_true", help="run the command(s) instead of printing them")
    p.add_argument("--registration", type=Path, metavar="PATH",
                   help="the study's registration.yaml (or its directory); default: beside a committed report, "
                        "else docs/findings/<study>/")
    p.add_argument("--study", type=Path, metavar="STUDY.yaml",
                   help="runs trained with any trainer: SWEEP_DIR is one table of runs (python -m ablate.stats RUNS "
                        "--study reads it) and this its study block; prints which seeds of which conditions to train "
                        "next in your trainer (docs/any_runs.md)")
    p.add_argument("--conditions", metavar="COL[,COL]", help="with --study: the table's condition columns")
    args = p.parse_args(argv)
    if args.study is not None and len(args.sweep_dirs) != 1:
        p.error("--study reads exactly one table of runs")  # before the heavy imports: a bad call answers at once
    # heavy: the analysis pipeline (pandas, scipy: ~1.5 s), after the arguments: --help answers at once
    from ablate.external.plan import main_external
    from ablate.stats.read.runs import StatsInputError

    if args.study is not None:
        return main_external(args.sweep_dirs[0], args.study, args.registration, args.conditions)
    try:
        cmds = commands(args.sweep_dirs, args.registration)
    except StatsInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cmds:
        print("nothing to continue: every claim is decided, not testable, at its plan's last look, "
              "or stopped by the plan's futility rule")
        return 0
    for cmd in cmds:
        line = shlex.join(cmd)
        print(line, flush=True)
        if args.run:
            rc = subprocess.call(cmd)
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
