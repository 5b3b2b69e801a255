"""The composition root: which parts each stage is built from, and how they are wired.

`fit_stage` trains the stage `cfg.stage.name` names on the starting model; `starting_model_config`
resolves the model it starts from (an upstream stage is trained by the `run` it is given, so no
module imports the entry point). Everything a part needs arrives here from the config and goes on
as plain arguments; the parts know nothing of each other.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ablate.fit import fit, global_rank, precision
from ablate.metrics import REGIME_NO_TOOL, REGIME_TOOL  # re-exported: train reads them here

log = logging.getLogger("ablate.train")


def preference_stages() -> tuple[str, ...]:
    """The preference stages: the keys of `ablate.objectives.PREFERENCE_LOSSES` (dpo, ipo, ...)."""
    from ablate.objectives import PREFERENCE_LOSSES

    return tuple(PREFERENCE_LOSSES)


def stages() -> tuple[str, ...]:
    """What `stage.name` may be."""
    return ("sft", "rloo", *preference_stages())


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


def fit_rloo(cfg: DictConfig, model, tokenizer, train_problems, task, run_dir: Path, callbacks=()) -> None:
    from torch.utils.data import DataLoader

    from ablate.curriculum import ReplayBuffer, build_sampler
    from ablate.lit.rloo import RLOOModule
    from ablate.rollout.tools import build_tool

    s = cfg.stage
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


def build_pairs(cfg: DictConfig, model, tokenizer, train_problems, task) -> list:
    """The preference pairs `stage.pairs` describes (ablate.lit.pairs), from the first
    `stage.pairs.n_prompts` training problems; `sampled` samples from `model` (the starting policy) and
    scores with the task, `solver` asks the task's solver (`Task.solver_pairs`)."""
    import torch

    from ablate.lit.pairs import load_pairs, sampled_pairs
    from ablate.models import encode_prompt, prompt_text
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.rollout.tools import ToolPrompt, build_tool

    p = cfg.stage.pairs
    if p.source == "file":
        return load_pairs(str(p.file.path))
    problems = list(train_problems[: p.n_prompts])
    prompts = [prompt_text(task, problem, cfg.model.template, tokenizer) for problem in problems]
    if p.source == "solver":
        return task.solver_pairs(problems, prompts, dict(p.solver.mix), int(cfg.seed), p.solver.trace,
                                 compact=cfg.model.template == "compact")
    q = p.sampled
    # The tool (any kind) answers while sampling when its schedule is `on`; the prompts are decorated as in
    # the no_tool regime, since the pairs' prompts are what the stage trains and is evaluated on.
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if cfg.tool.schedule == "on" else None
    prompts = [ToolPrompt(cfg.tool, cfg.model.template, tokenizer, task).text(problem, available=False)
               for problem in problems]
    engine = HFEngine(model, tokenizer, batch_size=cfg.rollout.batch_size, tool=tool)
    params = SamplingParams(temperature=q.temperature, top_p=q.top_p, top_k=q.top_k,
                            max_new_tokens=q.max_new_tokens)
    generator = torch.Generator().manual_seed(int(cfg.seed))
    return sampled_pairs(problems, prompts, [encode_prompt(t, tokenizer) for t in prompts], engine, params, q.n,
                         task, q.margin, q.max_pairs_per_prompt, generator,
                         chunk=max(1, cfg.rollout.batch_size // q.n), progress=True)


def fit_preference(cfg: DictConfig, model, tokenizer, train_problems, task, run_dir: Path, status=None,
                   callbacks=()) -> None:
    """DPO/IPO: build the pairs (or reload them on resume), compute the reference log-probs once,
    save both to <run>/pairs.jsonl, then fit."""
    import json

    import torch
    from torch.utils.data import DataLoader

    from ablate.lit.dpo import PreferenceModule, encode_pair, reference_logprobs
    from ablate.lit.pairs import load_pairs, order_pairs, save_pairs

    s = cfg.stage
    average = s.average_logps
    pairs_file = run_dir / "pairs.jsonl"
    if cfg.resume == "auto" and pairs_file.is_file():
        pairs = load_pairs(pairs_file)
        rows = [json.loads(line) for line in pairs_file.read_text().splitlines() if line.strip()]
        reference = torch.tensor([[r["ref_chosen_logps"], r["ref_rejected_logps"]] for r in rows])
        encoded = [encode_pair(pair, tokenizer, s.max_length) for pair in pairs]
    else:
        if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu":
            model.to("cuda")  # sampling and the reference pass; Lightning keeps it there
        clock = time.monotonic()
        pairs = build_pairs(cfg, model, tokenizer, train_problems, task)
        if not pairs:
            raise RuntimeError(f"stage.pairs.source={s.pairs.source} made no pairs from {s.pairs.n_prompts} prompts "
                               "(sampled: no prompt had a reward gap >= stage.pairs.sampled.margin; raise "
                               "stage.pairs.n_prompts or stage.pairs.sampled.n, or lower the margin)")
        pairs_s = time.monotonic() - clock
        encoded = [encode_pair(pair, tokenizer, s.max_length) for pair in pairs]
        clock = time.monotonic()
        autocast = "bf16" if precision(cfg.trainer).startswith("bf16") else None
        reference = reference_logprobs(model, encoded, tokenizer.pad_token_id, average,
                                       batch_size=s.batch_size, autocast=autocast)
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
        stages = pair_stages(OmegaConf.to_container(cfg.curriculum, resolve=True), train_problems, task)
    elif s.pairs.order == "static":
        stages = OmegaConf.to_container(s.pairs.stages, resolve=True)
    else:
        stages = [{"until": 1.0, "n_numbers": None}]
    module = PreferenceModule(model, encoded, reference,
                              lambda length: order_pairs(pairs, stages, length, int(cfg.seed)), s, tokenizer.pad_token_id)
    # One item per optimizer step: the module takes its pairs from the schedule by global step.
    fit(cfg, module, run_dir, dataloader=DataLoader(range(s.max_steps), batch_size=None),
         gradient_clip=s.grad_clip, callbacks=callbacks)


def pair_stages(curriculum: dict, problems, task) -> list[dict]:
    """A static curriculum's stages (levels of n_numbers) as `order_pairs` stages (n_numbers values: a
    pair's is its prompt's report level, `task.level`)."""
    values = sorted({task.level(p) for p in problems})
    return [{"until": float(stage["until"]), "n_numbers": [values[level] for level in stage["levels"]]}
            for stage in curriculum["stages"]]


def prompt_embeddings(cfg: DictConfig, model, tokenizer, problems, task):
    """DOTS's prompt embeddings: the starting policy's (curriculum.embedding=policy) or a Hugging Face
    encoder's mean-pooled last hidden state over each training prompt, computed once."""
    from ablate.models import encode_prompt, mean_pooled_embeddings, prompt_text

    texts = [prompt_text(task, p, cfg.model.template, tokenizer) for p in problems]
    name = cfg.curriculum.get("embedding", "policy")
    if name == "policy":
        return mean_pooled_embeddings(model, [encode_prompt(t, tokenizer) for t in texts], tokenizer.pad_token_id)
    from transformers import AutoModel, AutoTokenizer

    encoder_tokenizer = AutoTokenizer.from_pretrained(name)
    encoder = AutoModel.from_pretrained(name).eval()
    ids = [encoder_tokenizer(t)["input_ids"] for t in texts]
    return mean_pooled_embeddings(encoder, ids, encoder_tokenizer.pad_token_id or 0)


def fit_sft(cfg: DictConfig, model, tokenizer, train_problems, task, run_dir: Path, callbacks=()) -> None:
    from ablate.lit.sft import SFTModule
    from ablate.lit.sft_data import SFTDataModule, sft_tool_inputs

    s = cfg.stage
    inputs = sft_tool_inputs(s, cfg.tool)
    oracle = {key: inputs[key] for key in ("mistake_rate", "max_messages")} if s.trace == "oracle" else None
    data = SFTDataModule(task, train_problems, tokenizer, cfg.model.template, s.trace, s.batch_size, int(cfg.seed),
                         s.max_length, tool_cfg=cfg.tool, oracle=oracle)
    module = SFTModule(model, lr=s.lr, weight_decay=s.weight_decay, warmup_steps=s.warmup_steps,
                       total_steps=s.max_steps, min_lr_ratio=s.min_lr_ratio)
    fit(cfg, module, run_dir, datamodule=data, gradient_clip=s.grad_clip, callbacks=callbacks)


def starting_model_config(cfg: DictConfig, run: Callable[[DictConfig, Path], Any]) -> DictConfig:
    """The model config the stage starts from: init=sft|dpo|ipo the model of that upstream stage
    (trained once by `run` and cached, see ablate.upstream; for model=tiny with the shipped SFT config
    the checkpoint in the package), init=scratch a random init, init=model model.name_or_path as given."""
    from ablate.upstream import UPSTREAM_STAGES, upstream_model

    model = cfg.model.copy()
    if cfg.stage.name == "sft":
        return model
    if cfg.stage.init == "scratch":
        model.name_or_path = None
    elif cfg.stage.init in UPSTREAM_STAGES:
        model.name_or_path = upstream_model(cfg, cfg.stage.init, run)
    return model


def validation_callbacks(cfg: DictConfig, val_problems, tokenizer, task, run_dir: Path) -> list:
    """`eval.every=N`: held-out evaluation every N steps (ablate.validation); none otherwise."""
    if not cfg.eval.get("every"):
        return []
    from ablate.rollout.tools import build_tool
    from ablate.validation import ValidationCallback

    keep = run_dir / "checkpoints" if cfg.checkpoint.keep_evaluated else None
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if validation_regime(cfg) == REGIME_TOOL else None
    return [ValidationCallback(val_problems, tokenizer, cfg.model.template, task,
                               OmegaConf.to_container(cfg.eval, resolve=True), int(cfg.seed), int(cfg.eval.every),
                               cfg.stage.max_steps, keep, tool_cfg=cfg.tool, tool=tool)]


def final_regimes(cfg: DictConfig) -> list[str]:
    """The regimes of the final evaluation: `eval.regimes`, or by default no_tool, plus tool when the run
    has a tool (any schedule but off)."""
    if not cfg.eval.enabled:
        return []
    if cfg.eval.get("regimes") is not None:
        return list(cfg.eval.regimes)
    return [REGIME_NO_TOOL] + ([REGIME_TOOL] if cfg.tool.schedule != "off" else [])


def validation_regime(cfg: DictConfig) -> str:
    """`eval.val_regime`, with auto resolved: the tool answers in validation when the run has one and its
    format cannot do without it (`Tool.validates_with_tool`: the solver oracle), else no_tool."""
    regime = cfg.eval.get("val_regime", "auto")
    if regime != "auto":
        return regime
    from ablate.rollout.tools import tool_classes

    tool_class = tool_classes().get(cfg.tool.get("kind", "calculator"))
    on = cfg.tool.schedule != "off" and getattr(tool_class, "validates_with_tool", False)
    return REGIME_TOOL if on else REGIME_NO_TOOL


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


def fit_stage(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status, extra_callbacks=()) -> None:
    """Train the stage `stage.name` on `model` (in place) on the run's `task` (`ablate.tasks.build_task`), with
    `eval.every`'s validation callback and `extra_callbacks` (Lightning callbacks of the caller's, e.g. a
    bench's step timings)."""
    callbacks = [*validation_callbacks(cfg, splits.val, tokenizer, task, run_dir), *extra_callbacks]
    if cfg.stage.name == "sft":
        fit_sft(cfg, model, tokenizer, splits.train, task, run_dir, callbacks)
    elif cfg.stage.name in preference_stages():
        fit_preference(cfg, model, tokenizer, splits.train, task, run_dir, status, callbacks)
    else:
        fit_rloo(cfg, model, tokenizer, splits.train, task, run_dir, callbacks)
