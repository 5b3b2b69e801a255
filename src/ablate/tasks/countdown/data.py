"""Problem pools from the generator, the Hugging Face Hub or local files, and the fixed test split.

`build_splits(task_cfg)` is what the trainer calls. It reads problems from `task.source` in a fixed
order (generation with `data_seed`, or the rows of a dataset), drops duplicates (by sorted numbers
and target) and, by default, problems with no exactly-once solution. The test split
(`test_size` problems, stratified by operand count, drawn with `test_seed`) comes from the first
`test_pool` problems only, and the training pool is the first `pool_size` problems minus the
test's. The generator is prefix-stable (the first k of n problems do not depend on n), so the test
split is the same for every run, every seed and every pool size (an SFT stage may train on a larger
pool than an RL stage and both are scored on the same prompts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ablate.config import typed
from ablate.rundir.cache import cache_dir  # noqa: F401 - where generated pools are cached (also read here by tests)
from ablate.tasks.base import Splits, stratified_indices

from .generator import generate
from .problem import Problem
from .schema import CountdownTaskConfig
from .solver import is_solvable

log = logging.getLogger(__name__)

SOURCES = ("generated", "hub", "file")


def problems_from_rows(rows: Iterable[Mapping[str, Any]], numbers_column: str = "nums",
                       target_column: str = "target", where: str = "dataset") -> list[Problem]:
    problems = []
    for i, row in enumerate(rows):
        try:
            numbers = tuple(int(n) for n in row[numbers_column])
            target = int(row[target_column])
        except KeyError as missing:
            raise ValueError(f"{where}: row {i} has no column {missing}; columns are {sorted(row)}. "
                             f"Set task.*.numbers_column / target_column.") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: row {i} is not a Countdown problem ({err}): {dict(row)}") from None
        problems.append(Problem(numbers, target, row.get("n_solutions"), row.get("hardness")))
    return problems


def load_hub(path: str, name: str | None = None, split: str = "train", numbers_column: str = "nums",
             target_column: str = "target", limit: int | None = None) -> list[Problem]:
    """Rows of a Hugging Face dataset (a Hub id such as `asingh15/countdown_tasks_3to4`, or a
    local directory of data files, which `datasets.load_dataset` reads the same way)."""
    import datasets  # heavy: datasets, off ablate.stats (which reads ablate.tasks) and ablate.train's start-up

    dataset = datasets.load_dataset(path, name, split=split)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return problems_from_rows(dataset, numbers_column, target_column, where=path)


def load_file(path: str | Path, numbers_column: str = "nums", target_column: str = "target",
              limit: int | None = None) -> list[Problem]:
    """A local `.jsonl`/`.json` or `.parquet` file with one problem per row."""
    import datasets  # heavy: datasets, off ablate.stats (which reads ablate.tasks) and ablate.train's start-up

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task.file.path: no such file: {path}")
    builders = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
    if path.suffix not in builders:
        raise ValueError(f"task.file.path: {path} should end in .jsonl, .json or .parquet")
    dataset = datasets.load_dataset(builders[path.suffix], data_files=str(path), split="train")
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return problems_from_rows(dataset, numbers_column, target_column, where=str(path))


def save_problems(problems: Sequence[Problem], path: str | Path) -> Path:
    """Write `.jsonl` (default) or `.parquet`; rows carry `id`, `nums`, `target` and the labels."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [p.to_dict() for p in problems]
    if path.suffix == ".parquet":
        # heavy: pyarrow.parquet, ~10 ms of ablate.train's start-up, for a .parquet file only
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        with path.open("w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return path


def deduplicate(problems: Iterable[Problem]) -> list[Problem]:
    seen: set = set()
    unique = []
    for problem in problems:
        if problem.key not in seen:
            seen.add(problem.key)
            unique.append(problem)
    return unique


def split_test(pool: Sequence[Problem], test_size: int, seed: int) -> Splits:
    """Hold out `test_size` problems stratified by operand count (proportional allocation,
    largest remainders); the rest, in pool order, is the training pool."""
    pool = deduplicate(pool)
    if not 0 < test_size < len(pool):
        raise ValueError(f"task.test_size={test_size} must be between 1 and the pool size minus one "
                         f"({len(pool) - 1} after de-duplication); raise task.pool_size or lower test_size")
    chosen = stratified_indices([p.n_numbers for p in pool], test_size, seed)
    test = [pool[i] for i in sorted(chosen)]
    train = [p for i, p in enumerate(pool) if i not in chosen]
    return Splits(train=train, test=test)


def generated_pool(size: int, seed: int, counts: Sequence[int], min_number: int, max_number: int,
                   min_target: int, max_target: int) -> list[Problem]:
    """`generate(size, ...)` without labels, cached on disk: the generator is prefix-stable, so one
    cached file of n problems serves every request for up to n (a sweep generates once)."""
    spec = {"seed": seed, "counts": list(counts), "min_number": min_number, "max_number": max_number,
            "min_target": min_target, "max_target": max_target, "version": 1}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir() / "countdown"
    for path in sorted(folder.glob(f"{key}-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]), reverse=True):
        if int(path.stem.split("-")[1]) >= size:
            try:
                with path.open() as f:
                    return [Problem.from_dict(json.loads(line)) for line, _ in zip(f, range(size))]
            except (OSError, ValueError, KeyError):
                log.warning("ignoring unreadable cache file %s", path)
    problems = generate(size, seed=seed, counts=counts, min_number=min_number, max_number=max_number,
                        min_target=min_target, max_target=max_target, labels=False, progress=size >= 5000)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}-{size}.{os.getpid()}.tmp"
        with tmp.open("w") as f:
            for p in problems:
                f.write(json.dumps({"nums": list(p.numbers), "target": p.target}) + "\n")
        os.replace(tmp, folder / f"{key}-{size}.jsonl")
    except OSError as err:  # a read-only home still trains, just without the cache
        log.warning("could not cache the generated pool in %s: %s", folder, err)
    return problems


def load_pool(task: CountdownTaskConfig, size: int) -> list[Problem]:
    """The first `size` problems of `task.source`, in source order."""
    if task.source == "generated":
        g = task.generator
        return generated_pool(size, seed=task.data_seed, counts=list(g.counts), min_number=g.min_number,
                              max_number=g.max_number, min_target=g.min_target, max_target=g.max_target)
    if task.source == "hub":
        h = task.hub
        return load_hub(h.path, h.name, h.split, h.numbers_column, h.target_column, limit=size)
    if task.source == "file":
        f = task.file
        if not f.path:
            raise ValueError("task.source=file needs task.file.path=<.jsonl or .parquet file>")
        return load_file(f.path, f.numbers_column, f.target_column, limit=size)
    raise ValueError(f"task.source={task.source!r} is not one of {SOURCES}")


def build_splits(task_cfg: CountdownTaskConfig | Mapping[str, Any], pool_size: int | None = None,
                 label_test: bool = True, val_size: int = 0) -> Splits:
    """The training pool and the held-out test split described by a `conf/task/` config
    (`pool_size` overrides `task.pool_size`; the test split does not depend on it). `val_size` > 0 also
    holds out a validation split for evaluation during training: stratified by operand count like the
    test, drawn from the same first `test_pool` problems minus the test (so it depends on neither
    `pool_size` nor the run's seed) with seed `test_seed + 1`, and removed from the training pool. `task_cfg`:
    the composed `task` config or a mapping of its keys (the schema's defaults fill the rest)."""
    task = typed(CountdownTaskConfig, task_cfg)
    pool_size = int(task.pool_size if pool_size is None else pool_size)
    test_pool = task.test_pool
    problems = load_pool(task, max(pool_size, test_pool))
    # Generated problems are solvable by construction; only external data needs the check.
    if task.source != "generated" and task.drop_unsolvable:
        solvable = [p for p in problems if is_solvable(p.numbers, p.target)]
        if len(solvable) < len(problems):
            log.warning("dropped %d of %d problems with no solution using each number exactly once",
                        len(problems) - len(solvable), len(problems))
        keep = {id(p) for p in solvable}
    else:
        keep = {id(p) for p in problems}
    held_out = split_test([p for p in problems[:test_pool] if id(p) in keep], task.test_size, task.test_seed).test
    test_keys = {p.key for p in held_out}
    val: list[Problem] = []
    if val_size > 0:
        rest = [p for p in problems[:test_pool] if id(p) in keep and p.key not in test_keys]
        val = [p.labelled() for p in split_test(rest, val_size, task.test_seed + 1).test]
    held_keys = test_keys | {p.key for p in val}
    train = deduplicate(p for p in problems[:pool_size] if id(p) in keep and p.key not in held_keys)
    if not train:
        raise ValueError(f"no training problems left: task.pool_size={pool_size} holds only test problems")
    test = [p.labelled() for p in held_out] if label_test else held_out
    return Splits(train=train, test=test, val=val)
