"""Wrong invocations exit with code 2 and a message naming the key and the fix, before any data
generation or model load (issue 15, "Config and CLI")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.config.checks import added_keys_error, task_file_error
from ablate.models.source import model_source_error
from ablate.checks import ConfigError, check_config


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke", *overrides])


def refused(*overrides) -> str:
    with pytest.raises(ConfigError) as err:
        check_config(cfg_of(*overrides))
    return str(err.value)


def test_seed_must_be_an_integer():
    assert "seed='abc'" in refused("seed=abc") and "seed=0" in refused("seed=abc")
    assert "upstream.seed" in refused("upstream.seed=x1")
    check_config(cfg_of("seed=7"))


def test_pass_at_k_beyond_n_is_refused_not_dropped():
    message = refused("eval.n=4", "eval.ks=[1,2,4,8]")
    assert "eval.ks" in message and "eval.n=4" in message and "eval.ks=[1, 2, 4]" in message


def test_task_file_missing_or_malformed(tmp_path):
    assert "task.file.path" in refused("task.source=file")
    assert "no such file" in refused("task.source=file", f"task.file.path={tmp_path / 'none.jsonl'}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nums": [1, 2], "target": 3}\n{"nums": [1, 2], "targ\n')
    assert "line 2 is not valid JSON" in refused("task.source=file", f"task.file.path={bad}")
    columns = tmp_path / "cols.jsonl"
    columns.write_text('{"numbers": [1, 2], "target": 3}\n')
    assert "'nums'" in refused("task.source=file", f"task.file.path={columns}")
    good = tmp_path / "good.jsonl"
    good.write_text('{"nums": [1, 2], "target": 3}\n')
    assert task_file_error({"source": "file", "file": {"path": str(good)}}) is None
    parquet = tmp_path / "bad.parquet"
    parquet.write_text("not parquet")
    assert "parquet" in task_file_error({"source": "file", "file": {"path": str(parquet)}})


def test_model_path_must_exist(tmp_path):
    message = refused("model=hf", f"model.name_or_path={tmp_path / 'no-model'}")
    assert "model.name_or_path" in message and "no such directory" in message
    (tmp_path / "empty").mkdir()
    assert "no config.json" in model_source_error(str(tmp_path / "empty"))
    assert "no such shipped checkpoint" in model_source_error("builtin:nope")
    assert model_source_error("builtin:tiny-sft") is None
    assert "valid Hub id" in model_source_error("bad id with spaces")


def test_model_hub_id_unknown_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in model_source_error("nobody-here/no-such-model-xyz")


def test_keys_added_with_plus_are_refused():
    assert "stage.lrr" in added_keys_error(["+stage.lrr=1e-3", "seed=1"], CONF_DIR)
    assert added_keys_error(["+experiment=smoke", "++stage.lr=1", "+tool.anneal_ratio=0.5", "seed=1",
                             "+model.arch.rope_theta=1e4", "+rollout.engine_kwargs.swap_space=1"], CONF_DIR) is None


def test_keys_the_chosen_options_schema_lacks_are_refused():
    """`+` on a key another option of the group has passes the command-line check, then the composed
    config is checked against the chosen option's schema (ablate.config.checks.unknown_keys_error)."""
    assert added_keys_error(["+stage.beta=1"], CONF_DIR) is None  # a key of the preference stages' schema
    message = refused("stage=rloo", "+stage.beta=1")
    assert "stage.beta" in message and "RLOOStageConfig" in message and "another option" in message
    assert "stage.lrr" in refused("stage=rloo", "++stage.lrr=1")  # force-added: refused after composition
    assert "tool.anneal_ratio" in refused("tool=on", "+tool.anneal_ratio=0.5")
    assert "stage.sampling.top" in refused("stage=rloo", "+stage.sampling.top=1")  # nested schemas too
    # open mappings (rollout.engine_kwargs of rollout=vllm) take any key; rollout=hf has none to add to
    from ablate.config.checks import unknown_keys_error

    assert unknown_keys_error(cfg_of("stage=rloo", "rollout=vllm", "+rollout.engine_kwargs.swap_space=1")) is None
    assert "rollout.engine_kwargs" in unknown_keys_error(cfg_of("stage=rloo", "+rollout.engine_kwargs.swap_space=1"))


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("seed=abc", "seed='abc'"),
    ("+stage.lrr=1e-3", "stage.lrr"),
    ("eval.ks=[1,8]", "eval.ks"),
    ("task.source=file", "task.file.path"),
])
def test_cli_exits_2_naming_the_key(tmp_path, override, message):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "ablate.train", "experiment=smoke", override,
                             f"hydra.run.dir={run_dir}"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (run_dir / "status.json").exists()


