"""`python -m ablate.studies.register experiment=<study>`: register a study's claims before its first run.

Composes the preset as a run would (Hydra, no training), checks its study block as start-up does, and
writes `registration.yaml` (default docs/findings/<study.name>/, or --out DIR) atomically: the composed
study block, the git commit, the UTC time and the block's sha256 fingerprint. An existing registration
is never overwritten; --amend records an amendment (with its differences) and keeps the original.
`python -m ablate.stats` then decides with the registered block (docs/stats.md, Registration).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from ablate.config import CONF_DIR, ConfigError, plain
from ablate.config.scale import scaled_block  # the study at its model's scale: `model=small` is its own study
from ablate.rundir.status import git_sha


def compose_study(overrides: list[str]) -> dict:
    """The composed, checked `study:` block of a run with these overrides."""
    # heavy: torch/transformers (every part's schema, before Hydra composes), off --help and --study
    import ablate.parts  # noqa: F401
    from ablate.checks import check_study

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    if cfg.get("study") is None:
        raise SystemExit(f"error: {' '.join(overrides) or 'the default config'} has no study block; "
                         "name a study preset, e.g. experiment=curriculum_study")
    check_study(cfg)
    return scaled_block(plain(cfg.study), plain(cfg.model))  # what the registration fingerprints


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.studies.register", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides, e.g. experiment=curriculum_study")
    p.add_argument("--study", type=Path, metavar="STUDY.yaml",
                   help="register an external study's block (runs trained with any trainer, docs/any_runs.md) "
                        "instead of composing a preset; default --out: beside STUDY.yaml")
    p.add_argument("--out", type=Path, metavar="DIR", help="directory of registration.yaml "
                                                            "(default docs/findings/<study.name>/)")
    p.add_argument("--amend", action="store_true",
                   help="the registration exists: record the preset's changes as an amendment (the original stays)")
    args = p.parse_args(argv)
    if (args.study is None) == (not args.overrides):
        p.error("give either Hydra overrides (experiment=<study>) or --study STUDY.yaml")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        p.error(f"{bad[0]!r} is not a Hydra override KEY=VALUE (e.g. experiment=curriculum_study)")
    # heavy: the stats and external readers (numpy, pandas, scipy: ~2 s), after the arguments: --help answers at once
    from ablate.external.report import load_study
    from ablate.external.tidy import TidyError
    from ablate.stats.claims.registration import FILE, register
    from ablate.stats.read.runs import StatsInputError

    try:
        if args.study is not None:
            block = load_study(args.study)
            path = (args.out or args.study.parent) / FILE
        else:
            block = compose_study(args.overrides)
            path = (args.out or Path("docs/findings") / str(block.get("name") or "unnamed_study")) / FILE
        reg = register(path, block, amend=args.amend, commit=git_sha())
    except TidyError as exc:
        for line in exc.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except (ConfigError, StatsInputError, HydraException) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    last = reg.records[-1]
    what = "registered" if len(reg.records) == 1 else f"amendment {len(reg.records) - 1} recorded"
    print(f"{path}: {reg.study} {what} at {last.at} (commit {(last.commit or 'unknown')[:10]}, "
          f"fingerprint {last.fingerprint[:12]}, {len(block.get('claims') or [])} claim(s))")
    print(f"  code bound: training {last.code['training'][:12]}, analysis {last.code['analysis'][:12]} (a run whose "
          "training code differs is not confirmatory unless an amendment (--amend) precedes it)")
    for change in last.changes:
        print(f"  {change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
