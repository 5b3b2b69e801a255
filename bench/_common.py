"""Shared by the bench scripts: composing ablate's config, running its RL stage in-process, reading the
per-step metrics back, the machine's description and small statistics. Figures are printed, never asserted.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import platform
import re
import statistics
import time
import sys
from pathlib import Path
from typing import Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # the checkout's ablate, not an installed copy
    sys.path.insert(0, str(ROOT / "src"))

# The RL stage as the comparisons run it: the shipped SFT model, the default RLOO settings, no
# checkpoints inside the timed window and no end-of-run evaluation (the scripts evaluate themselves).
RLOO_BASE = ["stage=rloo", "eval.enabled=false", "stage.checkpoint_every=1000000", "resume=never"]


def compose(overrides: Sequence[str] = ()):
    """The composed `python -m ablate.train` config for these overrides (Hydra's compose API)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    import ablate.parts  # noqa: F401 - every part's schema in Hydra's ConfigStore before composing
    from ablate.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def run_ablate(overrides: Sequence[str], run_dir: Path, callbacks: Sequence[object] = (),
               base: Sequence[str] = RLOO_BASE) -> list[dict[str, float]]:
    """Train one run in this process (`ablate.run.run`, with Lightning `callbacks`; by default the RL
    stage as the comparisons run it, `base`) and return its metrics.csv rows."""
    import logging

    from ablate.run import run

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    cfg = compose(list(base) + list(overrides))
    # Lightning's progress bar and ablate's closing lines would land in the figures printed on stdout.
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            run(cfg, run_dir, callbacks)
    except BaseException:
        sys.stderr.write(captured.getvalue()[-4000:])
        raise
    return read_metrics(run_dir / "metrics.csv")


def project_requirements(extra: str | None = None) -> list[str]:
    """pyproject.toml's requirement strings: the core dependencies, or those of one extra. Read from the
    file, so a bench that checks its environment follows the project's dependencies as they change."""
    text = re.sub(r"#.*", "", (ROOT / "pyproject.toml").read_text())  # comments hold no requirement
    key = "dependencies" if extra is None else re.escape(extra)
    block = re.search(rf"^{key} = \[(.*?)\]", text, re.M | re.S)
    if block is None:
        raise ValueError(f"pyproject.toml has no {'dependencies' if extra is None else f'extra {extra!r}'}")
    return re.findall(r'"([^"]+)"', block.group(1))


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)


def missing_distributions(requirements: Sequence[str], installed=None) -> list[str]:
    """The requirements whose distribution this interpreter lacks (by name: versions are pip's business).
    `installed(name) -> bool` replaces the lookup in tests."""
    from importlib import metadata

    def has(name: str) -> bool:
        try:
            metadata.version(name)
            return True
        except metadata.PackageNotFoundError:
            return False

    return [r for r in requirements if not (installed or has)(requirement_name(r))]


