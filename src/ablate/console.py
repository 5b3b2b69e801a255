"""What a run prints: one line per message, no tips, no false alarms, progress bars only where a
person watches them.

`setup(interactive)` runs at the start of `python -m ablate.train` (after Hydra has set up logging):

* Lightning's own console handler on the `lightning` logger goes: its records reach Hydra's handlers
  (console and `<run>/<job>.log`) once instead of twice. Its INFO lines (accelerator, `fit stopped`)
  go to the log file only; warnings still reach the console.
* Lightning's advertising tips (litlogger, litmodels) are dropped everywhere.
* Warnings that say nothing to a user: the CSV logger's "Experiment logs directory ... exists and is
  not empty" (the run directory always exists, Hydra created it; a resumed run's rows are kept by
  `ablate.rundir.metrics_csv.stash_metrics`), torch's `LeafSpec` deprecation raised inside Lightning, and on a
  resume, "Checkpoint directory ... exists" and the dataloader-not-resumable note (ablate restores
  its data order and sampler state itself; the resume tests check it).
* transformers' per-file bars (loading weights, writing shards) are off. When the run is not
  interactive (stderr is not a terminal, or a `-m` sweep job), every tqdm bar is off (`TQDM_DISABLE`)
  and so is Lightning's; `ProgressLog` writes a log line every tenth of the steps, and at least every
  `LOG_EVERY_S` seconds, instead; `tracked` does the same for the long loops before training (generating
  and solving a problem pool, evaluation), so a run written to a file never goes quiet for minutes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

log = logging.getLogger("ablate.train")

# a run written to a file (a cluster job) says something at least this often, whatever it is doing
LOG_EVERY_S = 30.0

QUIET_WARNINGS = (
    r"Experiment logs directory .* exists and is not empty",
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",
    # a resumed run: its checkpoints are there on purpose, and its data order is restored by ablate itself
    r"Checkpoint directory .* exists and is not empty",
    r"You're resuming from a checkpoint that ended before the epoch ended",
    # any machine with SLURM's client installed, and a batch script that execs the run (docs/training.md)
    r"The `srun` command is available on your system but is not used",
)


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip:" not in str(record.msg)


class _FileOnly(logging.Filter):
    """On a console handler: Lightning's INFO records stay in the log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("lightning") and record.levelno < logging.WARNING)


def interactive(sweeping: bool = False) -> bool:
    try:
        return sys.stderr.isatty() and not sweeping
    except (AttributeError, ValueError):
        return False


def _is_console(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__))


def setup(interactive: bool) -> None:
    # tqdm reads TQDM_* when it is imported (lightning imports it): set it first
    if not interactive:
        os.environ["TQDM_DISABLE"] = "1"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    else:
        os.environ.pop("TQDM_DISABLE", None)
    if not interactive:
        _disable_tqdm()
    # heavy: lightning (seconds), imported once the config is checked; it adds its console handler on import:
    import lightning  # noqa: F401 - import first, then remove that handler

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if _is_console(handler):
                logger.removeHandler(handler)
        logger.propagate = True
    root = logging.getLogger()
    if not root.handlers:  # not under Hydra: one plain console handler
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    for handler in root.handlers:
        if not any(isinstance(f, _DropTips) for f in handler.filters):
            handler.addFilter(_DropTips())
        if _is_console(handler) and not any(isinstance(f, _FileOnly) for f in handler.filters):
            handler.addFilter(_FileOnly())
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    try:
        from transformers.utils import logging as hf_logging  # heavy: transformers, off ablate.stats (via ablate.tasks)

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


def _disable_tqdm() -> None:
    """Wrap tqdm's constructor so every bar starts disabled: TQDM_DISABLE alone does not stop a bar made
    with an explicit `disable=False` (`progress=True` callers), nor one from a tqdm imported earlier."""
    import tqdm.std  # order: tqdm reads TQDM_* when imported, after `setup` sets them

    if getattr(tqdm.std.tqdm, "_ablate_quiet", False):
        return
    original = tqdm.std.tqdm.__init__

    def __init__(self, *args, **kwargs):
        kwargs["disable"] = True
        original(self, *args, **kwargs)

    tqdm.std.tqdm.__init__ = __init__
    tqdm.std.tqdm._ablate_quiet = True


def progress_bars() -> bool:
    """Whether Lightning shows its bar: not when `setup` turned the bars off."""
    return os.environ.get("TQDM_DISABLE", "") not in ("1", "true", "True")


def tracked(iterable: Iterable[T], desc: str, total: int, unit: str = "it", enabled: bool = True,
            every_s: float = LOG_EVERY_S) -> Iterator[T]:
    """`iterable` with a tqdm bar where bars are on, else with a log line `desc: i/total unit (s)` at least
    every `every_s` seconds (tqdm cannot write to a logger, and a bar in a log file is one endless line)."""
    if not enabled:
        yield from iterable
        return
    if progress_bars():
        from tqdm import tqdm  # order: tqdm reads TQDM_* when imported, after `setup` sets them

        yield from tqdm(iterable, desc=desc, total=total, unit=unit)
        return
    start = last = time.monotonic()
    for i, item in enumerate(iterable):
        now = time.monotonic()
        if now - last >= every_s:
            log.info("%s: %d/%d %s (%.0f s)", desc, i, total, unit, now - start)
            last = now
        yield item


# shown first in the progress line, when the stage logs them
PROGRESS_KEYS = ("train/loss", "train/reward_mean", "train/verdict/correct", "train/kl", "train/reward_accuracy",
                 "train/margin", "train/lr")


def progress_log(every: int | None = None):
    """A Lightning callback that logs `step s/N` and the step's train/* metrics every `every` steps
    (a tenth of the run by default), at least every `LOG_EVERY_S` seconds, and at the end: the periodic
    line that replaces the bar."""
    from lightning.pytorch.callbacks import Callback  # heavy: lightning (seconds), off the refusal path

    class ProgressLog(Callback):
        def __init__(self):
            self.start = self.last = time.monotonic()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            step, total = trainer.global_step, trainer.max_steps
            period = every or max(1, total // 10)
            if step % period and step != total and time.monotonic() - self.last < LOG_EVERY_S:
                return
            self.last = time.monotonic()
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
                       if k.startswith("train/") and getattr(v, "numel", lambda: 1)() == 1}
            first = [k for k in PROGRESS_KEYS if k in metrics]
            keys = (first + sorted(k for k in metrics if k not in first))[:6]
            shown = "  ".join(f"{k.removeprefix('train/')} {metrics[k]:.4g}" for k in keys)
            log.info("step %d/%d  %s  (%.0f s)", step, total, shown, time.monotonic() - self.start)

    return ProgressLog()
