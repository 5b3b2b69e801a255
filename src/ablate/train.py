"""`python -m ablate.train`: compose the config, validate it, train one stage, evaluate, write the run dir.

    python -m ablate.train                                   # SFT of the tiny default, then evaluation
    python -m ablate.train experiment=smoke                  # the whole path in seconds
    python -m ablate.train --cfg job                         # print the composed config
    python -m ablate.train hydra.run.dir=outputs/x           # re-running the same dir resumes it

Run directory (`ablate.rundir.RunDir`): `.hydra/` (config, overrides), `status.json`, `metrics.csv`, `checkpoints/`,
`model/` (`save_pretrained` export), `eval/<regime>/{summary.json,samples.jsonl}`. Checks: `ablate.checks`;
the stages and their wiring: `ablate.stages`; Lightning's fit: `ablate.fit`; the device: `ablate.device`.
"""

from __future__ import annotations

import logging
import errno
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import hydra
from omegaconf import DictConfig

import ablate.parts  # noqa: F401 - every part's schema, before Hydra composes
from ablate.config import CONF_DIR, torch_threads
from ablate.checks import ConfigError, check_config
from ablate.fit import global_rank, launch_rank
from ablate.rundir import RunDir
from ablate.stages import REGIME_NO_TOOL, REGIME_TOOL, final_regimes, fit_stage, starting_model_config

log = logging.getLogger("ablate.train")


def run(cfg: DictConfig, run_dir: Path, callbacks: Sequence[Any] = ()) -> Path:
    """One run, end to end; returns the run directory. `callbacks`: Lightning callbacks for this stage's fit.
    Raises RunOwned when another live process owns `run_dir` (ablate.rundir.ownership; the entry point has
    taken it already, an upstream run takes it here)."""
    import contextlib

    from ablate.rundir.ownership import owned

    with owned(run_dir) if global_rank() == 0 else contextlib.nullcontext():
        return _run(cfg, run_dir, callbacks)


def study_fingerprint(cfg: DictConfig) -> str | None:
    """The sha256 of the study block this run runs under: ablate.stats checks it against the registration."""
    if cfg.get("study") is None:
        return None
    from omegaconf import OmegaConf

    from ablate.stats.claims.registration import fingerprint

    return fingerprint(OmegaConf.to_container(cfg.study, resolve=True))


def _run(cfg: DictConfig, run_dir: Path, callbacks: Sequence[Any]) -> Path:
    import lightning as L
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.device import device
    from ablate.eval import evaluate, format_summary, write_eval
    from ablate.models import load_model, load_tokenizer, parameter_count, weights_sha256
    from ablate.rollout.tools import build_tool
    from ablate.rundir.atomic import export_model, model_exported
    from ablate.rundir.status import RunStatus
    from ablate.tasks import build_task

    check_config(cfg)
    rd = RunDir(run_dir)
    model_dir = rd.model_dir
    regimes = final_regimes(cfg)
    if _prepared_and_complete(cfg, rd, regimes):
        print(f"run already completed, nothing to do: {run_dir}")
        return run_dir

    worker = global_rank() > 0  # a DDP worker trains; rank 0 writes the run directory and evaluates
    with RunStatus(rd, writer=not worker).running(stage=cfg.stage.name) as status:
        torch.set_num_threads(torch_threads(cfg.trainer.num_threads))
        status.update(threads=torch.get_num_threads(), study_sha256=study_fingerprint(cfg))
        clock = time.monotonic()
        start = starting_model_config(cfg, run)  # may train an upstream stage: before seeding, which it would disturb
        status.timing("upstream_s", time.monotonic() - clock)
        L.seed_everything(int(cfg.seed), workers=True, verbose=False)
        clock = time.monotonic()
        task = build_task(cfg)  # task.name's registered task, scoring with the reward config
        splits = task.splits(pool_size=int(cfg.stage.pool_size),
                             val_size=int(cfg.eval.val_size) if cfg.eval.get("every") else 0)
        status.timing("data_s", time.monotonic() - clock)
        tokenizer = load_tokenizer(start)
        if model_exported(model_dir) and cfg.resume == "auto":
            log.info("stage already exported to %s; loading it", model_dir)
            model = AutoModelForCausalLM.from_pretrained(str(model_dir))
        else:
            model = load_model(start, tokenizer)
            init = start.get("name_or_path")
            status.update(parameters=parameter_count(model), train_problems=len(splits.train),
                          test_problems=len(splits.test), init=init,
                          init_sha256=weights_sha256(model) if init else None)  # a random init has none
            clock = time.monotonic()
            fit_stage(cfg, model, tokenizer, splits, task, run_dir, status, callbacks)
            status.timing("train_s", time.monotonic() - clock)
            if worker:
                return run_dir
            export_model(model, tokenizer, model_dir)  # all or nothing: a kill never leaves half a model/
        model.to(device(cfg.trainer))
        for regime in regimes:
            if cfg.resume == "auto" and rd.evaluated(regime):
                continue
            clock = time.monotonic()
            tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if regime == REGIME_TOOL else None
            summary, rows = evaluate(model, tokenizer, splits.test[:cfg.eval.get("limit")], cfg.model.template, task,
                                     cfg.eval, int(cfg.seed), tool, tool_cfg=cfg.tool)
            write_eval(run_dir, regime, summary, rows)
            status.timing(f"eval_{regime}_s", time.monotonic() - clock)
            print(f"eval [{regime}]: {format_summary(summary)}")
    print(f"run directory: {run_dir}")
    return run_dir


