"""Policy models and their prompts: the tiny default and any Hugging Face causal LM.

`model.kind=tiny`: a small Qwen2-architecture model with the project's own character-level
tokenizer, random init unless `model.name_or_path` names a saved checkpoint directory.
`model.kind=hf`: `AutoModelForCausalLM`/`AutoTokenizer.from_pretrained(model.name_or_path)`, a Hub
id or a local directory, prompted with the tokenizer's chat template.
Both save with `save_pretrained`, so every stage's `<run>/model` loads the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ablate.padding import attention_mask, right_pad

from .tokenizer import load_tiny_tokenizer

if TYPE_CHECKING:  # the modeling stack takes seconds to import; a config check needs none of it
    from transformers import PreTrainedModel

MODEL_KINDS = ("tiny", "hf")
PACKAGE_DIR = Path(__file__).resolve().parent
# Checkpoints shipped inside the package, addressed as `builtin:<name>` (see each folder's README.md
# for the command that reproduces it and its evaluation).
BUILTIN = {"tiny-sft": PACKAGE_DIR / "tiny_sft"}


def resolve_path(name_or_path: str | None) -> str | None:
    """`builtin:<name>` -> the shipped checkpoint's directory; anything else unchanged."""
    if not name_or_path or not str(name_or_path).startswith("builtin:"):
        return name_or_path
    name = str(name_or_path).split(":", 1)[1]
    if name not in BUILTIN or not (BUILTIN[name] / "config.json").is_file():
        raise ValueError(f"model.name_or_path={name_or_path!r}: no such shipped checkpoint; "
                         f"available: {[f'builtin:{k}' for k, v in BUILTIN.items() if (v / 'config.json').is_file()]}")
    return str(BUILTIN[name])


def load_tokenizer(model_cfg: Mapping[str, Any]) -> PreTrainedTokenizerBase:
    path = resolve_path(model_cfg.get("name_or_path"))
    if model_cfg["kind"] == "tiny":
        # Not AutoTokenizer: for a qwen2 model directory it builds Qwen2's byte-level tokenizer
        # around our vocabulary, which silently drops spaces and newlines.
        return load_tiny_tokenizer() if not path else PreTrainedTokenizerFast.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def weights_sha256(model: torch.nn.Module) -> str:
    """A fingerprint of a model's weights (names, dtypes, bytes). Runs that name one starting point (an
    upstream's cache key) but got different weights, e.g. an upstream re-trained by other code or on a CPU
    whose kernels round otherwise, tell themselves apart by it: ablate.stats lists them as a data problem."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_model(model_cfg: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    path = resolve_path(model_cfg.get("name_or_path"))
    if path:
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if model_cfg["kind"] != "tiny":
        raise ValueError("model.kind=hf needs model.name_or_path=<Hub id or local directory>")
    from transformers import Qwen2Config, Qwen2ForCausalLM  # heavy: transformers' modeling stack (Qwen2's)

    arch = dict(model_cfg["arch"])
    # arch.vocab_size: rows beyond the tokenizer's, as Qwen2.5 pads 151,665 tokens to 151,936, so that a
    # random model has a real model's embedding and output layer (model=qwen2.5-0.5b-shape); the extra
    # ids decode to nothing. checks.check_model_and_task refuses fewer rows than tokens.
    vocab_size = int(arch.pop("vocab_size", None) or len(tokenizer))
    config = Qwen2Config(vocab_size=vocab_size, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **arch)
    return Qwen2ForCausalLM(config)


def prompt_text(task: Any, problem: Any, template: str, tokenizer: PreTrainedTokenizerBase, calculator: bool = False,
                oracle: bool = False) -> str:
    """The prompt of `problem` as text: the task renders it (`Task.render`: plain text for the compact
    template of the tiny model, else chat messages, which the tokenizer's chat template turns into text).
    `calculator`: with the calculator preamble; `oracle`: the solver oracle's search prompt (the tools
    a task offers)."""
    rendered = task.render(problem, template, calculator=calculator, oracle=oracle)
    if isinstance(rendered, str):
        return rendered
    return tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=True)


def encode_prompt(text: str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids of a prompt, led by BOS when the tokenizer has one (the tiny tokenizer does)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + ids


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def mean_pooled_embeddings(model: PreTrainedModel, sequences: Sequence[list[int]], pad_id: int,
                           batch_size: int = 256) -> torch.Tensor:
    """The last hidden layer averaged over each sequence's tokens: [len(sequences), hidden].
    Works for a causal LM (policy) and a plain encoder (a sentence-embedding model) alike."""
    device = next(model.parameters()).device
    rows = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start:start + batch_size]
        ids, attention = right_pad(chunk, pad_id), attention_mask(chunk)
        out = model(input_ids=ids.to(device), attention_mask=attention.to(device), output_hidden_states=True)
        hidden = out.hidden_states[-1].float()
        weights = attention.to(device).unsqueeze(-1).float()
        rows.append(((hidden * weights).sum(1) / weights.sum(1)).cpu())
    return torch.cat(rows)
