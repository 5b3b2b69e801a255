"""Preference pairs for `stage=dpo|ipo`: where (prompt, chosen, rejected) comes from, and in what order.

Sources (`stage.pairs.source`):
* `solver`: a task's own pairs from its solver (`Task.solver_pairs`; Countdown's: a correct solution
  trace against a wrong one of a kind drawn in fixed proportions, `stage.pairs.solver.mix`, see
  the pairs module of the Countdown task package).
* `sampled`: paper 004's reward-based pairs: N responses per prompt from the starting policy
  (temperature 0.8 there), scored by the run's reward, sorted, and paired with maximal distance
  (best with worst, second best with second worst, ...) while the reward gap is at least `margin`.
* `file`: a jsonl of `{"prompt", "chosen", "rejected"}` strings (TRL's standard preference format;
  `prompt` is the exact text the model reads, so chat models need their template applied already).
  An optional `n_numbers` (or `nums`) per row enables the static ordering.

A pair is text; it is tokenized as prompt + response + eos (TRL does the same), so a saved
`pairs.jsonl` is itself valid `file` input.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ablate import seeds
from ablate.console import tracked
from ablate.rundir.atomic import write_jsonl

SOURCES = ("solver", "sampled", "file")
ORDERS = ("none", "static")


@dataclass(frozen=True)
class Pair:
    prompt: str
    chosen: str
    rejected: str
    kind: str                      # solver: the rejected kind; otherwise the source
    n_numbers: int | None = None   # difficulty for the static ordering
    problem_id: str | None = None
    chosen_reward: float | None = None
    rejected_reward: float | None = None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# solver (a task's hook, Task.solver_pairs: Countdown's is in its task package, pairs.py)


def quotas(n: int, mix: Mapping[str, float]) -> dict[str, int]:
    """Split n into counts proportional to `mix` (largest remainders, ties to the earlier kind),
    so the fractions hold exactly rather than in expectation."""
    total = sum(mix.values())
    if total <= 0 or any(v < 0 for v in mix.values()):
        raise ValueError(f"mix={dict(mix)}: fractions must be >= 0 and not all zero")
    exact = {k: n * v / total for k, v in mix.items()}
    counts = {k: math.floor(x) for k, x in exact.items()}
    order = sorted(mix, key=lambda k: (counts[k] - exact[k], list(mix).index(k)))
    for k in order[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


# ---------------------------------------------------------------------------------------------
# sampled


def max_distance_pairs(rewards: Sequence[float], margin: float, max_pairs: int) -> list[tuple[int, int]]:
    """(chosen, rejected) indices: sort by reward (ties by index), pair the k-th best with the k-th
    worst for k = 0, 1, ... while the gap is >= margin (gaps only shrink inward), at most max_pairs."""
    if margin <= 0:
        raise ValueError(f"margin={margin} must be > 0 (pairs of equal reward carry no preference)")
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    pairs = []
    for k in range(min(len(order) // 2, max_pairs)):
        best, worst = order[k], order[-1 - k]
        if rewards[best] - rewards[worst] < margin:
            break
        pairs.append((best, worst))
    return pairs


def sampled_pairs(problems: Sequence[Any], prompts: Sequence[str], prompt_ids: Sequence[list[int]], engine: Any,
                  params: Any, n: int, task: Any, margin: float, max_pairs: int, generator: Any,
                  chunk: int = 64, progress: bool = False) -> list[Pair]:
    """Sample n responses per prompt with `engine`, score them with the task's reward (`task.score`), keep
    max-distance pairs (a pair's `n_numbers` is the prompt's report level, `task.level`)."""
    pairs = []
    starts = range(0, len(problems), chunk)
    for start in tracked(starts, desc="sampling pairs", total=len(starts), unit="chunks", enabled=progress):
        part = slice(start, start + chunk)
        rollouts = engine.generate(prompt_ids[part], n, params, generator)
        for p, (problem, prompt) in enumerate(zip(problems[part], prompts[part])):
            texts = rollouts.texts[p * n:(p + 1) * n]
            rewards = [task.score(problem, text)[0] for text in texts]
            for best, worst in max_distance_pairs(rewards, margin, max_pairs):
                pairs.append(Pair(prompt, texts[best], texts[worst], "sampled", task.level(problem), problem.id,
                                  rewards[best], rewards[worst]))
    return pairs


# ---------------------------------------------------------------------------------------------
# file


def load_pairs(path: str | Path) -> list[Pair]:
    """Pairs from a jsonl of {"prompt", "chosen", "rejected"} strings (extra keys are kept where
    they are Pair fields: kind, n_numbers, problem_id, rewards; `nums` gives n_numbers)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stage.pairs.file.path: no such file: {path}")
    pairs = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not JSON ({err})") from None
            missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
            if missing:
                raise ValueError(f"{path}:{line_no}: missing {missing}; each line needs prompt, chosen and rejected")
            if not all(isinstance(row[k], str) for k in ("prompt", "chosen", "rejected")):
                raise ValueError(f"{path}:{line_no}: prompt, chosen and rejected must be strings (TRL's standard "
                                 "format); render conversational rows with the model's chat template first")
            n_numbers = row.get("n_numbers", len(row["nums"]) if isinstance(row.get("nums"), list) else None)
            pairs.append(Pair(row["prompt"], row["chosen"], row["rejected"], row.get("kind", "file"),
                              None if n_numbers is None else int(n_numbers), row.get("problem_id"),
                              row.get("chosen_reward"), row.get("rejected_reward")))
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def save_pairs(path: str | Path, pairs: Sequence[Pair], extra: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Write pairs (plus per-pair `extra` fields) as jsonl, atomically."""
    return write_jsonl(path, ({**pair.to_row(), **(dict(extra[i]) if extra else {})} for i, pair in enumerate(pairs)))


# ---------------------------------------------------------------------------------------------
# order


def check_stages(stages: Sequence[Mapping[str, Any]]) -> None:
    """`until` strictly increasing in (0, 1] and ending at 1; `n_numbers` a non-empty list or null."""
    if not stages:
        raise ValueError("stage.pairs.stages is empty; give at least [{until: 1.0, n_numbers: null}]")
    previous = 0.0
    for k, stage in enumerate(stages):
        until = float(stage["until"])
        if not previous < until <= 1.0:
            raise ValueError(f"stage.pairs.stages[{k}].until={until}: must increase and lie in (0, 1]")
        allowed = stage.get("n_numbers")
        if allowed is not None and not list(allowed):
            raise ValueError(f"stage.pairs.stages[{k}].n_numbers is empty; list report levels (`Task.level`) or null for all")
        previous = until
    if previous != 1.0:
        raise ValueError(f"stage.pairs.stages: the last until is {previous}; it must be 1.0")


def order_pairs(pairs: Sequence[Any], stages: Sequence[Mapping[str, Any]], length: int, seed: int) -> list[int]:
    """The training order: `length` pair indices, stage by stage (paper 000's static curriculum as
    an ordering of fixed pairs). Stage k fills the positions up to `until_k * length` with pairs whose
    `n_numbers` is in its list (null: all pairs), cycling through them in a fresh shuffled order
    each time they are used up (epochs within a stage). Stages are cumulative by convention:
    `[{until: 0.5, n_numbers: [3]}, {until: 1.0, n_numbers: [3, 4]}]` trains the first half on
    3-number pairs and keeps rehearsing them in the second. One stage of all pairs is plain
    shuffled epochs (`order=none`)."""
    check_stages(stages)
    rng = seeds.rng(seed, "order")
    order: list[int] = []
    for k, stage in enumerate(stages):
        end = length if k == len(stages) - 1 else round(float(stage["until"]) * length)
        allowed = stage.get("n_numbers")
        pool = [i for i, p in enumerate(pairs) if allowed is None or p.n_numbers in set(allowed)]
        if not pool and end > len(order):
            have = sorted({p.n_numbers for p in pairs}, key=str)
            raise ValueError(f"stage.pairs.stages[{k}]: no pair has n_numbers in {list(allowed)} "
                             f"(the pairs have {have})")
        bag: list[int] = []
        while len(order) < end:
            if not bag:
                bag = pool[:]
                rng.shuffle(bag)
            order.append(bag.pop())
    return order
