"""`stage=sft`: supervised fine-tuning on solver traces (ablate.lit.sft), the first stage of every chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.fit import fit
from ablate.config.schemas import SFTStageConfig
from ablate.stages.registry import Stage, register


def fit_sft(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status=None, callbacks=()) -> None:
    from ablate.lit.sft import SFTModule
    from ablate.lit.sft_data import SFTDataModule, sft_tool_inputs

    s = cfg.stage
    inputs = sft_tool_inputs(s, cfg.tool)
    oracle = {key: inputs[key] for key in ("mistake_rate", "max_messages")} if s.trace == "oracle" else None
    data = SFTDataModule(task, splits.train, tokenizer, cfg.model.template, s.trace, s.batch_size, int(cfg.seed),
                         s.max_length, tool_cfg=cfg.tool, oracle=oracle)
    module = SFTModule(model, lr=s.lr, weight_decay=s.weight_decay, warmup_steps=s.warmup_steps,
                       total_steps=s.max_steps, min_lr_ratio=s.min_lr_ratio)
    fit(cfg, module, run_dir, datamodule=data, gradient_clip=s.grad_clip, callbacks=callbacks)


def check_sft(cfg: DictConfig) -> None:
    """The SFT module's checks, and that oracle traces go with tool=oracle and only with it."""
    from ablate.config import require
    from ablate.lit.sft import check_stage

    check_stage(cfg)
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
    from ablate.lit.sft_data import sft_tool_inputs

    spec = {key: OmegaConf.to_container(up[key], resolve=True) for key in ("model", "task")}
    tool = sft_tool_inputs(up.stage, up.tool)
    if tool:
        spec["tool"] = tool
    return spec


STAGE = register(Stage("sft", fit_sft, check=check_sft, schema=SFTStageConfig, upstream=sft_upstream, init=False))
