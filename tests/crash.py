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


def assert_resume_reproduces(module_class, step: int, run, run_dir, expected, columns, monkeypatch) -> None:
    """Crash `run()` (writing to `run_dir`) at `step`, run it again, and check that the resumed run's
    per-step metrics equal `expected` (the uninterrupted run's metrics.csv as a DataFrame)."""
    import pandas as pd

    run_crashing_at_step(module_class, step, run, monkeypatch)
    run()
    again = pd.read_csv(run_dir / "metrics.csv")
    assert again["step"].tolist() == expected["step"].tolist()
    for column in columns:
        assert again[column].tolist() == pytest.approx(expected[column].tolist(), rel=1e-5), column
