"""Start-up checks of a reasoning-gym task's config: ConfigError naming the key and the fix, before compute."""

from __future__ import annotations

from typing import Any


def check(task_class: type, cfg: Any) -> None:
    from omegaconf import OmegaConf

    from ablate.config_checks import ConfigError, require

    from .task import load_dataset

    t = cfg.task
    require(0 < t.test_size < t.test_pool, f"task.test_size={t.test_size} must be > 0 and < task.test_pool={t.test_pool}")
    require(t.pool_size >= 1, f"task.pool_size={t.pool_size} must be >= 1")
    reward = cfg.reward.get("name") if cfg.get("reward") else None
    require(reward == "score_answer", f"reward={reward}: task.dataset={t.dataset} is scored by reasoning-gym's own "
                                      "scorer (dataset.score_answer); use reward=score_answer")
    require(cfg.tool.schedule == "off" and cfg.tool.prompt != "always",
            f"tool={cfg.tool.name} (schedule {cfg.tool.schedule}, prompt {cfg.tool.prompt}): task.dataset={t.dataset} "
            "offers no tools; use tool=off")
    require(cfg.model.template in ("compact", "tinyzero"),
            f"model.template={cfg.model.template!r}: a reasoning-gym task takes compact or tinyzero")
    try:
        entry = load_dataset(t.dataset, OmegaConf.to_container(t.config, resolve=True), int(t.data_seed), 1)[0]
    except ValueError as err:
        raise ConfigError(str(err)) from None
    metadata = entry["metadata"]
    integers = sorted(k for k, v in metadata.items() if isinstance(v, int) and not isinstance(v, bool))
    if t.operands is not None:
        require(t.operands in integers, f"task.operands={t.operands!r}: {t.dataset}'s entries have no integer field "
                                        f"of that name; choose one of {integers} or null (no report level)")
    else:
        require(not cfg.get("curriculum"), f"curriculum={cfg.curriculum.name if cfg.get('curriculum') else None} "
                                           "orders prompts by operand count: set task.operands")
    try:
        str(t.prompt).format(question=entry["question"], **metadata)
    except (KeyError, IndexError, ValueError, AttributeError) as err:
        raise ConfigError(f"task.prompt={t.prompt!r}: not a format string over question and {sorted(metadata)} "
                          f"({type(err).__name__}: {err})") from None
