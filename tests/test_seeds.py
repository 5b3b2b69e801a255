"""The run's random streams (ablate.seeds): each gives the seed its call site derived before the helper
existed (the derivations are written out here, so a change to a stream's seed fails this test, as it
would change every run's numbers), and the derived streams differ from each other and the run seed."""

import random

import numpy as np
import pytest

from ablate import seeds

PAIRS = [(0, 0), (0, 7), (1, 0), (42, 3), (100, 250), (2**31 - 1, 1)]


@pytest.mark.parametrize("seed, step", PAIRS)
def test_each_stream_gives_the_seed_its_call_site_derived(seed, step):
    for stream in ("sampler", "rollout", "replay", "eval", "data"):
        assert seeds.seed_of(stream, seed, step) == seed
    assert seeds.seed_of("availability", seed, step) == int(np.random.SeedSequence([seed, 3]).generate_state(1)[0])
    assert seeds.seed_of("val", seed, step) == int(np.random.SeedSequence([seed, 17, step]).generate_state(1)[0])
    assert seeds.rank_seed(seed, 2, step) == seed * 1_000_003 + 2 * 7_919 + step


@pytest.mark.parametrize("seed, step", PAIRS)
def test_the_derived_streams_differ_from_each_other_and_from_the_run_seed(seed, step):
    derived = [seeds.seed_of("availability", seed, step), seeds.seed_of("val", seed, step),
               seeds.seed_of("val", seed, step + 1), seeds.rank_seed(seed, 1, step), seeds.rank_seed(seed, 2, step)]
    assert len(set(derived)) == len(derived) and seed not in derived


def test_a_validation_seed_depends_on_the_step_only_through_the_step():
    assert seeds.seed_of("val", 5, 10) == seeds.seed_of("val", 5, 10)
    assert seeds.seed_of("availability", 5, 0) == seeds.seed_of("availability", 5, 99)  # not per-step


def test_text_keyed_streams_are_the_python_generators_of_their_key():
    assert seeds.rng(3, "pair", 4).random() == random.Random("3-pair-4").random()
    assert seeds.rng(3, "order").random() == random.Random("3-order").random()
    assert seeds.rng(3, 5, 0).random() == random.Random("3-5-0").random()
    assert seeds.rng(3, "kinds").random() != seeds.rng(4, "kinds").random()
    assert seeds.rng(3, "kinds").random() != seeds.rng(3, "order").random()


def test_an_unknown_stream_is_refused_naming_the_streams():
    with pytest.raises(KeyError, match="sampler"):
        seeds.seed_of("samplr", 0)
