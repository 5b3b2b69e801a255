"""A reasoning-gym generator as an `ablate.tasks.base.Task` (`task.name=reasoning_gym`, optional extra:
`pip install 'ablate-rl[reasoning-gym]'`). `conf/task/chain_sum.yaml` is one: sums and differences of
a few small numbers, short enough answers for the embedded tiny model to learn from scratch.

`task.dataset` names the generator (`reasoning_gym.create_dataset`) and `task.config` its own config
fields; the problems are its entries with a fixed data seed, so the splits are the same for every run.
The reward is reasoning-gym's own: `dataset.score_answer(answer, entry)` on the last `<answer>...</answer>`
of the completion (its `extract_answer`), a score in [0, 1]; the verdict is `correct` at 1, `no_answer`
without an answer tag, else `wrong_answer`. The report level is the entry's operand count
(`task.operands`, a metadata field such as chain_sum's `num_terms`): `n_numbers` in samples.jsonl and
`by_operands/<n>/...` in summaries, as for Countdown, so ablate.stats reads both alike.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence

from ablate.config import ConfigError, require
from ablate.config.schemas import config_schema, typed
from ablate.tasks.base import CORRECT, NO_ANSWER, OPERANDS, TASKS, Messages, Splits, held_out_splits

from .steps import worked_steps

INSTALL = "pip install 'ablate-rl[reasoning-gym]'"


@dataclass(frozen=True)
class Entry:
    """One generated problem: reasoning-gym's entry (question, answer, metadata) and its index."""

    index: int
    question: str
    answer: str
    metadata: Mapping[str, Any]
    n_numbers: int | None = None

    @property
    def id(self) -> str:
        """Stable across runs and orders: a hash of the question (entries are de-duplicated by it)."""
        return hashlib.sha1(self.question.encode()).hexdigest()[:12]

    def as_entry(self) -> dict[str, Any]:
        """The dict reasoning-gym's scorers take."""
        return {"question": self.question, "answer": self.answer, "metadata": dict(self.metadata)}


def load_dataset(dataset: str, config: Mapping[str, Any], seed: int, size: int):
    """reasoning-gym's generator: ValueError naming the fix when it is not installed or refuses the config."""
    try:
        import reasoning_gym  # optional: the reasoning-gym extra
    except ImportError:
        raise ValueError(f"task.dataset={dataset}: reasoning-gym is not installed; {INSTALL}") from None
    from reasoning_gym.factory import DATASETS  # optional: the reasoning-gym extra

    if dataset not in DATASETS:
        raise ValueError(f"task.dataset={dataset!r}: no such reasoning-gym dataset; e.g. {sorted(DATASETS)[:12]}")
    try:
        return reasoning_gym.create_dataset(dataset, **dict(config), seed=seed, size=max(1, size))
    except (TypeError, AssertionError, ValueError) as err:
        raise ValueError(f"task.config={dict(config)}: {dataset} refuses it ({type(err).__name__}: {err})") from None


@config_schema("task", "reasoning_gym_schema")
@dataclass
class ReasoningGymTaskConfig:
    """conf/task/<option>.yaml of a reasoning-gym task (`defaults: [reasoning_gym_schema]`); the defaults
    are conf/task/chain_sum.yaml's values."""

    name: str = "reasoning_gym"
    dataset: str = "chain_sum"
    config: Dict[str, Any] = field(default_factory=lambda: {"min_terms": 2, "max_terms": 3, "min_digits": 1,
                                                            "max_digits": 2})  # the generator's own config fields
    pool_size: int = 10000
    data_seed: int = 0
    test_size: int = 500
    test_pool: int = 5000
    test_seed: int = 1234
    operands: Optional[str] = "num_terms"  # metadata field counting the operands: the report level (null: none)
    prompt: str = "{expression} ="  # the compact template's prompt: a format string over question and metadata