def _prepared_and_complete(cfg: DictConfig, rd: RunDir, regimes: Sequence[str]) -> bool:
    """Record the config and clear a killed attempt's temporary files (rank 0); True when a resumed run
    already finished: completed, its model exported and every regime evaluated."""
    from ablate.rundir.atomic import model_exported, remove_orphans
    from ablate.rundir.record import record_config
    from ablate.rundir.status import State, read_status

    if global_rank() == 0:
        record_config(cfg, rd)  # what this directory holds, out of Hydra's reach (ablate.rundir.record)
        for folder in rd.writable_dirs((REGIME_NO_TOOL, REGIME_TOOL)):
            remove_orphans(folder)  # temporary files of a killed attempt
    done = (read_status(rd) or {}).get("state") == State.COMPLETED
    return done and cfg.resume == "auto" and model_exported(rd.model_dir) and all(rd.evaluated(r) for r in regimes)


# CONF_DIR, not "conf": in a clone that did not follow the src/ablate/conf link it is the top-level tree
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ablate.config import local_sweep_worker
    from ablate.stopping import Stopped, exit_now, stop_on_signals, stop_signal

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
            print(f"{stop}: run the same command again to resume {run_dir} (a run under way there is marked "
                  "interrupted in its status.json)", file=sys.stderr)
            if worker:
                exit_now(stop.code)  # its sweep is stopping: no further job, no result to hand back
            raise stop from None


def job(cfg: DictConfig, run_dir: Path, sweeping: bool) -> str | None:
    """One launch or sweep job in `run_dir`, once this process owns it (before anything is written,
    and before the seconds of importing Lightning: a refusal comes at once). Refused, a single launch
    exits 2 and a sweep's job is skipped (returning ablate.rundir.ownership.SKIPPED); the sweep goes on."""
    import contextlib

    from hydra.core.hydra_config import HydraConfig

    from ablate.config import local_sweep_worker
    from ablate.rundir.ownership import SKIPPED, RunOwned, owned
    from ablate.rundir.record import restore_hydra_files

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
    from ablate import console
    from ablate.rundir.status import RunStatus
    from ablate.rundir.record import check_run_dir

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
    from ablate.config.checks import added_keys_error

    error = added_keys_error([a for a in argv if not a.startswith("-")], CONF_DIR)
    if error:
        print(f"config error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.argv[1:] = drop_multirun_when_printing(sys.argv[1:])
    refuse_added_keys(sys.argv[1:])
    main()
