"""The field's recipes as presets (conf/recipe/): each composes to docs/training.md's table, a command-line value
beats the recipe, every recipe trains, and the new parts engage in the learner (truncation mask, overlong
penalty, clip fractions) and are checked before any compute."""

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.config import CONF_DIR

RECIPES = ("rloo", "grpo", "dr_grpo", "dapo", "gspo", "cispo")
PAGE = Path(__file__).resolve().parents[1] / "docs" / "training.md"
# the table's column -> how the composed config shows it
COLUMNS = {"advantage": "stage.advantage", "advantage_scale": "stage.advantage_scale", "is_level": "stage.is_level",
           "clip_eps_low / high": ("stage.clip_eps_low", "stage.clip_eps_high"), "aggregation": "stage.aggregation",
           "kl_coef": "stage.kl_coef", "dynamic_sampling": "dynamic_sampling.enabled",
           "overlong_buffer": "stage.overlong_buffer"}


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def recipe_table() -> dict[str, dict[str, str]]:
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith("| recipe | paper |")]
    assert len(lines) == 1, "docs/training.md has one recipe table"
    text = PAGE.read_text()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in text[text.index(lines[0]):].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(header, cells))
    return rows


def shown(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def test_every_recipe_composes_to_the_documented_table():
    table = recipe_table()
    assert sorted(table) == sorted(RECIPES) == sorted(p.stem for p in (CONF_DIR / "recipe").glob("*.yaml"))
    for name in RECIPES:
        cfg = composed(f"recipe={name}")
        assert cfg.stage.name == "rloo"  # a recipe implies the RL stage
        for column, keys in COLUMNS.items():
            keys = keys if isinstance(keys, tuple) else (keys,)
            got = " / ".join(shown(OmegaConf.select(cfg, key)) for key in keys)
            assert got == table[name][column], (name, column)
        header = (CONF_DIR / "recipe" / f"{name}.yaml").read_text().split("defaults:")[0]
        assert re.search(r"eqs?\. \d", header), f"{name}.yaml names the paper's equations"


def test_recipes_set_the_updates_per_batch_their_papers_use_and_say_why():
    # DAPO section 4.1: 16 gradient updates per rollout step; GSPO section 5.1: four minibatches; the rest one
    papers = {"dapo": 16, "gspo": 4, "grpo": 1, "dr_grpo": 1, "cispo": 1, "rloo": 1}
    for name, mini_batches in papers.items():
        cfg = composed(f"recipe={name}")
        assert (cfg.stage.ppo_epochs, cfg.stage.ppo_mini_batches) == (1, mini_batches), name
        header = (CONF_DIR / "recipe" / f"{name}.yaml").read_text().split("defaults:")[0]
        assert name == "rloo" or "update" in header, f"{name}.yaml says why its updates per batch"


def test_the_rloo_recipe_is_the_shipped_stage_and_the_command_line_beats_a_recipe():
    plain, recipe = composed("stage=rloo"), composed("recipe=rloo")
    assert OmegaConf.to_container(plain.stage) == OmegaConf.to_container(recipe.stage)
    assert plain.dynamic_sampling == recipe.dynamic_sampling
    cfg = composed("recipe=dapo", "stage.clip_eps_high=0.3", "dynamic_sampling.enabled=false", "curriculum=static")
    assert cfg.stage.clip_eps_high == 0.3 and not cfg.dynamic_sampling.enabled and cfg.stage.clip_eps_low == 0.2
    assert cfg.curriculum.name == "static"


def test_every_recipe_trains_two_steps(tmp_path):
    from ablate.run import run

    for name in RECIPES:
        out = tmp_path / name
        run(composed("experiment=smoke_rloo", f"recipe={name}", "stage.max_steps=2", "stage.checkpoint_every=2",
                     "eval.enabled=false", "dynamic_sampling.max_gen_batches=2"), out)
        metrics = pd.read_csv(out / "metrics.csv")
        assert metrics["step"].tolist() == [0, 1], name
        assert metrics["train/loss"].notna().all(), name
        if name in ("grpo", "dr_grpo", "dapo", "gspo", "cispo"):
            assert {"train/is_clip_frac_low", "train/is_clip_frac_high"} <= set(metrics.columns), name
        if name == "dapo":
            assert {"dynamic/gen_batches", "train/truncated_frac", "train/overlong_penalty_mean"} <= set(metrics)


# --- the learner: truncation and the overlong penalty -------------------------------------------------------

class NoEosOnOdd:
    """Wraps test_rloo's FixedEngine: odd sequences lose their eos (cut at the budget)."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, *args, **kwargs):
        r = self.engine.generate(*args, **kwargs)
        eos = self.engine.tokenizer.eos_token_id
        for i in range(1, len(r.completion_ids), 2):
            r.completion_ids[i] = [t for t in r.completion_ids[i] if t != eos]
            r.behaviour_logprobs[i] = r.behaviour_logprobs[i][:len(r.completion_ids[i])]
            r.tool_mask[i] = r.tool_mask[i][:len(r.completion_ids[i])]
        return r

    def sync(self, model):
        pass


def test_truncated_completions_carry_no_loss_and_are_counted(tiny_policy):
    from test_rloo import FixedEngine, one_step

    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]
    swap = lambda module: setattr(module.collector, "engine", NoEosOnOdd(FixedEngine(model, tokenizer, texts)))  # noqa: E731
    logged, _, module = one_step(model, tokenizer, texts, before_step=swap, mask_truncated=True, kl_coef=0.0,
                                 entropy_coef=0.0)
    assert logged["train/truncated_frac"] == 0.5
    # binary reward: the correct sample's RLOO advantage is 1; only its tokens (eos included) are left
    prompt = module.collected.rollouts.prompt_ids[0]
    kept = module.collector.engine.engine.sequence_logprobs(prompt, module.collected.rollouts.completion_ids[0])
    assert logged["train/pg_loss"] == pytest.approx(-sum(kept) / len(kept), rel=1e-5)
    plain, _, _ = one_step(model, tokenizer, texts, before_step=swap, kl_coef=0.0, entropy_coef=0.0)
    assert "train/truncated_frac" not in plain and plain["train/pg_loss"] != pytest.approx(logged["train/pg_loss"])


def test_the_overlong_penalty_enters_the_advantages_not_the_reward_metric(tiny_policy):
    from test_rloo import one_step

    from ablate.objectives import overlong_penalty

    model, tokenizer = tiny_policy
    texts = ["<answer>44+19+35</answer>", "<answer>44+19-35</answer>"]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts]
    budget = max(lengths) + 2
    logged, _, module = one_step(model, tokenizer, texts, overlong_buffer=8, overlong_penalty=0.5,
                                 sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": budget})
    expected = overlong_penalty(torch.tensor(lengths), budget, 8, 0.5)
    assert expected.min() < 0  # the planted lengths reach into the buffer
    assert logged["train/overlong_penalty_mean"] == pytest.approx(expected.mean().item())
    assert torch.allclose(module.collected.rewards.flatten(), torch.tensor([1.0, 0.0]) + expected)
    assert logged["train/reward_mean"] == 0.5 and logged["train/truncated_frac"] == 0.0


@pytest.mark.parametrize("overrides, message", [
    (["stage.advantage_scale=rank"], "stage.advantage_scale='rank'"),
    (["stage.advantage=grpo", "stage.advantage_scale=batch_std"], "stage.advantage=group_mean"),
    (["stage.clip_eps_high=0.28"], "not sequence"),
    (["stage.is_level=token", "stage.clip_eps_low=1.5"], "must be <= 1"),
    (["stage.is_level=cispo", "stage.is_mode=mask"], "stage.is_mode=truncate"),
    (["stage.overlong_buffer=100"], "stage.overlong_buffer=100"),
    (["stage.aggregation=median"], "stage.aggregation='median'"),
])
def test_recipe_options_are_checked(overrides, message):
    from ablate.checks import ConfigError, check_config

    cfg = composed("stage=rloo", "stage.init=scratch", *overrides)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(cfg)
