"""docs/findings.md's claims tables are rendered from the committed reports, never typed."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_findings_tables_match_what_the_committed_reports_render(monkeypatch):
    from ablate.stats.findings import main

    monkeypatch.chdir(ROOT)
    assert main(["docs/findings", "--check"]) == 0, "run: python -m ablate.stats.findings docs/findings"


def test_a_typed_number_is_caught(tmp_path):
    import shutil

    from ablate.stats.findings import main

    shutil.copytree(ROOT / "docs" / "findings", tmp_path / "findings")
    doc = tmp_path / "findings.md"
    text = (ROOT / "docs" / "findings.md").read_text()
    doc.write_text(text.replace("| 0.303 [0.210, 0.397] |", "| 0.313 [0.210, 0.397] |", 1))
    assert doc.read_text() != text
    assert main([str(tmp_path / "findings"), "--check"]) == 1
    assert main([str(tmp_path / "findings")]) == 0 and doc.read_text() == text  # re-rendered


@pytest.mark.parametrize("study", ["curriculum_study", "threshold_study", "dots_replay_study", "tool_annealing_study",
                                   "oracle_tool_study"])
def test_every_claim_of_every_study_has_a_verdict_of_the_partition(study):
    from ablate.stats.findings import study_claims

    table = study_claims(ROOT / "docs" / "findings" / study).table
    assert len(table) and table["verdict"].isin(
        ["replicated", "not replicated", "inconclusive", "not testable", "descriptive"]).all()
    assert not table[table["type"] != "descriptive"]["verdict"].eq("descriptive").any()
