import pytest

import ablate.parts  # noqa: F401 - every part's schema in Hydra's ConfigStore, before a test composes


def pytest_configure(config):
    """The warnings `python -m ablate.train` keeps off its console (ablate.console) stay off this one:
    tests that train in-process do not go through its console setup."""
    from ablate.console import QUIET_WARNINGS

    for message in QUIET_WARNINGS:
        config.addinivalue_line("filterwarnings", f"ignore:{message}")


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Keep generated-pool caches out of the user's ~/.cache (subprocesses inherit the variable)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ABLATE_CACHE", str(tmp_path_factory.mktemp("ablate-cache")))
    yield
    mp.undo()


@pytest.fixture
def tiny_policy():
    """A small random `model=tiny` policy and its tokenizer (seeded): (model, tokenizer)."""
    import torch
    from omegaconf import OmegaConf

    from ablate.config import CONF_DIR
    from ablate.models import load_model, load_tokenizer

    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.arch.hidden_size, cfg.arch.num_hidden_layers, cfg.arch.intermediate_size = 32, 2, 64
    tokenizer = load_tokenizer(cfg)
    torch.manual_seed(0)
    return load_model(cfg, tokenizer), tokenizer

