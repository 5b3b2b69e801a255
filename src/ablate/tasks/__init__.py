"""Verifiable tasks, behind one seam (`ablate.tasks.base.Task`) and a registry keyed by `task.name`.

Each subpackage is a task that registers itself on import (`@TASKS.register`); importing this package
imports them all, so `TASKS` holds every shipped task. `build_task(cfg)` is what the trainer calls.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ablate.config.schemas import typed

from .base import CORRECT, NO_ANSWER, OPERANDS, TASKS, Splits, Task, task_class

for _module in pkgutil.iter_modules(__path__):  # a task package registers its task class when imported
    if _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CORRECT", "NO_ANSWER", "OPERANDS", "TASKS", "Splits", "Task", "build_task", "task_class"]


def build_task(cfg: Any) -> Task:
    """The task of a run config (a composed config or a plain dict): `task.name`'s class built from the `task`
    config, typed by the class's schema (`Task.schema`; as composed for a task that declares none), and the
    `reward` config (each task reads its own reward keys, typed by its reward schema)."""
    node = cfg["task"]
    cls = task_class(node["name"])
    schema = getattr(cls, "schema", None)
    return cls.from_config(typed(schema, node) if schema else node, cfg.get("reward") or {})
