"""`python -m ablate.train`: compose the config, validate it, own the run directory, and run one stage there
(ablate.run: train, evaluate, write the run dir); the exit codes and a sweep's job handling live here.

    python -m ablate.train                                   # SFT of the tiny default, then evaluation
    python -m ablate.train experiment=smoke                  # the whole path in seconds
    python -m ablate.train --cfg job                         # print the composed config
    python -m ablate.train hydra.run.dir=outputs/x           # re-running the same dir resumes it

Run directory (`ablate.rundir.RunDir`): `.hydra/` (config, overrides), `status.json`, `metrics.csv`, `checkpoints/`,
`model/` (`save_pretrained` export), `eval/<regime>/{summary.json,samples.jsonl}`. The run: `ablate.run`; checks:
`ablate.checks`; the stages and their wiring: `ablate.stages`; Lightning's fit: `ablate.fit`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import ablate.parts  # noqa: F401 - every part's schema, before Hydra composes
from ablate import console
from ablate.config import CONF_DIR, local_sweep_worker
from ablate.config.checks import added_keys_error
from ablate.checks import ConfigError, check_config
from ablate.fit import launch_rank
from ablate.rundir.ownership import SKIPPED, RunOwned, owned
from ablate.rundir.record import check_run_dir, restore_hydra_files
from ablate.rundir.status import RunStatus
from ablate.run import run
from ablate.stopping import Stopped, exit_now, preempted, requeue_job, stop_on_signals, stop_signal

log = logging.getLogger("ablate.train")


# CONF_DIR, not "conf": in a clone that did not follow the src/ablate/conf link it is the top-level tree
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    worker = local_sweep_worker()  # a joblib worker process: it stops when its sweep does
    with stop_on_signals(watch_parent=worker):
        try:
            return job(cfg, run_dir, sweeping)
        except BaseException as exc:
            signum = stop_signal(exc)
            if signum is None:
                raise
            stop = exc if isinstance(exc, Stopped) else Stopped(signum)  # Lightning's SIGTERMException exits 0
            if preempted(signum) and launch_rank() == 0:  # SLURM's warning: the job goes back in the queue
                print(f"{stop} (SLURM's warning): {requeue_job()}; run directory {run_dir}", file=sys.stderr)
            else:
                print(f"{stop}: run the same command again to resume {run_dir} (a run under way there is marked "
                      "interrupted in its status.json)", file=sys.stderr)
            if worker:
                exit_now(stop.code)  # its sweep is stopping: no further job, no result to hand back
            raise stop from None


def job(cfg: DictConfig, run_dir: Path, sweeping: bool) -> str | None:
    """One launch or sweep job in `run_dir`, once this process owns it (before anything is written,
    and before the seconds of importing Lightning: a refusal comes at once). Refused, a single launch
    exits 2 and a sweep's job is skipped (returning ablate.rundir.ownership.SKIPPED); the sweep goes on."""
    rank0 = launch_rank() == 0  # data-parallel workers share rank 0's directory
    with contextlib.ExitStack() as ownership:
        if rank0:
            try:
                ownership.enter_context(owned(run_dir, sweep_pid=os.getppid() if local_sweep_worker() else None))
            except RunOwned as err:
                restore_hydra_files(run_dir)  # Hydra rewrote them before this function ran
                print(f"{'skipped' if sweeping else 'error'}: {err}", file=sys.stderr)
                if not sweeping:
                    sys.exit(2)
                return SKIPPED
        overrides = list(HydraConfig.get().overrides.task)
        log.info("run: %s -> %s", " ".join(overrides) or "(defaults)", run_dir)  # the composed run in one line
        checked_run(cfg, run_dir, sweeping, rank0)
    return None


def checked_run(cfg: DictConfig, run_dir: Path, sweeping: bool, rank0: bool) -> None:
    """`run`, refused when the directory holds another config; errors end a single launch (exit 2
    for a config error) and are recorded and logged in a sweep, which goes on. The config is checked
    before the console is set up: that imports Lightning (seconds), which a refusal does not need."""
    try:
        conflict = check_run_dir(cfg, run_dir) if rank0 else None
        if conflict:
            print(f"config error: {conflict}", file=sys.stderr)
            if not sweeping:
                sys.exit(2)
            return  # the directory is another run's: no status of this job goes there
        check_config(cfg)
        console.setup(console.interactive(sweeping))
        run(cfg, run_dir)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        if not sweeping:
            sys.exit(2)
        status = RunStatus(run_dir)  # a sweep goes on; the job is on record as failed
        status.start(stage=cfg.stage.name)
        status.fail(err)
    except Exception as err:
        fault = machine_fault(err)
        if not sweeping and fault:
            print(f"error: {fault}", file=sys.stderr)
            sys.exit(EXIT_MACHINE_FAULT)
        if not sweeping:
            raise
        # status.json already says failed, with the error; one bad job must not stop the sweep.
        log.exception("job %s failed (see %s/status.json); the sweep continues", run_dir.name, run_dir)


# A fault of the machine, not of the run (status.json says failed, with the error): the fix, then the same
# command resumes the run from its last checkpoint. Exit 3, apart from a config error's 2 and a crash's 1.
EXIT_MACHINE_FAULT = 3
MACHINE_FAULTS = {errno.ENOSPC: "free space there", errno.EDQUOT: "free space there (or raise the quota)",
                  errno.EACCES: "make it writable for this user", errno.EPERM: "make it writable for this user",
                  errno.EROFS: "point hydra.run.dir at a writable disk, or remount it read-write"}


def machine_fault(err: BaseException) -> str | None:
    """One line for an OSError of the machine (disk full, permission denied, read-only file system) found in
    `err` or what caused it: the path, what happened, the fix. None for anything else."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in MACHINE_FAULTS:
            where = f" writing {seen.filename}" if seen.filename else ""
            return (f"{seen.strerror or os.strerror(seen.errno)}{where}: {MACHINE_FAULTS[seen.errno]}, then run the same "
                    "command again: it resumes from the last checkpoint (status.json records the failure)")
        seen = seen.__cause__ or seen.__context__
    return None


def drop_multirun_when_printing(argv: list[str]) -> list[str]:
    """`-m experiment=<study> --cfg hydra` shows a study's grid (hydra.sweeper): Hydra refuses --cfg
    with -m, and printing a config needs no sweep, so -m is dropped there."""
    printing = any(a == "--cfg" or a.startswith("--cfg=") or a in ("-c", "--info") for a in argv)
    return [a for a in argv if a not in ("-m", "--multirun")] if printing else argv


def refuse_added_keys(argv: list[str]) -> None:
    """`+key=value` naming a key no schema has: exit 2 naming it, before Hydra composes (which would
    refuse it too, with its own message and exit code 1)."""
    error = added_keys_error([a for a in argv if not a.startswith("-")], CONF_DIR)
    if error:
        print(f"config error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.argv[1:] = drop_multirun_when_printing(sys.argv[1:])
    refuse_added_keys(sys.argv[1:])
    main()
