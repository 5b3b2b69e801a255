"""Config groups with a schema (ablate.schemas): wrong types fail at composition, and each schema holds
exactly its yaml's keys with the yaml's types (so composed configs, and the cache keys hashed from them,
are what they were without schemas)."""

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from ablate import schemas
from ablate.config import CONF_DIR, load_group_config

GROUPS = {("eval", "default"): schemas.EvalConfig, ("rollout", "hf"): schemas.HFRolloutConfig,
          ("rollout", "vllm"): schemas.VLLMRolloutConfig}


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("group, option", list(GROUPS))
def test_a_schema_has_its_yaml_keys_types_and_values(group, option):
    plain = load_group_config(group, option)
    schema = GROUPS[group, option]
    assert [f.name for f in dataclasses.fields(schema)] == list(plain)
    assert OmegaConf.to_container(OmegaConf.structured(schema)) == plain  # defaults: the shipped values
    composed = OmegaConf.to_container(cfg_of("stage=rloo", f"{group}={option}")[group])
    assert composed == plain and [type(v) for v in composed.values()] == [type(v) for v in plain.values()]


@pytest.mark.parametrize("override", ["eval.n=abc", "eval.every=soon", "rollout.batch_size=1.5",
                                      "eval.ks=[1,x]"])
def test_a_wrong_type_fails_at_composition_naming_the_key(override):
    with pytest.raises(ConfigCompositionException) as err:
        cfg_of("stage=rloo", override)
    assert override.split("=")[0] in str(err.value) + str(err.value.__cause__)
