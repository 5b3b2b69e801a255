"""Where a run computes, decided in one place: every part that places a model or picks a precision asks here.

`trainer.accelerator=auto|gpu` uses the GPU when there is one; `trainer.accelerator=cpu` keeps the
whole run (training, sampling, evaluation and the precision) on the CPU even on a GPU machine.
"""

from __future__ import annotations

from typing import Any, Mapping


def cuda() -> bool:
    """Whether this machine has a CUDA GPU (torch imported only when asked: the entry point refuses
    bad configs before that import)."""
    import torch  # heavy: torch; ablate.config (read by the stats CLI) imports this module

    return torch.cuda.is_available()


def device(trainer: Mapping[str, Any]) -> str:
    """The device of the run's models: cuda when there is a GPU and `trainer.accelerator` is not cpu."""
    return "cuda" if cuda() and trainer["accelerator"] != "cpu" else "cpu"


def precision(trainer: Mapping[str, Any]) -> str:
    """`trainer.precision`, with auto resolved: bf16-mixed on the GPU, 32-true on the CPU."""
    if trainer["precision"] != "auto":
        return str(trainer["precision"])
    return "bf16-mixed" if device(trainer) == "cuda" else "32-true"
