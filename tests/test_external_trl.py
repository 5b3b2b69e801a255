"""Issue 60: a real external study. TRL's own GRPOTrainer trains the project's tiny model (the shipped SFT
checkpoint, CPU, 3 steps a run) at two sampling temperatures x 3 seeds, interleaved; TRL writes its own logs
(TensorBoard event files and trainer_state.json); the adapters read them and `python -m ablate.stats RUNS
--study` decides a declared claim on them."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from ablate.external.convert import main as convert_main
from ablate.stats.__main__ import main as stats_main

TEMPERATURES = (0.5, 1.5)
SEEDS = (0, 1, 2)


def train(out_dir, seed: int, temperature: float) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from ablate.models import load_tokenizer, resolve_path

    torch.set_num_threads(1)
    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": "builtin:tiny-sft"})
    model = AutoModelForCausalLM.from_pretrained(resolve_path("builtin:tiny-sft"))
    prompts = [{"prompt": f"{tokenizer.bos_token}{a} {b} -> {a + b}\n"} for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)] * 4]

    def digits(prompts, completions, **kw):  # any verifiable reward: the share of digits in the completion
        return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]

    config = GRPOConfig(output_dir=str(out_dir), seed=seed, max_steps=3, learning_rate=1e-4, per_device_train_batch_size=4,
                        num_generations=4, max_completion_length=8, logging_steps=1, save_strategy="no",
                        report_to="tensorboard", use_cpu=True, disable_tqdm=True, beta=0.0, bf16=False,
                        temperature=temperature)
    trainer = GRPOTrainer(model=model, reward_funcs=digits, args=config, train_dataset=Dataset.from_list(prompts),
                          processing_class=tokenizer)
    trainer.train()
    trainer.save_state()  # trainer_state.json with its log_history


@pytest.fixture(scope="module")
def trl_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_runs")
    for seed in SEEDS:  # interleaved, as a study runs: every arm's seed s before any arm's seed s+1
        for temperature in TEMPERATURES:
            train(root / f"t{temperature}_s{seed}", seed, temperature)
    return root


def study(metric: str) -> dict:
    return {"name": "trl_temperature", "question": "Does a hotter sampler keep GRPO's policy more entropic?",
            "metrics": [metric.partition(":")[2]],
            "claims": [{"id": "hotter_more_entropic", "claim": "sampling at 1.5 keeps a higher policy entropy than 0.5",
                        "metric": metric, "condition": "temperature=1.5", "baseline": "temperature=0.5",
                        "direction": "higher", "effect": 0.1}],
            "plan": {"looks": [3, 6]}, "test": "welch"}


@pytest.mark.parametrize("kind, metric", [("tensorboard", "mean:train/entropy"), ("trl", "mean:entropy")])
def test_trl_logs_to_a_verdict(trl_runs, tmp_path, capsys, kind, metric):
    table = tmp_path / "runs.csv"
    assert convert_main([kind, str(trl_runs), "--pattern", "t{temperature}_s{seed}", "--out", str(table)]) == 0
    found = capsys.readouterr().out
    assert "found 6 run(s)" in found and "temperature=1.5, seed=2; 3 step(s)" in found
    runs = pd.read_csv(table)
    assert sorted(runs.groupby(["temperature", "seed"]).size().tolist()) == [3] * 6
    spec = tmp_path / "study.yaml"
    spec.write_text(yaml.safe_dump({"study": study(metric)}))
    out = tmp_path / "report"
    assert stats_main([str(table), "--study", str(spec), "--out", str(out), "--no-plots", "--quiet"]) == 0
    claim = pd.read_csv(out / "claims.csv").iloc[0]
    assert claim["verdict"] == "replicated" and (claim["n"], claim["n_baseline"]) == (3, 3)
    assert claim["estimate"] > 0.1


def test_both_logs_agree(trl_runs, tmp_path, capsys):
    tables = {}
    for kind in ("tensorboard", "trl"):
        path = tmp_path / f"{kind}.csv"
        assert convert_main([kind, str(trl_runs), "--pattern", "t{temperature}_s{seed}", "--out", str(path)]) == 0
        tables[kind] = pd.read_csv(path).sort_values(["temperature", "seed", "step"]).reset_index(drop=True)
    assert tables["tensorboard"]["train/entropy"].to_numpy() == pytest.approx(tables["trl"]["entropy"].to_numpy(), rel=1e-4)
    assert tables["tensorboard"]["started_at"].notna().all()  # TensorBoard's wall time: the interleaving check reads it
