"""A one-sample claim's bar read from a committed evaluation (`against_eval`), with its sampling error
(issue 58: "a bar taken from one evaluation carries its uncertainty"; no number typed by hand)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from ablate.config import CONF_DIR
from ablate.stats.claims.claim_types import CLAIM_TYPES
from ablate.stats.claims.declared import parse_claim, parse_declared
from ablate.stats.claims.measured_bar import read_bar, standard_error
from ablate.stats.maths.verdicts import welch, welch_vs_measured

TINY_EVAL = "src/ablate/models/tiny_sft/eval_summary.json"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(CONF_DIR.parents[2])  # paths in a study block are read from the repository root


def claim(**keys):
    problems: list[str] = []
    raw = {"id": "rl_gain", "claim": "RLOO improves on its SFT start", "metric": "pass@1", "condition": "RLOO",
           "effect": 0.03, "against_eval": TINY_EVAL, **keys}
    return parse_claim(raw, 0, problems), problems


def test_the_bar_is_the_evaluations_own_number_and_its_error_is_bounded_from_the_summary():
    summary = json.loads(open(TINY_EVAL).read())
    c, problems = claim()
    assert problems == []
    assert c.null == summary["pass@1"]
    p, n, v = summary["n_prompts"], summary["n_samples"], summary["pass@1"]
    assert c.null_se == pytest.approx(math.sqrt(v * (1 - v) / (p * n)))
    assert 0.005 < c.null_se < 0.0053  # 0.31625 over 500 x 16 answers
    three = read_bar(TINY_EVAL, "by_operands/3/pass@1", "no_tool")  # a level's block: its own prompt count
    block = summary["by_operands"]["3"]
    assert three.value == block["pass@1"]
    assert three.se == pytest.approx(standard_error("pass@1", block["pass@1"], block["n_prompts"], n))
    wide = read_bar(TINY_EVAL, "pass@16", "no_tool")  # pass@k, k > 1: per prompt, not per answer
    assert wide.se == pytest.approx(math.sqrt(summary["pass@16"] * (1 - summary["pass@16"]) / p))


def test_a_testbed_record_reads_like_a_summary():
    bar = read_bar("docs/testbed/evals/sft_small.json", "pass@16", "no_tool")
    record = json.loads(open("docs/testbed/evals/sft_small.json").read())
    assert bar.value == record["summary"]["pass@16"] and bar.se > 0


@pytest.mark.parametrize("keys, named", [
    ({"against": 0.3}, "without `against`"),
    ({"baseline": "RLOO none"}, "without a `baseline`"),
    ({"against_eval": "no/such/eval.json"}, "cannot read it as JSON"),
    ({"metric": "mean_response_length"}, "not a share"),
    ({"metric": "by_depth/2/pass@1"}, "has no 'by_depth/2/pass@1'"),
    ({"regime": "tool"}, "evaluated `no_tool`, the claim's regime is `tool`"),
])
def test_a_bar_that_cannot_be_read_or_compared_is_refused_by_name(keys, named):
    c, problems = claim(**keys)
    assert c is None and any(named in p for p in problems), problems


def test_a_damaged_evaluation_file_is_one_line(tmp_path):
    damaged = tmp_path / "summary.json"
    damaged.write_text(open(TINY_EVAL).read()[:200])
    c, problems = claim(against_eval=str(damaged))
    assert c is None and len(problems) == 1 and str(damaged) in problems[0]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"regime": "no_tool", "n_prompts": 10, "n_samples": 4, "pass@1": 1.7}))
    c, problems = claim(against_eval=str(bad))
    assert c is None and "pass@1 is" in problems[0]


def test_the_interval_carries_the_bars_error_and_is_welch_without_it():
    x = np.array([0.36, 0.40, 0.33, 0.38, 0.41, 0.35, 0.37, 0.39])
    exact, measured = welch(x, None, 0.95, 0.31625), welch_vs_measured(x, 0.31625, 0.0052, 0.95)
    assert measured.diff == pytest.approx(exact.diff)
    assert measured.low < exact.low and measured.high > exact.high
    same = welch_vs_measured(x, 0.31625, 0.0, 0.95)
    assert (same.low, same.high) == (exact.low, exact.high)


def test_its_coverage_holds_where_an_exact_bar_would_not():
    """Seeds and the bar drawn around the same truth, the bar's error as large as the seed mean's: the
    95% interval covers 0 about 95% of the time; ignoring the bar's error it does not."""
    rng = np.random.default_rng(7)
    n, sd, truth = 8, 0.03, 0.3
    se_bar = sd / math.sqrt(n)
    covered = ignored = 0
    sims = 2000
    for _ in range(sims):
        x, bar = rng.normal(truth, sd, n), rng.normal(truth, se_bar)
        m, w = welch_vs_measured(x, bar, se_bar, 0.95), welch(x, None, 0.95, bar)
        covered += m.low <= 0 <= m.high
        ignored += w.low <= 0 <= w.high
    assert covered / sims > 0.93 and ignored / sims < 0.88


