"""Where ablate caches what it can rebuild: generated problem pools and upstream models."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$ABLATE_CACHE, else ~/.cache/ablate."""
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))