@TASKS.register
class ReasoningGymTask:
    name = "reasoning_gym"
    schema = ReasoningGymTaskConfig
    verdicts = (NO_ANSWER, "wrong_answer", CORRECT)
    level_column, level_block = OPERANDS
    difficulty_fields = {"n_numbers": "levels"}  # one curriculum level per operand count
    # plain: a worked trace where ablate has one for the dataset (chain_sum), else the answer alone
    trace_styles = ("plain", "answer")

    def __init__(self, task_cfg: Mapping[str, Any]):
        self.cfg = typed(ReasoningGymTaskConfig, task_cfg)  # keys left out: the schema's defaults
        self.dataset = load_dataset(self.cfg.dataset, self.cfg.config, self.cfg.data_seed,
                                    max(self.cfg.pool_size, self.cfg.test_pool))

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any], reward_cfg: Mapping[str, Any]) -> "ReasoningGymTask":
        return cls(task_cfg)  # the reward is reasoning-gym's scorer (check() holds reward=score_answer)

    @classmethod
    def tools(cls) -> dict[str, type]:
        return {}

    @classmethod
    def check(cls, cfg: Any) -> None:
        """The task, reward, tool and template values: ConfigError naming the key and the fix, before compute."""
        t = cfg.task
        require(0 < t.test_size < t.test_pool, f"task.test_size={t.test_size} must be > 0 and < task.test_pool={t.test_pool}")
        require(t.pool_size >= 1, f"task.pool_size={t.pool_size} must be >= 1")
        reward = cfg.reward.get("name") if cfg.get("reward") else None
        require(reward == "score_answer", f"reward={reward}: task.dataset={t.dataset} is scored by reasoning-gym's own "
                                          "scorer (dataset.score_answer); use reward=score_answer")
        require(cfg.tool.schedule == "off" and cfg.tool.prompt != "always",
                f"tool={cfg.tool.name} (schedule {cfg.tool.schedule}, prompt {cfg.tool.prompt}): task.dataset={t.dataset} "
                "offers no tools; use tool=off")
        require(cfg.model.template in ("compact", "tinyzero"),
                f"model.template={cfg.model.template!r}: a reasoning-gym task takes compact or tinyzero")
        try:
            entry = load_dataset(t.dataset, typed(ReasoningGymTaskConfig, t).config, int(t.data_seed), 1)[0]
        except ValueError as err:
            raise ConfigError(str(err)) from None
        metadata = entry["metadata"]
        integers = sorted(k for k, v in metadata.items() if isinstance(v, int) and not isinstance(v, bool))
        if t.operands is not None:
            require(t.operands in integers, f"task.operands={t.operands!r}: {t.dataset}'s entries have no integer field "
                                            f"of that name; choose one of {integers} or null (no report level)")
        else:
            require(not cfg.get("curriculum"), f"curriculum={cfg.curriculum.name if cfg.get('curriculum') else None} "
                                               "orders prompts by operand count: set task.operands")
        try:
            str(t.prompt).format(question=entry["question"], **metadata)
        except (KeyError, IndexError, ValueError, AttributeError) as err:
            raise ConfigError(f"task.prompt={t.prompt!r}: not a format string over question and {sorted(metadata)} "
                              f"({type(err).__name__}: {err})") from None

    def entry(self, index: int) -> Entry:
        row = self.dataset[index]
        operands = self.cfg.operands
        return Entry(index, row["question"], str(row["answer"]), row["metadata"],
                     int(row["metadata"][operands]) if operands else None)

    def splits(self, pool_size: int | None = None, val_size: int = 0, label_test: bool = True) -> Splits:
        pool_size = int(self.cfg.pool_size if pool_size is None else pool_size)
        test_pool = self.cfg.test_pool
        size = max(pool_size, test_pool)
        if size > len(self.dataset):  # eval's pool_size=test_pool, or a larger stage pool: the same seed, more entries
            self.dataset = load_dataset(self.cfg.dataset, self.cfg.config, self.cfg.data_seed, size)
        problems = [self.entry(i) for i in range(size)]
        return held_out_splits(problems, pool_size, test_pool, self.cfg.test_size, self.cfg.test_seed,
                               val_size, key=lambda e: e.question, level=lambda e: e.n_numbers or 0)

    def render(self, problem: Entry, template: str, calculator: bool = False, oracle: bool = False) -> str | Messages:
        """The compact template: `task.prompt` (e.g. chain_sum's `{expression} =`) and a newline; a chat
        template: reasoning-gym's default system prompt and the question."""
        if calculator or oracle:
            raise ValueError(f"task.dataset={self.cfg.dataset}: this task offers no tools (tool=off)")
        if template == "compact":
            return self.cfg.prompt.format(question=problem.question, **problem.metadata) + "\n"
        if template != "tinyzero":
            raise ValueError(f"model.template={template!r}: a reasoning-gym task takes compact or tinyzero")
        from reasoning_gym.utils import SYSTEM_PROMPTS  # optional: the reasoning-gym extra

        return [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": problem.question}]

    def score(self, problem: Entry, completion: Any) -> tuple[float, str]:
        """reasoning-gym's reward: its scorer on its extraction of the last answer tag."""
        from reasoning_gym.utils import extract_answer  # optional: the reasoning-gym extra

        answer = extract_answer(completion, tag_name="answer") if isinstance(completion, str) else None
        reward = float(self.dataset.score_answer(answer, problem.as_entry()))
        return reward, NO_ANSWER if answer is None else CORRECT if reward >= 1.0 else "wrong_answer"

    def level(self, problem: Entry) -> int | None:
        return problem.n_numbers

    def difficulty(self, problems: Sequence[Entry], field: str) -> list[int]:
        if field != "n_numbers" or any(p.n_numbers is None for p in problems):
            raise ValueError(f"curriculum.difficulty.field={field!r}: a reasoning-gym task's levels are its operand "
                             "counts (n_numbers, with task.operands set)")
        return [p.n_numbers for p in problems]

    def record(self, problem: Entry) -> dict[str, Any]:
        labels = {k: v for k, v in problem.metadata.items() if isinstance(v, int) and k != "source_index"}
        return {"id": problem.id, "question": problem.question, "answer": problem.answer,
                "n_numbers": problem.n_numbers, "difficulty": labels}

    def sft_segments(self, problem: Entry, rng: random.Random, style: str, compact: bool,
                     oracle: Mapping[str, Any] | None = None) -> list[tuple[str, bool]]:
        """`<think>` with the worked steps (style plain, where the dataset has them), then the answer."""
        steps = worked_steps(self.cfg.dataset, problem.metadata, compact) if style == "plain" else None
        if compact:
            think = f"<think>{steps}</think>" if steps else ""
            return [(f"{think}<answer>{problem.answer}</answer>", False)]
        think = f"<think> {steps} </think>\n" if steps else ""
        return [(f"{think}<answer> {problem.answer} </answer>", False)]
