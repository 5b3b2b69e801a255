"""Claims that test the method (issue 58): declarations refused because they could not fail, or because
they compare unlike things without saying so.

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

from ablate.stats.claims.claim_types import one_signed


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