def test_reference_dtype_is_float32_bfloat16_or_auto():
    message = refused("stage=rloo", "stage.reference_dtype=float16")
    assert "stage.reference_dtype='float16'" in message and "auto" in message
    check_config(cfg_of("stage=rloo", "stage.reference_dtype=auto"))


def test_compile_on_cpu_needs_a_cxx_compiler(monkeypatch):
    import shutil

    from ablate.fit import check_compile

    cfg = cfg_of("trainer.compile=true", "trainer.accelerator=cpu")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError) as err:
        check_compile(cfg)
    assert "trainer.compile=true" in str(err.value) and "trainer.compile=false" in str(err.value)
    check_compile(cfg_of("trainer.accelerator=cpu"))  # off: nothing to check
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/g++" if name == "g++" else None)
    check_compile(cfg)


def test_validation_runs_with_the_tool_only_where_the_tools_format_needs_it():
    from ablate.stages import validation_regime

    assert validation_regime(cfg_of("tool=oracle", "eval.every=2")) == "tool"  # the search format waits for replies
    assert validation_regime(cfg_of("tool=on", "eval.every=2")) == "no_tool"  # the calculator: paper 003's question
    assert validation_regime(cfg_of("eval.every=2")) == "no_tool"
    assert validation_regime(cfg_of("tool=oracle", "eval.every=2", "eval.val_regime=no_tool")) == "no_tool"
    assert validation_regime(cfg_of("tool=on", "eval.every=2", "eval.val_regime=tool")) == "tool"
    message = refused("eval.every=2", "eval.val_regime=tool")
    assert "eval.val_regime=tool" in message and "tool.schedule=off" in message
    assert "eval.val_regime='sometimes'" in refused("eval.every=2", "eval.val_regime=sometimes")


def test_final_evaluation_regimes_default_to_the_runs_tool_and_can_be_chosen():
    from ablate.stages import final_regimes

    assert final_regimes(cfg_of()) == ["no_tool"]
    assert final_regimes(cfg_of("tool=oracle")) == ["no_tool", "tool"]
    assert final_regimes(cfg_of("tool=oracle", "eval.regimes=[tool]")) == ["tool"]
    assert final_regimes(cfg_of("eval.enabled=false")) == []
    check_config(cfg_of("tool=on", "eval.regimes=[tool,no_tool]"))
    message = refused("eval.regimes=[tool]")
    assert "eval.regimes includes tool" in message and "tool.schedule=off" in message
    for bad in ("[]", "[tools]", "[no_tool,no_tool]"):
        assert "eval.regimes=" in refused("tool=on", f"eval.regimes={bad}") and "eval.regimes=[tool]" in refused(
            "tool=on", f"eval.regimes={bad}")


def test_no_schema_is_shown_as_an_option(tmp_path):
    """The schemas are stored apart from the groups' options (ablate.config.schemas.schema_config): neither
    --help nor Hydra's "Available options" after a typo lists one as a choice."""
    from hydra.errors import MissingConfigException

    result = subprocess.run([sys.executable, "-m", "ablate.train", "--help"], capture_output=True, text=True,
                            cwd=tmp_path)
    groups = result.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert result.returncode == 0 and "curriculum: dots, frontier," in groups
    assert "stage: dpo, ipo, rloo, sft" in groups
    assert "schema" not in groups, groups
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        with pytest.raises(MissingConfigException) as typo:
            compose("config", overrides=["stage=rlo"])
    options = str(typo.value).split("Available options in 'stage':")[1].split("Config search path")[0]
    assert options.split() == ["dpo", "ipo", "rloo", "sft"], options