def read_metrics(path: Path) -> list[dict[str, float]]:
    """metrics.csv as one dict per step (empty cells dropped), ordered by step."""
    rows: dict[int, dict[str, float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("step"):
                continue
            merged = rows.setdefault(int(float(row["step"])), {})
            merged.update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return [rows[s] for s in sorted(rows)]


def step_seconds(rows: Sequence[dict[str, float]]) -> list[float]:
    """Wall seconds of each step from the cumulative `time/elapsed_s` (so Lightning's own overhead
    between steps is included); the first step is measured from the start of training."""
    elapsed = [r["time/elapsed_s"] for r in rows]
    return [b - a for a, b in zip([0.0] + elapsed[:-1], elapsed)]


def median(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles (inclusive method), as a spread next to a median."""
    values = sorted(values)
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def machine() -> str:
    """One line: CPU model, cores torch uses, memory, Python and torch versions."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        kib = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        memory = ""
    try:
        load = ", load avg %.1f" % os.getloadavg()[0]
    except OSError:
        load = ""
    return (f"{cpu} ({platform.machine()}), {os.cpu_count()} logical CPUs, torch threads {torch.get_num_threads()}"
            f"{memory}; Python {platform.python_version()}, torch {torch.__version__}{load}")


def fmt(value: float, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; cells are str()-ed as given."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- one ablate RL step, phase by phase -------------------------------------------------------------------

ABLATE_PHASES = ("generate", "score", "reference_forward", "policy_forward", "backward", "optimizer", "learn_other",
                 "sync", "other")


def ablate_phase_callback(profiler=None):
    """A Lightning callback (for `run_ablate(..., callbacks=[it])`) that keeps, per `RLOOModule` step, what
    the step's logged phases (`time/<phase>_s`) do not say: the token counts of the batch it learned from
    (`module.collected`), the decoding slots generation spent (every sequence runs until the longest one
    stops), and the process's CPU seconds since the previous step (on a shared machine the work done,
    where wall time also counts waiting for a core; exact with 1 torch thread). `profiler` (e.g. a
    cProfile.Profile) runs during training only. `.phases(rows)` joins them with metrics.csv's rows."""
    from lightning.pytorch.callbacks import Callback

    class AblatePhases(Callback):
        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []
            self.cpu_clock = 0.0

        def on_train_start(self, trainer, module) -> None:
            self.cpu_clock = time.process_time()
            if profiler is not None:
                profiler.enable()

        def on_train_end(self, trainer, module) -> None:
            if profiler is not None:
                profiler.disable()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            rollouts = module.collected.rollouts
            lengths = [len(p) + len(c) for p, c in zip(rollouts.prompt_ids, rollouts.completion_ids)]
            completions = [len(c) for c in rollouts.completion_ids]
            now = time.process_time()
            self.steps.append({"trained_tokens": float(sum(lengths)), "padded_tokens": float(len(lengths) * max(lengths)),
                               "sequences": float(len(lengths)), "decode_slots": float(len(lengths) * max(completions)),
                               "cpu": now - self.cpu_clock})
            self.cpu_clock = now

        def phases(self, rows: Sequence[dict[str, float]]) -> list[dict[str, float]]:
            return join_phases(rows, self.steps)

    return AblatePhases()


LEARN_PHASES = ("reference_forward", "policy_forward", "backward", "optimizer")  # logged inside time/learn_s


def join_phases(rows: Sequence[dict[str, float]], steps: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """Per step: every phase of ABLATE_PHASES in seconds (metrics.csv `rows`), plus `step` (wall), `tokens`
    (generated) and the callback's per-step counts (`steps`)."""
    out = []
    for row, counts, wall in zip(rows, steps, step_seconds(rows)):
        learn = row["time/learn_s"]
        phase = {"generate": row["time/generate_s"] + row.get("time/reference_s", 0.0),
                 "score": row["time/score_s"], "sync": row["time/sync_s"]}
        phase.update({key: row.get(f"time/{key}_s", 0.0) for key in LEARN_PHASES})
        phase["learn_other"] = max(0.0, learn - sum(phase[key] for key in LEARN_PHASES))
        phase["other"] = max(0.0, wall - (phase["generate"] + phase["score"] + learn + phase["sync"]))
        phase["step"] = wall
        phase["tokens"] = row["time/generate_tokens_per_s"] * row["time/generate_s"]
        phase.update(counts)
        out.append(phase)
    return out


def shares(phases: Sequence[dict[str, float]], names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Median seconds of each phase over steps and its share of the summed medians."""
    medians = {name: median(p.get(name, 0.0) for p in phases) for name in names}
    total = sum(medians.values()) or 1.0
    return {name: (value, value / total) for name, value in medians.items()}


# --- held-out reward of a policy, one evaluator for every trainer --------------------------------------------

def heldout_reward(model, tokenizer, problems, reward, samples: int, max_new_tokens: int, seed: int,
                   temperature: float = 1.0) -> dict[str, float]:
    """Mean reward and correct fraction of `samples` completions per held-out prompt, sampled with the
    training settings through ablate's engine (the same evaluator for models trained by any library)."""
    import torch

    from ablate.models import encode_prompt, prompt_text
    from ablate.rollout import SamplingParams
    from ablate.rollout.hf import HFEngine
    from ablate.tasks.countdown import CountdownTask

    model.eval()
    task = CountdownTask({}, reward)
    prompts = [encode_prompt(prompt_text(task, p, "compact", tokenizer), tokenizer) for p in problems]
    params = SamplingParams(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
    out = HFEngine(model, tokenizer, batch_size=512).generate(prompts, samples, params,
                                                              torch.Generator().manual_seed(seed))
    values, correct = [], 0
    for i, text in enumerate(out.texts):
        p = problems[i // samples]
        value, judgement = reward(text, p.numbers, p.target)
        values.append(value)
        correct += judgement.verdict.value == "correct"
    return {"reward": sum(values) / len(values), "correct": correct / len(values)}
