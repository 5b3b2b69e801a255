"""`stage=rloo`: online RL (ablate.lit.rloo) with a rollout engine, a tool, a curriculum and replay."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ablate.fit import fit, global_rank
from ablate.config.schemas import RLOOStageConfig
from ablate.stages.registry import Stage, register

log = logging.getLogger("ablate.train")


def build_engine(cfg: DictConfig, model, tokenizer, tool):
    """The RL rollout engine named by `rollout=`: hf (the policy itself) or vllm (a colocated copy);
    either runs any tool."""
    r = cfg.rollout
    if r.name == "vllm":
        from ablate.rollout import VLLM_LLM_KEYS
        from ablate.rollout.vllm import VLLMEngine

        llm_kwargs = {key: r[key] for key in VLLM_LLM_KEYS if r.get(key) is not None}
        llm_kwargs.update(OmegaConf.to_container(r.engine_kwargs, resolve=True) or {})
        return VLLMEngine(model, tokenizer, tool=tool, seed=int(cfg.seed), llm_kwargs=llm_kwargs)
    from ablate.rollout.hf import HFEngine

    return HFEngine(model, tokenizer, batch_size=r.batch_size, tool=tool)


def fit_rloo(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status=None, callbacks=()) -> None:
    from torch.utils.data import DataLoader

    from ablate.curriculum import ReplayBuffer, build_sampler
    from ablate.lit.rloo import RLOOModule
    from ablate.rollout.tools import build_tool

    s, train_problems = cfg.stage, splits.train
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if cfg.tool.schedule != "off" else None
    engine = build_engine(cfg, model, tokenizer, tool)
    curriculum = OmegaConf.to_container(cfg.curriculum, resolve=True) if cfg.get("curriculum") else None
    sampler = build_sampler(curriculum, train_problems, int(cfg.seed), s.max_steps,
                            embed=lambda: prompt_embeddings(cfg, model, tokenizer, train_problems, task), task=task)
    replay = (ReplayBuffer(int(cfg.replay.capacity), float(cfg.replay.fresh_fraction), int(cfg.seed))
              if cfg.replay.enabled else None)
    module = RLOOModule(model, tokenizer, train_problems, cfg.model.template, engine, task, sampler,
                        s, int(cfg.seed), replay=replay,
                        tool=OmegaConf.to_container(cfg.tool, resolve=True),
                        dynamic_sampling=OmegaConf.to_container(cfg.dynamic_sampling, resolve=True))
    # One item per optimizer step: prompts come from the sampler inside training_step.
    steps = DataLoader(range(s.max_steps), batch_size=None)
    try:
        fit(cfg, module, run_dir, dataloader=steps, callbacks=callbacks)
    finally:  # rollout=vllm holds a vLLM engine: release it before a sweep's next job builds one
        getattr(engine, "close", lambda: None)()
    if status is not None and global_rank() == 0:
        record_engagement(cfg, run_dir, status)


def prompt_embeddings(cfg: DictConfig, model, tokenizer, problems, task):
    """DOTS's prompt embeddings: the starting policy's (curriculum.embedding=policy) or a Hugging Face
    encoder's mean-pooled last hidden state over each training prompt, computed once."""
    from ablate.models import encode_prompt, mean_pooled_embeddings, prompt_text

    texts = [prompt_text(task, p, cfg.model.template, tokenizer) for p in problems]
    name = cfg.curriculum.embedding  # only DOTS asks for embeddings, and its schema has the key
    if name == "policy":
        return mean_pooled_embeddings(model, [encode_prompt(t, tokenizer) for t in texts], tokenizer.pad_token_id)
    from transformers import AutoModel, AutoTokenizer

    encoder_tokenizer = AutoTokenizer.from_pretrained(name)
    encoder = AutoModel.from_pretrained(name).eval()
    ids = [encoder_tokenizer(t)["input_ids"] for t in texts]
    return mean_pooled_embeddings(encoder, ids, encoder_tokenizer.pad_token_id or 0)


def record_engagement(cfg: DictConfig, run_dir: Path, status) -> None:
    """Warn (log, status.json `warnings`) when the curriculum ended the run behaving as uniform sampling."""
    if not cfg.get("curriculum") or not (run_dir / "metrics.csv").is_file():
        return
    import pandas as pd

    from ablate.curriculum import engagement_warnings

    found = engagement_warnings(cfg.curriculum.kind, pd.read_csv(run_dir / "metrics.csv"))
    for warning in found:
        log.warning("%s", warning)
    status.update(warnings=found)


def check_rloo(cfg: DictConfig) -> None:
    from ablate.lit.rloo import check_stage

    check_stage(cfg)


STAGE = register(Stage("rloo", fit_rloo, check=check_rloo, schema=RLOOStageConfig,
                       curriculum=lambda cfg: None))  # any curriculum chooses its prompts
