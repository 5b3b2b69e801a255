"""`stage=dpo|ipo|...`: offline preference optimization (ablate.lit.dpo), one stage per key of
`ablate.objectives.PREFERENCE_LOSSES`, all with the same pairs, schema and checks."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ablate.config import ConfigError, require
from ablate.config.schemas import config_schema, typed
from ablate.curriculum.samplers import StaticCurriculum
from ablate.device import device, precision
from ablate.fit import fit, global_rank
from ablate.models import encode_prompt, prompt_text
from ablate.objectives import PREFERENCE_LOSSES
from ablate.pairs import (ORDERS, SOURCES, check_stages, load_pairs, order_pairs, sampled_pairs,
                          save_pairs)
from ablate.rollout import SamplingParams
from ablate.rollout.engines import check_compile
from ablate.rollout.tools import ToolPrompt, build_tool
from ablate.rundir import RunDir
from ablate.seeds import seed_of
from ablate.stages.registry import STAGES, check_schedule, groups
from ablate.tasks import task_class


@dataclass
class PairStage:
    until: float = 1.0
    n_numbers: Optional[List[int]] = None


@dataclass
class PairMix:
    wrong_value: float = 0.5
    wrong_numbers: float = 0.25
    substitution: float = 0.25


@dataclass
class SolverPairsConfig:
    trace: str = "plain"
    mix: PairMix = field(default_factory=PairMix)


@dataclass
class SampledPairsConfig:
    n: int = 4
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 96
    margin: float = 0.5
    max_pairs_per_prompt: int = 2


@dataclass
class FilePairsConfig:
    path: Optional[str] = None


@dataclass
class PairsConfig:
    source: str = "sampled"
    n_prompts: int = 2000
    order: str = "none"
    stages: List[PairStage] = field(default_factory=lambda: [PairStage(0.5, [3]), PairStage(1.0, [3, 4])])
    solver: SolverPairsConfig = field(default_factory=SolverPairsConfig)
    sampled: SampledPairsConfig = field(default_factory=SampledPairsConfig)
    file: FilePairsConfig = field(default_factory=FilePairsConfig)


@config_schema("stage", "preference_schema")
@dataclass
class PreferenceStageConfig:
    name: str = "dpo"
    init: str = "sft"
    pool_size: int = 10000
    beta: float = 0.25
    label_smoothing: float = 0.0
    average_logps: bool = False
    batch_size: int = 32
    max_steps: int = 120
    max_length: int = 160
    lr: float = 3.0e-5
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float = 1.0
    checkpoint_every: int = 50
    pairs: PairsConfig = field(default_factory=PairsConfig)


def preference_stages() -> tuple[str, ...]:
    """The preference stages: the keys of `ablate.objectives.PREFERENCE_LOSSES` (dpo, ipo, ...)."""
    return tuple(PREFERENCE_LOSSES)


def build_pairs(cfg: DictConfig, model, tokenizer, train_problems, task) -> list:
    """The preference pairs `stage.pairs` describes (ablate.pairs), from the first
    `stage.pairs.n_prompts` training problems; `sampled` samples from `model` (the starting policy) and
    scores with the task, `solver` asks the task's solver (`Task.solver_pairs`)."""
    from ablate.rollout.hf import HFEngine  # heavy: transformers' modeling stack, off ablate.train's config refusal

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
    prompt = ToolPrompt(cfg.tool, cfg.model.template, tokenizer, task)
    prompts = [prompt.text(problem, available=False) for problem in problems]
    engine = HFEngine(model, tokenizer, batch_size=cfg.rollout.batch_size, tool=tool,
                      compile=bool(cfg.rollout.get("compile")),
                      dtype=cfg.rollout.get("dtype") if cfg.rollout.name == "hf" else None)
    params = SamplingParams(temperature=q.temperature, top_p=q.top_p, top_k=q.top_k,
                            max_new_tokens=q.max_new_tokens)
    generator = torch.Generator().manual_seed(seed_of("data", cfg.seed))
    return sampled_pairs(problems, prompts, [encode_prompt(t, tokenizer) for t in prompts], engine, params, q.n,
                         task, q.margin, q.max_pairs_per_prompt, generator,
                         chunk=max(1, cfg.rollout.batch_size // q.n), progress=True)


def pairs_and_reference(cfg: DictConfig, model, tokenizer, train_problems, task, run_dir: Path, status):
    """The pairs, encoded, and their reference log-probs [P, 2]: built (and saved to <run>/pairs.jsonl)
    or, on resume, reloaded from there."""
    from ablate.lit.dpo import encode_pair, reference_logprobs  # heavy: Lightning, off ablate.train's config refusal

    s = cfg.stage
    pairs_file = RunDir(run_dir).pairs_file
    if cfg.resume == "auto" and pairs_file.is_file():
        pairs = load_pairs(pairs_file)
        rows = [json.loads(line) for line in pairs_file.read_text().splitlines() if line.strip()]
        reference = torch.tensor([[r["ref_chosen_logps"], r["ref_rejected_logps"]] for r in rows])
        return pairs, [encode_pair(pair, tokenizer, s.max_length) for pair in pairs], reference
    model.to(device(cfg.trainer))  # sampling and the reference pass; Lightning keeps it there
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
    reference = reference_logprobs(model, encoded, tokenizer.pad_token_id, s.average_logps,
                                   batch_size=s.batch_size, autocast=autocast)
    if global_rank() == 0:  # DDP ranks build the same pairs (sampled ones up to device noise); one writes
        save_pairs(pairs_file, pairs, [{"ref_chosen_logps": float(c), "ref_rejected_logps": float(r)}
                                       for c, r in reference.tolist()])
    if status is not None:
        status.timing("pairs_s", pairs_s)
        status.timing("reference_s", time.monotonic() - clock)
        status.update(pairs=len(pairs), pair_kinds=dict(Counter(p.kind for p in pairs)),
                      pair_operands=dict(Counter(str(p.n_numbers) for p in pairs)))
    return pairs, encoded, reference


def fit_preference(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status=None,
                   callbacks=()) -> None:
    """DPO/IPO: build the pairs (or reload them on resume), compute the reference log-probs once,
    save both to <run>/pairs.jsonl, then fit."""
    from ablate.lit.dpo import PreferenceModule  # heavy: Lightning, off ablate.train's config refusal

    s = typed(PreferenceStageConfig, cfg.stage)
    pairs, encoded, reference = pairs_and_reference(cfg, model, tokenizer, splits.train, task, run_dir, status)
    if cfg.get("curriculum"):  # curriculum=static stage=ipo: the curriculum's stages order the pairs
        stages = pair_stages(typed(StaticCurriculum, cfg.curriculum), splits.train, task)
    elif s.pairs.order == "static":
        stages = [asdict(stage) for stage in s.pairs.stages]
    else:
        stages = [{"until": 1.0, "n_numbers": None}]
    module = PreferenceModule(model, encoded, reference,
                              lambda length: order_pairs(pairs, stages, length, int(cfg.seed)),
                              s, tokenizer.pad_token_id)
    # One item per optimizer step: the module takes its pairs from the schedule by global step.
    fit(cfg, module, run_dir, dataloader=DataLoader(range(s.max_steps), batch_size=None),
        gradient_clip=s.grad_clip, callbacks=callbacks)


def pair_stages(curriculum, problems, task) -> list[dict]:
    """A static curriculum's stages (its schema's `LevelStage`s: levels of n_numbers) as `order_pairs` stages
    (n_numbers values: a pair's is its prompt's report level, `task.level`)."""
    values = sorted({task.level(p) for p in problems})
    return [{"until": float(stage.until), "n_numbers": [values[level] for level in stage.levels]}
            for stage in curriculum.stages]


def check_preference(cfg: DictConfig) -> None:
    """`stage=dpo|ipo` config and its pairs: ConfigError naming the key and the fix."""
    s, p = cfg.stage, cfg.stage.pairs
    require(s.beta > 0, f"stage.beta={s.beta} must be > 0")
    require(0 <= s.label_smoothing < 0.5, f"stage.label_smoothing={s.label_smoothing} must be in [0, 0.5)")
    check_schedule(s, ("batch_size", "max_steps", "max_length", "pool_size", "checkpoint_every"))
    require(p.source in SOURCES, f"stage.pairs.source={p.source!r}: expected one of {SOURCES}")
    require(p.order in ORDERS, f"stage.pairs.order={p.order!r}: expected one of {ORDERS}")
    require(p.n_prompts >= 1, f"stage.pairs.n_prompts={p.n_prompts} must be >= 1")
    if p.order == "static":
        try:
            check_stages([asdict(stage) for stage in typed(PreferenceStageConfig, s).pairs.stages])
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"stage.pairs.stages: {err}") from None
    if p.source == "solver":  # the task's own pairs, from its solver (Task.solver_pairs)
        task = task_class(cfg.task.name)
        kinds = getattr(task, "pair_kinds", ())
        require(bool(kinds), f"stage.pairs.source=solver: task={cfg.task.name} has no solver to make pairs; "
                             "use stage.pairs.source=sampled (or file)")
        styles = getattr(task, "pair_trace_styles", task.trace_styles)  # one style for every pair
        require(p.solver.trace in styles, f"stage.pairs.solver.trace={p.solver.trace!r}: expected one of {styles}")
        mix = dict(p.solver.mix)
        require(set(mix) <= set(kinds) and all(float(v) >= 0 for v in mix.values()) and sum(mix.values()) > 0,
                f"stage.pairs.solver.mix={mix}: fractions >= 0, not all 0, of the kinds {list(kinds)}")
    elif p.source == "sampled":
        q = p.sampled
        require(q.n >= 2, f"stage.pairs.sampled.n={q.n}: pairs need at least 2 responses per prompt")
        require(q.margin > 0, f"stage.pairs.sampled.margin={q.margin} must be > 0")
        require(q.max_pairs_per_prompt >= 1,
                f"stage.pairs.sampled.max_pairs_per_prompt={q.max_pairs_per_prompt} must be >= 1")
        require(q.temperature > 0 and 0 < q.top_p <= 1,
                "stage.pairs.sampled.temperature must be > 0 and stage.pairs.sampled.top_p in (0, 1]")
        require(cfg.rollout.batch_size >= 1, f"rollout.batch_size={cfg.rollout.batch_size} must be >= 1")
        if cfg.rollout.get("compile"):
            check_compile(cfg.trainer)
    else:
        require(p.file.path and Path(str(p.file.path)).is_file(),
                f"stage.pairs.file.path={p.file.path!r}: stage.pairs.source=file needs an existing .jsonl of "
                f"prompt/chosen/rejected")


def check_curriculum(cfg: DictConfig) -> None:
    """A preference stage takes a static curriculum on n_numbers, as an ordering of its pairs."""
    s, c = cfg.stage, cfg.curriculum
    require(c.kind == "static" and c.difficulty.field == "n_numbers",
            f"curriculum={c.name} chooses RL prompts; it needs stage=rloo, not stage={s.name} (preference "
            "stages take a static curriculum on n_numbers as an ordering of their pairs: curriculum=static)")


# the stage, registered last: what it is registered with is defined above
STAGES.register("preference", check=check_preference, schema=PreferenceStageConfig,
                upstream=groups("model", "task", "reward", "tool"), curriculum=check_curriculum,
                names=preference_stages)(fit_preference)
