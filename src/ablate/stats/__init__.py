"""Significance reports across seeds and conditions of a sweep (`python -m ablate.stats`).

The math lives in `intervals`, `sequential`, `verdicts` (pure functions), discovery in `runs`, loading in
`load` (samples.jsonl in `samples`), the pipeline's stages in `analysis` (each stage's result in its own
module: `conditions`, `summary`, `compare`, `curves`, `engine` for claims, `mechanisms`), files in `report`,
report.md in `render_markdown`, figures in `figures`. Names are imported on first use so that the CLI can
reject a bad path before paying for scipy, pandas and matplotlib.
"""

import importlib

_WHERE = {name: f"ablate.stats.{module}" for module, names in {
    "intervals": "BootstrapCI Interval PairedResult ProbabilityOfImprovement SeedTest hierarchical_bootstrap_distribution "
                 "iqm iqm_ci paired_test percentile_interval performance_profile "
                 "probability_of_improvement prompt_replicates ratio_bootstrap_ci seed_test t_interval wilson_interval",
    "runs": "PromptTable RegimeEval Run StatsInputError Sweep find_run_dirs find_sweeps newest_sweep",
    "load": "load_run load_sweep",
    "analysis": "Analysis analyze",
    "settings": "Settings",
    "conditions": "choose_baseline",
    "blocks": "prompt_metrics",
    "report": "print_summary report_json write_report",
    "render_markdown": "render_markdown",
}.items() for name in names.split()}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'ablate.stats' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_WHERE[name]), name)
    return value
