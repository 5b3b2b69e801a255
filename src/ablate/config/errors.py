"""`ConfigError`: a config value that cannot work, refused before any compute (exit code 2)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and the fix."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
