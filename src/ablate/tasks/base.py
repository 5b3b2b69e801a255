"""The task seam: what the toolkit asks of a verifiable task, and the registry keyed by `task.name`.

A task is a class registered with `@TASKS.register` under its `name` (the `name` of its
`conf/task/<option>.yaml`). The trainer builds one instance per run with
`from_config(task_cfg, reward_cfg)`; every part that needs the task (training stages, evaluation,
validation, curricula, tools, preference pairs) is handed that instance and treats a problem as an
opaque record with an `id`. What an instance offers:

* `splits(pool_size, val_size, label_test)`: the training pool, the fixed test split and the
  validation split, from the task's own generator or data with a fixed data seed (never the run seed);
* `render(problem, template, calculator, oracle)`: the prompt, plain text for the compact template of
  the tiny model, chat messages otherwise (the model's chat template turns them into text);
* `score(problem, completion)`: (reward, verdict). `verdicts` lists every verdict, `correct` and
  `no_answer` among them (metrics count correct and answered samples by these two);
* `level(problem)`: the prompt's report level (Countdown: its operand count), written as the
  `level_column` of samples.jsonl and broken down as `<level_block>/<level>/...` in summaries,
  validation and training metrics (`rollout_metrics`: what RL rollouts log, named by the task);
  `difficulty(problems, field)`: the values of a curriculum's `difficulty.field` (the keys of
  `difficulty_fields`, whose value says `levels`: one level per value, or `quantiles`:
  `curriculum.difficulty.bins` equal-count bins);
* `record(problem)`: what identifies and labels a prompt in samples.jsonl (an `id` among them; evaluation
  adds the sample counts, `n`, `n_correct`, `n_answered`, `verdicts`, ..., after it);
* `sft_segments(problem, rng, style, compact, oracle)`: one SFT response in the `stage.trace` style
  (one of `trace_styles`), as (text, written by a tool) pieces; optionally `trace_style(style, rng)`: the
  style of one trace, for a style drawn per trace (Countdown's `mixed`: calc or plain), drawn from the
  trace's generator before the trace; optionally `tool_styles`: the styles whose traces a tool answered
  (their prompts decorated as rollouts the tool answers: Countdown's calc and oracle);
* `tools()` (a class method): the tool classes it offers by `tool.kind` (none for most tasks), and
  optionally `solver_pairs(...)` (preference pairs from a solver: `stage.pairs.source=solver`).
`check(cfg)` (a class method) refuses, before any compute, task, reward and stage values the task
cannot serve (ConfigError naming the key and the fix).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Protocol, Sequence, TypeVar

from ablate.registry import Registry

P = TypeVar("P")
Messages = list[dict[str, str]]
CORRECT, NO_ANSWER = "correct", "no_answer"  # verdicts every task has: metrics read them
# The report level's names when it is an operand count (Countdown's, and any task whose level counts
# operands): summaries, metrics and ablate.stats read these.
OPERANDS = ("n_numbers", "by_operands")


@dataclass(frozen=True)
class Splits:
    train: list
    test: list
    val: list = field(default_factory=list)  # held out from training, disjoint from test (eval.every)


class Task(Protocol):
    name: str
    verdicts: tuple[str, ...]
    level_column: str
    level_block: str
    difficulty_fields: Mapping[str, str]
    schema: type  # its `task` config's dataclass (ablate.config.schemas.config_schema), beside the task

    @classmethod
    def check(cls, cfg: Any) -> None: ...

    @classmethod
    def from_config(cls, task_cfg: Any, reward_cfg: Mapping[str, Any]) -> "Task": ...  # task_cfg: a `schema` instance

    @classmethod
    def tools(cls) -> dict[str, type]: ...

    def splits(self, pool_size: int | None = None, val_size: int = 0, label_test: bool = True) -> Splits: ...

    def render(self, problem: Any, template: str, calculator: bool = False, oracle: bool = False) -> str | Messages: ...

    def score(self, problem: Any, completion: Any) -> tuple[float, str]: ...

    def level(self, problem: Any) -> int | None: ...

    def difficulty(self, problems: Sequence[Any], field: str) -> list[int]: ...

    def record(self, problem: Any) -> dict[str, Any]: ...

    def sft_segments(self, problem: Any, rng: random.Random, style: str, compact: bool,
                     oracle: Mapping[str, Any] | None = None) -> list[tuple[str, bool]]: ...


def rollout_metrics(task: Task, levels: Sequence[Any], rewards: Any, verdicts: Sequence[str],
                    values: Sequence[Any]) -> dict[str, float]:
    """What a task's RL rollouts log, named by the task: `train/verdict/<verdict>` for each of its `verdicts`
    (fractions of samples), then reward and verdict rates per report level under its `level_block`
    (Countdown's: `train/by_operands/3/reward_mean`, `train/by_operands/3/verdict/correct`, ...), NaN for a
    level the batch did not draw, so a mean over steps is a mean over the steps that trained on it.
    `levels`: each prompt's; `values`: the levels to report; `rewards` [prompts, k]; verdicts prompt-major."""
    out = {f"train/verdict/{v}": sum(x == v for x in verdicts) / len(verdicts) for v in task.verdicts}
    k = rewards.shape[1]
    for n in values:
        rows = [i for i, level in enumerate(levels) if level == n]
        mine = [v for i in rows for v in verdicts[i * k:(i + 1) * k]]
        out[f"train/{task.level_block}/{n}/reward_mean"] = rewards[rows].mean().item() if rows else float("nan")
        for verdict in task.verdicts:
            out[f"train/{task.level_block}/{n}/verdict/{verdict}"] = (sum(v == verdict for v in mine) / len(mine)
                                                                      if mine else float("nan"))
    return out


# `@TASKS.register` on a task class: `task.name=<cls.name>` builds `cls.from_config(task_cfg, reward_cfg)`;
# `cls.schema` is its `task` config's dataclass (@config_schema, beside the task)
TASKS = Registry("task.name", hint=" (a task registers itself with @ablate.tasks.TASKS.register)")


def task_class(name: str) -> type:
    """The task class registered as `task.name=<name>`; ValueError naming the registered ones otherwise."""
    return TASKS[name]


def deduplicate(items: Iterable[P], key: Callable[[P], Hashable]) -> list[P]:
    seen: set = set()
    unique = []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            unique.append(item)
    return unique


def stratified_indices(levels: Sequence[Hashable], size: int, seed: int) -> set[int]:
    """`size` indices drawn without replacement, stratified by level: proportional allocation with
    largest remainders (ties to the smaller level), each stratum sampled with one `random.Random(seed)`
    in level order. The test and validation splits of every task are drawn this way."""
    strata: dict[Any, list[int]] = defaultdict(list)
    for index, level in enumerate(levels):
        strata[level].append(index)
    quotas = {k: size * len(v) / len(levels) for k, v in strata.items()}
    sizes = {k: int(q) for k, q in quotas.items()}
    for k in sorted(quotas, key=lambda k: (sizes[k] - quotas[k], k))[: size - sum(sizes.values())]:
        sizes[k] += 1
    rng = random.Random(seed)
    return {i for k in sorted(strata) for i in rng.sample(strata[k], sizes[k])}


def held_out_splits(problems: Sequence[P], pool_size: int, test_pool: int, test_size: int, test_seed: int,
                    val_size: int, key: Callable[[P], Hashable], level: Callable[[P], Hashable]) -> Splits:
    """The split rule every generated task shares: the test split (`test_size` problems stratified by
    level, seed `test_seed`) comes from the first `test_pool` problems only, the validation split
    (`val_size`, seed `test_seed + 1`) from what those leave, and the training pool is the first
    `pool_size` problems minus both. With a prefix-stable source the held-out splits depend on
    neither `pool_size` nor the run's seed. `problems` is in source order; duplicates (by `key`) are dropped
    within the test pool and the training pool, each cut from the source first."""
    head = deduplicate(problems[:test_pool], key)
    if not 0 < test_size < len(head):
        raise ValueError(f"task.test_size={test_size} must be between 1 and the test pool size minus one "
                         f"({len(head) - 1} after de-duplication); raise task.test_pool or lower test_size")
    chosen = stratified_indices([level(p) for p in head], test_size, test_seed)
    test = [p for i, p in enumerate(head) if i in chosen]
    rest = [p for i, p in enumerate(head) if i not in chosen]
    val: list = []
    if val_size > 0:
        if not 0 < val_size < len(rest):
            raise ValueError(f"eval.val_size={val_size} must be below the {len(rest)} problems the test leaves")
        picked = stratified_indices([level(p) for p in rest], val_size, test_seed + 1)
        val = [p for i, p in enumerate(rest) if i in picked]
    held = {key(p) for p in test} | {key(p) for p in val}
    train = deduplicate((p for p in problems[:pool_size] if key(p) not in held), key)
    if not train:
        raise ValueError(f"no training problems left: task.pool_size={pool_size} holds only held-out problems")
    return Splits(train=train, test=test, val=val)
