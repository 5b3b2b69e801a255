"""Where the config tree lives, and reading single group files outside a Hydra run.

`conf/` sits at the top of the repository; `src/ablate/conf` links to it, and a wheel copies it
into the package, so the same path works from a clone, an editable and a plain install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate import schemas  # noqa: F401 - registers the group schemas the yaml files name

CONF_DIR = Path(__file__).resolve().parent / "conf"


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load_group_config(group: str, option: str) -> dict[str, Any]:
    """The plain dict of `conf/<group>/<option>.yaml`, e.g. ("reward", "tinyzero")."""
    path = CONF_DIR / group / f"{option}.yaml"
    if not path.is_file():
        raise ValueError(f"no {group} config {option!r}; choose one of {group_options(group)}")
    plain = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    plain.pop("defaults", None)  # a schema (ablate.schemas) or other group choices: not values
    return plain
