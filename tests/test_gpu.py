"""The GPU tier (marked gpu, skipped without CUDA; `bash bench/gpu_acceptance.sh` runs it on a GPU machine):
a small Qwen2 model that vLLM's GPU attention takes (head size 64), built locally with random weights,
through SFT in bf16, RLOO with rollout=vllm colocated and its weights pushed in place, evaluation, DPO,
and DDP on every visible GPU, two steps each. The configs are bench/gpu_acceptance.py's CONFIGS; the
last test, which runs everywhere, is that script's CPU dry run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from gpu_acceptance import ALL, CONFIGS  # noqa: E402



def on_gpu(test):
    """Marked gpu (`pytest -m gpu`), and skipped where torch sees no CUDA device."""
    reason = "needs a CUDA GPU: bash bench/gpu_acceptance.sh on a GPU machine"
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason=reason)(test))


def cfg_of(name: str, *extra: str):
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[*CONFIGS[name], *extra])


def where_it_ran():
    """A Lightning callback recording the precision and the device of each training step."""
    import lightning as L

    class Where(L.Callback):
        def __init__(self):
            self.seen: list[tuple[str, str]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.seen.append((str(trainer.precision), next(pl_module.parameters()).device.type))

    return Where()


def train(name: str, run_dir: Path, *extra: str) -> pd.DataFrame:
    from ablate.run import run

    where = where_it_ran()
    run(cfg_of(name, *extra), run_dir, callbacks=[where])
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"
    assert where.seen == [("bf16-mixed", "cuda")] * 2, where.seen
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert metrics["step"].tolist() == [0, 1] and all(math.isfinite(v) for v in metrics["train/loss"])
    return metrics


@on_gpu
def test_sft_two_steps_in_bf16_then_evaluation_on_the_gpu(tmp_path):
    train("sft_bf16", tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "eval" / "no_tool" / "summary.json").read_text())
    assert summary["n_prompts"] == 12 and 0.0 <= summary["pass@1"] <= 1.0
    # A saved model evaluates on its own, on the GPU too.
    out = tmp_path / "eval"
    done = subprocess.run([sys.executable, "-m", "ablate.eval", f"model_dir={tmp_path / 'run' / 'model'}",
                           "experiment=smoke", f"hydra.run.dir={out}"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "status.json").read_text())["device"] == "cuda"
    assert json.loads((out / "eval" / "no_tool" / "summary.json").read_text())["n_prompts"] == 12


@on_gpu
def test_rloo_with_colocated_vllm_pushes_weights_in_place(tmp_path, monkeypatch):
    pytest.importorskip("vllm", reason="rollout=vllm needs the vllm extra (bench/gpu_acceptance.sh installs it)")
    from test_vllm import same_weights, vllm_parameters

    from ablate.rollout.vllm import VLLMEngine

    syncs = []
    original = VLLMEngine.sync

    def checked_sync(self, model):
        before = {n: p.data_ptr() for n, p in vllm_parameters(self).items() if p.numel()}
        original(self, model)
        held = vllm_parameters(self)
        syncs.append(({n: p.data_ptr() for n, p in held.items() if p.numel()} == before,
                      same_weights(held, model.state_dict()), sum(p.numel() > 0 for p in held.values())))

    monkeypatch.setattr(VLLMEngine, "sync", checked_sync)
    metrics = train("rloo_vllm", tmp_path / "run")
    # After each optimizer step: the same storage (in place, no reload), the learner's new values.
    assert len(syncs) == 2 and all(same and equal and count >= 10 for same, equal, count in syncs), syncs
    assert metrics["time/generate_tokens_per_s"].gt(0).all() and metrics["time/sync_s"].notna().all()
    # Both sample and learn in bf16 from the same weights: importance weights stay near 1.
    assert metrics["train/is_weight_mean"].tolist() == pytest.approx([1.0, 1.0], abs=0.05)
    assert metrics["val/pass@1"].notna().all()  # eval.every=1: validation after each step, on the GPU
    assert (tmp_path / "run" / "eval" / "no_tool" / "summary.json").is_file()


@on_gpu
def test_rloo_with_rollout_hf_two_steps_in_bf16(tmp_path):
    """The default engine on the GPU: two RLOO steps in bf16, sampled on the device; throughput logged."""
    metrics = train("rloo_hf", tmp_path / "run")
    assert metrics["train/is_weight_mean"].tolist() == pytest.approx([1.0, 1.0], abs=0.05)
    for column in ("time/generate_tokens_per_s", "time/learner_tokens_per_s", "time/peak_gpu_memory_gib"):
        assert metrics[column].gt(0).all(), column
    assert metrics["val/pass@1"].notna().all()


@on_gpu
def test_rloo_with_the_fast_gpu_sampling_settings_two_steps(tmp_path):
    """rollout.dtype=bfloat16 (a bf16 sampling copy refreshed in place) with rollout.compile=true (the folded
    grouped-query attention, CUDA graphs): on-policy importance weights near 1 (bf16 behaviour log-probs against
    the bf16-mixed learner's), the compiled graphs counted and none sent back to eager past the recompile limit."""
    metrics = train("rloo_hf", tmp_path / "run", "rollout.dtype=bfloat16", "rollout.compile=true")
    assert metrics["train/is_weight_mean"].tolist() == pytest.approx([1.0, 1.0], abs=0.1)
    assert metrics["rollout/compiled_graphs"].ge(1).all()
    assert metrics["rollout/recompile_limit_hits"].eq(0).all()


@on_gpu
def test_sampling_on_the_gpu_is_seeded(tmp_path):
    """Same GPU, same run seed: the same tokens; another seed: others (rollout=hf draws on the device)."""
    from ablate.models import encode_prompt, load_model, load_tokenizer
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine

    cfg = cfg_of("rloo_hf").model
    tokenizer = load_tokenizer(cfg)
    torch.manual_seed(0)
    model = load_model(cfg, tokenizer).cuda()
    engine = HFEngine(model, tokenizer, batch_size=64)
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n")]
    params = SamplingParams(temperature=1.0, max_new_tokens=32)
    draw = lambda seed: engine.generate(prompts, 16, params, torch.Generator().manual_seed(seed))  # noqa: E731
    first = draw(0)
    assert first.completion_ids == draw(0).completion_ids and first.behaviour_logprobs == draw(0).behaviour_logprobs
    assert first.completion_ids != draw(1).completion_ids


@on_gpu
def test_rollout_compile_on_the_gpu_gives_the_eager_tokens():
    """rollout.compile on CUDA (inductor, CUDA graphs; the model in fp32 as in the seeded test): the eager loop's
    completions, the behaviour log-probs to float32 rounding, and the same again from the replayed graph."""
    from ablate.models import encode_prompt, load_model, load_tokenizer
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine

    cfg = cfg_of("rloo_hf").model
    tokenizer = load_tokenizer(cfg)
    torch.manual_seed(0)
    model = load_model(cfg, tokenizer).cuda()
    prompts = [encode_prompt(t, tokenizer) for t in ("1 2 -> 3\n", "44 19 35 -> 98\n")]
    params = SamplingParams(temperature=1.0, max_new_tokens=32)
    eager, compiled = HFEngine(model, tokenizer, batch_size=16), HFEngine(model, tokenizer, batch_size=16, compile=True)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 on either side, whatever an earlier test set
    try:
        for seed in (0, 1):  # the second call replays the graphs the first one built
            want = eager.generate(prompts, 16, params, torch.Generator().manual_seed(seed))
            got = compiled.generate(prompts, 16, params, torch.Generator().manual_seed(seed))
            assert got.completion_ids == want.completion_ids
            for a, b in zip(got.behaviour_logprobs, want.behaviour_logprobs):
                assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)
    finally:
        torch.set_float32_matmul_precision(precision)


