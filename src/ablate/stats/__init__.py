"""Significance reports across seeds and conditions of a sweep (`python -m ablate.stats`).

A pipeline in rooms, each importing only the rooms below it: `read` (run directories, archives) ->
`values` (per-run metric values) -> `claims` (declared claims, decided with the pure statistics of
`maths`) -> `stages` (conditions, summary, comparisons, curves, mechanisms; `analysis` runs them) ->
`render` (report.md, console, figures, the report's files). Names are imported on first use so that the
CLI can reject a bad path before paying for scipy, pandas and matplotlib.
"""

import importlib

_WHERE = {name: f"ablate.stats.{module}" for module, names in {
    "maths.intervals": "BootstrapCI Interval hierarchical_bootstrap_distribution iqm iqm_ci percentile_interval "
                       "performance_profile prompt_replicates ratio_bootstrap_ci t_interval wilson_interval",
    "maths.paired": "PairedResult ProbabilityOfImprovement SeedTest paired_test probability_of_improvement seed_test",
    "read.runs": "PromptTable RegimeEval Run StatsInputError Sweep find_run_dirs find_sweeps newest_sweep",
    "read.load": "load_run load_sweep",
    "stages.analysis": "Analysis analyze",
    "stages.settings": "Settings",
    "stages.conditions": "choose_baseline",
    "values.blocks": "prompt_metrics",
    "render.report": "print_summary report_json write_report",
    "render.markdown": "render_markdown",
}.items() for name in names.split()}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'ablate.stats' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_WHERE[name]), name)
    return value
