"""LightningModules and DataModules for the training stages."""

from __future__ import annotations

import torch

# torch.compile's backend for trainer.compile=true (tests swap in "eager" to check what is compiled without inductor)
COMPILE_BACKEND = "inductor"


class CompilableLearner:
    """`self.learner`: the policy as the training loss calls it, `self.model` itself or, after
    `compile_learner()` (`trainer.compile=true`), a `torch.compile` wrapper of it sharing its weights.
    Only the loss's forward is compiled: decoding (rollouts, evaluation) calls `self.model`, whose
    growing KV cache and shrinking batch would recompile at every step. Kept in a tuple so that the
    wrapper is no submodule of the LightningModule and the checkpoint's keys do not change."""

    _learner: tuple = ()

    @property
    def learner(self) -> torch.nn.Module:
        return self._learner[0] if self._learner else self.model

    def compile_learner(self) -> None:
        self._learner = (torch.compile(self.model, dynamic=True, backend=COMPILE_BACKEND),)
