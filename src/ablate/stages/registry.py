"""The stage registry: `stage.name` -> everything the toolkit needs to know about a stage.

A stage module registers its fit function when it is imported (`@STAGES.register("<name>", check=...,
schema=...)`, kept as a `Stage`; `ablate.stages` imports every module of the package); the config check, the
upstream cache and the entry point read this registry and nothing else, so a new stage is its module and
its `conf/stage/<name>.yaml` (docs/extending.md, "A stage").

This module imports no part (no Lightning, no torch), so the upstream cache and the config checks can read
it without a stage's modules (importing the `ablate.stages` package, which registers them, loads torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from omegaconf import DictConfig

from ablate.config import ConfigError, plain, require
from ablate.registry import Registry

# fit(cfg, model, tokenizer, splits, task, run_dir, status, callbacks): train `model` in place on the run's
# task (`ablate.tasks.Task`: its splits, prompts, scoring and traces).
Fit = Callable[..., None]


@dataclass(frozen=True)
class Stage:
    """What a stage is to the rest of the toolkit.

    name: its `stage.name` (the key of its conf/stage yaml).
    fit: trains the starting model in place (see `Fit`).
    check: its own config checks (ConfigError naming the key and the fix); the registry's generic
        checks (a known name, lr > 0, stage.init) run before it.
    schema: the dataclass of its `stage` config, beside the stage (`@config_schema("stage", "<name>_schema")`
        stores it for its yaml, which lists it first in `defaults`); the stage reads `typed(schema, cfg.stage)`.
        None: untyped.
    upstream: what the model it trains depends on besides its stage config and seed, as a dict hashed
        into its cache key (`ablate.upstream`), from that upstream run's config; None: no stage starts from
        it (`stage.init=<name>` is refused).
    init: whether it starts from `stage.init` (sft does not: it trains the model as `model` configures it).
    curriculum: checks the `curriculum` it is given (ConfigError); None: it takes no curriculum.
    names: the `stage.name` values it trains when one module serves several (the preference losses),
        read at every lookup so that a loss registered later is a stage too; None: just `name`.
    """

    name: str
    fit: Fit
    check: Callable[[DictConfig], None] = lambda cfg: None
    schema: Optional[type] = None
    upstream: Optional[Callable[[DictConfig], dict[str, Any]]] = None
    init: bool = True
    curriculum: Optional[Callable[[DictConfig], None]] = None
    names: Optional[Callable[[], Iterable[str]]] = None

    def stage_names(self) -> tuple[str, ...]:
        return tuple(self.names()) if self.names else (self.name,)


# module name -> Stage: `@STAGES.register("<name>", **the Stage's other fields)` on the stage's fit function
STAGES = Registry("stage", entry=lambda name, fit, **fields: Stage(name, fit, **fields), error=ConfigError)


def stage_names() -> tuple[str, ...]:
    """What `stage.name` may be."""
    return tuple(name for stage in STAGES.values() for name in stage.stage_names())


def stage_of(name: str) -> Stage:
    """The registered stage that trains `stage.name=<name>`; ConfigError naming the choices otherwise."""
    for stage in STAGES.values():
        if name in stage.stage_names():
            return stage
    raise ConfigError(f"stage={name!r}: expected one of {stage_names()}")  # every name, dpo and ipo too


def upstream_names() -> tuple[str, ...]:
    """The stages another may start from (`stage.init=<name>`): those with an `upstream` spec."""
    return tuple(name for stage in STAGES.values() if stage.upstream for name in stage.stage_names())


def groups(*names: str) -> Callable[[DictConfig], dict[str, Any]]:
    """An `upstream` spec of the config groups a stage's training reads besides its stage config."""
    return lambda up: {key: plain(up[key]) for key in names}  # hashed into the cache key


def check_schedule(stage: DictConfig, counts: Iterable[str]) -> None:
    """What every stage's config shares: each of `counts` (batch sizes, steps, pool) >= 1 and a warmup
    shorter than the run. ConfigError naming the key."""
    for key in counts:
        require(stage[key] >= 1, f"stage.{key}={stage[key]} must be >= 1")
    require(0 <= stage.warmup_steps < stage.max_steps,
            f"stage.warmup_steps={stage.warmup_steps} must be in [0, stage.max_steps={stage.max_steps})")
