"""`check_config`: every check of a composed run config, before any compute: the checks registered in
`ablate.check_registry.CHECKS`, each beside its part (`check_replay`, `check_eval`, `check_tool`,
`check_loggers`, ...), run in their registered order (the table in ablate.check_registry). Registered here:
the config package's own checks (`ablate.config.checks`: keys no schema has, the seed, pass@k against n, the
data file), the model and task ones, and the checks that span parts by asking their registries (the stage
`stage.name` names and its own `Stage.check`, which stage takes which curriculum). The parts import
`ablate.config` and `ablate.check_registry`, never this."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import ablate.parts  # noqa: F401 - every part, and with it every part's registered check
from ablate.check_registry import CHECKS, ordered
from ablate.config import ConfigError, plain, require
from ablate.config import checks as config_checks
from ablate.config.scale import DEFAULT, EMBEDDED
from ablate.curriculum import check_curriculum
from ablate.models import MODEL_KINDS, resolve_path
from ablate.models.source import PLAIN_SFT, model_source_error
from ablate.models.tokenizer import load_tiny_tokenizer
from ablate.stages import STAGES, stage_of
from ablate.tasks import TASKS, task_class
from ablate.upstream import check_init, upstream_config, upstream_spec, upstream_stages

__all__ = ["ConfigError", "check_config"]


@CHECKS.register("config", order=10)
def check_config_values(cfg: DictConfig) -> None:
    """The config's own values: resume, keys no schema has, the seed, pass@k against n."""
    require(cfg.resume in ("auto", "never"), f"resume={cfg.resume!r}: use resume=auto or resume=never")
    for error in (config_checks.unknown_keys_error(cfg), config_checks.seed_error(cfg),
                  config_checks.eval_ks_error(cfg.eval)):
        require(error is None, str(error))


@CHECKS.register("task_file", order=80)
def check_task_file(cfg: DictConfig) -> None:
    """task.source=file: the file reads (after the checks that read only the config)."""
    error = config_checks.task_file_error(cfg.task)
    require(error is None, str(error))


@CHECKS.register("model_and_task", order=20)
def check_model_and_task(cfg: DictConfig) -> None:
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
        tokens = len(load_tiny_tokenizer())
        require(int(vocab_size) >= tokens, f"model.arch.vocab_size={vocab_size} is below the tiny tokenizer's "
                                           f"{tokens} tokens: use >= {tokens}, or leave it out (null)")
    require(m.kind == "tiny" or m.get("name_or_path") != PLAIN_SFT,
            f"model.name_or_path={PLAIN_SFT} (the model's own plain SFT) needs an embedded model (model=tiny, small); "
            "a Hub model names its weights")
    if m.get("name_or_path") and cfg.stage.get("init") != "scratch":
        error = model_source_error(m.name_or_path)
        require(error is None, str(error))
        if m.kind == "tiny":
            require_arch_matches(m)

    require(cfg.task.name in TASKS, f"task.name={cfg.task.name!r}: expected one of {tuple(TASKS)} (the registered "
                                    "tasks, ablate.tasks.register_task)")
    TASKS[cfg.task.name].check(cfg)  # the task's own values, and the reward it scores with


def require_arch_matches(m: DictConfig) -> None:
    """An embedded model started from saved weights loads their shape, not `model.arch`: refuse a mismatch
    where the arch is a named scale other than the default (ablate.config.scale.EMBEDDED; e.g. `model=small` under a testbed that starts from builtin:tiny-sft would train the tiny model while
    the study is named after the small one, ablate.config.scale)."""
    config = Path(str(resolve_path(m.name_or_path))) / "config.json"
    if not config.is_file():
        return
    saved = json.loads(config.read_text(encoding="utf-8"))
    keys = ("hidden_size", "num_hidden_layers")
    have, want = tuple(saved.get(k) for k in keys), tuple((m.get("arch") or {}).get(k) for k in keys)
    if EMBEDDED.get(want, DEFAULT) == DEFAULT:  # the default arch, or a shape no scale names (a smoke size's):
        return                                 # saved weights win over it, as they always did
    require(have == want, f"model.name_or_path={m.name_or_path} holds a model of hidden {have[0]} x {have[1]} layers, "
                          f"but model.arch says {want[0]} x {want[1]}: the weights would win and the run would not "
                          "be the model it is named after; drop model.name_or_path (stage.init=sft trains this "
                          "model's own SFT) or use the model those weights are")


@CHECKS.register("stage", order=30)
def check_stage(cfg: DictConfig) -> None:
    """The registered stage `stage.name` names (ablate.stages.registry), its `stage.init`, its own checks."""
    s = cfg.stage
    stage = stage_of(s.name)  # ConfigError naming the registered stages
    if "lr" in s:
        require(float(s.lr) > 0, f"stage.lr={s.lr} must be > 0")
    if stage.init:
        check_init(cfg)
    stage.check(cfg)


@CHECKS.register("upstream", order=35)
def check_upstream(cfg: DictConfig) -> None:
    """The stage `stage.init` names is checked as a run of its own (and chains of them refuse cycles)."""
    init = cfg.stage.get("init")
    if init not in upstream_stages(cfg):
        return
    try:
        upstream_spec(cfg, init)  # refuses cycles
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        check_config(upstream_config(cfg, init))
    except ConfigError as err:
        raise ConfigError(f"upstream.{init} (the stage stage.init={init} starts from): {err}") from None


@CHECKS.register("curriculum", order=40)
def check_curriculum_stage(cfg: DictConfig) -> None:
    """The stage takes the curriculum (its registered `curriculum` check), which is checked by its sampler."""
    if not cfg.get("curriculum"):
        return
    s, c = cfg.stage, cfg.curriculum
    stage = stage_of(s.name)
    if stage.curriculum is None:
        takers = [name for other in STAGES.values() if other.curriculum for name in other.stage_names()]
        raise ConfigError(f"curriculum={c.name} chooses RL prompts; stage={s.name} takes no curriculum "
                          f"(the stages that take one: {', '.join(takers)})")
    stage.curriculum(cfg)
    try:
        fields = tuple(task_class(cfg.task.name).difficulty_fields)  # the task's difficulty axes
        check_curriculum(cfg.curriculum, fields, cfg.task.name)  # typed by the curriculum's schema
    except ValueError as err:
        raise ConfigError(str(err)) from None


@CHECKS.register("study", order=100)
def check_study(cfg: DictConfig) -> None:
    """A study preset's claims and seed plan are read by ablate.stats after the runs: a malformed one
    must fail now, before any compute, not after hours of training."""
    if cfg.get("study") is None:
        return
    # heavy: scipy (ablate.stats), needed only when the config declares a study: off ablate.train's --help
    from ablate.stats.claims.study import check_study_block

    problems = check_study_block(plain(cfg.study))  # the block as ablate.stats reads it
    require(not problems, "study (the preset's claims and seed plan): " + "; ".join(problems)
            + " (docs/stats.md, Claims, lists the keys)")


def check_config(cfg: DictConfig) -> None:
    """Fail before any compute on values that cannot work (ConfigError naming the key and the fix): every
    registered check, in its order (ablate.check_registry)."""
    for check in ordered():
        check(cfg)
