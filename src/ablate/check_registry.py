"""`CHECKS`: every check of a composed run config, each registered beside the part it checks, and run in
their `order` by `ablate.checks.check_config` before any compute (a ConfigError naming the key and the fix).

    @CHECKS.register("replay", order=50)
    def check_replay(cfg): ...

The order is fixed by the numbers, not by which module was imported first (ties keep registration order):

    10 config            the config's own values: resume, keys no schema has, the seed, pass@k against n (ablate.checks)
    20 model_and_task    the model's kind, template and weights; the registered task's own check (ablate.checks)
    30 stage             the registered stage `stage.name` names, its `stage.init`, its own check (ablate.checks)
    35 upstream          the stage `stage.init` starts from, checked as a run of its own (ablate.checks)
    40 curriculum        the stage takes the curriculum, which its sampler checks (ablate.checks)
    50 replay            (ablate.curriculum.replay)
    55 dynamic_sampling  (ablate.stages.rloo)
    60 eval              (ablate.eval)
    70 tool              (ablate.rollout.tools)
    80 task_file         reads the data file: after the checks that read only the config (ablate.checks)
    85 loggers           the switched-on loggers' packages are installed (ablate.loggers)
    90 compile           a C++ compiler for trainer.compile on CPU (ablate.fit)
   100 study             a study preset's claims and seed plan (ablate.checks)

A new check is one function registered beside its part, with an order between its neighbours'. This module
imports nothing of ablate but the registry, so every part can register here."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ablate.registry import Registry


class CheckEntry(NamedTuple):
    check: Callable[[Any], None]  # (the composed run config) -> None, or a ConfigError naming the key and the fix
    order: int  # where it runs (the table above)


# `@CHECKS.register(name, order=...)` on a part's check of the composed run config
CHECKS = Registry("config check", entry=lambda name, check, *, order: CheckEntry(check, order))


def ordered() -> list[Callable[[Any], None]]:
    """The registered checks in the order they run."""
    return [entry.check for entry in sorted(CHECKS.values(), key=lambda entry: entry.order)]
