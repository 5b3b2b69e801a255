"""Every part that registers itself, imported: the registries filled (stages, tasks, curricula, rollout
engines, the tool schedules, loggers, the config checks of `ablate.check_registry.CHECKS`) and, with them, each part's config schema stored in Hydra's ConfigStore by its
`@config_schema` (ablate.config.schemas). Whatever composes a run config imports this module first: the
entry points, the study tools and the tests. A part in a new module of one of these packages is imported
by its package, so nothing here changes when a part is added."""

from __future__ import annotations

import ablate.config  # noqa: F401 - the schemas no part owns (eval, model, the tool's and reward's common keys), the resolvers
import ablate.curriculum  # noqa: F401 - samplers, and replay's schema
import ablate.eval  # noqa: F401 - evaluation's check
import ablate.fit  # noqa: F401 - the trainer's schema
import ablate.loggers  # noqa: F401 - loggers, and their schemas
import ablate.rollout.engines  # noqa: F401 - rollout engines
import ablate.rollout.schedules  # noqa: F401 - the annealed tools' schemas
import ablate.rollout.tools  # noqa: F401 - tools, and the tool config's check
import ablate.stages  # noqa: F401 - stages, and dynamic sampling's schema (with stage=rloo)
import ablate.tasks  # noqa: F401 - tasks, and the tools' and rewards' schemas of their own (countdown's)
