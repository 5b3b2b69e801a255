"""model=small, the second scale (issue 59): the tiny model's architecture at ~5.6x its parameters, with its
own SFT upstream (never the shipped tiny checkpoint)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from transformers import Qwen2Config, Qwen2ForCausalLM

import ablate.parts  # noqa: F401 - the schemas
from ablate.config import CONF_DIR
from ablate.upstream import is_shipped, upstream_key


def _cfg(*overrides):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _non_embedding(cfg) -> int:
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, **dict(cfg.model.arch)))
    return sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()


def test_small_is_five_to_six_times_tiny_with_grouped_query_attention():
    tiny, small = _cfg("stage=rloo"), _cfg("stage=rloo", "model=small")
    ratio = _non_embedding(small) / _non_embedding(tiny)
    assert 5.0 < ratio < 6.5, ratio
    assert small.model.arch.num_key_value_heads < small.model.arch.num_attention_heads  # as Qwen2.5
    assert small.model.kind == tiny.model.kind and small.model.template == tiny.model.template  # same tokenizer


def test_small_trains_and_caches_its_own_sft_never_the_shipped_tiny_one():
    tiny, small = _cfg("stage=rloo", "stage.init=sft"), _cfg("stage=rloo", "stage.init=sft", "model=small")
    assert is_shipped(tiny, "sft") and not is_shipped(small, "sft")
    assert upstream_key(small, "sft") != upstream_key(tiny, "sft")


def test_small_brings_its_own_sft_recipe_and_the_command_line_still_wins():
    """conf/upstream/sft/small.yaml doubles the steps of small's cached SFT (the shipped 1,500 under-train it);
    tiny keeps the shipped recipe (its key still names builtin:tiny-sft); upstream.sft.* given wins."""
    tiny, small = _cfg("stage=rloo", "stage.init=sft"), _cfg("stage=rloo", "stage.init=sft", "model=small")
    assert tiny.upstream.sft.max_steps == 1500 and small.upstream.sft.max_steps == 3000
    assert small.upstream.sft.lr < tiny.upstream.sft.lr  # the deeper model needs a lower peak lr (docs/training.md)
    assert small.stage.max_steps == tiny.stage.max_steps  # the RL stage is not touched
    given = _cfg("stage=rloo", "stage.init=sft", "model=small", "upstream.sft.max_steps=10")
    assert given.upstream.sft.max_steps == 10
    assert upstream_key(given, "sft") != upstream_key(small, "sft")


def test_a_second_sft_starts_from_the_models_own_plain_sft_at_any_scale():
    """testbed=calc_sft's calculator SFT starts from `upstream:sft`: builtin:tiny-sft at model=tiny (its cache
    key unchanged: the registered tool studies' calculator SFT stays the same model), small's cached plain
    SFT at model=small (the key `stage.init=sft` gives there), named in the key by its key, not a path."""
    from ablate.models.source import PLAIN_SFT
    from ablate.upstream import plain_sft_name

    tiny = _cfg("experiment=tool_annealing_study")
    assert tiny.model.name_or_path == PLAIN_SFT and plain_sft_name(tiny) == "builtin:tiny-sft"
    assert upstream_key(tiny, "sft") == upstream_key(_cfg("experiment=tool_annealing_study",
                                                          "model.name_or_path=builtin:tiny-sft"), "sft")
    small = _cfg("experiment=tool_annealing_study", "model=small")
    plain = _cfg("model=small", "stage=rloo", "stage.init=sft")
    assert plain_sft_name(small) == upstream_key(plain, "sft")
    assert upstream_key(small, "sft") not in (upstream_key(plain, "sft"), upstream_key(tiny, "sft"))


def test_the_chain_plain_sft_calc_sft_rl_runs_at_small(tmp_path):
    """One job at model=small (smoke sizes): its plain SFT trained and cached, the mixed calculator SFT
    trained from it, the RL stage from that; each cache entry names what it started from."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache")}
    tiny_steps = [f"upstream.{slot}.{key}={value}" for slot in ("plain_sft", "sft")
                  for key, value in (("max_steps", 2), ("warmup_steps", 1), ("pool_size", 300))]
    out = subprocess.run([sys.executable, "-m", "ablate.train", "experiment=[tool_annealing_mixed_study,smoke_study]",
                          "model=small", "size=smoke", "tool=off", "upstream.eval=false", *tiny_steps,
                          "trainer.num_threads=1", f"hydra.run.dir={tmp_path / 'run'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    entries = {json.loads((d / "upstream.json").read_text())["stage"]["trace"]: d
               for d in (tmp_path / "cache" / "models").iterdir() if d.is_dir()}
    assert set(entries) == {"plain", "mixed"}
    mixed = json.loads((entries["mixed"] / "upstream.json").read_text())
    assert mixed["model"]["name_or_path"] == entries["plain"].name  # the plain SFT's key
    assert json.loads((entries["mixed"] / "status.json").read_text())["init"] == str(entries["plain"] / "model")
    assert json.loads((tmp_path / "run" / "status.json").read_text())["init"] == str(entries["mixed"] / "model")


def test_the_plain_sft_reference_needs_an_embedded_model():
    from ablate.checks import ConfigError, check_config

    cfg = _cfg("model=hf", "model.name_or_path=upstream:sft", "stage=rloo", "stage.init=model")
    try:
        check_config(cfg)
    except ConfigError as err:
        assert "upstream:sft" in str(err) and "embedded" in str(err)
    else:
        raise AssertionError("model=hf with upstream:sft was accepted")
