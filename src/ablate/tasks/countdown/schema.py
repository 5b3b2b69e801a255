"""Countdown's config schemas (ablate.config.schemas): `task=countdown` (conf/task/countdown.yaml) and its
solver oracle's tool condition (conf/tool/oracle.yaml). The task class carries the first (`CountdownTask.schema`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ablate.config.schemas import ToolConfig, config_schema


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
