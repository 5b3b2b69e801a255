"""A one-sample claim's bar read from a committed evaluation (`against_eval:`), with its sampling error.

"RLOO improves on its SFT starting point" compares the RL arm's seeds with one evaluation of the SFT
model. Typed as a constant (`against: 0.31625`) the bar is a number copied by hand and treated as exact;
read from the evaluation's own file it is the number the evaluation wrote, and it carries the error of
that one evaluation: the test prompts are fixed (the RL arm is evaluated on the same ones), so its error
is the sampling of the N answers per prompt. Its standard error is bounded from the summary alone:

    pass@1 (a mean of P x N Bernoulli answers, prompt i's rate p_i): SE^2 = sum p_i (1 - p_i) / (N P^2)
                                            <= v (1 - v) / (P N)        (v the mean; Jensen)
    any other share (pass@k, coverage, ...): a per-prompt estimate in [0, 1], SE^2 <= v (1 - v) / P

so the bound needs no per-prompt table, and overstates the error where prompts differ (conservative).

Accepted files: an evaluation's `eval/<regime>/summary.json` (ablate.rundir.summary's shape, e.g.
src/ablate/models/tiny_sft/eval_summary.json) or a testbed record (docs/testbed/evals/<name>.json, whose
`summary` is one). A relative path is read from the working directory, else from the checkout the
`ablate` package runs from (its src/'s parent): a run started in any directory finds the repository's file.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Mapping, NamedTuple

from ablate.rundir.checks import RATE
from ablate.rundir.code import source_root
from ablate.rundir.summary import BY, N_PROMPTS, N_SAMPLES, REGIME, check_summary, kind_of

_PASS1 = re.compile(r"^(exact_)?pass@1$")


class MeasuredBar(NamedTuple):
    value: float  # the evaluation's value of the claim's metric
    se: float  # its sampling standard error's bound (module docstring)
    source: str  # the file, as declared


def standard_error(metric: str, value: float, n_prompts: int, n_samples: int) -> float:
    """The bound on a share's sampling SE (module docstring): pass@1 over P x N answers, else over P."""
    draws = n_prompts * (n_samples if _PASS1.match(metric) else 1)
    return math.sqrt(max(value * (1.0 - value), 0.0) / draws)


def resolve(source: str) -> Path:
    """The file `source` names: as given, else (relative) under the checkout the package runs from."""
    path = Path(source)
    return source_root().parent / source if not path.is_absolute() and not path.exists() else path


def digests(block: Mapping | None) -> dict[str, str]:
    """{source: sha256 of its bytes} of every bar file a study block's claims read (`against_eval`): what a
    registration binds beside the block ('missing' for a file not there)."""
    out: dict[str, str] = {}
    for claim in (block or {}).get("claims") or []:
        source = claim.get("against_eval") if isinstance(claim, Mapping) else None
        if source is not None:
            path = resolve(str(source))
            out[str(source)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return out


def read_bar(source: str, metric: str, regime: str) -> MeasuredBar:
    """The bar for `metric` (a share in summary.json, `by_<level>/<value>/<metric>` for a level's block)
    evaluated in `regime`. Raises ValueError with one line naming the file, the value and the fix."""
    path = resolve(source)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"against_eval {source!r}: cannot read it as JSON ({err.__class__.__name__}: {err}); "
                         "name a committed eval summary.json or docs/testbed/evals/<name>.json") from None
    summary = data.get("summary") if isinstance(data, dict) and "summary" in data else data
    issues: list[str] = []
    summary = check_summary(summary, source, issues, recomputable=False)
    if summary is None or issues:
        raise ValueError(f"against_eval {source!r}: not a valid evaluation summary: "
                         f"{'; '.join(issues) or 'no summary'}")
    if summary.get(REGIME, regime) != regime:
        raise ValueError(f"against_eval {source!r} was evaluated `{summary[REGIME]}`, the claim's regime is "
                         f"`{regime}`: compare like with like (name an evaluation in `{regime}`)")
    *blocks, name = metric.split("/")
    if kind_of(name) != RATE:
        raise ValueError(f"against_eval: {metric!r} is not a share (pass@k, coverage, ...), so its sampling error "
                         "has no bound from the summary; compare against a baseline arm's seeds instead")
    block = summary
    for part in blocks:
        block = block.get(part) if isinstance(block, dict) else None
    if not isinstance(block, dict) or not isinstance(block.get(name), (int, float)):
        raise ValueError(f"against_eval {source!r} has no {metric!r} (blocks: "
                         f"{', '.join(k for k in summary if k.startswith(BY)) or 'none'})")
    n_prompts, n_samples = block.get(N_PROMPTS), summary.get(N_SAMPLES)
    if not (isinstance(n_prompts, int) and n_prompts > 0 and isinstance(n_samples, int) and n_samples > 0):
        raise ValueError(f"against_eval {source!r}: needs {N_PROMPTS} and {N_SAMPLES} to bound the bar's error")
    value = float(block[name])
    return MeasuredBar(value, standard_error(name, value, n_prompts, n_samples), source)
