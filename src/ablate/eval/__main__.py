"""`python -m ablate.eval model_dir=<dir | builtin:tiny-sft>`: evaluate a saved model on the task's held-out
split into this command's own run directory (ablate.eval does the evaluation). Apart from the library, so
that the command can import every part (ablate.parts: their schemas, before Hydra composes) while the
parts import the library."""

from __future__ import annotations

import contextlib
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import ablate.device
import ablate.parts  # noqa: F401 - every part's schema, before Hydra composes
from ablate.config import CONF_DIR, torch_threads
from ablate.eval import evaluate, format_summary, write_eval
from ablate.metrics import REGIME_TOOL, REGIMES
from ablate.models import load_model, load_tokenizer, resolve_path
from ablate.rollout.tools import build_tool
from ablate.rundir.ownership import RunOwned, owned
from ablate.rundir.status import RunStatus
from ablate.stopping import stop_on_signals
from ablate.tasks import build_task


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="eval_model")
def main(cfg: DictConfig) -> None:
    """Evaluate a saved model directory on the task's held-out split into this run's `eval/`."""
    if cfg.regime not in REGIMES:
        raise SystemExit(f"config error: regime={cfg.regime!r}: expected no_tool or tool (the tool of `tool=...` answers)")
    try:
        model_dir = Path(resolve_path(str(cfg.model_dir)))
    except ValueError as err:
        raise SystemExit(f"config error: {err}") from None
    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"model_dir={cfg.model_dir}: no config.json there; point it at a run's model/ directory "
                         "or a shipped checkpoint such as builtin:tiny-sft")
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    ownership = contextlib.ExitStack()
    try:
        ownership.enter_context(owned(run_dir))
    except RunOwned as err:
        raise SystemExit(f"error: {err}") from None
    with stop_on_signals(), ownership, RunStatus(run_dir).running(stage="eval", model_dir=str(model_dir)) as status:
        torch.set_num_threads(torch_threads(cfg.trainer.num_threads))
        cfg.model.name_or_path = str(model_dir)
        tokenizer = load_tokenizer(cfg.model)
        model = load_model(cfg.model, tokenizer)
        # on the GPU where there is one, as a training run's final evaluation (ablate.run)
        device = ablate.device.device(cfg.trainer)
        model.to(device)
        status.update(device=device)
        task = build_task(cfg)
        splits = task.splits(pool_size=int(cfg.task.test_pool))
        tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if cfg.regime == REGIME_TOOL else None
        summary, rows = evaluate(model, tokenizer, splits.test[:cfg.eval.get("limit")], cfg.model.template, task,
                                 cfg.eval, int(cfg.seed), tool, tool_cfg=cfg.tool)
        out = write_eval(run_dir, cfg.regime, summary, rows)
    print(f"eval [{cfg.regime}]: {format_summary(summary)}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
