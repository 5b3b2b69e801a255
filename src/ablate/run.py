"""One run, end to end, the composition root: validate the config, resolve the starting model (training
an upstream stage first when it is missing), build the task and the model, fit the stage, export the model,
evaluate it in each regime, and record it all in the run directory (`ablate.rundir.RunDir`: `.hydra/`,
`status.json`, `metrics.csv`, `checkpoints/`, `model/`, `eval/<regime>/`). A resumed run picks up where the
last attempt stopped. The entry point that launches it is `python -m ablate.train` (ablate.train).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig
from transformers import AutoModelForCausalLM

from ablate.checks import check_config
from ablate.config import plain, torch_threads
from ablate.config.scale import scaled_block
from ablate.device import device
from ablate.eval import evaluate, format_summary, write_eval
from ablate.fit import global_rank, record_data_parallel, record_resume
from ablate.models import load_model, load_tokenizer, parameter_count, weights_sha256
from ablate.rollout.tools import build_tool
from ablate.rundir import RunDir
from ablate.rundir.atomic import export_model, model_exported, remove_orphans
from ablate.rundir.code import code_fingerprints
from ablate.rundir.ownership import owned
from ablate.rundir.record import record_config
from ablate.rundir.status import RunStatus, State, read_status
from ablate.stages import REGIME_NO_TOOL, REGIME_TOOL, final_regimes, fit_stage, starting_model_config
from ablate.tasks import build_task

log = logging.getLogger("ablate.train")


def run(cfg: DictConfig, run_dir: Path, callbacks: Sequence[Any] = ()) -> Path:
    """One run, end to end; returns the run directory. `callbacks`: Lightning callbacks for this stage's fit.
    Raises RunOwned when another live process owns `run_dir` (ablate.rundir.ownership; the entry point has
    taken it already, an upstream run takes it here)."""
    with owned(run_dir) if global_rank() == 0 else contextlib.nullcontext():
        return _run(cfg, run_dir, callbacks)


def study_fingerprint(cfg: DictConfig) -> str | None:
    """The sha256 of the study block this run runs under: ablate.stats checks it against the registration."""
    if cfg.get("study") is None:
        return None
    # heavy: ablate.stats' readers, ~10 ms of ablate.train's start-up, for a study's runs only
    from ablate.stats.claims.registration import fingerprint

    return fingerprint(scaled_block(plain(cfg.study), plain(cfg.model)))


def _run(cfg: DictConfig, run_dir: Path, callbacks: Sequence[Any]) -> Path:
    import lightning as L  # heavy: Lightning, off ablate.train's config refusal and --help

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
        status.update(threads=torch.get_num_threads(), study_sha256=study_fingerprint(cfg), code=code_fingerprints())
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
            if cfg.resume == "auto":
                record_resume(status, rd.checkpoint_dir)
            clock = time.monotonic()
            fit_stage(cfg, model, tokenizer, splits, task, run_dir, status,
                      [*callbacks, record_data_parallel(status, cfg.stage)])
            status.timing("train_s", time.monotonic() - clock)
            if worker:
                return run_dir
            export_model(model, tokenizer, model_dir)  # all or nothing: a kill never leaves half a model/
        model.to(device(cfg.trainer))
        _evaluate(cfg, rd, model, tokenizer, splits.test, task, regimes, status)
    print(f"run directory: {run_dir}")
    return run_dir


def _evaluate(cfg: DictConfig, rd: RunDir, model, tokenizer, test: Sequence[Any], task, regimes: Sequence[str],
              status) -> None:
    """The final evaluation in each regime not yet evaluated (a resumed run skips those it has), written to
    eval/<regime>/ and timed in status.json."""
    for regime in regimes:
        if cfg.resume == "auto" and rd.evaluated(regime):
            continue
        clock = time.monotonic()
        tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if regime == REGIME_TOOL else None
        summary, rows = evaluate(model, tokenizer, test[:cfg.eval.get("limit")], cfg.model.template, task,
                                 cfg.eval, int(cfg.seed), tool, tool_cfg=cfg.tool)
        write_eval(rd, regime, summary, rows)
        status.timing(f"eval_{regime}_s", time.monotonic() - clock)
        print(f"eval [{regime}]: {format_summary(summary)}")


def _prepared_and_complete(cfg: DictConfig, rd: RunDir, regimes: Sequence[str]) -> bool:
    """Record the config and clear a killed attempt's temporary files (rank 0); True when a resumed run
    already finished: completed, its model exported and every regime evaluated."""
    if global_rank() == 0:
        record_config(cfg, rd)  # what this directory holds, out of Hydra's reach (ablate.rundir.record)
        for folder in rd.writable_dirs((REGIME_NO_TOOL, REGIME_TOOL)):
            remove_orphans(folder)  # temporary files of a killed attempt
    done = (read_status(rd) or {}).get("state") == State.COMPLETED
    return done and cfg.resume == "auto" and model_exported(rd.model_dir) and all(rd.evaluated(r) for r in regimes)
