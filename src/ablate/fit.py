"""Lightning's fit for every stage: the run directory's CSV log (and the optional loggers), checkpoints,
resume, and the precision; `global_rank` for the parts that only rank 0 may do."""

from __future__ import annotations

import logging
import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig

from ablate.check_registry import CHECKS
from ablate.config import ConfigError, require
from ablate.config.schemas import config_schema, typed
from ablate.console import progress_bars, progress_log
from ablate.device import device, precision
from ablate.loggers import extra_loggers
from ablate.rundir import RunDir
from ablate.rundir.atomic import checkpoint_io
from ablate.rundir.metrics_csv import merge_metrics, stash_metrics
from ablate.rundir.status import EFFECTIVE_BATCH, WORLD_SIZE
from ablate.stopping import step_boundaries

log = logging.getLogger("ablate.train")


@config_schema("trainer", "trainer_schema")
@dataclass
class TrainerConfig:
    """`trainer=` (conf/trainer/default.yaml; ddp.yaml extends it): the hardware Lightning's Trainer runs on.
    `devices` and `precision` take whatever Lightning takes (a count, a list or a string of device ids; a
    precision string or number), so they are left untyped."""

    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    num_nodes: int = 1
    precision: Any = "auto"
    num_threads: Optional[int] = None
    compile: bool = False
    log_every_n_steps: int = 1


def global_rank() -> int:
    """This process's rank in data-parallel training (Lightning re-launches the command once per extra
    device with the rank in the environment); 0 without DDP."""
    from lightning.pytorch.utilities import rank_zero_only  # heavy: lightning (seconds), off the refusal path

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def launch_rank() -> int:
    """The rank the launcher put in the environment: what `global_rank` says before a Trainer exists,
    read as Lightning reads it at import, without importing it (seconds): a second launch of a run
    directory in use is refused at once."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if os.environ.get(key) is not None:
            return int(os.environ[key])
    return 0


def fit(cfg: DictConfig, module, run_dir: Path, datamodule=None, dataloader=None, gradient_clip: float | None = None,
         callbacks: Sequence[Any] = ()):
    """Lightning fit with the run directory's CSV log, checkpoints and resume (`callbacks`: e.g. validation)."""
    # heavy: lightning (seconds; ablate.lit.elapsed imports it too), off ablate.train's refusal path
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    from ablate.lit.elapsed import ElapsedTime

    # name="" and version="": the CSV lands on the run directory's metrics.csv (RunDir.metrics_file)
    loggers: list[Any] = [CSVLogger(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=10)]
    loggers.extend(extra_loggers(cfg, run_dir))
    checkpoints = RunDir(run_dir).checkpoint_dir
    t = typed(TrainerConfig, cfg.trainer)
    trainer = L.Trainer(
        max_steps=int(cfg.stage.max_steps), max_epochs=-1, accelerator=t.accelerator,
        devices=t.devices, strategy=t.strategy, num_nodes=t.num_nodes,
        precision=precision(cfg.trainer), gradient_clip_val=gradient_clip, logger=loggers,
        # Lightning runs checkpoint callbacks last: a step's validation is logged before its checkpoint.
        # A SIGTERM / Ctrl-C is held back from a step's checkpoint to its metrics row (ablate.stopping).
        callbacks=[ElapsedTime(), *callbacks, step_boundaries(str(checkpoints / RunDir.LAST_CHECKPOINT)),
                   ModelCheckpoint(dirpath=str(checkpoints), save_last=True,
                                   every_n_train_steps=int(cfg.stage.checkpoint_every))],
        log_every_n_steps=t.log_every_n_steps, enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=0, default_root_dir=str(run_dir), plugins=[checkpoint_io(), *slurm_plugins()],
        enable_progress_bar=progress_bars(),
    )
    if not progress_bars():  # not watched (a sweep job, a log file): a line every tenth of the run instead
        trainer.callbacks.append(progress_log())
    # RLOO and DPO step their optimizer inside training_step, before Lightning saves: the checkpoint
    # holds the post-step state a resume needs (the resume tests check it), so Lightning's warning about
    # manual optimization and step-based checkpoints, a page of sample code per run, is noise here.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    resume_from = resume_checkpoint(checkpoints) if cfg.resume == "auto" else None
    if resume_from and global_rank() == 0:
        log.info("resuming from %s", resume_from)
        stash_metrics(run_dir)
    if t.compile:
        module.compile_learner()  # the loss's forward only (ablate.lit.CompilableLearner)
    module.train()  # from_pretrained returns eval mode; Lightning expects training mode at the start
    try:
        if datamodule is not None:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
        else:
            trainer.fit(module, train_dataloaders=dataloader, ckpt_path=resume_from)
    finally:
        if global_rank() == 0:
            merge_metrics(run_dir)


