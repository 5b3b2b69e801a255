"""The run directory, owned once: its layout (`RunDir`), status.json (`status`), the run's own copy of
its config (`record`), atomic writes (`atomic`), one live owner (`ownership`), metrics.csv across a
resume (`metrics_csv`) and the cache of what can be rebuilt (`cache`).

Training writes a run directory through this package and `ablate.stats` reads it through it. It imports
no other part of ablate but the leaf `ablate.stopping` (tests/test_import_graph.py), so every part may import it.
"""

from ablate.rundir.layout import RunDir, RunDirLike

__all__ = ["RunDir", "RunDirLike"]
