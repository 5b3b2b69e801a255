"""The composition root: the stage `stage.name` names (ablate.stages.registry), the model it starts
from, and the held-out evaluation around it.

`fit_stage` trains that stage on the starting model; `starting_model_config` resolves the model it
starts from (an upstream stage is trained by the `run` it is given, so no module imports the entry
point). Everything a part needs arrives here from the config and goes on as plain arguments; the parts
know nothing of each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from ablate.config.schemas import config_schema, typed
from ablate.metrics import REGIME_NO_TOOL, REGIME_TOOL
from ablate.rollout.tools import build_tool, tool_classes
from ablate.rundir import RunDir
from ablate.stages.registry import stage_of, upstream_names
from ablate.upstream import resolve_plain_sft, upstream_model


def starting_model_config(cfg: DictConfig, run: Callable[[DictConfig, Path], Any]) -> DictConfig:
    """The model config the stage starts from: init=<an upstream stage> the model of that stage
    (trained once by `run` and cached, see ablate.upstream; for model=tiny with the shipped SFT config
    the checkpoint in the package), init=scratch a random init, init=model model.name_or_path as given.
    A stage without `init` (sft) starts from the model as configured. `model.name_or_path=upstream:sft`
    (ablate.models.source.PLAIN_SFT) is the model's own plain SFT, trained once by `run` and cached."""
    model = cfg.model.copy()
    init = cfg.stage.init if stage_of(cfg.stage.name).init else "model"
    if init == "scratch":
        model.name_or_path = None
    elif init in upstream_names():
        model.name_or_path = upstream_model(cfg, init, run)
    return resolve_plain_sft(cfg, model, run)


@config_schema("checkpoint", "checkpoint_schema")
@dataclass
class CheckpointConfig:
    """`checkpoint:` (conf/config.yaml): what the run keeps beside Lightning's last and step checkpoints."""

    keep_evaluated: bool = False  # with eval.every: each evaluated step's checkpoint (ablate.periodic_eval)


def validation_callbacks(cfg: DictConfig, val_problems, tokenizer, task, run_dir: Path) -> list:
    """`eval.every=N`: held-out evaluation every N steps (ablate.periodic_eval); none otherwise."""
    if not cfg.eval.get("every"):
        return []
    from ablate.periodic_eval import ValidationCallback  # heavy: Lightning, off ablate.train's config refusal

    keep = RunDir(run_dir).checkpoint_dir if typed(CheckpointConfig, cfg.checkpoint).keep_evaluated else None
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if validation_regime(cfg) == REGIME_TOOL else None
    return [ValidationCallback(val_problems, tokenizer, cfg.model.template, task,
                               cfg.eval, int(cfg.seed), int(cfg.eval.every),
                               cfg.stage.max_steps, keep, tool_cfg=cfg.tool, tool=tool)]


def final_regimes(cfg: DictConfig) -> list[str]:
    """The regimes of the final evaluation: `eval.regimes`, or by default no_tool, plus tool when the run
    has a tool (any schedule but off)."""
    if not cfg.eval.enabled:
        return []
    if cfg.eval.get("regimes") is not None:
        return list(cfg.eval.regimes)
    return [REGIME_NO_TOOL] + ([REGIME_TOOL] if cfg.tool.schedule != "off" else [])


def validation_regime(cfg: DictConfig) -> str:
    """`eval.val_regime`, with auto resolved: the tool answers in validation when the run has one and its
    format cannot do without it (`Tool.validates_with_tool`: the solver oracle), else no_tool."""
    regime = cfg.eval.val_regime
    if regime != "auto":
        return regime
    tool_class = tool_classes().get(cfg.tool.kind)
    on = cfg.tool.schedule != "off" and getattr(tool_class, "validates_with_tool", False)
    return REGIME_TOOL if on else REGIME_NO_TOOL


def fit_stage(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status, extra_callbacks=()) -> None:
    """Train the stage `stage.name` on `model` (in place) on the run's `task` (`ablate.tasks.build_task`), with
    `eval.every`'s validation callback and `extra_callbacks` (Lightning callbacks of the caller's, e.g. a
    bench's step timings)."""
    callbacks = [*validation_callbacks(cfg, splits.val, tokenizer, task, run_dir), *extra_callbacks]
    stage_of(cfg.stage.name).fit(cfg, model, tokenizer, splits, task, run_dir, status, callbacks)
