"""Fingerprints of the code that trains and of the code that decides, so a registration can bind them.

A registration freezes a study's claims *and* the code: each run records the fingerprint of the training
code it ran (status.json `code`), the registration the fingerprints of the code at registration, and
`ablate.stats` compares them (ablate.stats.claims.standing). Two parts:

- `training`: the code that makes a run's numbers: the `ablate` package less its analysis rooms and its
  configs (each run records its composed config), and the sweeper plugin (it orders the runs);
- `analysis`: the rooms that decide (`ablate.stats`, `ablate.studies`, `ablate.external`).

A file is hashed as git hashes a blob (sha1 of "blob <size>\\0" + bytes), so the same fingerprint comes
from the files on disk at run time (`code_fingerprints`, no git needed) and from any commit of the
repository without checking it out (`fingerprints_at`, `git ls-tree`): a run recorded before runs carried
fingerprints is still compared through its `git_sha`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path

ANALYSIS = ("ablate/stats/", "ablate/studies/", "ablate/external/")
ROOTS = ("ablate/", "hydra_plugins/ablate_sweeper/")  # under the source root (src/ in the repository)
SUFFIXES = (".py", ".yaml", ".yml")
# The shipped configs are not hashed: every run records its composed config (.hydra/config.yaml), and the
# study block has its own fingerprint (ablate.stats.claims.registration); in a checkout ablate/conf is a link.
CONFIGS = "ablate/conf/"


def part_of(rel: str) -> str | None:
    """'training', 'analysis' or None (not code that counts) for a path relative to the source root."""
    if not rel.endswith(SUFFIXES) or "__pycache__" in rel or not rel.startswith(ROOTS) or rel.startswith(CONFIGS):
        return None
    return "analysis" if rel.startswith(ANALYSIS) else "training"


def blob_sha(data: bytes) -> str:
    """git's object name of a file's bytes (what `git ls-tree` lists)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def combine(blobs: dict[str, str]) -> dict[str, str]:
    """{'training': sha256, 'analysis': sha256} of {path relative to the source root: blob sha}."""
    lines: dict[str, list[str]] = {"training": [], "analysis": []}
    for rel in sorted(blobs):
        part = part_of(rel)
        if part is not None:
            lines[part].append(f"{rel} {blobs[rel]}\n")
    return {part: hashlib.sha256("".join(ls).encode()).hexdigest() for part, ls in lines.items()}


def source_root() -> Path:
    """The folder holding the `ablate` package (src/ in a checkout, site-packages in an install)."""
    return Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def code_fingerprints() -> dict[str, str]:
    """The fingerprints of the code this process imports, from its files (a few ms; cached)."""
    root = source_root()
    blobs = {}
    for top in ROOTS:
        for path in (root / top).rglob("*"):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and part_of(rel) is not None:
                blobs[rel] = blob_sha(path.read_bytes())
    return combine(blobs)


# Commits resolved in this process, and fingerprints of commits read from a committed file (`use_known`):
# a shallow clone or a copy without git still compares what the repository's history once gave.
RESOLVED: dict[str, dict[str, str]] = {}
KNOWN: dict[str, dict[str, str]] = {}


def use_known(path: Path) -> None:
    """Read {commit: fingerprints} written by `write_known` (absent file: nothing known)."""
    if Path(path).is_file():
        KNOWN.update(json.loads(Path(path).read_text(encoding="utf-8")))


def known_text() -> str:
    """Every commit known or resolved in this process, as the JSON `use_known` reads."""
    return json.dumps({**KNOWN, **RESOLVED}, indent=1, sort_keys=True) + "\n"


def fingerprints_at(commit: str | None, repo: str = ".") -> dict[str, str] | None:
    """The fingerprints of `commit`'s code in the git repository at `repo`, else as `use_known` read them
    (None when neither has it: then nothing is compared)."""
    if not commit:
        return None
    found = _from_git(commit, repo)
    if found is not None:
        RESOLVED[commit] = found
    return found or KNOWN.get(commit)


@functools.lru_cache(maxsize=64)
def _from_git(commit: str, repo: str) -> dict[str, str] | None:
    try:
        out = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--full-tree", commit, "--", "src/"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout:
        return None
    blobs = {}
    for line in out.stdout.splitlines():
        meta, _, path = line.partition("\t")
        if path.startswith("src/") and meta.split()[1:2] == ["blob"]:
            blobs[path[len("src/"):]] = meta.split()[2]
    return combine(blobs)
