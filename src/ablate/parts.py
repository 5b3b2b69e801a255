"""Every part that registers itself, imported: the registries filled (stages, tasks, curricula, rollout
engines, the tool schedules) and, with them, each part's config schema stored in Hydra's ConfigStore by its
`@config_schema` (ablate.config.schemas). Whatever composes a run config imports this module first: the
entry points, the study tools and the tests. A part in a new module of one of these packages is imported
by its package, so nothing here changes when a part is added."""

from __future__ import annotations

import ablate.config  # noqa: F401 - the schemas no part owns (eval, the tool's common keys), the resolvers
import ablate.curriculum  # noqa: F401 - samplers
import ablate.rollout.engines  # noqa: F401 - rollout engines
import ablate.rollout.schedules  # noqa: F401 - the annealed tools' schemas
import ablate.stages  # noqa: F401 - stages
import ablate.tasks  # noqa: F401 - tasks, and the tools' schemas of their own (countdown's oracle)
