"""The math of ablate.stats against reference implementations (statsmodels, scipy, brute force)."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from ablate.metrics import pass_at_k
from ablate.stats import (
    hierarchical_bootstrap_distribution,
    paired_test,
    percentile_interval,
    probability_of_improvement,
    ratio_bootstrap_ci,
    seed_test,
    t_interval,
    wilson_interval,
)
from ablate.stats.maths.multiplicity import holm_adjusted

sys.path.insert(0, str(Path(__file__).resolve().parent))  # works whether or not tests/ is a package
from stats_fixtures import brute_pass_at_k  # noqa: E402


# --------------------------------------------------------------------------------- pass@k


def test_pass_at_k_matches_combinatorial_formula_exhaustively():
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_vectorised_equals_scalar():
    rng = np.random.default_rng(0)
    n = rng.integers(16, 40, size=500)
    c = rng.integers(0, 17, size=500)
    for k in (1, 2, 4, 8, 16):
        vec = pass_at_k(n, c, k)
        assert isinstance(vec, np.ndarray) and vec.shape == n.shape
        np.testing.assert_allclose(vec, [pass_at_k(int(a), int(b), k) for a, b in zip(n, c)], rtol=0, atol=1e-14)
    assert isinstance(pass_at_k(16, 3, 4), float)
    np.testing.assert_allclose(pass_at_k(16, np.arange(17).reshape(1, 17), 1), np.arange(17).reshape(1, 17) / 16)


def test_pass_at_k_edges_and_errors():
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 1, 16) == 1.0  # n - c < k
    assert pass_at_k(16, 16, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 8)  # fewer samples than k
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, -1, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)


def test_pass_hat_k_equals_the_exact_formula_exhaustively():
    from math import comb

    from ablate.metrics import pass_hat_k

    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) == pytest.approx(comb(c, k) / comb(n, k), abs=1e-12), (n, c, k)
    assert pass_hat_k(16, 3, 4) == 0.0 and pass_hat_k(16, 16, 16) == 1.0 and pass_hat_k(16, 15, 16) == 0.0
    assert pass_hat_k(16, 8, 1) == 0.5 == pass_at_k(16, 8, 1)  # pass^1 = pass@1 = c / n
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # {the two correct} is 1 of C(4, 2) = 6 pairs
    n = np.array([16, 16, 8]); c = np.array([16, 4, 5])
    np.testing.assert_allclose(pass_hat_k(n, c, 2), [1.0, 12 / 240, 20 / 56], rtol=0, atol=1e-15)
    assert not np.signbit(pass_hat_k(np.array([16]), np.array([0]), 4)).any()  # a clean 0, not -0.0
    for bad in ((4, 1, 8), (4, 5, 1), (4, -1, 1), (4, 1, 0)):
        with pytest.raises(ValueError):
            pass_hat_k(*bad)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_properties(nck):
    n, c, k = nck
    p = pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-9)
    if c < n:
        assert pass_at_k(n, c + 1, k) >= p - 1e-12  # more correct samples never hurt
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p - 1e-12  # more attempts never hurt
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


# --------------------------------------------------------------------------------- Wilson


def test_wilson_matches_statsmodels_on_a_grid():
    for n in (1, 2, 5, 16, 50, 1000):
        for x in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            for conf in (0.8, 0.95, 0.99):
                ref = proportion_confint(x, n, alpha=1 - conf, method="wilson")
                got = wilson_interval(x, n, conf)
                assert got == pytest.approx(ref, abs=1e-12), (x, n, conf)


def test_wilson_vectorised_and_empty():
    rng = np.random.default_rng(1)
    n = rng.integers(1, 5000, size=300)
    x = rng.integers(0, n + 1)
    lo, hi = wilson_interval(x, n)
    ref_lo, ref_hi = proportion_confint(x, n, alpha=0.05, method="wilson")
    np.testing.assert_allclose(lo, ref_lo, atol=1e-12)
    np.testing.assert_allclose(hi, ref_hi, atol=1e-12)
    lo, hi = wilson_interval(0, 0)
    assert math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**6).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.floats(0.5, 0.999))
def test_wilson_property_against_statsmodels(xn, conf):
    x, n = xn
    lo, hi = wilson_interval(x, n, conf)
    ref = proportion_confint(x, n, alpha=1 - conf, method="wilson")
    assert (lo, hi) == pytest.approx(ref, abs=1e-10)
    assert 0.0 <= lo <= x / n <= hi <= 1.0


# --------------------------------------------------------------------------------- Holm


def test_holm_matches_statsmodels():
    # statsmodels' multipletests takes ~50 ms a call here, so a seeded sample rather than hypothesis
    rng = np.random.default_rng(0)
    for trial in range(30):
        m = int(rng.integers(1, 30))
        p = rng.random(m) ** rng.uniform(0.5, 4)  # some draws with many small p-values
        if trial % 3 == 0:  # ties and exact edge values
            p = rng.choice([0.0, 0.001, 0.01, 0.0125, 0.025, 0.05, 0.5, 1.0], size=m)
        for alpha in ((0.01, 0.05, 0.1)[trial % 3],):
            reject, adjusted = holm_adjusted(p, alpha)
            ref_reject, ref_adj, _, _ = multipletests(p, alpha=alpha, method="holm")
            np.testing.assert_array_equal(adjusted, ref_adj)  # to the last bit: Holm's graph in exact arithmetic
            np.testing.assert_array_equal(reject, ref_reject)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_properties(pvals):
    reject, adjusted = holm_adjusted(pvals)
    p = np.asarray(pvals)
    assert np.all(adjusted >= p - 1e-15) and np.all(adjusted <= 1.0)
    order = np.argsort(p, kind="mergesort")
    assert np.all(np.diff(adjusted[order]) >= -1e-15)  # monotone in p
    np.testing.assert_array_equal(reject, adjusted <= 0.05)


def test_holm_ignores_nan_and_keeps_order():
    p = [0.01, np.nan, 0.04, 0.03]
    reject, adj = holm_adjusted(p, 0.05)
    ref_reject, ref_adj, _, _ = multipletests([0.01, 0.04, 0.03], method="holm")
    assert np.isnan(adj[1]) and not reject[1]
    np.testing.assert_array_equal(adj[[0, 2, 3]], ref_adj)
    np.testing.assert_array_equal(reject[[0, 2, 3]], ref_reject)
    assert holm_adjusted([])[1].size == 0


def test_adjusted_p_values_decide_as_the_claims_graph_does():
    """The comparisons table's adjusted p-values and the claims' sequentially rejective test are one
    procedure: at every alpha, rejected by the graph exactly where the adjusted p-value is <= alpha
    (Holm, gatekeeping, and Bretz 2009's two-dose graph, whose H3 and H4 start with no weight)."""
    from ablate.stats.maths.multiplicity import adjusted_p_values, gatekeeping, graphical_test, holm

    bretz = (np.array([0.5, 0.5, 0, 0]), np.array([[0, 0.5, 0.5, 0], [0.5, 0, 0, 0.5], [0, 1, 0, 0], [1, 0, 0, 0.0]]))
    # by hand (tests/test_stats_level.py): H2 at 0.005 / (1/2), H1 at 0.01 / (3/4), H3 at 0.015 / (1/2);
    # H4 then holds all of H3's weight (0.022 / 1) but is rejected no earlier than H3
    np.testing.assert_allclose(adjusted_p_values([0.01, 0.005, 0.015, 0.022], *bretz), [0.04 / 3, 0.01, 0.03, 0.03])
    rng = np.random.default_rng(5)
    for w, g in (holm(4), gatekeeping([True, True, False, False]), bretz):
        for _ in range(60):
            p = rng.random(4) ** 3
            adjusted = adjusted_p_values(p, w, g)
            for alpha in (0.01, 0.025, 0.05, 0.1):
                np.testing.assert_array_equal(graphical_test(p, w, g, alpha), adjusted <= alpha)


# --------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_equals_scipy_bca():
    x = np.random.default_rng(2).exponential(size=150)
    got = ratio_bootstrap_ci(x, n_resamples=3000, rng=np.random.default_rng(7))
    ref = scipy.stats.bootstrap((x,), np.mean, n_resamples=3000, method="BCa", rng=np.random.default_rng(7))
    assert got.method == "BCa"
    assert (got.low, got.high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert got.estimate == pytest.approx(x.mean())


def test_bootstrap_falls_back_to_percentile_without_leaking_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ratio_bootstrap_ci(np.full(50, 0.25), n_resamples=500, rng=np.random.default_rng(0))
    assert got.method == "percentile"
    assert got.low == got.high == pytest.approx(0.25)


def test_ratio_bootstrap_equals_scipy_for_means_and_ratios():
    rng = np.random.default_rng(3)
    c = rng.binomial(16, 0.4, size=120).astype(float)
    a = np.minimum(16, c + rng.binomial(4, 0.5, size=120)).astype(float)
    # a mean (den = 1): same indices drawn, so the same interval as a direct scipy call
    got = ratio_bootstrap_ci(c / 16, rng=np.random.default_rng(11), n_resamples=2000)
    ref = scipy.stats.bootstrap((c / 16,), np.mean, n_resamples=2000, rng=np.random.default_rng(11))
    assert (got.low, got.high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12)
    # a ratio of sums with paired resampling
    got = ratio_bootstrap_ci(c, a, rng=np.random.default_rng(12), n_resamples=2000)
    ref = scipy.stats.bootstrap((c, a), lambda u, v, axis: u.sum(axis) / v.sum(axis), paired=True,
                                n_resamples=2000, rng=np.random.default_rng(12))
    assert (got.low, got.high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12)
    assert got.estimate == pytest.approx(c.sum() / a.sum())


def test_ratio_bootstrap_many_metrics_with_a_degenerate_column():
    rng = np.random.default_rng(4)
    num = np.column_stack([rng.random(80), np.ones(80), rng.random(80)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = ratio_bootstrap_ci(num, np.ones_like(num), rng=np.random.default_rng(5), n_resamples=1000)
    assert list(res.method) == ["BCa", "percentile", "BCa"]
    assert res.low[1] == res.high[1] == 1.0
    assert res.distribution.shape == (3, 1000)
    for j in (0, 2):
        single = ratio_bootstrap_ci(num[:, j], rng=np.random.default_rng(5), n_resamples=1000)
        assert (res.low[j], res.high[j]) == pytest.approx((single.low, single.high))


def hierarchical_ci(groups, n_resamples, rng):
    """What the report computes (ablate.stats.stages.analysis): the percentile interval of the distribution."""
    dist = hierarchical_bootstrap_distribution(groups, n_resamples=n_resamples, rng=rng)[:, 0]
    return percentile_interval(dist, 0.95)


def _naive_hierarchical(groups, n_resamples, rng):
    out = np.empty(n_resamples)
    for b in range(n_resamples):
        picks = rng.integers(0, len(groups), len(groups))
        out[b] = np.mean([rng.choice(groups[s], size=len(groups[s]), replace=True).mean() for s in picks])
    return out


def test_hierarchical_bootstrap_matches_a_naive_loop():
    rng = np.random.default_rng(6)
    groups = [rng.normal(mu, 1.0, size=n) for mu, n in [(0.0, 40), (0.5, 60), (1.2, 50), (0.3, 45)]]
    fast = hierarchical_bootstrap_distribution(groups, n_resamples=4000, rng=np.random.default_rng(1))[:, 0]
    slow = _naive_hierarchical(groups, 4000, np.random.default_rng(2))
    assert fast.mean() == pytest.approx(slow.mean(), abs=0.03)
    assert fast.std() == pytest.approx(slow.std(), rel=0.08)
    for q in (0.025, 0.5, 0.975):
        assert np.quantile(fast, q) == pytest.approx(np.quantile(slow, q), abs=0.06)
    ci = hierarchical_ci(groups, n_resamples=4000, rng=np.random.default_rng(1))
    assert ci.low < np.mean([g.mean() for g in groups]) < ci.high


def test_hierarchical_bootstrap_known_cases():
    # no within-seed variation: the interval is the bootstrap of the seed means
    groups = [np.full(30, v) for v in (0.1, 0.2, 0.6)]
    dist = hierarchical_bootstrap_distribution(groups, n_resamples=3000, rng=np.random.default_rng(0))[:, 0]
    assert set(np.round(dist * 30).astype(int)) <= {round(30 * (a + b + c) / 3) for a in (0.1, 0.2, 0.6)
                                                    for b in (0.1, 0.2, 0.6) for c in (0.1, 0.2, 0.6)}
    # identical constant seeds: zero width
    ci = hierarchical_ci([np.ones(10) * 0.5] * 3, n_resamples=500, rng=np.random.default_rng(0))
    assert ci.low == ci.high == 0.5
    # one seed: the prompt bootstrap
    x = np.random.default_rng(1).random(100)
    ci = hierarchical_ci([x], n_resamples=4000, rng=np.random.default_rng(2))
    ref = scipy.stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(3))
    assert ci.low == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert ci.high == pytest.approx(ref.confidence_interval.high, abs=0.01)


def test_hierarchical_is_wider_than_prompt_only_when_seeds_disagree():
    rng = np.random.default_rng(8)
    groups = [rng.binomial(1, p, 200).astype(float) for p in (0.3, 0.45, 0.6)]
    hier = hierarchical_ci(groups, n_resamples=3000, rng=np.random.default_rng(0))
    pooled = ratio_bootstrap_ci(np.concatenate(groups), rng=np.random.default_rng(0), n_resamples=3000)
    assert hier.high - hier.low > 2 * (pooled.high - pooled.low)


# --------------------------------------------------------------------------------- tests


def test_paired_test_exact_equals_scipy_permutation_test():
    rng = np.random.default_rng(9)
    x = rng.random(10)
    y = x - 0.1 + rng.normal(0, 0.1, 10)
    got = paired_test(x, y, n_resamples=5000, rng=np.random.default_rng(0))
    ref = scipy.stats.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis),
                                       permutation_type="samples", n_resamples=5000, vectorized=True)
    assert got.p_value == pytest.approx(ref.pvalue)
    assert got.diff == pytest.approx(np.mean(x - y))
    # the permutation was exact, so the bootstrap CI draws from a fresh generator: same as scipy's
    boot = scipy.stats.bootstrap((x - y,), np.mean, n_resamples=5000, rng=np.random.default_rng(0))
    # (x - y).mean() and sum(x)/n - sum(y)/n differ in the last bits, which can move BCa by a hair
    assert (got.low, got.high) == pytest.approx((boot.confidence_interval.low, boot.confidence_interval.high), abs=1e-4)


def test_paired_test_randomised_close_to_scipy():
    rng = np.random.default_rng(10)
    x = rng.binomial(16, 0.45, 300) / 16
    y = np.clip(x - rng.binomial(16, 0.03, 300) / 16 + rng.normal(0, 0.05, 300), 0, 1)
    got = paired_test(x, y, n_resamples=4000, rng=np.random.default_rng(0))
    ref = scipy.stats.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis),
                                       permutation_type="samples", n_resamples=4000, vectorized=True,
                                       rng=np.random.default_rng(1))
    assert got.p_value == pytest.approx(ref.pvalue, abs=0.03)