def per_device_batch(stage: DictConfig) -> int:
    """What one data-parallel rank takes per optimizer step: RLOO's prompts (stage.batch_prompts), else
    the stage's stage.batch_size (SFT's sequences, DPO's pairs)."""
    return int(stage.batch_prompts if "batch_prompts" in stage else stage.batch_size)


def record_data_parallel(status, stage: DictConfig):
    """A Lightning callback that records, when training starts, the world size and the effective batch
    (world size x `per_device_batch`) in status.json (ablate.rundir.status.WORLD_SIZE, EFFECTIVE_BATCH)."""
    from lightning.pytorch.callbacks import Callback  # heavy: lightning (seconds), off the refusal path

    class RecordDataParallel(Callback):
        def on_train_start(self, trainer, *_args) -> None:
            world = int(trainer.world_size)
            status.update(**{WORLD_SIZE: world, EFFECTIVE_BATCH: world * per_device_batch(stage)})

    return RecordDataParallel()


def slurm_plugins() -> list:
    """Under SLURM, Lightning's SLURM environment without its own requeue on SIGUSR1 (a checkpoint saved
    inside the signal handler, mid-step, and an `hpc_ckpt` a resume would prefer): ablate.stopping owns
    the scheduler's warning, checkpointing at a step's end and requeueing the job."""
    from lightning.fabric.plugins.environments import SLURMEnvironment  # heavy: lightning (seconds)

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def resume_plan(checkpoints: Path) -> tuple[str | None, list[str]]:
    """The checkpoint a resume starts from, and the newer ones passed over: `last.ckpt`, or where it does not
    read (a copy cut short, a damaged disk) the newest step checkpoint that does. A torch checkpoint is a zip
    file whose directory sits at its end, so a truncated one fails to open cheaply."""
    def step(path: Path) -> int:
        return int(path.stem.rsplit("step=", 1)[1].split("-")[0])

    steps = sorted(checkpoints.glob("epoch=*-step=*.ckpt"), key=step, reverse=True) if checkpoints.is_dir() else []
    passed_over = []
    for path in [checkpoints / RunDir.LAST_CHECKPOINT, *steps]:
        if not path.is_file():
            continue
        try:
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
        except (OSError, zipfile.BadZipFile):
            passed_over.append(path.name)
            continue
        return str(path), passed_over
    return None, passed_over


def resume_checkpoint(checkpoints: Path) -> str | None:
    """`resume_plan`'s checkpoint, with a warning naming what was passed over."""
    checkpoint, passed_over = resume_plan(checkpoints)
    if passed_over and checkpoint:
        log.warning("resuming from %s: %s did not read (damaged or cut short)", Path(checkpoint).name,
                    ", ".join(passed_over))
    elif passed_over:
        log.warning("no checkpoint in %s reads (%s): starting the run again from step 0", checkpoints,
                    ", ".join(passed_over))
    return checkpoint


def record_resume(status, checkpoints: Path) -> None:
    """A resume in status.json (`resumed_from`, kept with its attempt in `history`): the checkpoint it starts
    from (None: step 0) and the damaged ones it passed over."""
    checkpoint, passed_over = resume_plan(checkpoints)
    if checkpoint or passed_over:
        status.update(resumed_from={"checkpoint": checkpoint and Path(checkpoint).name, "passed_over": passed_over})


@CHECKS.register("compile", order=90)
def check_compile(cfg: DictConfig) -> None:
    """`trainer.compile=true` on CPU needs a C++ compiler (torch.compile's inductor builds its kernels with it)."""
    if not cfg.trainer.get("compile"):
        return
    if device(cfg.trainer) == "cuda":
        return
    compilers = [c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c]
    require(any(shutil.which(c) for c in compilers),
            f"trainer.compile=true needs a C++ compiler on CPU (torch.compile builds its kernels with one); none of "
            f"{compilers} is on PATH: install g++ (or set CXX), or set trainer.compile=false")

