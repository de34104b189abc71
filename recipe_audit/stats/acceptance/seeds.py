"""A defense's gates decided over seeds: an exact binomial test per gate, Holm over the family.

The acceptance sweep runs each defense on several seeds, each on a base model of its own, and one
cell's verdict carries the luck of its base. Each seed's status of a gate (pass, fail, N/A,
pass-with-caveat, missing) is one draw of what the defense does to that gate; the question over
seeds is whether the gate passes (or fails) on most of the seeds one would draw.

**The procedure** (exact binomial majority test, Holm-adjusted). For each defense ``d`` and gate
``g`` with ``S`` seeds, two one-sided hypotheses about a seed's status drawn from the sweep's
design:

- ``H_pass(d, g)``: P(the gate passes) <= 1/2, p-value ``P(Binomial(S, 1/2) >= #pass)``;
- ``H_fail(d, g)``: P(the gate fails) <= 1/2, p-value ``P(Binomial(S, 1/2) >= #fail)``.

Holm's step-down at level α runs over all ``2 x defenses x 4`` hypotheses (24 for three defenses).
A gate is decided ``pass`` when ``H_pass`` is rejected, ``fail`` when ``H_fail`` is (never both:
each needs more than half of the seeds), ``missing`` when it has no result on any seed, and
``undecided`` otherwise. N/A, pass-with-caveat and missing are neither a pass nor a fail in the
counts, so they make both decisions harder, never easier. The defense's verdict over seeds is the
card's own rule (:func:`.verdict.card_verdict`) on the decided gates, an undecided gate counting as
missing evidence (more seeds would decide it), never as a pass or a fail.

**What it guarantees.** With probability at least ``1 - α``, no gate of any defense is decided
wrongly: every ``pass`` is of a gate that passes on more than half of the seeds one would draw, and
every ``fail`` of one that fails on more than half, whatever the dependence between gates and
defenses (Holm controls the family-wise error under any dependence), provided the seeds are
independent draws of the same design. A gate that passes each seed with probability 1/2 is decided
``pass`` with probability at most α (at most ``α / 24`` while no other gate is decided); the earlier
rule (a share of 80 % of seeds) decided it so 18.8 % of the time with five seeds. **What it does not.** It says nothing about a pass rate above
one half (a gate decided ``pass`` may fail on 40 % of seeds); it is about this design (task, base
recipe, λ), not other tasks or models; it takes each seed's status as given, whatever that gate's
own error rate on one cell; and ``undecided`` is no evidence against a gate. Few seeds decide
nothing: a gate that agrees on all ``S`` seeds has p-value ``2**-S``, so the first Holm level
``α / 24`` needs ``S >= 8`` at α = 0.1 (:func:`seeds_to_decide`).

References: S. Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J.
Statist. 6(2), 65-70; C. J. Clopper and E. S. Pearson (1934) (the exact binomial test's bound:
``H_pass`` is rejected at level α exactly when the one-sided lower bound on the pass rate at
confidence ``1 - α`` exceeds 1/2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from recipe_audit.stats.acceptance.names import FAIL, GATES, MISSING, NA, PASS, STATUSES
from recipe_audit.stats.acceptance.verdict import card_verdict
from recipe_audit.stats.errors import StatsInputError

__all__ = ["DEFAULT_ALPHA", "UNDECIDED", "GateOverSeeds", "SeedDecision", "decide_over_seeds", "majority_p_value",
           "seeds_to_decide"]

#: The family-wise error rate of the decisions over seeds (as δ_stat's default on recipe cards).
DEFAULT_ALPHA = 0.1
#: A gate the seeds do not decide: counts as missing evidence in the verdict over seeds.
UNDECIDED = "undecided"
_HALF = Fraction(1, 2)


def majority_p_value(successes: int, seeds: int) -> float:
    """The exact one-sided p-value of "a seed gives this outcome with probability at most 1/2":
    ``P(Binomial(seeds, 1/2) >= successes)``, summed exactly.

    >>> majority_p_value(5, 5), majority_p_value(4, 5), majority_p_value(0, 5)
    (0.03125, 0.1875, 1.0)
    """
    if not 0 <= successes <= seeds:
        raise StatsInputError(f"{successes} successes cannot come from {seeds} seeds.")
    return float(Fraction(sum(math.comb(seeds, j) for j in range(successes, seeds + 1)), 2**seeds))


def seeds_to_decide(hypotheses: int, alpha: float = DEFAULT_ALPHA) -> int:
    """The fewest seeds at which a gate that agrees on every seed is decided: the smallest ``S``
    with ``2**-S <= alpha / hypotheses`` (the first Holm level).

    >>> seeds_to_decide(24), seeds_to_decide(1, 0.05)
    (8, 5)
    """
    s = 1
    while Fraction(1, 2**s) > Fraction(alpha) / hypotheses:
        s += 1
    return s


@dataclass(frozen=True)
class GateOverSeeds:
    """One gate of one defense over its seeds: the counts of each status, the two p-values, the
    Holm levels they were tested at (None: not reached, the step-down stopped before them) and the
    ``decided`` status (pass, fail, undecided or missing)."""

    defense: str
    gate: str
    seeds: int
    passed: int
    failed: int
    na: int
    caveat: int
    missing: int
    p_pass: float
    p_fail: float
    level_pass: float | None
    level_fail: float | None
    decided: str


@dataclass(frozen=True)
class SeedDecision:
    """Every defense's gates decided over seeds (:func:`decide_over_seeds`), the verdict each gives
    (the card's rule, undecided counted as missing), the level ``alpha``, the number of hypotheses
    and the fewest seeds at which a unanimous gate would be decided."""

    alpha: float
    hypotheses: int
    seeds_to_decide: int
    gates: tuple[GateOverSeeds, ...]
    verdicts: Mapping[str, str]

    def of(self, defense: str) -> dict[str, GateOverSeeds]:
        """The four gates of ``defense``, by gate."""
        return {g.gate: g for g in self.gates if g.defense == defense}


def _holm(p_values: Sequence[float], alpha: float) -> tuple[list[bool], list[float | None]]:
    """Holm's step-down: which hypotheses are rejected, and the level each was tested at."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    rejected, levels = [False] * m, [None] * m
    for r, i in enumerate(order):
        levels[i] = alpha / (m - r)
        if p_values[i] > levels[i]:
            break
        rejected[i] = True
    return rejected, levels


def decide_over_seeds(statuses: Mapping[str, Sequence[Mapping[str, str]]], alpha: float = DEFAULT_ALPHA) -> SeedDecision:
    """Decide each defense's gates over its seeds (see the module docstring for the test).

    ``statuses``: per defense, one mapping gate -> status per seed (a gate absent is ``missing``).

    >>> seeds = [{"a": "pass", "b": "pass", "c": "fail", "d": "n/a"}] * 9
    >>> dec = decide_over_seeds({"l2sp": seeds})
    >>> [dec.of("l2sp")[g].decided for g in "abcd"], dec.verdicts["l2sp"]
    (['pass', 'pass', 'fail', 'undecided'], 'near miss')
    >>> dec = decide_over_seeds({"l2sp": seeds[:5], "x": seeds[:5], "y": seeds[:5]})
    >>> [dec.of("l2sp")[g].decided for g in "abcd"], dec.verdicts["l2sp"], dec.seeds_to_decide
    (['undecided', 'undecided', 'undecided', 'undecided'], 'missing evidence', 8)
    """
    if not 0 < alpha < 1:
        raise StatsInputError(f"alpha must lie strictly between 0 and 1, got {alpha!r}.")
    rows = []
    for defense, seeds in statuses.items():
        for g in GATES:
            got = [(s.get(g) or MISSING) for s in seeds]
            bad = [x for x in got if x not in STATUSES]
            if bad:
                raise StatsInputError(f"gate ({g}) of {defense} has status {bad[0]!r}, not one of {list(STATUSES)}.")
            rows.append((defense, g, got))
    tested = [i for i, (_, _, got) in enumerate(rows) if any(x != MISSING for x in got)]
    p_of = {(i, outcome): majority_p_value(got.count(outcome), len(got))
            for i, (_, _, got) in enumerate(rows) for outcome in (PASS, FAIL)}
    owners = [(i, outcome) for i in tested for outcome in (PASS, FAIL)]
    p_values = [p_of[o] for o in owners]
    rejected, levels = _holm(p_values, alpha)
    found: dict[tuple[int, str], tuple[bool, float | None]] = {
        owner: (rej, lv) for owner, rej, lv in zip(owners, rejected, levels, strict=True)}
    gates = []
    for i, (defense, g, got) in enumerate(rows):
        rej_pass, lv_pass = found.get((i, PASS), (False, None))
        rej_fail, lv_fail = found.get((i, FAIL), (False, None))
        if i not in tested:
            decided = MISSING
        else:
            decided = PASS if rej_pass else FAIL if rej_fail else UNDECIDED
        gates.append(GateOverSeeds(
            defense=defense, gate=g, seeds=len(got), passed=got.count(PASS), failed=got.count(FAIL),
            na=got.count(NA), caveat=len(got) - sum(got.count(x) for x in (PASS, FAIL, NA, MISSING)),
            missing=got.count(MISSING), p_pass=p_of[(i, PASS)],
            p_fail=p_of[(i, FAIL)], level_pass=lv_pass, level_fail=lv_fail,
            decided=decided))
    verdicts = {}
    for defense in statuses:
        decided = {g.gate: (MISSING if g.decided == UNDECIDED else g.decided) for g in gates if g.defense == defense}
        verdicts[defense] = card_verdict(decided)
    m = len(p_values)
    return SeedDecision(alpha=alpha, hypotheses=m, seeds_to_decide=seeds_to_decide(max(m, 1), alpha),
                        gates=tuple(gates), verdicts=verdicts)