def test_paired_test_identical_and_planted():
    x = np.random.default_rng(0).binomial(16, 0.4, 200) / 16
    same = paired_test(x, x.copy(), n_resamples=2000, rng=np.random.default_rng(0))
    assert same.p_value == 1.0 and same.diff == 0.0 and same.low == same.high == 0.0
    y = np.random.default_rng(1).binomial(16, 0.2, 200) / 16
    z = np.random.default_rng(2).binomial(16, 0.5, 200) / 16
    planted = paired_test(z, y, n_resamples=2000, rng=np.random.default_rng(0))
    assert planted.p_value < 0.001 and planted.low > 0.2


def test_paired_test_ratio_statistic():
    rng = np.random.default_rng(11)
    c1, c2 = rng.binomial(16, 0.5, 100), rng.binomial(16, 0.5, 100)
    a1, a2 = np.maximum(c1, 12), np.maximum(c2, 12)
    res = paired_test(c1, c2, a1, a2, n_resamples=2000, rng=np.random.default_rng(0))
    assert res.diff == pytest.approx(c1.sum() / a1.sum() - c2.sum() / a2.sum())
    assert 0.0 <= res.p_value <= 1.0 and res.low <= res.diff <= res.high


def test_seed_test_is_welch():
    x, y = [0.51, 0.55, 0.49, 0.53], [0.45, 0.47, 0.52]
    ref = scipy.stats.ttest_ind(x, y, equal_var=False)
    got = seed_test(x, y)
    assert got.p_value == pytest.approx(ref.pvalue) and got.statistic == pytest.approx(ref.statistic)
    assert math.isnan(seed_test([0.5], [0.4, 0.3]).p_value)
    assert seed_test([0.5, 0.5], [0.5, 0.5]).p_value == 1.0


