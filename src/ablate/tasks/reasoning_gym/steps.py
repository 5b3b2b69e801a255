"""Worked traces for SFT where ablate knows how a reasoning-gym dataset's answer is computed.

`chain_sum`: the running total, one step per operation, left to right (`15-43=-28 -28-75=-103`), so the
tiny model adds or subtracts two numbers at a time instead of writing the answer in one go. Other
datasets have none (None): their traces are the answer alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from ablate.registry import Registry

# a reasoning-gym dataset -> (its metadata, compact) -> its worked steps, or None where it has none
STEPPERS = Registry("task.dataset")


@STEPPERS.register("chain_sum")
def chain_sum_steps(metadata: Mapping[str, Any], compact: bool) -> str | None:
    parts = str(metadata.get("expression", "")).split()  # "15 - 43 - 75": numbers and operators, spaced
    if len(parts) < 3 or len(parts) % 2 == 0:
        return None
    total = int(parts[0])
    sep = "" if compact else " "
    steps = []
    for op, number in zip(parts[1::2], parts[2::2]):
        if op not in "+-" or len(op) != 1:
            return None
        value = total + int(number) if op == "+" else total - int(number)
        steps.append(f"{total}{sep}{op}{sep}{number}{sep}={sep}{value}")
        total = value
    return (" " if compact else ", ").join(steps)


def worked_steps(dataset: str, metadata: Mapping[str, Any], compact: bool) -> str | None:
    stepper = STEPPERS.get(dataset)
    return stepper(metadata, compact) if stepper else None
