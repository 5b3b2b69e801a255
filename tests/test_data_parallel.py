"""Data-parallel runs in their condition: status.json records the world size and the effective batch, the
report never pools an arm's seeds across world sizes, and rollout=vllm is refused with trainer=ddp."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from ablate.checks import ConfigError, check_config
from ablate.config import CONF_DIR
from ablate.rundir.status import EFFECTIVE_BATCH, WORLD_SIZE, RunStatus, data_parallel, read_status
from ablate.stats import Settings, analyze, load_sweep

from stats_fixtures import RunSpec, write_run

FAST = Settings(resamples=200)


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_a_run_records_its_world_size_and_effective_batch(tmp_path):
    """One process: world size 1, the effective batch is the per-device batch (RLOO: stage.batch_prompts)."""
    from ablate.train import run

    cfg = compose_cfg("experiment=smoke_rloo", "trainer.num_threads=1", "stage.batch_prompts=3")
    run(cfg, tmp_path / "run")
    status = read_status(tmp_path / "run")
    assert (status[WORLD_SIZE], status[EFFECTIVE_BATCH]) == (1, 3) and data_parallel(status) == (1, 3)


def test_a_resumed_attempt_that_does_not_train_keeps_the_layout(tmp_path):
    first = RunStatus(tmp_path, heartbeat_s=0)
    first.start(stage="rloo")
    first.update(**{WORLD_SIZE: 4, EFFECTIVE_BATCH: 64})
    first.fail(RuntimeError("killed during evaluation"))
    again = RunStatus(tmp_path, heartbeat_s=0)
    again.start(stage="rloo")  # e.g. the model was exported: this attempt only evaluates
    again.complete()
    assert data_parallel(read_status(tmp_path)) == (4, 64) and read_status(tmp_path)["attempts"] == 2


@pytest.mark.parametrize("status, expected", [
    ({WORLD_SIZE: 2, EFFECTIVE_BATCH: 32}, (2, 32)),
    ({WORLD_SIZE: 2}, None),  # half a record
    ({WORLD_SIZE: True, EFFECTIVE_BATCH: 32}, None),
    ({WORLD_SIZE: 0, EFFECTIVE_BATCH: 32}, None),
    ({WORLD_SIZE: 2, EFFECTIVE_BATCH: 32.5}, None),
    (None, None),
])
def test_the_layout_is_read_only_when_whole(status, expected):
    assert data_parallel(status) == expected


def _arm(root: Path, job: int, curriculum: str, seed: int, world: int, rng) -> None:
    write_run(root / str(job), RunSpec(overrides=[f"curriculum={curriculum}", f"seed={seed}"], p=0.4), rng,
              n_prompts=40)
    path = root / str(job) / "status.json"
    status = json.loads(path.read_text())
    path.write_text(json.dumps({**status, WORLD_SIZE: world, EFFECTIVE_BATCH: 16 * world}))


def test_the_report_refuses_to_pool_an_arm_across_world_sizes(tmp_path):
    """curriculum=static: seeds 0 and 1 on one device, seed 2 on two (DDP: twice the batch). Its seeds are two
    conditions, apart by effective_batch=, and the report names the data problem; an arm at one world size
    (curriculum=none) pools as before."""
    rng = np.random.default_rng(0)
    for job, (curriculum, seed, world) in enumerate([("none", 0, 1), ("none", 1, 1), ("none", 2, 1),
                                                     ("static", 0, 1), ("static", 1, 1), ("static", 2, 2)]):
        _arm(tmp_path, job, curriculum, seed, world, rng)
    analysis = analyze(load_sweep(tmp_path), FAST)
    conditions = analysis.conditions
    usable = {c: [r.seed for r in runs] for c, runs in conditions.usable.items()}
    assert usable == {("curriculum=none",): ["0", "1", "2"], ("curriculum=static",): ["0", "1"],
                      ("curriculum=static", "effective_batch=32"): ["2"]}
    refusals = [p for p in conditions.problems if "different data-parallel world sizes" in p]
    assert len(refusals) == 1, conditions.problems
    assert refusals[0].startswith("curriculum=static ran at different data-parallel world sizes (1 process "
                                  "(effective batch 16): seed 0, seed 1; 2 processes (effective batch 32): seed 2)")


def test_one_world_size_for_every_seed_pools_and_reports_no_problem(tmp_path):
    rng = np.random.default_rng(1)
    for job, (curriculum, seed) in enumerate([("none", 0), ("none", 1), ("static", 0), ("static", 1)]):
        _arm(tmp_path, job, curriculum, seed, 4, rng)
    conditions = analyze(load_sweep(tmp_path), FAST).conditions
    assert sorted(conditions.usable) == [("curriculum=none", "effective_batch=64"),
                                         ("curriculum=static", "effective_batch=64")]
    assert not [p for p in conditions.problems if "world sizes" in p]
    assert sorted(conditions.labels.values()) == ["curriculum=none", "curriculum=static"]  # the shared part is not shown


@pytest.mark.parametrize("overrides, named", [
    (["trainer=ddp"], "trainer.strategy=ddp"),
    (["trainer.devices=2"], "trainer.devices=2"),
    (["trainer.num_nodes=2"], "trainer.num_nodes=2"),
])
def test_rollout_vllm_with_data_parallel_training_is_refused_in_one_line(overrides, named):
    with pytest.raises(ConfigError) as err:
        check_config(compose_cfg("experiment=smoke_rloo", "rollout=vllm", *overrides))
    message = str(err.value)
    assert named in message and "trainer=default" in message and "rollout=hf" in message and "\n" not in message
    check_config(compose_cfg("experiment=smoke_rloo", "rollout=hf", *overrides))  # the fix it names passes
