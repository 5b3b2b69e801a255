"""reasoning-gym's procedurally generated tasks (an optional extra), behind ablate's Task seam."""

from .task import Entry, ReasoningGymTask, ReasoningGymTaskConfig  # registers task.name=reasoning_gym

__all__ = ["Entry", "ReasoningGymTask", "ReasoningGymTaskConfig"]
