"""Experiment loggers beside the run directory's metrics.csv (always written): each a function registered
under the `logger.<name>` switch that turns it on (conf/logger/*.yaml), returning a Lightning logger.

    @LOGGERS.register("wandb", modules=("wandb",), extra="wandb")
    def wandb(cfg, run_dir, params): ...

A new logger is this module's one function and a conf/logger/<name>.yaml setting `<name>: true`
(docs/extending.md). Each is imported inside its function: wandb, TensorBoard and MLflow are extras.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ablate.check_registry import CHECKS
from ablate.config import plain, require
from ablate.config.schemas import config_schema, typed
from ablate.registry import Registry


@config_schema("logger", "csv_schema")
@dataclass
class LoggerConfig:
    """`logger=` (conf/logger/csv.yaml, tensorboard.yaml): a switch per registered logger; metrics.csv is
    always written. A logger with settings of its own extends it (wandb, mlflow below)."""

    wandb: bool = False
    tensorboard: bool = False
    mlflow: bool = False


@config_schema("logger", "wandb_schema")
@dataclass
class WandbLoggerConfig(LoggerConfig):
    wandb: bool = True
    project: str = "ablate"
    mode: str = "offline"


@config_schema("logger", "mlflow_schema")
@dataclass
class MLflowLoggerConfig(LoggerConfig):
    mlflow: bool = True
    tracking_uri: Optional[str] = None
    experiment_name: str = "ablate"


class LoggerEntry(NamedTuple):
    build: Callable[[DictConfig, Path, dict], Any]  # (cfg, run_dir, the composed config) -> a Lightning logger
    modules: tuple[str, ...]  # usable when any of these is installed
    extra: str  # the extra that installs one


# `@LOGGERS.register(name, modules=..., extra=...)`: the logger `logger.<name>: true` turns on
LOGGERS = Registry("logger", entry=lambda name, build, **needs: LoggerEntry(build, **needs))


@CHECKS.register("loggers", order=85)
def check_loggers(cfg: DictConfig) -> None:
    """The switched-on loggers' packages are installed (before any compute): ConfigError naming the extra."""
    for name, entry in LOGGERS.items():
        if cfg.logger.get(name):
            require(any(importlib.util.find_spec(m) for m in entry.modules),
                    f"logger={name} needs the {entry.extra} extra: pip install -e '.[{entry.extra}]'")


def mlflow_name(key: str) -> str:
    """A metric name MLflow accepts (alphanumerics and `_ / . - space`): `@` -> `_at_`, `^` -> `_hat_`."""
    return key.replace("@", "_at_").replace("^", "_hat_")


@LOGGERS.register("wandb", modules=("wandb",), extra="wandb")
def wandb(cfg: DictConfig, run_dir: Path, params: dict) -> Any:
    from lightning.pytorch.loggers import WandbLogger  # optional: the wandb extra (and heavy: Lightning)

    w = typed(WandbLoggerConfig, cfg.logger)
    return WandbLogger(project=w.project, save_dir=str(run_dir), offline=w.mode == "offline")


@LOGGERS.register("tensorboard", modules=("tensorboard", "tensorboardX"), extra="tensorboard")
def tensorboard(cfg: DictConfig, run_dir: Path, params: dict) -> Any:
    from lightning.pytorch.loggers import TensorBoardLogger  # optional: the tensorboard extra (and heavy: Lightning)

    logger = TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False)
    logger.log_hyperparams(params)
    return logger


@LOGGERS.register("mlflow", modules=("mlflow",), extra="mlflow")
def mlflow(cfg: DictConfig, run_dir: Path, params: dict) -> Any:
    from lightning.pytorch.loggers import MLFlowLogger  # optional: the mlflow extra (and heavy: Lightning)

    class Logger(MLFlowLogger):
        def log_metrics(self, metrics, step=None):
            super().log_metrics({mlflow_name(k): v for k, v in metrics.items()}, step)

    m = typed(MLflowLoggerConfig, cfg.logger)  # its keys, where the logger= option lacks them (logger.mlflow=true)
    uri = m.tracking_uri
    if not uri:  # the run directory's own file store; MLflow >= 3.x refuses one unless allowed
        uri = (run_dir / "mlruns").resolve().as_uri()
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    overrides = _task_overrides()
    logger = Logger(experiment_name=m.experiment_name or "ablate", tracking_uri=uri,
                    run_name=" ".join(overrides) or run_dir.name,
                    tags={"run_dir": str(run_dir.resolve()), "overrides": " ".join(overrides)})
    logger.log_hyperparams(params)
    return logger


def extra_loggers(cfg: DictConfig, run_dir: Path) -> list[Any]:
    """The loggers `cfg.logger` switches on, in registry order; those that log hyperparameters get the
    composed config."""
    wanted = [name for name in LOGGERS if cfg.logger.get(name)]
    if not wanted:
        return []
    params = plain(cfg)  # the composed config, as the logger records it
    return [LOGGERS[name].build(cfg, Path(run_dir), params) for name in wanted]


def _task_overrides() -> list[str]:
    """The run's command-line overrides (Hydra's task overrides), or none outside a Hydra run."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []
