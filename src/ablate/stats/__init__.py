"""Significance reports across seeds and conditions of a sweep (`python -m ablate.stats`).

The math lives in `intervals` (pure functions of arrays), discovery and loading in `runs`, tables
in `analysis`, files and figures in `report`. Names are imported on first use so that the CLI can
reject a bad path before paying for scipy, pandas and matplotlib.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ablate.stats.intervals": [
        "BootstrapCI", "Interval", "PairedResult", "ProbabilityOfImprovement", "SeedTest",
        "hierarchical_bootstrap_distribution", "holm_bonferroni", "iqm", "iqm_ci", "paired_test", "percentile_interval",
        "performance_profile", "probability_of_improvement", "prompt_replicates", "ratio_bootstrap_ci", "seed_test",
        "t_interval", "wilson_interval",
    ],
    "ablate.stats.runs": [
        "PromptTable", "RegimeEval", "Run", "StatsInputError", "Sweep", "find_run_dirs", "find_sweeps",
        "load_run", "load_sweep", "newest_sweep",
    ],
    "ablate.stats.analysis": ["Analysis", "Settings", "analyze", "choose_baseline", "prompt_metrics"],
    "ablate.stats.report": ["print_summary", "render_markdown", "report_json", "write_report"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ablate.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
