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
    assert small.upstream.sft.lr == tiny.upstream.sft.lr
    assert small.stage.max_steps == tiny.stage.max_steps  # the RL stage is not touched
    given = _cfg("stage=rloo", "stage.init=sft", "model=small", "upstream.sft.max_steps=10")
    assert given.upstream.sft.max_steps == 10
    assert upstream_key(given, "sft") != upstream_key(small, "sft")
