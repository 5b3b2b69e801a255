"""`stage=sft`: supervised fine-tuning on solver traces (ablate.lit.sft), the first stage of every chain."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig

from ablate.config import require
from ablate.config.schemas import config_schema
from ablate.fit import fit
from ablate.rollout.schedules import show_preamble
from ablate.stages.registry import STAGES, check_schedule, groups
from ablate.tasks import task_class


@config_schema("stage", "sft_schema")
@dataclass
class SFTStageConfig:
    name: str = "sft"
    trace: str = "plain"
    pool_size: int = 50000
    batch_size: int = 64
    max_steps: int = 1500
    max_length: int = 128
    lr: float = 3.0e-3
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    warmup_steps: int = 100
    grad_clip: float = 1.0
    checkpoint_every: int = 250


def fit_sft(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status=None, callbacks=()) -> None:
    # heavy: Lightning, off ablate.train's config refusal
    from ablate.lit.sft import SFTModule
    from ablate.lit.sft_data import SFTDataModule

    s = cfg.stage
    inputs = sft_tool_inputs(s, cfg.tool)
    oracle = {key: inputs[key] for key in ("mistake_rate", "max_messages")} if s.trace == "oracle" else None
    data = SFTDataModule(task, splits.train, tokenizer, cfg.model.template, s.trace, s.batch_size, int(cfg.seed),
                         s.max_length, tool_cfg=cfg.tool, oracle=oracle)
    module = SFTModule(model, lr=s.lr, weight_decay=s.weight_decay, warmup_steps=s.warmup_steps,
                       total_steps=s.max_steps, min_lr_ratio=s.min_lr_ratio)
    fit(cfg, module, run_dir, datamodule=data, gradient_clip=s.grad_clip, callbacks=callbacks)


def check_sft(cfg: DictConfig) -> None:
    """`stage=sft` config (ConfigError naming the key and the fix), and that oracle traces go with
    tool=oracle and only with it."""
    s = cfg.stage
    styles = task_class(cfg.task.name).trace_styles  # the task makes the traces
    require(s.trace in styles, f"stage.trace={s.trace!r}: expected one of {styles} (the traces task={cfg.task.name} offers)")
    check_schedule(s, ("batch_size", "max_steps", "max_length", "pool_size", "checkpoint_every"))
    s, t = cfg.stage, cfg.tool
    require((s.trace == "oracle") == (t.kind == "oracle"),
            f"stage.trace={s.trace} with tool={t.name}: oracle traces go with tool=oracle and only with it "
            "(the solver answers in its evaluation); "
            + ("set stage.trace=oracle (experiment=oracle_sft sets both; for the SFT an RL or preference stage "
               "starts from: upstream.sft.trace=oracle)" if t.kind == "oracle" else
               "use tool=oracle, or stage.trace=plain"))


def sft_upstream(up: DictConfig) -> dict[str, Any]:
    """What an SFT model depends on: model, task and, of `tool`, only what its traces read (the calculator
    preamble, oracle traces; nothing for plain SFT, which is one model whatever the tool condition)."""
    spec = groups("model", "task")(up)
    tool = sft_tool_inputs(up.stage, up.tool)
    if tool:
        spec["tool"] = tool
    return spec


def sft_tool_inputs(stage: Mapping[str, Any], tool: Mapping[str, Any]) -> dict[str, Any]:
    """What an SFT run's training reads from `tool`: whether its prompts carry the calculator
    preamble (calculator traces are rollouts in which the calculator answered, so `tool.prompt`
    decides as it does for RL rollouts and evaluation) and, for oracle traces, how they are made.
    Empty when nothing applies, so plain SFT is one model whatever the tool condition (its cache key,
    ablate.upstream, includes this and nothing else of `tool`)."""
    inputs: dict[str, Any] = {}
    if stage.trace != "oracle" and show_preamble(tool.prompt, available=stage.trace in ("calc", "mixed")):
        inputs["preamble"] = True
    if stage.trace == "oracle":
        inputs.update(mistake_rate=float(tool.get("mistake_rate", 0.05)), max_messages=int(tool.get("max_messages", 20)))
    return inputs


# the stage, registered last: what it is registered with is defined above
STAGES.register("sft", check=check_sft, schema=SFTStageConfig, upstream=sft_upstream, init=False)(fit_sft)
