"""Claims that test the method (issue 58): declarations refused because they could not fail, because
they compare unlike things without saying so, or because their sentence claims what their type does not test.

- A one-signed metric (pass@16 - pass@1, coverage - pass@1: >= 0 in every run by construction) is compared
  only between conditions. Against a constant it tests nothing about the method: any arm that is not
  collapsed clears a small bar (596 runs with pass@1 >= 0.02 in this repository: smallest pass@16 - pass@1
  gap 0.088), so the claim is true by construction at any bar below that.
- Cost is measured in CPU seconds (`time/cpu_s`, `reach_cpu:`) or counted work (tokens, forward passes),
  never wall seconds on a shared machine: the load of the hour, not the method, moves wall time (002's
  arms ran under a load that varied 5-6x; at its quiet second look replay was ~6% cheaper a step, not ~20%).
- Two arms evaluated in different regimes (one with the tool, one without) measure access to the tool at
  test time, not the training method; such a claim must name its regimes in its sentence, as
  `(tool vs no_tool)`, so that no reader takes it for a like-with-like comparison.
"""

from __future__ import annotations

import re

from ablate.stats.claims.claim_types import CLAIM_TYPES


WALL = ("elapsed_s", "wall_time", "reach_time:")  # metric names that read a wall clock


def check_method(claim, problems: list[str]) -> None:
    """Append one line per way `claim` (a parsed Claim) does not test the method."""
    if claim.kind == "descriptive":
        return
    if claim.baseline is None and one_signed(claim.metric):
        problems.append(f"claim {claim.id!r}: {claim.metric} is one-signed by construction, so a bar any "
                        "uncollapsed run clears cannot test the method; compare it between conditions (a `baseline` "
                        "arm's seeds), e.g. the method's gap against the control's gap")
    if any(w in claim.metric for w in WALL):
        problems.append(f"claim {claim.id!r}: {claim.metric} reads wall seconds, which a shared machine's load moves "
                        "as much as the method; decide cost in CPU seconds (`slope:time/cpu_s`, `reach_cpu:...`) or "
                        "in counted work (tokens generated, forward passes); wall time may be `type: descriptive`")
    if claim.baseline_regime and claim.baseline_regime != claim.regime:
        named = f"({claim.regime} vs {claim.baseline_regime})"
        if named not in claim.text:
            problems.append(f"claim {claim.id!r} compares {claim.condition} evaluated `{claim.regime}` with "
                            f"{claim.baseline} evaluated `{claim.baseline_regime}`: that measures the evaluation "
                            f"regime as much as the training; compare like with like (one regime), or name the "
                            f"regimes in the sentence: add {named!r} to `claim`")


# pass@k >= pass@j (k > j), coverage >= pass@1 >= pass^k: a difference of two of these is one-signed
_PASS_AT = re.compile(r"^(?P<pre>.*?)pass@(?P<k>\d+)$")
_ABOVE = {("coverage", "pass@1"), ("coverage", "exact_pass@1"), ("pass@1", "exact_pass@1")}


def _dominates(a: str, b: str) -> bool:
    """Is metric `a` >= metric `b` in every run, by construction?"""
    ma, mb = _PASS_AT.match(a), _PASS_AT.match(b)
    if ma and mb and ma["pre"] == mb["pre"]:
        return int(ma["k"]) > int(mb["k"])
    caret = re.match(r"^pass\^(\d+)$", b)
    if caret and (a == "coverage" or (ma and not ma["pre"])):
        return True
    return (a, b) in _ABOVE


def one_signed(metric: str) -> int:
    """+1 / -1 when the per-run difference `A - B` is >= 0 / <= 0 by construction, else 0."""
    if " - " not in metric:
        return 0
    a, b = (m.strip() for m in metric.split(" - ", 1))
    return 1 if _dominates(a, b) else -1 if _dominates(b, a) else 0


def check_words(claim, problems: list[str]) -> None:
    """A sentence that says 'most of' or 'little' must be declared as the type that tests it."""
    for t in CLAIM_TYPES.values():
        if t.words and claim.kind != t.name and claim.kind != "descriptive" and re.search(t.words, claim.text, re.I):
            word = re.search(t.words, claim.text, re.I).group(0)
            problems.append(f"claim {claim.id!r} says {word!r}: declare it `type: {t.name}` "
                            f"({', '.join(f'`{k}`' for k in t.keys)}), which tests what the sentence says")
