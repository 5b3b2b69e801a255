"""A simulated crash mid-run, for the resume tests."""

import pytest


def run_crashing_at_step(module_class, step: int, run, monkeypatch) -> None:
    """Call `run()` with `module_class.training_step` raising at `step` (after the checkpoints before it
    are written): the run must fail with that crash; the next `run()` is a resume."""
    original = module_class.training_step

    def crash(self, batch, batch_idx):
        if self.global_step == step:
            raise RuntimeError("simulated crash")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(module_class, "training_step", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run()
    monkeypatch.setattr(module_class, "training_step", original)
