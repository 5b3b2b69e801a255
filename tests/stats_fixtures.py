"""Synthetic run directories that follow the run-directory contract, for the ablate.stats tests.

Imported by the test modules (not a conftest, so it never touches other tests). Summaries are
computed here with the brute-force combinatorial pass@k, independently of ablate.metrics.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def make_prompts(rng: np.random.Generator, p_success, *, n_prompts: int = 200, n_samples: int = 16,
                 ids: Sequence[str] | None = None, difficulty: np.ndarray | None = None,
                 tool: bool = False) -> list[dict]:
    """One samples.jsonl record per prompt.

    Success probability per prompt: logistic(logit(p_success) + difficulty_i), so two conditions
    given the same `difficulty` share which prompts are hard (what makes pairing informative).
    """
    ids = list(ids) if ids is not None else [f"p{i:05d}" for i in range(n_prompts)]
    n_prompts = len(ids)
    if difficulty is None:
        difficulty = np.zeros(n_prompts)
    p = float(np.clip(p_success, 1e-6, 1 - 1e-6))
    probs = 1.0 / (1.0 + np.exp(-(math.log(p / (1 - p)) + difficulty)))
    c = rng.binomial(n_samples, probs)
    answered = c + rng.binomial(n_samples - c, 0.9)
    lengths = rng.normal(120, 10, n_prompts)
    records = []
    for i, pid in enumerate(ids):
        n_numbers = 3 + (i % 2)
        rec = {
            "id": pid, "numbers": list(range(1, n_numbers + 1)), "target": 24, "n_numbers": n_numbers,
            "difficulty": {"n_numbers": n_numbers, "n_solutions": 2, "hardness": int(i % 5)},
            "n": n_samples, "n_correct": int(c[i]), "n_answered": int(answered[i]),
            "verdicts": {"correct": int(c[i]), "wrong_value": int(answered[i] - c[i]),
                         "no_answer": int(n_samples - answered[i])},
            "mean_length": float(round(lengths[i], 3)),
        }
        if tool:
            rec["n_calc"] = int(rng.integers(0, n_samples + 1))
            rec["tool_calls"] = int(rec["n_calc"] + rng.integers(0, 3))
        records.append(rec)
    return records


def _block(records: list[dict]) -> dict:
    """Aggregates as ablate.eval.summarize writes them (pass@k by brute force here)."""
    n = np.array([r["n"] for r in records])
    c = np.array([r["n_correct"] for r in records])
    a = np.array([r["n_answered"] for r in records])
    out: dict = {"n_prompts": len(records)}
    for k in (1, 2, 4, 8, 16):
        if k <= n.min():
            out[f"pass@{k}"] = float(np.mean([brute_pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c)]))
    for k in (1, 2, 4, 8, 16):
        if k <= n.min():
            out[f"pass^{k}"] = float(np.mean([math.comb(int(ci), k) / math.comb(int(ni), k) for ni, ci in zip(n, c)]))
    out["exact_pass@1"] = float(np.mean(c / n))
    out["coverage"] = float(a.sum() / n.sum())
    out["precision"] = float(c.sum() / a.sum())
    out["mixed_fraction"] = float(np.mean((c > 0) & (c < n)))
    out["best_of_n"] = float(np.mean(c > 0))
    out["mean_response_length"] = float(sum(r["mean_length"] * r["n"] for r in records) / n.sum())
    return out


def summary_for(records: list[dict], regime: str, tool: bool = False) -> dict:
    """A summary.json consistent with the records, shaped like ablate.eval's."""
    out = {"regime": regime, **_block(records), "n_samples": int(records[0]["n"])}
    verdicts: dict[str, int] = {"correct": 0, "wrong_value": 0, "no_answer": 0, "bad_format": 0}
    for r in records:
        for key, v in r["verdicts"].items():
            verdicts[key] = verdicts.get(key, 0) + v
    out["verdicts"] = verdicts
    out["by_operands"] = {str(j): _block([r for r in records if r["n_numbers"] == j])
                          for j in sorted({r["n_numbers"] for r in records})}
    if tool:
        n = sum(r["n"] for r in records)
        out["tool"] = {
            "calls_per_rollout": float(sum(r["tool_calls"] for r in records) / n),
            "calc_emission_rate": float(sum(r["n_calc"] for r in records) / n),
            "tool_errors": 3,
        }
    return out


VAL_COLUMNS = ["val/pass@1", "val/exact_pass@1", "val/coverage", "val/no_answer_rate", "val/by_operands/3/pass@1",
               "val/by_operands/4/pass@1", "val/by_operands/3/no_answer_rate", "val/by_operands/4/no_answer_rate"]


