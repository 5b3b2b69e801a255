"""`model_source_error`: whether `model.name_or_path` names a model that can be loaded, checked before
any compute (ablate.checks) without loading it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, try_to_load_from_cache
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors import safe_open

from ablate.models import resolve_path


def _looks_local(name: str) -> bool:
    return (name.startswith(("/", "./", "../", "~")) or os.sep + os.sep in name or name.count("/") > 1
            or name.endswith("/") or (os.altsep is not None and os.altsep in name))


def _json_error(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"not valid JSON ({' '.join(str(err).split())[:120]})"
    return None if isinstance(value, dict) else f"not a JSON object (a {type(value).__name__})"


def model_dir_damage(local: Path, key: str, name: str) -> str | None:
    """A local model directory's files checked before any compute, each without loading the model: the JSON
    files parse (config, tokenizer, weight index), every safetensors file's header reads and its size covers
    the tensors the header lists, and some weights are there. None, or one line naming the file and the fix."""
    fix = "re-export it (save_pretrained: a run's model/) or copy the directory again"
    for json_name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json", "model.safetensors.index.json"):
        if (local / json_name).is_file() and (error := _json_error(local / json_name)):
            return f"{key}={name!r}: {local / json_name} is damaged: {error}; {fix}"
    weights = sorted(local.glob("*.safetensors"))
    if not weights and not any(local.glob("*.bin")):
        return f"{key}={name!r}: {local} has config.json but no weights (*.safetensors or *.bin); {fix}"
    for path in weights:
        try:
            with safe_open(str(path), framework="pt") as f:  # reads and checks the header only
                f.keys()
        except Exception as err:  # noqa: BLE001 - safetensors raises its own SafetensorError and OSError
            return f"{key}={name!r}: {path} is not a readable safetensors file ({' '.join(str(err).split())[:120]}); {fix}"
    return None


# model.name_or_path of an embedded model: its own plain SFT (the `upstream.plain_sft` slot: conf/stage/sft.yaml
# with the model's recipe, conf/upstream/sft/<model>.yaml), trained once and cached (ablate.upstream.plain_sft_config):
# what a second SFT (the calculator SFT of testbed=calc_sft) starts from at any scale; builtin:tiny-sft at model=tiny.
PLAIN_SFT = "upstream:sft"


def model_source_error(name_or_path: Any, key: str = "model.name_or_path") -> str | None:
    """A shipped checkpoint, an existing local model directory, or a Hub id that exists (in the local
    cache, or on the Hub when it answers within a few seconds; offline, an unknown id is refused)."""
    if not name_or_path or name_or_path == PLAIN_SFT:
        return None
    name = str(name_or_path)
    if name.startswith("builtin:"):
        try:
            resolve_path(name)
        except ValueError as err:
            return str(err)
        return None
    local = Path(name).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            return model_dir_damage(local, key, name)
        return (f"{key}={name!r}: not a model directory (no config.json); point it at a save_pretrained "
                "directory (a run's model/), a Hub id or builtin:tiny-sft")
    if _looks_local(name):
        return f"{key}={name!r}: no such directory; point it at a save_pretrained directory, a Hub id or builtin:tiny-sft"
    try:
        validate_repo_id(name)
    except HFValidationError:
        return f"{key}={name!r}: neither a local directory nor a valid Hub id (like Qwen/Qwen2.5-0.5B-Instruct)"
    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - an odd cache is not the user's error
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return f"{key}={name!r}: not a local directory and not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
    try:
        HfApi().model_info(name, timeout=10)
    except GatedRepoError:
        return None  # it exists; the download will ask for the token
    except RepositoryNotFoundError:
        return f"{key}={name!r}: no such model on the Hugging Face Hub and no such local directory"
    except Exception:  # noqa: BLE001 - no network: let the load say what happened
        return None
    return None
