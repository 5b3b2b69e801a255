"""`metrics.csv`: one row per step, its columns in families declared here (the writers that log a family
and the readers that pick one name it from here), and the file across a resume: Lightning's CSVLogger
deletes an existing file when it starts, so a resumed fit moves it aside first (`stash_metrics`) and puts
the earlier rows back after (`merge_metrics`)."""

from __future__ import annotations

import pandas as pd

from ablate.rundir import atomic
from ablate.rundir.layout import RunDir, RunDirLike

TRAIN = "train/"  # the learner's and the reward's numbers of each step
CURRICULUM = "curriculum/"  # the sampler's state (ablate.curriculum)
TIME = "time/"  # seconds and throughput: `time/<phase>_s`, `time/elapsed_s`, ...
VAL = "val/"  # the held-out validation subset during training (eval.every)
FAMILIES = (TRAIN, CURRICULUM, TIME, VAL)


def stash_metrics(run_dir: RunDirLike) -> None:
    """Move `metrics.csv` aside before a resumed fit: Lightning's CSVLogger deletes an existing
    file when it starts. `merge_metrics` puts the rows back."""
    run = RunDir.of(run_dir)
    current, stash = run.metrics_file, run.metrics_stash
    if not current.is_file():
        return
    frames = [pd.read_csv(p) for p in (stash, current) if p.is_file() and p.stat().st_size]
    if frames:
        merged = pd.concat(frames, ignore_index=True).drop_duplicates(subset=["step"], keep="last")
        atomic.write_with(stash, lambda f: merged.to_csv(f, index=False))
    current.unlink()


def merge_metrics(run_dir: RunDirLike) -> None:
    """Rows logged before a resume (steps the resumed fit did not log again) + the new rows."""
    run = RunDir.of(run_dir)
    current, stash = run.metrics_file, run.metrics_stash
    if not stash.is_file():
        return
    old = pd.read_csv(stash)
    if current.is_file() and current.stat().st_size:
        new = pd.read_csv(current)
        old = old[old["step"] < new["step"].min()] if len(new) else old
        old = pd.concat([old, new], ignore_index=True)
    merged = old.sort_values("step")
    atomic.write_with(current, lambda f: merged.to_csv(f, index=False))
    stash.unlink()
