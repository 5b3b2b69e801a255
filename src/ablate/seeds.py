"""The run's random streams, each derived from the run seed (`seed=`) here and nowhere else, so a reader sees
which draws share a seed and a new consumer names its own stream instead of inventing a derivation.

    stream        seed                                   drawn by
    sampler       the run seed                           the curriculum sampler's prompts
    rollout       the run seed                           token sampling (hf; vllm's per-request seeds)
    replay        the run seed                           which replayed groups a batch reuses
    eval          the run seed                           final evaluation's sampling
    data          the run seed                           SFT batches' order, preference pairs' sampling
    availability  SeedSequence([seed, 3])                the tool's per-rollout availability
    val           SeedSequence([seed, 17, step])         validation during training, a function of the step
    rank          seed * 1_000_003 + rank * 7_919 + step a data-parallel rank's generators from `step` on
    `rng(seed, *key)`: a Python `random.Random` keyed by text (a trace's draws, pair kinds, pair order).

The first five share the run seed: each is its own generator, but their draws are not independent of one
another. They are kept so (as are the other derivations) because every run, golden and registered study
repeats its numbers only with these exact seeds; a new stream takes a `SeedSequence` spawn key of its own.
"""

from __future__ import annotations

import random
from typing import Callable

import numpy as np

RUN_SEED_STREAMS = ("sampler", "rollout", "replay", "eval", "data")


def spawned(*key: int) -> int:
    """A seed unrelated to its key's neighbours: numpy's `SeedSequence` hash of the key."""
    return int(np.random.SeedSequence(list(key)).generate_state(1)[0])


STREAMS: dict[str, Callable[[int, int], int]] = {
    **{name: (lambda seed, step: int(seed)) for name in RUN_SEED_STREAMS},
    "availability": lambda seed, step: spawned(seed, 3),
    "val": lambda seed, step: spawned(seed, 17, step),
}


def seed_of(stream: str, seed: int, step: int = 0) -> int:
    """The seed of `stream` in a run seeded `seed` (at `step`, for the streams that depend on it)."""
    if stream not in STREAMS:
        raise KeyError(f"no random stream {stream!r}; the streams: {tuple(STREAMS)} (ablate.seeds)")
    return STREAMS[stream](int(seed), int(step))


def rank_seed(seed: int, rank: int, step: int) -> int:
    """What a data-parallel rank > 0 reseeds its generators with at `step` (its own prompts and rollouts; a
    resumed worker re-derives them from the step it resumes at)."""
    return int(seed) * 1_000_003 + int(rank) * 7_919 + int(step)


def rng(seed: int, *key: object) -> random.Random:
    """A Python generator keyed by the run seed and `key`, joined with '-' (`rng(0, "pair", 3)` is
    `random.Random("0-pair-3")`): a stream per item that does not depend on the order items are drawn in."""
    return random.Random("-".join(str(part) for part in (seed, *key)))
