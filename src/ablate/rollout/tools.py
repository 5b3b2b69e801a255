"""Tools the rollout loop can run mid-generation, engine-agnostic: the policy writes a call, the
tool's answer is spliced into the sequence as tokens the policy did not sample (masked from the loss).

The interface an engine needs (`Tool`): `stop_ids` (token ids after which the tool may answer;
`stop_strings` is the same as text, for engines that stop on strings), `max_calls` (answers per
rollout), and `session(prompt_ids)`, one per rollout, whose `reply(generated)` returns the token ids
to splice in after the tokens generated so far, or None. The engine counts answers and stops
asking after `max_calls`. A reply may end with the eos token: the tool ends the rollout.

A tool class also owns its prompt decoration: `prompt_text(task, problem, template, tokenizer, mode,
available)` is the prompt of a rollout it does (`available`) or does not answer, `mode` being
`tool.prompt`. `ToolPrompt` gives the prompts of a `tool` config to every caller (RL rollouts,
evaluation in both regimes, validation), so no caller tests which tool it is; `rollout_metrics(texts)`
names the tool's own metrics of RL rollouts (the calculator's `tool/calc_emission_rate`).

The tools are a task's hooks (`Task.tools()`: Countdown offers the calculator of paper 003 and the
solver oracle of paper 004, in the tools module of its package); `tool_classes()` gathers them with any
registered in `TOOLS` (`@TOOLS.register` on the class, under its `kind`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from transformers import PreTrainedTokenizerBase

from ablate.check_registry import CHECKS
from ablate.config import require
from ablate.config.schemas import ToolConfig, typed
from ablate.models import encode_prompt
from ablate.registry import Registry
from ablate.rollout.schedules import PROMPT_MODES, SCHEDULES
from ablate.tasks import TASKS

# tool.kind -> tool class (`@TOOLS.register`, and every task's `tools()`): `build_tool` and the config check read
# this. `tool.kind=<cls.kind>` builds `cls.from_config(tool_cfg, tokenizer, template)`, after `cls.check(tool_cfg)`
# (ConfigError naming the key) at start-up.
TOOLS = Registry("tool.kind", attr="kind")


def tool_classes() -> Registry:
    """`TOOLS` with the tools every registered task offers (`Task.tools()`, imported on first use)."""
    for task in TASKS.values():
        for kind, cls in task.tools().items():
            TOOLS.setdefault(kind, cls)
    return TOOLS


class ToolSession(Protocol):
    def reply(self, generated: list[int]) -> list[int] | None: ...


class Tool(Protocol):
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    max_calls: int
    # Validation during training (`eval.val_regime=auto`) runs with the tool answering when a model trained
    # on it cannot do the task without it (its format waits for the tool's replies).
    validates_with_tool: bool

    def session(self, prompt_ids: Sequence[int]) -> ToolSession: ...

    def errors(self, tool_text: str) -> int:
        """How many of the tool's answers in `tool_text` (the tool-written text of one rollout) are errors."""

    @staticmethod
    def prompt_text(task: Any, problem: Any, template: str, tokenizer: PreTrainedTokenizerBase, mode: str,
                    available: bool) -> str:
        """The prompt of a rollout the tool does (`available`) or does not answer; `mode` is `tool.prompt`."""

    @staticmethod
    def rollout_metrics(texts: Sequence[str]) -> dict[str, float]:
        """The tool's own metrics of a step's RL rollouts (`texts`, with or without the tool's answers), logged
        beside the generic `tool/` ones; the tool class of `tool.kind` names them, also under `tool=off`."""


class ToolPrompt:
    """The prompts of a run's `task` under its `tool` config (None: no tool): the tool's class decorates
    them (`prompt_text`), given whether the tool answers the rollout. Builds no tool, so it serves the
    no_tool regime and tokenizers that lack the tool's tokens alike."""

    def __init__(self, tool_cfg: ToolConfig | Mapping[str, Any] | None, template: str,
                 tokenizer: PreTrainedTokenizerBase, task: Any):
        tool = typed(ToolConfig, tool_cfg) if tool_cfg else ToolConfig()  # keys left out: tool=off's
        self.tool_class = tool_classes()[tool.kind]  # unknown: ValueError naming the kinds
        self.mode = tool.prompt
        self.template, self.tokenizer, self.task = template, tokenizer, task

    def text(self, problem: Any, available: bool) -> str:
        return self.tool_class.prompt_text(self.task, problem, self.template, self.tokenizer, self.mode, available)

    def ids(self, problem: Any, available: bool) -> list[int]:
        return encode_prompt(self.text(problem, available), self.tokenizer)


def build_tool(tool_cfg: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, template: str):
    """The tool a `tool` config names (whatever its schedule: availability is the caller's business)."""
    tool_class = tool_classes()[tool_cfg.get("kind", "calculator")]  # unknown: ValueError naming the kinds
    return tool_class.from_config(tool_cfg, tokenizer, template)


@CHECKS.register("tool", order=70)
def check_tool(cfg) -> None:
    """`tool=` config: ConfigError naming the key and the fix (whether a stage takes the tool is the
    stage's check: ablate.stages)."""
    t = cfg.tool
    tools = tool_classes()
    require(t.kind in tools, f"tool.kind={t.kind!r}: expected one of {tuple(tools)}")
    require(t.schedule in SCHEDULES, f"tool.schedule={t.schedule!r}: expected one of {SCHEDULES}")
    require(t.prompt in PROMPT_MODES, f"tool.prompt={t.prompt!r}: expected one of {PROMPT_MODES}")
    ratio, stages = t.get("anneal_ratio", 0.667), t.get("stages", 1)
    require(0 < float(ratio) <= 1, f"tool.anneal_ratio={ratio} must be in (0, 1] (T_anneal = anneal_ratio * stage.max_steps)")
    require(int(stages) >= 1, f"tool.stages={stages} must be >= 1 (anneal_step's number of levels)")
    require(t.max_calls >= 1, f"tool.max_calls={t.max_calls} must be >= 1")
    tools[t.kind].check(t)