def test_the_sign_guard_moves_the_bar_against_the_verdict_and_pays_for_it():
    c, _ = claim()
    rule = CLAIM_TYPES["superiority"]
    above = np.full(8, c.null) + np.linspace(0.005, 0.1, 8)  # every seed above the bar, one within its error
    assert rule.sign_p(c, above, "replicated") == pytest.approx(0.5 ** 8)  # no alpha: the bar as read
    p = rule.sign_p(c, above, "replicated", alpha=0.05)
    assert p == pytest.approx(9 / 256 + 0.05 / 20)  # the seed within 2.8 SE of the bar no longer counts
    verdict, reason = rule.guard(c, "replicated", "", above, None, 0.05, "randomization")
    assert verdict == "inconclusive", reason


def test_the_threshold_study_reads_its_bar_from_the_shipped_sfts_evaluation():
    """No number typed by hand: the preset names the file, the bar is the file's number."""
    block = yaml.safe_load((CONF_DIR / "experiment" / "threshold_study.yaml").read_text())["study"]
    problems: list[str] = []
    study = parse_declared(block, problems)
    assert problems == []
    rl = next(c for c in study.claims if c.id == "rloo_improves_on_sft")
    assert rl.null == json.loads(open(TINY_EVAL).read())["pass@1"] and rl.null_se > 0
    assert rl.null_from == TINY_EVAL


def test_a_relative_path_is_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run's own directory, as a sweep job starts in
    c, problems = claim()
    assert problems == [] and c.null > 0.3


def _bar_block(path) -> dict:
    from test_stats_registration import BLOCK

    return {**BLOCK, "claims": [*BLOCK["claims"], {
        "id": "over_sft", "claim": "C improves on its start (pass@1)", "metric": "pass@1", "condition": "C",
        "effect": 0.03, "against_eval": str(path)}]}


def test_the_registration_binds_the_bars_file_and_a_later_edit_makes_the_verdicts_exploratory(tmp_path):
    """The bar file is data the claim decides on: registered beside the block (its sha256); changed after
    the registration, every verdict is exploratory and the note names the file; an amendment names it."""
    import copy
    import shutil

    from test_stats_registration import STARTED, _table, evaluate

    from ablate.stats.claims.registration import FILE, read_registration, register
    from ablate.stats.claims.standing import CONFIRMATORY, EXPLORATORY, decide

    bar = tmp_path / "eval_summary.json"
    shutil.copy(TINY_EVAL, bar)
    block = _bar_block(bar)
    register(tmp_path / FILE, copy.deepcopy(block), commit="abc", now="2026-01-01T00:00:00+00:00")
    reg = read_registration(tmp_path / FILE)
    assert set(reg.original.bars) == {str(bar)}

    def decided():
        return decide(block, read_registration(tmp_path / FILE), STARTED, lambda d: evaluate(d, _table()))

    assert set(decided().table["standing"]) == {CONFIRMATORY}
    summary = json.loads(bar.read_text())
    bar.write_text(json.dumps({**summary, "pass@1": 0.25}))  # the evaluation "redone" after the data
    moved = decided()
    assert set(moved.table["standing"]) == {EXPLORATORY}
    assert f"The bar file(s) {bar} differ from the registered bytes" in moved.note
    amended = register(tmp_path / FILE, copy.deepcopy(block), amend=True, now="2026-01-01T01:00:00+00:00",
                       code=reg.original.code)
    assert amended.records[-1].changes[0].startswith(f"bar {bar} ")
