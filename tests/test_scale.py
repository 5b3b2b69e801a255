"""A study at a second model scale is its own study (issue 59): named, fingerprinted, registered and
reported apart from the tiny model's, and findings.md's scale table pairs their verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.config.scale import base_name, scale_of, scaled_block
from ablate.stats.claims.registration import fingerprint, register
from ablate.stats.read.runs import Run

TINY = {"kind": "tiny", "name_or_path": None, "arch": {"hidden_size": 128, "num_hidden_layers": 4}}
SMALL = {"kind": "tiny", "name_or_path": None, "arch": {"hidden_size": 256, "num_hidden_layers": 6}}
BLOCK = {"name": "curriculum_study", "claims": [{"id": "c", "claim": "x beats y", "metric": "pass@1",
                                                 "condition": "x", "baseline": "y", "effect": 0.03}]}


def test_the_scale_label_comes_from_the_composed_model_alone():
    assert scale_of(TINY) == "tiny" and scale_of(SMALL) == "small" and scale_of({}) == "tiny"
    assert scale_of({**SMALL, "arch": {"hidden_size": 512, "num_hidden_layers": 8}}) == "h512l8"
    assert scale_of({"kind": "hf", "name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}) == "qwen2.5-0.5b-instruct"
    assert scale_of({**TINY, "name_or_path": "builtin:tiny-sft"}) == "tiny"  # embedded: its shape, whatever weights
    assert scale_of({"kind": "hf", "name_or_path": "/runs/x/model/"}) == "model"  # a pretrained directory: its name


def test_a_small_model_started_from_the_tiny_weights_is_refused_before_compute():
    """The weights win over model.arch when loading: model=small started from builtin:tiny-sft would train
    the tiny model under the small study's name."""
    from hydra import compose as hydra_compose, initialize_config_dir

    import ablate.parts  # noqa: F401 - every part's schema, before Hydra composes
    from ablate.checks import ConfigError, check_config
    from ablate.config import CONF_DIR

    def compose(overrides):
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return hydra_compose("config", overrides=overrides)

    cfg = compose(["experiment=tool_annealing_study", "model=small", "model.name_or_path=builtin:tiny-sft"])
    with pytest.raises(ConfigError, match=r"holds a model of hidden 128 x 4 layers, but model.arch says 256 x 6"):
        check_config(cfg)
    check_config(compose(["experiment=tool_annealing_study"]))  # the tiny preset as shipped passes
    # and at small it starts from small's own plain SFT (model.name_or_path=upstream:sft), so it passes too
    check_config(compose(["experiment=tool_annealing_study", "model=small"]))


def test_the_tiny_study_keeps_its_name_and_fingerprint_and_a_small_one_gets_its_own():
    assert scaled_block(BLOCK, TINY) == BLOCK and fingerprint(scaled_block(BLOCK, TINY)) == fingerprint(BLOCK)
    small = scaled_block(BLOCK, SMALL)
    assert small["name"] == "curriculum_study_small" and fingerprint(small) != fingerprint(BLOCK)
    assert scaled_block(small, SMALL) == small and BLOCK["name"] == "curriculum_study"  # idempotent, no mutation
    assert base_name("curriculum_study_small") == "curriculum_study" and base_name("curriculum_study") == "curriculum_study"


def test_ablate_stats_reads_a_small_run_as_the_scaled_study(tmp_path):
    def run(model):
        return Run(path=tmp_path, rel="s/0", overrides=(), condition=(), seed="0", state="completed", status=None,
                   evals={}, metrics=None, config={"study": BLOCK, "model": model})

    assert run(SMALL).study["name"] == "curriculum_study_small" and run(TINY).study == BLOCK


def test_the_registration_of_a_preset_at_model_small_is_its_own_study():
    from ablate.studies.register import compose_study as composed_block

    block = composed_block(["experiment=curriculum_study", "model=small"])
    tiny = composed_block(["experiment=curriculum_study"])
    assert block["name"] == "curriculum_study_small" and tiny["name"] == "curriculum_study"
    assert {k: v for k, v in block.items() if k != "name"} == {k: v for k, v in tiny.items() if k != "name"}


def test_the_scale_table_lists_a_registered_second_scale_before_its_runs(tmp_path):
    from tools.scale_table import scale_block

    assert "no study is registered at a second scale yet" in scale_block(tmp_path, {})
    register(tmp_path / "curriculum_study_small" / "registration.yaml", scaled_block(BLOCK, SMALL),
             commit="0123456789abcdef", code={"training": "t", "analysis": "a"})
    table = scale_block(tmp_path, {})
    row = next(line for line in table.splitlines() if line.startswith("| curriculum_study |"))
    assert "c: x beats y" in row and "not run yet" in row and "commit 0123456" in row
    assert "no pretrained weights offline" in row and "experiment=curriculum_study model=qwen2.5-0.5b" in table