def make_val_metrics(rng: np.random.Generator, final: float, every: int, steps: int = 40) -> str:
    """metrics.csv as a run with eval.every=`every` logs it: train/ and time/elapsed_s every step,
    the held-out val/ columns on their own rows every `every` steps (NaN elsewhere)."""
    lines = ["epoch,step,train/loss,train/reward_mean,time/elapsed_s," + ",".join(VAL_COLUMNS)]
    empty_val = "," * (len(VAL_COLUMNS) - 1)
    for s in range(steps):
        reward = final * (1 - math.exp(-s / (steps / 5))) + rng.normal(0, 0.01)
        lines.append(f"0,{s},{1.0 / (1 + s):.6f},{reward:.6f},{2.0 * (s + 1):.3f},{empty_val}")
        if s % every == every - 1:
            acc = final * (1 - math.exp(-(s + 1) / (steps / 4))) + rng.normal(0, 0.01)
            vals = [acc, acc, 0.9, 0.1, acc + 0.05, acc - 0.05, 0.08, 0.12]
            lines.append(f"0,{s},,,," + ",".join(f"{v:.6f}" for v in vals))
    return "\n".join(lines) + "\n"


def make_metrics(rng: np.random.Generator, final: float, steps: int = 40, sparse: bool = True) -> str:
    """metrics.csv text: train/* every step, val/score every 10 steps on its own row (sparse)."""
    lines = ["epoch,step,train/loss,train/reward_mean,train/effective_prompt_frac,val/score"]
    for s in range(steps):
        reward = final * (1 - math.exp(-s / (steps / 5))) + rng.normal(0, 0.01)
        loss = 1.0 / (1 + s) + rng.normal(0, 0.005)
        lines.append(f"0,{s},{loss:.6f},{reward:.6f},{0.5 + 0.1 * rng.normal():.6f},")
        if sparse and s % 10 == 9:
            lines.append(f"0,{s},,,,{reward + 0.01:.6f}")
    return "\n".join(lines) + "\n"


@dataclass
class RunSpec:
    overrides: list[str]
    p: float = 0.5
    state: str = "completed"
    regimes: Sequence[str] = ("default",)
    with_eval: bool = True
    with_metrics: bool = True
    ids: Sequence[str] | None = None
    tool: bool = False
    corrupt_line: bool = False
    summary_patch: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # merged into .hydra/config.yaml (e.g. a study block)
    warnings: Sequence[str] = ()  # status.json "warnings"
    val_every: int = 0  # >0: metrics.csv with held-out val/ columns every val_every steps


def write_run(job_dir: Path, spec: RunSpec, rng: np.random.Generator, *, n_prompts: int = 200,
              n_samples: int = 16, difficulty: np.ndarray | None = None,
              records_by_regime: dict[str, list[dict]] | None = None) -> dict[str, list[dict]]:
    """Write one run directory; returns the samples written per regime."""
    job_dir.mkdir(parents=True, exist_ok=True)
    hydra = job_dir / ".hydra"
    hydra.mkdir(exist_ok=True)
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(list(spec.overrides)))
    seed = next((o.split("=", 1)[1] for o in spec.overrides if o.lstrip("+").startswith("seed=")), "0")
    (hydra / "config.yaml").write_text(yaml.safe_dump({"seed": int(seed), "trainer": {"max_steps": 40},
                                                       **spec.config}))
    status = {
        "state": spec.state, "started_at": "2025-01-01T00:00:00", "duration_s": None, "git_sha": None,
        "finished_at": None if spec.state == "running" else "2025-01-01T01:00:00", "versions": {},
        "error": "RuntimeError: CUDA out of memory" if spec.state == "failed" else None,
    }
    if spec.warnings:
        status["warnings"] = list(spec.warnings)
    (job_dir / "status.json").write_text(json.dumps(status))
    if spec.with_metrics:
        text = make_val_metrics(rng, spec.p, spec.val_every) if spec.val_every else make_metrics(rng, spec.p)
        (job_dir / "metrics.csv").write_text(text)
    written: dict[str, list[dict]] = {}
    if spec.with_eval and spec.state != "running":
        for regime in spec.regimes:
            d = job_dir / "eval" / regime
            d.mkdir(parents=True, exist_ok=True)
            if records_by_regime and regime in records_by_regime:
                records = records_by_regime[regime]
            else:
                records = make_prompts(rng, spec.p, n_prompts=n_prompts, n_samples=n_samples, ids=spec.ids,
                                       difficulty=difficulty, tool=spec.tool)
            lines = [json.dumps(r) for r in records]
            if spec.corrupt_line:
                lines.insert(3, '{"id": "broken", "n": 16, "n_corr')
            (d / "samples.jsonl").write_text("\n".join(lines) + "\n")
            summary = summary_for(records, regime, tool=spec.tool)
            summary.update(spec.summary_patch)
            (d / "summary.json").write_text(json.dumps(summary))
            written[regime] = records
    return written


