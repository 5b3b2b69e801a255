"""docs/findings.md's claims tables are rendered from the committed reports, never typed."""

import math
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = ROOT / "docs" / "findings"


def test_findings_tables_match_what_the_committed_reports_render(monkeypatch):
    from tools.findings import main

    monkeypatch.chdir(ROOT)
    assert main(["docs/findings", "--check"]) == 0, "run: python -m tools.findings docs/findings"


def test_a_typed_number_is_caught(tmp_path):
    import shutil

    from tools.findings import main

    shutil.copytree(ROOT / "docs" / "findings", tmp_path / "findings")
    doc = tmp_path / "findings.md"
    text = (ROOT / "docs" / "findings.md").read_text()
    import re

    block = text.index("<!-- claims:oracle_tool_study -->")
    cell = re.compile(r"\| (-?\d\.\d{3}) \[").search(text, block)  # the first estimate of a rendered table
    typed = f"{float(cell.group(1)) + 0.01:.3f}"
    doc.write_text(text[: cell.start(1)] + typed + text[cell.end(1):])
    assert doc.read_text() != text
    assert main([str(tmp_path / "findings"), "--check"]) == 1
    assert main([str(tmp_path / "findings")]) == 0 and doc.read_text() == text  # re-rendered


def test_a_number_typed_in_the_prose_is_caught_unless_a_table_backs_it_or_it_is_the_papers(tmp_path):
    from tools.prose import check, table_values, unbacked

    doc = ROOT / "docs" / "findings.md"
    text = doc.read_text()
    values = table_values(text, FINDINGS, ROOT / "conf")
    assert unbacked(text, values) == []
    typed = text.replace("\n\n", "\n\nThe gain was 0.4321 over the baseline.\n\n", 1)
    assert [n for _, n, _ in unbacked(typed, values)] == ["0.4321"]
    assert unbacked(typed.replace("0.4321", "0.4321 (paper)"), values) == []
    assert unbacked(typed.replace("The gain", "The paper's gain"), values) == []
    assert unbacked(typed.replace("0.4321 over", "0.4321 min over"), values) == []  # a wall time, not a finding
    assert unbacked(typed.replace("0.4321", "`0.4321`"), values) == []  # code: a command or a config value
    (tmp_path / "findings.md").write_text(typed)
    assert "0.4321 is in no rendered table" in check(tmp_path / "findings.md", FINDINGS, ROOT / "conf")[0]


def test_committed_reports_claims_sections_agree_with_claims_csv():
    """report.md's claims section, claims.csv and findings.md render from the same rows."""
    import pandas as pd

    text = (FINDINGS / "tool_annealing_mixed_study" / "report.md").read_text()
    claims = pd.read_csv(FINDINGS / "tool_annealing_mixed_study" / "claims.csv").set_index("id")
    line = next(s for s in text.splitlines() if s.startswith("| **calc_persists**"))
    assert f"**{claims.loc['calc_persists', 'verdict']}" in line and "10 vs 10" not in line
    findings = (ROOT / "docs" / "findings.md").read_text()
    block = findings.split("<!-- claims:tool_annealing_mixed_study -->")[1].split("<!-- /claims -->")[0]
    assert next(s for s in block.splitlines() if s.startswith("| **calc_persists**")) == line


@pytest.mark.parametrize("study", ["curriculum_study", "threshold_study", "dots_replay_study", "tool_annealing_study",
                                   "oracle_tool_study"])
def test_every_claim_of_every_study_has_a_verdict_of_the_partition(study):
    from tools.findings import study_claims

    table = study_claims(ROOT / "docs" / "findings" / study).table
    assert len(table) and table["verdict"].isin(
        ["replicated", "not replicated", "inconclusive", "not testable", "descriptive"]).all()
    assert not table[table["type"] != "descriptive"]["verdict"].eq("descriptive").any()


