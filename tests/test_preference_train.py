"""End to end: `stage=dpo|ipo` runs, the reference pass, resume, and the cache of upstream stages."""

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.checks import ConfigError, check_config
from ablate.stages import starting_model_config
from ablate.run import run
from ablate.upstream import is_shipped, upstream_config, upstream_key
from crash import run_crashing_at_step

SMALL_TASK = ["task.pool_size=300", "task.test_pool=200", "task.test_size=12"]
SMALL_EVAL = ["eval.n=2", "eval.ks=[1,2]", "eval.max_new_tokens=16"]


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tiny_default_starts_from_the_shipped_sft_and_keys_ignore_the_run_seed():
    default = cfg_of("stage=dpo")
    assert is_shipped(default, "sft") and starting_model_config(default, run).name_or_path == "builtin:tiny-sft"
    changed = cfg_of("stage=dpo", "upstream.sft.lr=1e-3")
    assert not is_shipped(changed, "sft") and upstream_key(changed, "sft") != upstream_key(default, "sft")
    assert upstream_key(cfg_of("stage=dpo", "seed=1"), "sft") == upstream_key(default, "sft")
    assert upstream_key(cfg_of("stage=rloo", "seed=7"), "ipo") == upstream_key(cfg_of("stage=rloo"), "ipo")
    # a chained key changes with its parent's config, and with what the stage itself reads (reward)
    assert upstream_key(changed, "ipo") != upstream_key(default, "ipo")
    assert upstream_key(cfg_of("reward=partial"), "ipo") != upstream_key(default, "ipo")
    assert upstream_key(cfg_of("reward=partial"), "sft") == upstream_key(default, "sft")  # SFT reads no reward
    # the downstream's validation does not reach its upstream: one key, one model (validation would
    # keep its prompts out of the upstream's training pool)
    validated = cfg_of("stage=dpo", "eval.every=2")
    assert upstream_config(validated, "sft").eval.every is None and upstream_config(default, "sft").eval.every is None
    assert upstream_key(validated, "sft") == upstream_key(default, "sft")
    assert not is_shipped(cfg_of("stage=dpo", "model.arch.hidden_size=64"), "sft")
    # the downstream's trainer.compile does not reach its upstream stages (trained eager, keys unchanged)
    compiled = cfg_of("stage=rloo", "trainer.compile=true")
    assert is_shipped(compiled, "sft") and upstream_key(compiled, "ipo") == upstream_key(cfg_of("stage=rloo"), "ipo")
    assert upstream_config(compiled, "ipo").trainer.compile is False


@pytest.mark.parametrize("overrides, message", [
    (["stage.pairs.source=nope"], "stage.pairs.source='nope'"),
    (["stage.pairs.sampled.margin=0"], "stage.pairs.sampled.margin=0"),
    (["stage.pairs.order=static", "stage.pairs.stages=[{until: 0.5, n_numbers: [3]}]"], "must be 1.0"),
    (["stage.pairs.source=file"], "stage.pairs.file.path=None"),
    (["stage.pairs.source=solver", "stage.pairs.solver.mix.wrong_value=-1"], "stage.pairs.solver.mix"),
    (["stage.beta=0"], "stage.beta=0"),
    (["upstream.sft.lr=-1"], "upstream.sft (the stage stage.init=sft starts from): stage.lr=-1"),
    (["stage.init=ipo", "upstream.ipo.init=ipo"], "cycle: ipo -> ipo"),
])
def test_bad_preference_configs_are_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        check_config(cfg_of("stage=dpo", *overrides))
    assert message in str(err.value)


def test_rloo_from_ipo_checks_the_whole_chain():
    check_config(cfg_of("stage=rloo", "stage.init=ipo"))
    with pytest.raises(ConfigError, match=r"upstream.ipo .*upstream.sft .*stage.max_steps=0"):
        check_config(cfg_of("stage=rloo", "stage.init=ipo", "upstream.sft.max_steps=0"))