def test_probability_of_improvement_is_mann_whitney_u():
    rng = np.random.default_rng(12)
    for n, m in [(3, 3), (5, 4), (10, 7)]:
        x = np.round(rng.random(n), 1)
        y = np.round(rng.random(m), 1)  # rounding makes ties
        got = probability_of_improvement(x, y, n_resamples=2000, rng=np.random.default_rng(0))
        u = scipy.stats.mannwhitneyu(x, y).statistic
        assert got.estimate == pytest.approx(u / (n * m))
        assert 0.0 <= got.low <= got.high <= 1.0
    same = probability_of_improvement([0.5, 0.5], [0.5, 0.5], n_resamples=100, rng=np.random.default_rng(0))
    assert same.estimate == 0.5


def test_t_interval_matches_scipy():
    v = np.array([0.3, 0.35, 0.32, 0.4])
    lo, hi = t_interval(v, 0.9)
    ref = scipy.stats.t.interval(0.9, len(v) - 1, loc=v.mean(), scale=scipy.stats.sem(v))
    assert (lo, hi) == pytest.approx(ref)
    lo, hi = t_interval([0.3])
    assert math.isnan(lo) and math.isnan(hi)


# --------------------------------------------------------------------------------- IQM, performance profiles


def test_iqm_is_the_mean_of_the_middle_half_of_runs():
    from ablate.stats import iqm

    assert iqm([0.1, 0.5, 0.6, 0.7, 5.0]) == pytest.approx((0.5 + 0.6 + 0.7) / 3)  # int(5/4) = 1 cut each side
    assert iqm([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]) == pytest.approx((3 + 4 + 5 + 6) / 4)
    assert iqm([0.2, 0.9, 0.3]) == pytest.approx(np.mean([0.2, 0.9, 0.3]))  # below 4 runs: the mean
    scores = np.arange(12.0).reshape(4, 3)  # runs x tasks: one 25% trimmed mean over all 12 scores
    assert iqm(scores) == pytest.approx(np.mean(np.arange(3.0, 9.0)))
    assert iqm(scores) == pytest.approx(scipy.stats.trim_mean(scores, 0.25, axis=None))


