"""Training stages (`conf/stage/`), each a module of this package that registers itself
(`ablate.stages.registry`); importing the package imports them all.

    sft         supervised fine-tuning on solver traces (the first stage of every chain)
    rloo        online RL: RLOO / GRPO advantages, importance-weighted policy gradient, KL, tools, curricula
    dpo, ipo    offline preference optimization, one stage per key of ablate.objectives.PREFERENCE_LOSSES

`ablate.stages.wiring` is the composition root the entry point calls (`fit_stage`, `starting_model_config`).
"""

from __future__ import annotations

import importlib
import pkgutil

from ablate.stages.registry import STAGES, Stage, stage_names, stage_of, upstream_names

from ablate.stages import sft, rloo, preference  # noqa: E402,F401,I001 - the shipped stages register, in chain order
for _module in pkgutil.iter_modules(__path__):  # a stage registers itself when its module is imported
    importlib.import_module(f"{__name__}.{_module.name}")

from ablate.metrics import REGIME_NO_TOOL, REGIME_TOOL  # noqa: E402 - re-exported: train reads them here
from ablate.stages.preference import pair_stages, preference_stages  # noqa: E402
from ablate.stages.wiring import (final_regimes, fit_stage, starting_model_config, validation_callbacks,  # noqa: E402
                                  validation_regime)

__all__ = ["REGIME_NO_TOOL", "REGIME_TOOL", "STAGES", "Stage", "final_regimes", "fit_stage", "pair_stages",
           "preference_stages", "stage_names", "stage_of", "starting_model_config", "upstream_names",
           "validation_callbacks", "validation_regime"]