def write_sweep(root: Path, conditions: dict[str, float], *, seeds: Sequence[int] = (0, 1, 2),
                n_prompts: int = 200, n_samples: int = 16, key: str = "curriculum", seed: int = 0,
                regimes: Sequence[str] = ("default",), identical: bool = False,
                multirun_yaml: bool = True, extra: Sequence[str] = (), tool: bool = False) -> Path:
    """A flat sweep `root/<job>/` over `key` in `conditions` (value -> success rate) x seeds.

    identical=True gives every condition exactly the same samples per seed (a null comparison).
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    difficulty = np.random.default_rng(seed + 1000).normal(0, 1.0, n_prompts)
    job = 0
    shared: dict[int, dict[str, list[dict]]] = {}
    for value, p in conditions.items():
        for s in seeds:
            spec = RunSpec(overrides=[f"{key}={value}", f"seed={s}", *extra], p=p, regimes=regimes, tool=tool)
            recs = shared.get(s) if identical else None
            written = write_run(root / str(job), spec, rng, n_prompts=n_prompts, n_samples=n_samples,
                                difficulty=difficulty, records_by_regime=recs)
            if identical and s not in shared:
                shared[s] = written
            job += 1
    if multirun_yaml:
        task = [f"{key}={','.join(conditions)}", f"seed={','.join(map(str, seeds))}", *extra]
        (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": task}}}))
    return root


def write_conditions(root: Path, specs: Sequence[RunSpec], *, seeds: Sequence[int] = (0, 1, 2), n_prompts: int = 60,
                     seed: int = 0) -> Path:
    """One run directory per (spec, seed): `root/<job>/`, the spec's overrides plus seed=<s>. Every
    condition shares the prompts' difficulty, so paired tests are informative."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    difficulty = np.random.default_rng(seed + 1000).normal(0, 1.0, n_prompts)
    job = 0
    for spec in specs:
        for s in seeds:
            run = dataclasses.replace(spec, overrides=[*spec.overrides, f"seed={s}"])
            write_run(root / str(job), run, rng, n_prompts=n_prompts, difficulty=difficulty)
            job += 1
    return root


CURRICULUM_STUDY = {
    "name": "curriculum_study",
    "question": "Does a static easy->hard curriculum help RLOO; does the frontier sampler forget 3-number prompts?",
    "metrics": ["pass@1", "by_operands/3/pass@1", "by_operands/4/pass@1", "coverage"],
    "effect": 0.05,
    "baselines": [
        {"family": {"stage.name": "rloo"}, "baseline": {"curriculum.name": "none"}},
        {"family": {"stage.name": "ipo"}, "baseline": {"stage.name": "ipo", "curriculum": None}},
        {"family": {"stage.name": "sft"}, "regime": "tool", "baseline": {"tool.name": "on"}},
    ],
}


def study_specs(study: dict | None = CURRICULUM_STUDY, val_every: int = 10) -> list[RunSpec]:
    """Seven conditions of three families (rloo: none/static/frontier; ipo without and with a
    curriculum; sft with the tool on/off, evaluated with and without it), as a study preset would
    compose them: stage/curriculum/tool nodes in the config and the study block in every run."""

    def spec(overrides, p, stage, curriculum, tool="off", regimes=("default",)):
        cfg = {"stage": {"name": stage}, "curriculum": None if curriculum is None else {"name": curriculum},
               "tool": {"name": tool}, "study": study}
        return RunSpec(overrides, p, regimes=regimes, config=cfg, val_every=val_every)

    return [
        spec(["stage=rloo", "curriculum=none"], 0.40, "rloo", "none"),
        spec(["stage=rloo", "curriculum=static"], 0.42, "rloo", "static"),
        spec(["stage=rloo", "curriculum=frontier"], 0.60, "rloo", "frontier"),
        spec(["stage=ipo"], 0.30, "ipo", None),
        spec(["stage=ipo", "curriculum=static"], 0.33, "ipo", "static"),
        spec(["stage=sft", "tool=on"], 0.50, "sft", None, "on", ("default", "tool")),
        spec(["stage=sft", "tool=off"], 0.35, "sft", None, "off", ("default", "tool")),
    ]
