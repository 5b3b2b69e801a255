"""Issue 60: planted tables through `python -m ablate.stats RUNS --study` (bench/bench_external.py prints the
rates at 200 replications): the null is replicated at most about as often as its one-sided level, a planted
effect of 2.4 seed SDs nearly always."""

from __future__ import annotations

from ablate.external.calibrate import rejection_rates

REPLICATIONS = 20


def test_null_tables_are_not_claimed_beyond_the_level():
    r = rejection_rates(0.0, REPLICATIONS, seed=11)
    # one-sided 0.025: 20 replications replicate 0.5 on average; 4 or more has probability < 0.002
    assert r.replicated <= 3
    assert r.replicated + r.not_replicated + r.inconclusive == REPLICATIONS


def test_planted_effect_is_found():
    r = rejection_rates(0.12, REPLICATIONS, seed=12)
    assert r.replicated >= 16 and r.not_replicated == 0  # Welch's power at 6 vs 6, d = 2.4: about 0.96