def test_iqm_interval_resamples_runs_within_each_task():
    from ablate.stats import iqm_ci

    rng = np.random.default_rng(0)
    x = rng.normal(0.5, 0.05, 10)
    ci = iqm_ci(x, n_resamples=4000, rng=np.random.default_rng(1))
    assert ci.low < ci.estimate < ci.high and ci.distribution.shape == (4000,)
    # the stratified bootstrap keeps every task's column: a task whose runs agree adds no spread
    flat = iqm_ci(np.stack([x, np.full(10, 0.3)], axis=1), n_resamples=2000, rng=np.random.default_rng(1))
    assert flat.high - flat.low < ci.high - ci.low
    same = iqm_ci([0.4, 0.4, 0.4, 0.4], n_resamples=500, rng=np.random.default_rng(0))
    assert same.low == same.high == same.estimate == 0.4
    one = iqm_ci([0.4], n_resamples=500, rng=np.random.default_rng(0))
    assert one.estimate == 0.4 and np.isnan(one.low)
    # reproducible from the generator
    again = iqm_ci(x, n_resamples=4000, rng=np.random.default_rng(1))
    assert (again.low, again.high) == (ci.low, ci.high)


def test_performance_profile_is_the_fraction_of_runs_above_tau():
    from ablate.stats import performance_profile

    scores = [0.1, 0.2, 0.2, 0.4]
    profile, low, high = performance_profile(scores, [0.0, 0.1, 0.2, 0.3, 0.5])
    np.testing.assert_allclose(profile, [1.0, 0.75, 0.25, 0.25, 0.0])  # strictly above tau, as rliable
    assert np.isnan(low).all() and np.isnan(high).all()  # no generator: no band
    profile, low, high = performance_profile(scores, [0.0, 0.15, 0.5], n_resamples=1000, rng=np.random.default_rng(0))
    assert (low <= profile).all() and (profile <= high).all()
    assert low[0] == high[0] == 1.0 and low[2] == high[2] == 0.0  # every resample is above 0 and below 0.5


def test_seed_test_with_one_constant_arm_is_quiet_and_stands_on_the_other_arm():
    import warnings

    from ablate.stats.maths.paired import seed_test

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision-loss warning reached the report's console
        t = seed_test([0.0012, 0.0, 0.0025, 0.0012], [0.0, 0.0, 0.0, 0.0])
    assert t.p_value > 0.05 and t.statistic > 0 and t.note == ""