@pytest.mark.slow
def test_dpo_run_computes_reference_log_probs_once_per_pair_and_resumes_exactly(tmp_path, monkeypatch, one_thread):
    import ablate.lit.dpo as dpo
    from ablate.lit.dpo import PreferenceModule

    calls = []
    original_reference = dpo.reference_logprobs

    def counting(model, encoded, *args, **kwargs):
        calls.append(len(encoded))
        return original_reference(model, encoded, *args, **kwargs)

    monkeypatch.setattr(dpo, "reference_logprobs", counting)
    # 16 pairs, 4 per step: 12 steps are 3 epochs
    overrides = ["experiment=smoke_dpo", "stage.max_steps=12", "trainer.num_threads=1"]
    straight = tmp_path / "straight"
    run(cfg_of(*overrides), straight)
    assert calls == [16]  # one reference pass over the 16 pairs for 3 epochs of training
    metrics = pd.read_csv(straight / "metrics.csv")
    assert metrics["step"].tolist() == list(range(12))
    assert {"train/loss", "train/reward_accuracy", "train/margin", "train/logp_chosen", "train/logp_rejected",
            "train/reward_chosen", "train/reward_rejected", "train/lr", "time/elapsed_s"} <= set(metrics.columns)
    first = metrics.iloc[0]  # before any update the policy is the reference: h = 0 for every pair
    assert first["train/margin"] == pytest.approx(0.0, abs=1e-4) and first["train/reward_accuracy"] == 0.0
    assert first["train/loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert metrics["train/reward_accuracy"].iloc[-4:].mean() > 0.5
    rows = [json.loads(line) for line in (straight / "pairs.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all({"prompt", "chosen", "rejected", "ref_chosen_logps"} <= set(r) for r in rows)
    status = json.loads((straight / "status.json").read_text())
    assert status["state"] == "completed" and status["pairs"] == 16 and sum(status["pair_kinds"].values()) == 16
    assert (straight / "eval" / "no_tool" / "summary.json").is_file() and (straight / "model" / "config.json").is_file()

    resumed = tmp_path / "resumed"
    run_crashing_at_step(PreferenceModule, 7, lambda: run(cfg_of(*overrides), resumed), monkeypatch)
    calls.clear()
    run(cfg_of(*overrides), resumed)
    assert calls == []  # the pairs and their reference log-probs come back from <run>/pairs.jsonl
    again = pd.read_csv(resumed / "metrics.csv")
    assert again["step"].tolist() == list(range(12))
    for column in ("train/loss", "train/margin", "train/logp_chosen"):
        assert again[column].tolist() == pytest.approx(metrics[column].tolist(), rel=1e-5), column


def save_tiny_hf_model(path):
    """A random tiny Qwen2 and its tokenizer in a local directory: a stand-in for a Hub model."""
    from omegaconf import OmegaConf

    from ablate.models import load_model, load_tokenizer

    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.arch.hidden_size, cfg.arch.num_hidden_layers, cfg.arch.intermediate_size = 32, 1, 64
    tokenizer = load_tokenizer(cfg)
    torch.manual_seed(0)
    load_model(cfg, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)


SHORT_SFT = ["upstream.sft.pool_size=300", "upstream.sft.batch_size=4", "upstream.sft.max_steps=3",
             "upstream.sft.warmup_steps=1", "upstream.eval=false"]
SHORT_PREF = ["pool_size=300", "batch_size=2", "max_steps=2", "warmup_steps=0", "pairs.source=solver",
              "pairs.n_prompts=4"]


@pytest.mark.slow
def test_hf_init_sft_trains_once_caches_and_chains_to_rloo_from_ipo(tmp_path, monkeypatch, one_thread):
    import dataclasses

    from ablate.stages import STAGES

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "base"
    save_tiny_hf_model(base)
    common = ["model=hf", f"model.name_or_path={base}", "model.template=compact", *SMALL_TASK, *SMALL_EVAL,
              *SHORT_SFT, "trainer.num_threads=1"]
    dpo = ["stage=dpo", *[f"stage.{o}" for o in SHORT_PREF]]
    run(cfg_of(*common, *dpo), tmp_path / "dpo0")
    models = tmp_path / "cache" / "models"
    (sft,) = [d for d in models.iterdir() if d.is_dir()]
    assert sft.name == upstream_key(cfg_of(*common, *dpo), "sft") and sft.name.startswith("sft-")
    assert json.loads((sft / "status.json").read_text())["state"] == "completed"
    assert (sft / "model" / "config.json").is_file() and not (sft / "checkpoints").exists()
    assert json.loads((sft / "upstream.json").read_text())["model"]["name_or_path"] == str(base)
    assert pd.read_csv(sft / "metrics.csv")["step"].tolist() == [0, 1, 2]
    init = json.loads((tmp_path / "dpo0" / "status.json").read_text())["init"]
    assert init == str(sft / "model")

    def no_training(*args, **kwargs):
        raise AssertionError("the cached upstream SFT must not be trained again")

    monkeypatch.setitem(STAGES, "sft", dataclasses.replace(STAGES["sft"], fit=no_training))
    run(cfg_of(*common, *dpo, "seed=1"), tmp_path / "dpo1")  # another seed of the sweep: same SFT
    seed1 = json.loads((tmp_path / "dpo1" / "status.json").read_text())
    assert seed1["init"] == init
    # both seeds started from the cached SFT's very weights (the fingerprint ablate.stats compares)
    from transformers import AutoModelForCausalLM

    from ablate.models import weights_sha256

    cached = weights_sha256(AutoModelForCausalLM.from_pretrained(init))
    assert seed1["init_sha256"] == cached == json.loads((tmp_path / "dpo0" / "status.json").read_text())["init_sha256"]
    monkeypatch.undo()
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))

    rloo = ["stage=rloo", "stage.init=ipo", "stage.pool_size=300", "stage.batch_prompts=2", "stage.k=2",
            "stage.max_steps=1", "stage.sampling.max_new_tokens=8", *[f"upstream.ipo.{o}" for o in SHORT_PREF]]
    run(cfg_of(*common, *rloo), tmp_path / "rloo")
    (ipo,) = [d for d in models.iterdir() if d.is_dir() and d.name.startswith("ipo-")]
    assert json.loads((ipo / "status.json").read_text())["init"] == init  # SFT -> IPO ...
    assert json.loads((ipo / "upstream.json").read_text())["parent"] == sft.name
    assert json.loads((tmp_path / "rloo" / "status.json").read_text())["init"] == str(ipo / "model")  # ... -> RLOO
    assert len([d for d in models.iterdir() if d.is_dir()]) == 2

    run(cfg_of(*common, *dpo, "upstream.sft.max_steps=4"), tmp_path / "dpo2")  # another SFT config: another model
    assert len([d for d in models.iterdir() if d.is_dir() and d.name.startswith("sft-")]) == 2


@pytest.mark.slow
def test_parallel_jobs_train_a_missing_upstream_once(tmp_path):
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    jobs = [subprocess.Popen([sys.executable, "-m", "ablate.train", "experiment=smoke_dpo", f"seed={seed}",
                              "trainer.num_threads=1", f"hydra.run.dir={tmp_path / str(seed)}"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for seed in (0, 1)]
    for job in jobs:
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, err[-3000:]
    (sft,) = [d for d in (tmp_path / "cache" / "models").iterdir() if d.is_dir()]
    assert json.loads((sft / "status.json").read_text())["attempts"] == 1  # trained by one job only
    inits = {json.loads((tmp_path / str(seed) / "status.json").read_text())["init"] for seed in (0, 1)}
    assert inits == {str(sft / "model")}


@pytest.mark.slow
def test_dpo_data_parallel_trains_the_missing_upstream_first_on_one_device(tmp_path):
    """trainer=ddp on two CPU processes: rank 0 trains the upstream SFT alone before the DPO fit
    launches the second rank, which then finds it cached."""
    run_dir = tmp_path / "ddp"
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "ablate.train", "experiment=smoke_dpo", "trainer=ddp", "trainer.accelerator=cpu",
         "trainer.devices=2", "trainer.num_threads=1", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed"
    assert (status["world_size"], status["effective_batch"]) == (2, 2 * 4)  # 2 ranks x stage.batch_size pairs
    assert pd.read_csv(run_dir / "metrics.csv")["step"].tolist() == [0, 1, 2, 3]
    assert len((run_dir / "pairs.jsonl").read_text().splitlines()) == 16
    (sft,) = [d for d in (tmp_path / "cache" / "models").iterdir() if d.is_dir()]
    assert json.loads((sft / "status.json").read_text())["attempts"] == 1
    assert result.stdout.count(f"run directory: {run_dir}") == 1  # the worker neither exports nor evaluates
