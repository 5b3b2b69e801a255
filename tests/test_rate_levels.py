"""`python -m ablate.studies.rate_levels`: exact error rates of success_rate claims over their plans."""

from pathlib import Path

import numpy as np
import pytest

from ablate.stats.claims.registration import Record, Registration, fingerprint, to_yaml
from ablate.studies import rate_levels

CLAIM = {"id": "collapses", "claim": "x collapses", "metric": "pass@1", "condition": "x", "baseline": "y",
         "type": "success_rate", "success": ">=0.1", "direction": "lower", "effect": 0.5}


def test_the_plan_outcome_is_what_drawing_seeds_look_by_look_gives():
    """The exact sum (counts carried between looks by convolution) against seeds drawn one by one, each
    claim stopping at its first decisive look of the same verdict tables: within 4 standard errors."""
    looks = (3, 6, 9)
    tables = rate_levels.verdict_tables(CLAIM, looks, 0.2)
    px, py = 0.3, 0.8
    rep, nrep = rate_levels.plan_outcome(tables, looks, px, py)
    assert 0 < rep < 1 and 0 < nrep < 1 and rep + nrep <= 1
    rng = np.random.default_rng(0)
    draws = 40_000
    kx, ky = (np.cumsum(rng.random((draws, looks[-1])) < p, axis=1) for p in (px, py))
    verdict = np.zeros(draws, dtype=np.int8)
    for n, table in zip(looks, tables):
        open_ = verdict == 0
        verdict[open_] = table[kx[open_, n - 1], ky[open_, n - 1]]
    for exact, freq in ((rep, (verdict == 1).mean()), (nrep, (verdict == -1).mean())):
        assert abs(freq - exact) <= 4 * np.sqrt(exact * (1 - exact) / draws) + 1e-9, (exact, freq)


def test_the_futility_rate_is_within_its_nominal_rate_where_the_tool_studies_decide():
    # the registered collapse claims' plan and first level (docs/findings/tool_annealing_study/confirmatory2)
    row = rate_levels.error_rates(rate_levels.Cell("s", CLAIM, (5, 10, 20), "pocock", 0.025))
    assert row["false_not_replicated"] <= row["nominal"]
    assert row["false_replicated"] <= row["nominal"]
    assert 0.5 < row["power"] < 1


def _registration(tmp_path, amended=None, **study):
    """A registration as `ablate.studies.register` writes it (an amendment: the block with `amended` in it)."""
    block = {"name": "s", "plan": {"looks": [10, 20], "spending": "pocock"},
             "claims": [CLAIM, {**CLAIM, "id": "other", "type": "superiority", "success": None}], **study}
    at = "2026-11-29T00:00:00+00:00"
    records = [Record(block, fingerprint(block), at, None)]
    if amended:
        records.append(Record({**block, **amended}, fingerprint({**block, **amended}), at, None))
    path = tmp_path / "registration.yaml"
    path.write_text(to_yaml(Registration("s", records)))
    return path


def test_the_levels_are_the_registrations_own(tmp_path):
    [cell] = rate_levels.cells_of(_registration(tmp_path))  # Bonferroni over the family of two
    assert cell.alpha == pytest.approx(0.025) and cell.looks == (10, 20) and cell.claim["id"] == "collapses"
    graph = {"weights": {"collapses": 0.2, "other": 0.8}, "transitions": {"other": {"collapses": 1}}}
    cells = rate_levels.cells_of(_registration(tmp_path, multiplicity=graph, realisations=2))
    assert [c.alpha for c in cells] == pytest.approx([0.005, 0.025])  # its weight, then all it can be passed
    [cell] = rate_levels.cells_of(_registration(tmp_path, amended={"plan": {"looks": [16, 32]}}))
    assert cell.looks == (16, 32)  # the latest version: an amendment made before the runs binds them


def test_the_command_prints_a_row_a_claim_and_refuses_an_empty_list(tmp_path, capsys):
    assert rate_levels.main([str(_registration(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.count("| s: collapses | 10/20 | 0.025 |") == 1
    doc = tmp_path / "stats.md"
    doc.write_text("before\n<!-- rate_levels -->\nold\n<!-- /rate_levels -->\nafter\n")
    assert rate_levels.main([str(_registration(tmp_path)), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "old" not in text and text.startswith("before\n<!-- rate_levels -->\n| claim |") and text.endswith("after\n")
    none = tmp_path / "none"
    none.mkdir()
    assert rate_levels.main([str(_registration(none, claims=[{**CLAIM, "type": "superiority", "success": None}]))]) == 0
    assert "no success_rate claim" in capsys.readouterr().out


def test_a_hand_edited_registration_is_one_line_and_nothing_computed(tmp_path, capsys):
    path = _registration(tmp_path)
    path.write_text(path.read_text().replace("looks:\n    - 10", "looks:\n    - 4"))
    assert rate_levels.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "edited by hand" in err


def test_the_table_in_stats_md_is_what_the_registrations_give(tmp_path, monkeypatch):
    """docs/stats.md's exact rates are the registered claims' at this commit: a registration or a rule that
    moves them fails here until the block is rendered again."""
    root = Path(__file__).resolve().parent.parent
    doc = tmp_path / "stats.md"
    doc.write_text((root / "docs" / "stats.md").read_text())
    monkeypatch.chdir(root)  # the default registrations: docs/findings/**/registration.yaml
    assert rate_levels.main(["--doc", str(doc)]) == 0
    assert doc.read_text() == (root / "docs" / "stats.md").read_text(), \
        "run: python -m ablate.studies.rate_levels --doc docs/stats.md"