@on_gpu
def test_dpo_two_steps_in_bf16(tmp_path):
    metrics = train("dpo_bf16", tmp_path / "run")
    assert metrics[["train/margin", "train/reward_accuracy"]].notna().all().all()
    assert (tmp_path / "run" / "pairs.jsonl").is_file()


@on_gpu
def test_ddp_trains_on_every_visible_gpu(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "ablate.train", *CONFIGS["sft_ddp"], f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"
    log = done.stdout + done.stderr + "".join(p.read_text() for p in run_dir.glob("*.log"))
    assert f"Starting with {torch.cuda.device_count()} processes" in log  # Lightning's DDP set-up line
    assert pd.read_csv(run_dir / "metrics.csv")["step"].tolist() == [0, 1]
    assert done.stdout.count("run directory:") == 1  # rank 0 alone exports and evaluates


def test_gpu_acceptance_dry_run_composes_and_checks_every_gpu_config():
    """What `bash bench/gpu_acceptance.sh --dry-run` does on a CPU machine: every GPU config composes and
    passes its checks, and the environment report names what a GPU run would lack."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_acceptance.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ALL:  # the gpu tests' configs, the vLLM timing and the rollout=hf stages of gpu_stages.sh
        assert f"  {name} " in done.stdout and "FAILED" not in done.stdout, done.stdout
    assert f"{len(ALL)}/{len(ALL)} configs ok" in done.stdout
    if not torch.cuda.is_available():
        assert "CUDA GPUs" in done.stdout and "a GPU run here would lack: CUDA GPUs" in done.stdout