def test_mechanisms_are_rendered_per_condition_and_embedded(tmp_path):
    from tools.findings import embed, mechanisms_block

    (tmp_path / "mechanisms.csv").write_text("run,tool,seed,rate,empty\n0,off,0,0.1,\n1,off,1,0.3,\n2,on,0,1.0,\n")
    block = mechanisms_block(tmp_path)
    assert "| tool | n | `rate` |" in block and "`empty`" not in block
    assert "| off | 2 | 0.2 [0.1, 0.3] |" in block and "| on | 1 | 1 [1, 1] |" in block
    doc = "a\n<!-- mechanisms:s -->\nold\n<!-- /mechanisms -->\n<!-- claims:s -->\nkeep\n<!-- /claims -->\n"
    out = embed(doc, {"mechanisms:s": block})
    assert block in out and "old" not in out and "keep" in out
    assert mechanisms_block(tmp_path / "none") is None


def test_a_curve_precondition_reads_curves_csv_gz_and_names_an_unconverted_curves_csv(tmp_path):
    import pandas as pd

    from tools.findings import _curve_rows

    bridge = {"metrics": {"final:val/pass@1@0:20": {"curve": "val/pass@1", "step": 19}},
              "labels": {"tool=off": "off"}}
    curves = pd.DataFrame({"condition": ["tool=off", "tool=off", "tool=on"], "metric": ["val/pass@1"] * 3,
                           "step": [9, 19, 19], "mean": [0.1, 0.2, 0.4]})
    curves.to_csv(tmp_path / "curves.csv", index=False)  # a report from before curves.csv.gz: named, not read
    with pytest.raises(ValueError, match="curves.csv.gz"):
        _curve_rows(tmp_path, bridge)
    curves.to_csv(tmp_path / "curves.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    rows = _curve_rows(tmp_path, bridge)
    assert {(r["condition"], r["value"]) for r in rows} == {("off", 0.2), ("tool=on", 0.4)}
    assert all(math.isnan(r["band_low"]) for r in rows)  # a table without its band: the gate has no interval
    curves.assign(ci_low=[0.0, 0.15, 0.3], ci_high=[0.2, 0.25, 0.5]).to_csv(
        tmp_path / "curves.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    band = {r["condition"]: (r["band_low"], r["band_high"]) for r in _curve_rows(tmp_path, bridge)}
    assert band == {"off": (0.15, 0.25), "tool=on": (0.3, 0.5)}  # the condition mean's t band: its interval
    assert _curve_rows(tmp_path, {"metrics": {"x": "a_mechanism_column"}}) == []  # no curve metric: not read


def test_a_study_rerun_on_another_testbed_is_set_beside_its_base(tmp_path):
    import shutil

    from tools.findings import render

    base = tmp_path / "tool_annealing_study"
    shutil.copytree(FINDINGS / "tool_annealing_study", base)
    rerun = tmp_path / "rerun"
    shutil.copytree(base, rerun)
    bridge = yaml.safe_load((rerun / "committed.yaml").read_text())
    bridge.update(base="tool_annealing_study", testbed="mixed_sft")
    (rerun / "committed.yaml").write_text(yaml.safe_dump(bridge))
    blocks, _, _ = render(tmp_path)
    lines = [r for r in blocks["testbeds"].splitlines() if r.startswith("| fixed_tool_beats_no_tool")]
    assert len(lines) == 1 and "tool_annealing_study (calc_sft)" in lines[0] and "rerun (mixed_sft)" in lines[0]
    assert lines[0].count("**replicated**") == 2


def test_committed_comparisons_intervals_are_welch_and_any_bootstrap_is_labelled():
    """Every committed comparisons.csv's diff_ci_* is Welch's interval over summary.csv's per-run values
    (what ablate.stats computes today); the replaced hierarchical bootstrap survives only as bootstrap_ci_*,
    which the prose check does not accept as backing."""
    import numpy as np
    import pandas as pd

    from ablate.stats.maths.verdicts import welch
    from tools.prose import REPLACED, _text

    files = sorted((ROOT / "docs" / "findings").glob("**/comparisons.csv"))
    assert len(files) >= 10
    for f in files:
        table = pd.read_csv(f)
        runs = pd.read_csv(f.parent / "summary.csv").query("level == 'run'")
        for r in table.itertuples():
            def arm(cond):
                return runs[(runs.metric == r.metric) & (runs.condition == cond) & (runs.regime == r.regime)].value
            x, y = arm(r.condition).to_numpy(float), arm(r.baseline).to_numpy(float)
            if len(x) < 2 or len(y) < 2 or not np.isfinite(r.diff_ci_low):
                continue
            want = welch(x, y, 0.95)
            assert np.isclose(r.diff_ci_low, want.low) and np.isclose(r.diff_ci_high, want.high), (f, r.metric, r.condition)
        if "bootstrap_ci_low" in table.columns:
            assert "bootstrap_ci_low" not in _text(f).split("\n", 1)[0] and REPLACED == "bootstrap_"


def test_the_confirmatory_table_counts_agreements_from_the_committed_claims(tmp_path):
    """A confirmatory claims.csv beside a study: each deciding row set beside the exploratory verdict;
    a flipped verdict is a disagreement, a claim amended after the data does not count."""
    import shutil

    import pandas as pd

    from tools.findings import render

    study = tmp_path / "curriculum_study"
    shutil.copytree(FINDINGS / "curriculum_study", study)
    for archived in ("runs.jsonl.gz", "prompts.csv.gz"):  # planted verdicts, no confirmatory runs to re-decide
        (study / "confirmatory" / archived).unlink(missing_ok=True)
    (study / "confirmatory").mkdir(exist_ok=True)
    (study / "confirmatory" / "claims.csv").unlink(missing_ok=True)  # the committed one: planted below instead
    blocks, _, results = render(tmp_path)
    assert "No confirmatory verdict yet" in blocks["confirmatory"]
    table = results[study].table.copy()
    table["standing"] = "confirmatory"
    decided = table.index[table["verdict"].isin(("replicated", "not replicated"))]
    assert len(decided) >= 2
    flipped = {"replicated": "not replicated", "not replicated": "replicated"}
    table.loc[decided[0], "verdict"] = flipped[table.loc[decided[0], "verdict"]]
    table.loc[decided[1], "standing"] = "amended after the data"
    table.to_csv(study / "confirmatory" / "claims.csv", index=False)
    blocks, _, _ = render(tmp_path)
    block = blocks["confirmatory"]
    family = int((table["verdict"] != "descriptive").sum()) - 1
    # decided on both sides: every decided claim but the amended one (no exploratory verdict), the flipped one too
    both = int(table["verdict"].isin(("replicated", "not replicated")).sum()) - 1
    assert block.startswith(f"**{both} claims were decided on both seed sets, and {both - 1} of them agree.**")
    assert f"All rows: {family - 1} of {family} verdicts agree." in block
    assert block.count("| no (reversed) |") == 1 and table.loc[decided[1], "id"] + ":" not in block


def test_a_claim_whose_arm_is_not_run_yet_waits_in_the_confirmatory_table_and_is_not_counted(tmp_path):
    """004's first look runs its plain-SFT and DPO arms before the oracle SFT: the oracle claims have no
    seeds yet, so they wait (named in the headline), and only the claims that ran count."""
    import math

    import pandas as pd

    from tools.confirmatory import side_by_side

    study = tmp_path / "oracle_tool_study"
    (study / "confirmatory").mkdir(parents=True)
    common = dict(standing="confirmatory", estimate=0.01, ci_low=-0.01, ci_high=0.02, n_baseline=5)
    rows = [dict(id="dpo_small_gain", claim="DPO adds little", verdict="inconclusive", n=5, **common),
            dict(id="oracle_beats", claim="oracle SFT beats plain SFT", verdict="not testable", n=math.nan,
                 reason="no pass@1 [tool vs no_tool] values for oracle SFT", **common)]
    pd.DataFrame(rows).to_csv(study / "confirmatory" / "claims.csv", index=False)
    before = pd.DataFrame([{**r, "verdict": v, "n": 5, "standing": "exploratory"}
                           for r, v in zip(rows, ("inconclusive", "replicated"))])
    block = side_by_side({study: before}, tmp_path)
    assert block.startswith("**0 claims were decided on both seed sets, and 0 of them agree.** 0 were decided on "
                            "one side only; 1 on neither")
    assert "All rows: 1 of 1 verdicts agree." in block
    assert "Waiting for an arm not yet run (not counted): oracle_tool_study oracle_beats." in block
    assert "arm not run yet (no pass@1 [tool vs no_tool] values for oracle SFT) | waits |" in block
    # once the arm has run, the same claim counts, whatever its verdict
    rows[1].update(verdict="not testable", n=5, reason="precondition failed")
    pd.DataFrame(rows).to_csv(study / "confirmatory" / "claims.csv", index=False)
    block = side_by_side({study: before}, tmp_path)
    assert "1 was decided on one side only" in block and "All rows: 1 of 2 verdicts agree." in block
    # a claim its study declared untestable counts nowhere, and is named
    rows[1].update(reason="precondition declared: a reference set as large as the paper's")
    pd.DataFrame(rows).to_csv(study / "confirmatory" / "claims.csv", index=False)
    block = side_by_side({study: before}, tmp_path)
    assert "0 were decided on one side only; 1 on neither" in block
    assert "declared untestable, not counted: oracle_beats." in block


def test_a_later_realisation_renders_beside_the_third_edition_with_what_its_redeclaration_changed(tmp_path):
    """003's collapse claim, re-declared as a success-rate claim and registered again (confirmatory2): its
    block sets the new registered verdict beside the third edition's, names the changed fields, and counts it;
    a registration without a report yet is named as waiting."""
    import pandas as pd

    from ablate.stats.claims.registration import register
    from tools.realisations import changed, realisations_block

    study = tmp_path / "tool_annealing_study"
    old = {"id": "fixed_tool_collapses", "claim": "collapses", "metric": "pass@1", "direction": "lower"}
    new = {**old, "type": "success_rate", "success": ">=0.1", "claim": "collapses (no-tool pass@1)"}
    for sub, claim in (("confirmatory", old), ("confirmatory2", new)):
        (study / sub).mkdir(parents=True)
        register(study / sub / "registration.yaml", {"name": study.name, "claims": [claim]}, commit="abc")
    assert realisations_block(tmp_path).startswith("**No later realisation reported yet.** Registered, runs not "
                                                   "yet reported: tool_annealing_study/confirmatory2.")
    common = dict(id="fixed_tool_collapses", claim="collapses", standing="confirmatory", n=5, n_baseline=5)
    pd.DataFrame([dict(common, verdict="inconclusive", estimate=-0.2, ci_low=-0.3, ci_high=-0.1)]).to_csv(
        study / "confirmatory" / "claims.csv", index=False)
    pd.DataFrame([dict(common, verdict="replicated", estimate=-1.0, ci_low=-1.0, ci_high=-0.4)]).to_csv(
        study / "confirmatory2" / "claims.csv", index=False)
    block = realisations_block(tmp_path)
    assert block.startswith("**0 claims were decided on both realisations, and 0 of them agree.** 1 was decided "
                            "on one side only; 0 on neither")
    row = next(line for line in block.splitlines() if line.startswith("| tool_annealing_study/confirmatory2 |"))
    assert "success: – -> >=0.1; type: – -> success_rate; the sentence" in row
    assert "| **inconclusive** -0.200 [-0.300, -0.100] (5 vs 5) | **replicated** -1.000 [-1.000, -0.400] (5 vs 5) | no |" in row
    assert changed(old, old) == "no change" and changed(None, new) == "new claim"


def test_the_document_leads_with_both_tables_counts_and_not_their_rows():
    from tools.findings import headline_block

    block = headline_block("**5 decided on both.** more\n\n| row |", "**No later realisation reported yet.**\n\n")
    assert "**5 decided on both.** more" in block and "No later realisation" in block and "| row |" not in block
    assert block.splitlines()[0].startswith("- Third edition") and len(block.splitlines()) == 2
