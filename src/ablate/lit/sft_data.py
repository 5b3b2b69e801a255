"""SFT data: the task's traces (`Task.sft_segments`) after its prompts in the model's template, tokenized
with a loss mask."""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from ablate import seeds
from ablate.objectives import IGNORE
from ablate.padding import attention_mask, right_pad
from ablate.rollout.tools import ToolPrompt


def tool_output_mask(ids: Sequence[int], open_id: int | None, close_id: int | None) -> list[bool]:
    """True for tokens inside `<result>...</result>` (tags included): text the tool wrote.

    Built from token ids, never by re-tokenizing text, so it always has the length of `ids`.
    """
    mask, inside = [], False
    for token in ids:
        if token == open_id:
            inside = True
        mask.append(inside)
        if token == close_id:
            inside = False
    return mask


class TraceDataset(Dataset):
    """Item i is problem i of `task` with a fresh random trace on every access (a new solution path each
    epoch, for a task whose traces vary), seeded by (seed, i, access count) so runs repeat exactly.

    `tool_cfg`: the run's `tool` config, whose tool decorates the prompts (`ablate.rollout.tools.ToolPrompt`)
    as for a rollout it answers, for the styles the task says a tool answers (`Task.tool_styles`), or not.
    `oracle`: the `mistake_rate` and `max_messages` of a task's solver-trajectory style (paper 004's). A trace
    comes as pieces (`Task.sft_segments`), each tokenized on its own, as the rollout loop splices tool answers
    in, so the mask comes from the pieces' token ids (plus any `<result>` span: tool answers written inline).
    """

    def __init__(self, task: Any, problems: Sequence[Any], tokenizer: PreTrainedTokenizerBase, template: str,
                 style: str, seed: int, max_length: int, tool_cfg: Mapping[str, Any],
                 oracle: Mapping[str, Any] | None = None):
        self.task = task
        self.problems = list(problems)
        self.tokenizer = tokenizer
        self.template = template
        self.style = style
        self.seed = seed
        self.max_length = max_length
        self.prompt = ToolPrompt(tool_cfg, template, tokenizer, task)
        self.tool_styles = frozenset(getattr(task, "tool_styles", ()))
        self.oracle = dict(oracle or {"mistake_rate": 0.05, "max_messages": 20})
        self.draws = [0] * len(self.problems)
        vocab = tokenizer.get_vocab()
        self.result_ids = (vocab.get("<result>"), vocab.get("</result>"))

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def response(self, problem: Any, rng: random.Random, style: str) -> tuple[list[int], list[bool]]:
        """Token ids of one trace in `style` (eos included) and which of them a tool wrote."""
        ids: list[int] = []
        tool: list[bool] = []
        for text, by_tool in self.task.sft_segments(problem, rng, style, self.template == "compact", self.oracle):
            piece = self._ids(text)
            ids += piece
            tool += [by_tool] * len(piece)
        ids.append(self.tokenizer.eos_token_id)
        tool.append(False)
        return ids, [t or r for t, r in zip(tool, tool_output_mask(ids, *self.result_ids))]

    def trace_style(self, rng: random.Random) -> str:
        """The style of one trace: the task's draw for a style that varies per trace (`Task.trace_style`),
        else `stage.trace` itself."""
        draw = getattr(self.task, "trace_style", None)
        return draw(self.style, rng) if draw is not None else self.style

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        problem = self.problems[index]
        rng = seeds.rng(self.seed, index, self.draws[index])
        self.draws[index] += 1
        style = self.trace_style(rng)  # a style drawn per trace: this trace's draw; other styles draw nothing
        prompt = self.prompt.ids(problem, available=style in self.tool_styles)
        response, tool = self.response(problem, rng, style)
        labels = [IGNORE] * len(prompt) + [IGNORE if t else r for r, t in zip(response, tool)]
        ids = (prompt + response)[: self.max_length]
        return {"input_ids": ids, "labels": labels[: self.max_length]}


def pad_batch(items: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    ids = [item["input_ids"] for item in items]
    return {"input_ids": right_pad(ids, pad_id), "labels": right_pad([item["labels"] for item in items], IGNORE),
            "attention_mask": attention_mask(ids)}


class SFTDataModule(L.LightningDataModule):
    def __init__(self, task: Any, problems: Sequence[Any], tokenizer: PreTrainedTokenizerBase, template: str,
                 style: str, batch_size: int, seed: int, max_length: int, tool_cfg: Mapping[str, Any],
                 oracle: Mapping[str, Any] | None = None):
        super().__init__()
        self.dataset = TraceDataset(task, problems, tokenizer, template, style, seed, max_length, tool_cfg, oracle)
        self.batch_size = batch_size
        self.seed = seed
        self.pad_id = tokenizer.pad_token_id

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(seeds.seed_of("data", self.seed))
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True, generator=generator,
                          collate_fn=lambda items: pad_batch(items, self.pad_id), num_workers=0, drop_last=True)

