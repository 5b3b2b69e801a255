"""Held-out evaluation during training (`eval.every`): the validation split and the val/* rows."""

import pandas as pd
import pytest
from crash import run_crashing_at_step
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR, load_group_config
from ablate.tasks.countdown import build_splits


def task_cfg(**overrides):
    task = load_group_config("task", "countdown")
    task.update({"pool_size": 1500, "test_pool": 1000, "test_size": 100, **overrides})
    return task


def test_the_validation_split_is_held_out_of_training_disjoint_from_test_and_stratified():
    plain = build_splits(task_cfg())
    splits = build_splits(task_cfg(), val_size=60)
    keys = lambda problems: {p.key for p in problems}  # noqa: E731
    assert len(splits.val) == 60 and plain.val == []
    assert keys(splits.test) == keys(plain.test)  # the test split never moves
    assert not keys(splits.val) & keys(splits.test) and not keys(splits.val) & keys(splits.train)
    assert keys(splits.train) == keys(plain.train) - keys(splits.val)
    share = lambda problems: sum(p.n_numbers == 3 for p in problems) / len(problems)  # noqa: E731
    assert share(splits.val) == pytest.approx(share(splits.test), abs=0.05)
    # fixed: it depends on neither the pool size nor anything but the task's seeds
    assert keys(build_splits(task_cfg(pool_size=3000), val_size=60).val) == keys(splits.val)
    assert all(p.hardness is not None for p in splits.val)  # labelled, like the test split


def test_val_metrics_are_the_summary_overall_and_per_operand_count():
    from ablate.eval import summarize
    from ablate.periodic_eval import val_metrics

    rows = [{"n": 4, "n_correct": c, "n_answered": a, "n_numbers": n, "mean_length": 10.0,
             "verdicts": {"correct": c, "no_answer": 4 - a}} for c, a, n in [(4, 4, 3), (0, 2, 4), (1, 3, 4)]]
    metrics = val_metrics(summarize(rows, [1]))
    assert metrics["val/pass@1"] == pytest.approx((1 + 0 + 0.25) / 3)
    assert metrics["val/no_answer_rate"] == pytest.approx(3 / 12)
    assert metrics["val/by_operands/4/no_answer_rate"] == pytest.approx(3 / 8)
    assert metrics["val/by_operands/3/pass@1"] == 1.0


def compose_rloo(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke_rloo", "stage.max_steps=6", "eval.every=2",
                                                        "eval.val_size=10", "eval.val_n=2", *overrides])


@pytest.mark.slow
def test_val_rows_every_n_steps_survive_a_crash_between_evaluations(tmp_path, monkeypatch):
    from ablate.lit.rloo import RLOOModule
    from ablate.run import run

    straight = tmp_path / "straight"
    run(compose_rloo("checkpoint.keep_evaluated=true"), straight)
    metrics = pd.read_csv(straight / "metrics.csv")
    evaluated = metrics.dropna(subset=["val/pass@1"])["step"].tolist()
    assert evaluated == [1, 3, 5]  # after 2, 4 and 6 updates
    assert metrics["time/val_s"].notna().sum() == 3
    assert sorted(p.name for p in (straight / "checkpoints").glob("val-step=*.ckpt")) == [
        "val-step=2.ckpt", "val-step=4.ckpt", "val-step=6.ckpt"]
    val_columns = [c for c in metrics.columns if c.startswith("val/")]
    assert {"val/pass@1", "val/coverage", "val/no_answer_rate", "val/by_operands/3/pass@1"} <= set(val_columns)

    # checkpoint_every=2: the crash at step 4 resumes from the checkpoint after step 3, so val rows
    # of steps 1 and 3 come from before the crash and step 5's is computed after it
    resumed = tmp_path / "resumed"
    run_crashing_at_step(RLOOModule, 4, lambda: run(compose_rloo(), resumed), monkeypatch)
    run(compose_rloo(), resumed)
    again = pd.read_csv(resumed / "metrics.csv")
    assert again["step"].tolist() == metrics["step"].tolist()
    for column in val_columns + ["train/loss"]:
        assert again[column].fillna(-1).tolist() == pytest.approx(metrics[column].fillna(-1).tolist(), rel=1e-6), column
