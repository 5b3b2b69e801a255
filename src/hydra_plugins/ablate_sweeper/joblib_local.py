"""`hydra/launcher=local`: hydra-joblib-launcher's parallel jobs on this machine, stopped with the sweep.

Joblib runs each job in a worker process of its own. A SIGTERM or SIGINT to the sweep (the process
that was launched) would end it alone and leave the workers training; this launcher stops them
first (`ablate.stopping.stop_workers`: each marks its run interrupted, resumable), then exits. At
the end it counts the jobs skipped because another live process owned their run directory
(`ablate.rundir.ownership`).
"""

import logging
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

from ablate.rundir.ownership import SKIPPED
from ablate.stopping import workers_stop_with_parent

log = logging.getLogger(__name__)


class LocalJoblibLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        with workers_stop_with_parent():
            returns = super().launch(job_overrides, initial_job_idx)
        skipped = [r for r in returns if r.status == JobStatus.COMPLETED and r.return_value == SKIPPED]
        if skipped:
            log.warning("%d of %d jobs skipped: another live process is running them (see the lines above); "
                        "re-run the sweep once it has ended to resume anything it left unfinished",
                        len(skipped), len(returns))
        return returns
