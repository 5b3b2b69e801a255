"""Countdown's config schemas (ablate.config.schemas): `task=countdown` (conf/task/countdown.yaml) and its
solver oracle's tool condition (conf/tool/oracle.yaml) and its rewards (conf/reward/tinyzero.yaml, binary.yaml,
partial.yaml). The task class carries the first (`CountdownTask.schema`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ablate.config.schemas import RewardConfig, ToolConfig, config_schema


@dataclass
class GeneratorConfig:
    counts: List[int] = field(default_factory=lambda: [3, 4])
    min_number: int = 1
    max_number: int = 99
    min_target: int = 1
    max_target: int = 99


@dataclass
class HubTaskConfig:
    path: str = "asingh15/countdown_tasks_3to4"
    name: Optional[str] = None
    split: str = "train"
    numbers_column: str = "nums"
    target_column: str = "target"


@dataclass
class FileTaskConfig:
    path: Optional[str] = None
    numbers_column: str = "nums"
    target_column: str = "target"


@config_schema("task", "task_schema")
@dataclass
class CountdownTaskConfig:
    name: str = "countdown"
    source: str = "generated"
    pool_size: int = 10000
    data_seed: int = 0
    test_size: int = 500
    test_pool: int = 5000
    test_seed: int = 1234
    drop_unsolvable: bool = True
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    hub: HubTaskConfig = field(default_factory=HubTaskConfig)
    file: FileTaskConfig = field(default_factory=FileTaskConfig)


@config_schema("tool", "oracle_schema")
@dataclass
class OracleToolConfig(ToolConfig):
    """The solver oracle (paper 004): how many messages it answers, and how often it errs in SFT traces."""

    name: str = "oracle"
    kind: str = "oracle"
    schedule: str = "on"
    prompt: str = "never"
    max_messages: int = 20
    mistake_rate: float = 0.05


@dataclass
class RewardValues:
    """The reward of each verdict (ablate.tasks.countdown.verifier.VERDICTS)."""

    correct: float = 1.0
    substitution_error: float = 0.1
    wrong_value: float = 0.1
    wrong_numbers: float = 0.1
    bad_format: float = 0.1
    no_answer: float = 0.0


@config_schema("reward", "verdicts_schema")
@dataclass
class VerdictRewardConfig(RewardConfig):
    """Countdown's rewards (conf/reward/tinyzero.yaml, binary.yaml, partial.yaml): a value per verdict, plus
    optional credit for closeness (ablate.tasks.countdown.verifier.Reward). Defaults: tinyzero's."""

    name: str = "tinyzero"
    last_line_only: bool = True
    distance_credit: float = 0.0
    values: RewardValues = field(default_factory=RewardValues)
