"""End to end: `python -m ablate.train experiment=smoke` and the run directory it leaves."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR

pytestmark = pytest.mark.slow


def train(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ablate.train", *args], capture_output=True, text=True, cwd=cwd)


def test_smoke_run_writes_the_run_directory_contract(tmp_path):
    run_dir = tmp_path / "run"
    result = train("experiment=smoke", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"run directory: {run_dir}" in result.stdout
    assert yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) == ["experiment=smoke"]  # hydra.* overrides are not task overrides
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["seed"] == 0
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["error"] is None and status["versions"]["torch"]
    import torch

    assert status["versions"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # whose kernels ran
    assert set(status["timings"]) >= {"data_s", "train_s", "eval_no_tool_s"}
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert list(metrics["step"].dropna().astype(int).unique()) == list(range(6))
    assert {"train/loss", "train/lr", "time/elapsed_s"} <= set(metrics.columns)
    assert metrics["time/elapsed_s"].is_monotonic_increasing
    assert metrics["time/cpu_s"].is_monotonic_increasing and (metrics["time/cpu_s"] > 0).all()
    assert (run_dir / "model" / "config.json").is_file() and (run_dir / "model" / "tokenizer.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    summary = json.loads((run_dir / "eval" / "no_tool" / "summary.json").read_text())
    assert summary["n_prompts"] == 12 and summary["n_samples"] == 4 and {"pass@1", "pass@4", "by_operands"} <= set(summary)
    assert len((run_dir / "eval" / "no_tool" / "samples.jsonl").read_text().splitlines()) == 12

    # The saved model evaluates on its own: `python -m ablate.eval model_dir=...`.
    out = tmp_path / "eval-run"
    result = subprocess.run([sys.executable, "-m", "ablate.eval", f"model_dir={run_dir / 'model'}", "experiment=smoke",
                             "eval.n=2", "eval.ks=[1,2]", f"hydra.run.dir={out}"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "eval" / "no_tool" / "summary.json").read_text())["n_samples"] == 2
    assert json.loads((out / "status.json").read_text())["device"] == "cpu"  # tests/test_gpu.py: cuda there
    missing = subprocess.run([sys.executable, "-m", "ablate.eval", f"model_dir={tmp_path / 'nowhere'}"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode != 0 and "no config.json" in missing.stderr

    # A re-run of a finished run does no work.
    before = (run_dir / "eval" / "no_tool" / "summary.json").stat().st_mtime_ns
    again = train("experiment=smoke", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert again.returncode == 0 and "already completed" in again.stdout
    assert (run_dir / "eval" / "no_tool" / "summary.json").stat().st_mtime_ns == before


def test_same_seed_same_numbers(tmp_path):
    outs = []
    for name in ("a", "b"):
        result = train("experiment=smoke", f"hydra.run.dir={tmp_path / name}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        outs.append(pd.read_csv(tmp_path / name / "metrics.csv")["train/loss"].tolist())
    assert outs[0] == outs[1]


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke", *overrides])


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    from ablate.lit.sft import SFTModule
    from ablate.run import run

    run_dir = tmp_path / "run"
    original = SFTModule.training_step

    def crash_at_step_4(self, batch, batch_idx):
        if self.global_step == 4:
            raise RuntimeError("simulated crash")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(SFTModule, "training_step", crash_at_step_4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(compose_cfg(), run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "simulated crash" in status["error"]
    last = run_dir / "checkpoints" / "last.ckpt"
    assert last.is_file()
    last.write_bytes(last.read_bytes()[:300])  # a copy cut short: the step checkpoint (the same step 3) reads

    monkeypatch.setattr(SFTModule, "training_step", original)
    run(compose_cfg(), run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["attempts"] == 2
    # the resume is on record with its attempt (and moves into `history` with it when another attempt starts)
    assert status["resumed_from"] == {"checkpoint": "epoch=0-step=3.ckpt", "passed_over": ["last.ckpt"]}
    assert "resumed_from" not in status["history"][0]
    steps = pd.read_csv(run_dir / "metrics.csv")["step"].astype(int).tolist()
    assert steps == list(range(6))  # steps before the crash kept, none twice


@pytest.mark.parametrize("override, message", [
    ("stage.lr=-1", "stage.lr=-1"),
    ("eval.top_p=1.5", "eval.top_p=1.5"),
    ("model=hf", "model.name_or_path"),
    ("resume=sometimes", "resume='sometimes'"),
    ("task.generator.counts=[9]", "outside 2..6"),
])
def test_bad_config_is_refused_before_any_compute(tmp_path, override, message):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "ablate.train", "experiment=smoke", override,
                             f"hydra.run.dir={run_dir}"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (run_dir / "status.json").exists()
    # ... and at once: not after the seconds of importing Lightning or transformers' modeling stack
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and not imported & {"lightning", "transformers.modeling_utils"}


def test_cfg_job_prints_the_composed_config(tmp_path):
    result = train("--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0
    cfg = yaml.safe_load(result.stdout)
    assert cfg["model"]["kind"] == "tiny" and cfg["stage"]["name"] == "sft" and cfg["eval"]["n"] == 16


def test_a_failed_job_is_recorded_and_does_not_stop_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    result = train("-m", "experiment=smoke", "task.source=file,generated", "task.file.path=/nonexistent.jsonl",
                   "stage.lr=3e-3,-1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    states = {}
    for job in sorted(sweep.iterdir()):
        if (job / "status.json").is_file():
            overrides = tuple(yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
            states[overrides] = json.loads((job / "status.json").read_text())
    assert len(states) == 4
    for overrides, status in states.items():
        ok = "task.source=generated" in overrides and "stage.lr=-1" not in overrides
        assert status["state"] == ("completed" if ok else "failed"), overrides
        if "stage.lr=-1" in overrides:
            assert "stage.lr=-1" in status["error"]
        elif not ok:
            assert "no such file" in status["error"]

