"""A study's scale: the same preset run at another model size is another study (issue 59).

`experiment=<study> model=small` runs the study's grid, claims and plan on the 5.9M model. Its runs must
never pool with the tiny model's under one registration, so the composed study block's name carries the
scale (`curriculum_study_small`): its fingerprint, its registration (docs/findings/<name>/) and its report
are its own, and every table that lists studies names the scale. The default model (tiny, hidden 128 x 4
layers) adds nothing, so the registrations and runs made before scales existed keep their names and
fingerprints. The label comes from the composed model config alone (no new key in conf/model/: the tiny
model's config is hashed into its cached SFT's key)."""

from __future__ import annotations

import re
from typing import Any, Mapping


DEFAULT = "tiny"
# (hidden_size, num_hidden_layers) of the embedded architectures shipped in conf/model/ -> their label
EMBEDDED = {(128, 4): "tiny", (256, 6): "small"}


def scale_of(model: Mapping[str, Any]) -> str:
    """The model's scale label: `tiny` / `small` for the shipped embedded shapes, `h<hidden>l<layers>` for
    another embedded shape (started from saved weights or not), the lower-cased last part of
    `name_or_path` for a pretrained (`hf`) model."""
    if not model or not model.get("kind"):  # no model config (a planted or external run): the default scale
        return DEFAULT
    if model.get("kind") == "tiny":  # the embedded architecture, whatever weights it starts from (checks.py
        arch = model.get("arch") or {}   # refuses saved weights of another shape)
        shape = (int(arch.get("hidden_size", 0)), int(arch.get("num_hidden_layers", 0)))
        return EMBEDDED.get(shape, f"h{shape[0]}l{shape[1]}")
    path = str(model.get("name_or_path") or model.get("kind") or "model")
    return re.sub(r"[^a-z0-9.]+", "-", path.rstrip("/").split("/")[-1].lower()).strip("-") or "model"


def scaled_name(name: str, scale: str) -> str:
    """The study's name at a scale: unchanged at the default one."""
    return name if scale == DEFAULT else f"{name}_{scale}"


def base_name(name: str) -> str:
    """The preset a (possibly scaled) study name comes from: `curriculum_study_small` -> `curriculum_study`."""
    for label in set(EMBEDDED.values()) - {DEFAULT}:
        if name.endswith(f"_{label}"):
            return name[: -len(label) - 1]
    return name


def scaled_block(block: Mapping[str, Any], model: Mapping[str, Any]) -> dict:
    """A study block (plain dict) named after `model`'s scale: what run.py fingerprints, the registration
    records and ablate.stats reads from each run's composed config. Idempotent."""
    out = dict(block)
    scale, name = scale_of(model), str(out.get("name") or "")
    if name and scale != DEFAULT and not name.endswith(f"_{scale}"):
        out["name"] = scaled_name(name, scale)
    return out
