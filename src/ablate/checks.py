"""`check_config`: every check of a composed run config, before any compute. Each part checks its own
config (`check_stage` in each `ablate.lit` stage, `check_rollout`, `check_tool`, `check_curriculum`,
`check_replay`, `check_eval`, `check_loggers`, ...); this module runs them in order, with the checks
that span parts (which stage may take which curriculum) and the model and task ones."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from ablate.config_checks import ConfigError, require

__all__ = ["ConfigError", "check_config"]


def check_model_and_task(cfg: DictConfig) -> None:
    from ablate import config_checks
    from ablate.models import MODEL_KINDS
    from ablate.tasks import TASKS

    m = cfg.model
    require(m.kind in MODEL_KINDS, f"model.kind={m.kind!r}: expected one of {MODEL_KINDS}")
    if m.kind == "hf":
        require(OmegaConf.is_missing(m, "name_or_path") is False and bool(m.name_or_path),
                "model=hf needs model.name_or_path=<Hub id or local directory>")
    require(m.template in ("compact", "tinyzero", "calculator"),
            f"model.template={m.template!r}: expected compact, tinyzero or calculator")
    require(m.kind != "tiny" or m.template == "compact",
            f"model.template={m.template!r} needs a chat template, which the tiny tokenizer lacks; use compact")
    vocab_size = (m.get("arch") or {}).get("vocab_size") if m.kind == "tiny" else None
    if vocab_size is not None:
        from ablate.models.tokenizer import load_tiny_tokenizer

        tokens = len(load_tiny_tokenizer())
        require(int(vocab_size) >= tokens, f"model.arch.vocab_size={vocab_size} is below the tiny tokenizer's "
                                           f"{tokens} tokens: use >= {tokens}, or leave it out (null)")
    if m.get("name_or_path") and not (cfg.stage.name != "sft" and cfg.stage.get("init") == "scratch"):
        error = config_checks.model_source_error(m.name_or_path)
        require(error is None, str(error))

    require(cfg.task.name in TASKS, f"task.name={cfg.task.name!r}: expected one of {tuple(TASKS)} (the registered "
                                    "tasks, ablate.tasks.register_task)")
    TASKS[cfg.task.name].check(cfg)  # the task's own values, and the reward it scores with


def check_stage(cfg: DictConfig) -> None:
    from ablate.stages import preference_stages, stages
    from ablate.upstream import check_init

    s = cfg.stage
    require(s.name in stages(), f"stage={s.name!r}: expected one of {stages()}")
    require(float(s.lr) > 0, f"stage.lr={s.lr} must be > 0")
    if s.name == "sft":
        from ablate.lit.sft import check_stage as check
    elif s.name in preference_stages():
        from ablate.lit.dpo import check_stage as check
    else:
        from ablate.lit.rloo import check_stage as check
    if s.name != "sft":
        check_init(cfg)
    check(cfg)


def check_upstream(cfg: DictConfig) -> None:
    """The stage `stage.init` names is checked as a run of its own (and chains of them refuse cycles)."""
    from ablate.upstream import UPSTREAM_STAGES, upstream_config, upstream_spec

    s = cfg.stage
    if s.name == "sft" or s.init not in UPSTREAM_STAGES:
        return
    try:
        upstream_spec(cfg, s.init)  # refuses cycles
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        check_config(upstream_config(cfg, s.init))
    except ConfigError as err:
        raise ConfigError(f"upstream.{s.init} (the stage stage.init={s.init} starts from): {err}") from None


def check_curriculum_stage(cfg: DictConfig) -> None:
    if not cfg.get("curriculum"):
        return
    from ablate.curriculum import check_curriculum
    from ablate.stages import preference_stages
    from ablate.tasks import task_class

    s, c = cfg.stage, cfg.curriculum
    static_pairs = s.name in preference_stages() and c.kind == "static" and c.difficulty.field == "n_numbers"
    require(s.name == "rloo" or static_pairs,
            f"curriculum={c.name} chooses RL prompts; it needs stage=rloo, not stage={s.name} (preference "
            "stages take a static curriculum on n_numbers as an ordering of their pairs: curriculum=static)")
    try:
        fields = tuple(task_class(cfg.task.name).difficulty_fields)  # the task's difficulty axes
        check_curriculum(OmegaConf.to_container(cfg.curriculum, resolve=True), fields, cfg.task.name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_study(cfg: DictConfig) -> None:
    """A study preset's claims and seed plan are read by ablate.stats after the runs: a malformed one
    must fail now, before any compute, not after hours of training."""
    if cfg.get("study") is None:
        return
    from ablate.stats.claims import check_study_block

    problems = check_study_block(OmegaConf.to_container(cfg.study, resolve=True))
    require(not problems, "study (the preset's claims and seed plan): " + "; ".join(problems)
            + " (docs/stats.md, Claims, lists the keys)")


def check_config(cfg: DictConfig) -> None:
    """Fail before any compute on values that cannot work (ConfigError naming the key and the fix)."""
    from ablate import config_checks
    from ablate.curriculum.replay import check_replay
    from ablate.eval import check_eval
    from ablate.fit import check_compile, check_loggers
    from ablate.lit.rloo import check_dynamic_sampling
    from ablate.rollout.tools import check_tool

    require(cfg.resume in ("auto", "never"), f"resume={cfg.resume!r}: use resume=auto or resume=never")
    for error in (config_checks.seed_error(cfg), config_checks.eval_ks_error(cfg.eval)):
        require(error is None, str(error))
    check_model_and_task(cfg)
    check_stage(cfg)
    check_upstream(cfg)
    check_curriculum_stage(cfg)
    check_replay(cfg)
    check_dynamic_sampling(cfg)
    check_eval(cfg)
    check_tool(cfg)
    error = config_checks.task_file_error(cfg.task)  # reads the file: after the checks that read only the config
    require(error is None, str(error))
    check_loggers(cfg)
    check_compile(cfg)
    check_study(cfg)
