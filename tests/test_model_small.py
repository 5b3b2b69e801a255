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
