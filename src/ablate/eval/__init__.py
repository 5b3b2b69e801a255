"""Evaluation: n samples per held-out prompt, scored by the verifier, written to `<run>/eval/<regime>/`.

    python -m ablate.eval model_dir=outputs/.../model            # Hydra; any eval.* override works
    python -m ablate.eval model_dir=... eval.n=4 task.test_size=100   (the command: ablate.eval.__main__)

Metrics (`summary.json`, its shape in ablate.rundir.summary): pass@k (Chen et al.'s unbiased estimator)
and pass^k (all k of k samples correct, C(c, k) / C(n, k)) for k in `eval.ks` up to n, exact pass@1
(fraction of correct samples), all also by the task's report level (Countdown: `by_operands/<n>/`, by operand count); coverage (samples with an answer), precision (correct among answered), the verdict breakdown, the mixed-outcome fraction
(prompts with some but not all samples correct: where RLOO has signal), mean response length in
tokens, and best-of-N (a prompt counts when the verifier finds a correct answer among its N
samples: paper 004's test-time compute, which equals pass@N with the verifier as the selector).
Tool metrics (`summary.json` "tool"): calls per rollout (tool answers spliced in), the fraction of
samples that write `<calc>` at all (under `no_tool` this is paper 003's residual emission, the
collapse signature) and the number of the tool's error answers (`<result>ERR</result>`, or the
oracle's error lines), read from the tool-written tokens only.
`samples.jsonl` has one line per prompt with its counts and a few completions. Sampling goes
through the same engine as RL rollouts (`ablate.rollout.hf`).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import torch

from ablate.check_registry import CHECKS
from ablate.config import require, typed
from ablate.config.schemas import EvalConfig
from ablate.console import tracked
from ablate.metrics import REGIME_TOOL, REGIMES, prompt_ratios
from ablate.rollout import SamplingParams
from ablate.rollout.tools import Tool, ToolPrompt
from ablate.rundir import RunDir, RunDirLike
from ablate.rundir import summary as summary_json
from ablate.rundir.atomic import write_json, write_jsonl
from ablate.seeds import seed_of
from ablate.tasks import CORRECT, NO_ANSWER, OPERANDS, Task

if TYPE_CHECKING:  # the modeling stack takes seconds to import; a config check needs none of it
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


def summarize(rows: Sequence[Mapping[str, Any]], ks: Sequence[int], verdicts: Sequence[str] | None = None,
              level: tuple[str, str] = OPERANDS) -> dict[str, Any]:
    """Aggregate per-prompt rows (n, n_correct, n_answered, verdicts, mean_length) into the metrics of
    `ablate.metrics.prompt_ratios`, overall and by the report level (`level`: the rows' column and the
    summary's block, `Task.level_column` / `level_block`; rows without the column get no block); tool
    metrics when rows count tool use. `verdicts`: the task's, each counted (0 when absent); by default
    those the rows name."""
    if not rows:
        raise ValueError("no prompts to summarize")
    tool = all("n_calc" in r for r in rows)
    keys = ["n", "n_correct", "n_answered", "mean_length"] + (["n_calc", "tool_calls"] if tool else [])

    def block(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        cols = {key: np.asarray([r[key] for r in group]) for key in keys}
        out: dict[str, Any] = {summary_json.N_PROMPTS: len(group)}
        for name, num, den, _, _ in prompt_ratios(cols, ks):
            # sums in row order (Python's sum), as summary.json has always been computed
            total = sum(den.tolist())
            out[name] = sum(num.tolist()) / total if total else 0.0
        return out

    summary = block(rows)
    tool_metrics = {name.split("/", 1)[1]: summary.pop(name) for name in list(summary) if name.startswith("tool/")}
    summary[summary_json.N_SAMPLES] = rows[0]["n"]
    counts = Counter()
    for r in rows:
        counts.update(r["verdicts"])
    names = verdicts if verdicts is not None else list(dict.fromkeys(v for r in rows for v in r["verdicts"]))
    summary[summary_json.VERDICTS] = {v: counts.get(v, 0) for v in names}
    column, block_name = level
    by_level: dict[int, list] = defaultdict(list)
    for r in rows:
        if r.get(column) is not None:
            by_level[r[column]].append(r)
    keys = keys[:4]  # tool use is reported for all prompts only
    if by_level:
        summary[block_name] = {str(k): block(group) for k, group in sorted(by_level.items())}
    if tool:
        # a count of the tool's error answers, not a rate: stats carries it from summary.json
        summary[summary_json.TOOL] = {**tool_metrics, summary_json.TOOL_ERRORS: sum(r["tool_errors"] for r in rows)}
    return summary


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Any], template: str,
             task: Task, eval_cfg: EvalConfig | Mapping[str, Any], seed: int, tool: Tool | None = None, *,
             tool_cfg: Mapping[str, Any] | None = None,
             progress: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sample `eval.n` completions per problem of `task` (with `tool` answering when one is given: the
    `tool` regime) and score them with the task's verifier: (summary, per-prompt rows). The run's `tool`
    config (`tool_cfg`) decorates the prompts given the regime (`ablate.rollout.tools.ToolPrompt`). `eval_cfg`:
    the `eval` config, composed or a mapping of its keys (the schema's defaults fill the rest)."""
    from ablate.rollout.hf import HFEngine  # heavy: transformers' modeling stack, off the config checks

    e = typed(EvalConfig, eval_cfg)
    n = e.n
    engine = HFEngine(model, tokenizer, batch_size=e.batch_size, tool=tool)
    prompt = ToolPrompt(tool_cfg, template, tokenizer, task)
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, top_k=e.top_k, max_new_tokens=e.max_new_tokens)
    generator = torch.Generator().manual_seed(seed_of("eval", seed))
    prompts_per_call = max(1, e.batch_size // n)
    keep = e.save_completions
    rows = []
    starts = range(0, len(problems), prompts_per_call)
    for start in tracked(starts, desc="evaluating", total=len(starts), unit="batches", enabled=progress):
        chunk = problems[start:start + prompts_per_call]
        prompts = [prompt.ids(p, available=tool is not None) for p in chunk]
        rollouts = engine.generate(prompts, n, params, generator)
        for i, problem in enumerate(chunk):
            group = slice(i * n, (i + 1) * n)
            texts = rollouts.texts[group]
            tool_texts = [tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
                          for ids, mask in zip(rollouts.completion_ids[group], rollouts.tool_mask[group])]
            verdicts = Counter(task.score(problem, text)[1] for text in texts)
            rows.append({
                **task.record(problem),
                "n": n, "n_correct": verdicts[CORRECT], "n_answered": n - verdicts[NO_ANSWER],
                "verdicts": {v: verdicts.get(v, 0) for v in task.verdicts},
                "mean_length": sum(len(c) for c in rollouts.completion_ids[group]) / n,
                "n_calc": sum("<calc>" in t for t in texts),
                "tool_calls": sum(rollouts.tool_calls[group]),
                "tool_errors": sum(tool.errors(t) for t in tool_texts) if tool is not None else 0,
                "completions": texts[:keep],
            })
    return summarize(rows, list(e.ks), task.verdicts, (task.level_column, task.level_block)), rows


def write_eval(run_dir: RunDirLike, regime: str, summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Path:
    run = RunDir.of(run_dir)
    out = run.eval_dir(regime)
    out.mkdir(parents=True, exist_ok=True)
    # Each file whole or absent (temp file + rename); summary.json last: its presence marks a finished evaluation.
    write_jsonl(run.samples_file(regime), rows)
    write_json(run.summary_file(regime), {summary_json.REGIME: regime, **summary})
    return out


def format_summary(summary: Mapping[str, Any]) -> str:
    parts = [f"{key} {summary[key]:.3f}" for key in ("pass@1", "pass@16", "exact_pass@1", "mixed_fraction",
                                                      "coverage") if key in summary]
    by = "  ".join(f"{k}-number pass@1 {v.get('pass@1', v['exact_pass@1']):.3f}"
                   for k, v in summary.get("by_operands", {}).items())
    by = by or "  ".join(f"{name}/{k} pass@1 {v.get('pass@1', v['exact_pass@1']):.3f}"
                         for name, blocks in summary.items() if name.startswith("by_") and isinstance(blocks, dict)
                         for k, v in blocks.items())
    return ", ".join(parts) + (f"  |  {by}" if by else "")


@CHECKS.register("eval", order=60)
def check_eval(cfg) -> None:
    """`eval=` config (and the validation split it takes from the task): ConfigError naming the key and the fix."""
    e = cfg.eval
    require(int(e.n) >= 1, f"eval.n={e.n} must be >= 1")
    require(all(int(k) >= 1 for k in e.ks), f"eval.ks={list(e.ks)} must be positive")
    require(float(e.temperature) > 0, f"eval.temperature={e.temperature} must be > 0 (sampling)")
    require(0 < float(e.top_p) <= 1, f"eval.top_p={e.top_p} must be in (0, 1]")
    require(int(e.max_new_tokens) >= 1 and int(e.batch_size) >= 1, "eval.max_new_tokens and eval.batch_size must be >= 1")
    require(e.get("limit") is None or int(e.limit) >= 1,
            f"eval.limit={e.get('limit')} must be >= 1 (the first test prompts evaluated) or null (all of them)")
    if e.get("regimes") is not None:
        regimes = list(e.regimes)
        require(regimes and set(regimes) <= set(REGIMES) and len(set(regimes)) == len(regimes),
                f"eval.regimes={regimes}: expected a non-empty list of no_tool and/or tool without repeats "
                "(e.g. eval.regimes=[tool]), or null for no_tool plus tool when the run has one")
        require(REGIME_TOOL not in regimes or cfg.tool.schedule != "off",
                "eval.regimes includes tool, but tool.schedule=off: choose a tool (e.g. tool=on, tool=oracle) "
                "or eval.regimes=[no_tool]")
    if e.get("every") is not None:
        require(int(e.every) >= 1, f"eval.every={e.every} must be >= 1 (steps between held-out evaluations) or null")
        require(int(e.val_n) >= 1, f"eval.val_n={e.val_n} must be >= 1")
        require(e.val_regime in ("auto", *REGIMES),
                f"eval.val_regime={e.val_regime!r}: expected auto, no_tool or tool")
        require(e.val_regime != REGIME_TOOL or cfg.tool.schedule != "off",
                "eval.val_regime=tool validates with the run's tool, but tool.schedule=off: choose a tool "
                "(e.g. tool=on, tool=oracle) or eval.val_regime=no_tool")
        room = int(cfg.task.test_pool) - int(cfg.task.test_size)
        require(1 <= int(e.val_size) < room, f"eval.val_size={e.val_size} must be in [1, {room}) (task.test_pool minus "
                                             "task.test_size: the validation split is drawn from what the test leaves)")
