"""Where ablate caches what it can rebuild: generated problem pools and upstream models (each a run
directory, trained once and shared by the runs that start from it)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$ABLATE_CACHE, else ~/.cache/ablate."""
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


def models_dir() -> Path:
    """The cached upstream stages' run directories, one per upstream key (ablate.upstream)."""
    return cache_dir() / "models"
