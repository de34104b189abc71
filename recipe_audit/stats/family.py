"""Family-wise recipe cards: a recipe chosen from a family of M keeps the card's guarantee.

A sweep over several recipe identities (models × learning rates × schedules ...) followed by
shipping the one whose card looks best is a selection: among M recipes that are all over budget,
the chance that *some* card reads ``release-supported`` is far above δ, and the winner's pointwise
bound no longer holds at confidence ``1 - δ``. The family-wise card keeps the promise whichever
recipe is chosen: with probability at least ``1 - δ`` no recipe of the family whose true failure
probability exceeds ε is certified.

* **Bonferroni**: every recipe is bounded at risk ``δ / M``. Its bounds ``U`` and ``L`` at that
  risk hold for all M recipes at once, so the shipped one's bound holds at ``1 - δ``.
* **Holm's step-down** (the default verdict): recipe ``i`` has the exact p-value
  ``p_i = P(Binomial(N_i, ε) <= k_i)`` for the hypothesis "its failure probability exceeds ε"
  (``U <= ε`` at risk α is exactly ``p_i <= α``, the sample floor included). The p-values are taken
  in increasing order; the r-th is certified at risk ``δ / (M - r + 1)`` as long as every earlier one
  was; the first that fails stops the procedure. The guarantee is the same (family-wise error at
  most δ under any dependence between the recipes); the recipe with the smallest p-value is
  certified exactly when Bonferroni certifies it, and later ones more often.

The family is every recipe identity looked at for the decision, finished or not: M counts the
identities, and an identity with no reruns on the audit set is a member that cannot be certified.
The family-wise sample floor is ``N_min`` at risk ``δ / M``: it grows like ``ln(M / δ) / ε``
(22, 44 and 66 reruns at M = 1, 10 and 100 for ε = δ = 0.1).

A family-wise verdict is, per recipe: ``strong-unsupported`` when ``L`` at ``δ / M`` exceeds ε;
``release-supported`` when the procedure certifies it; ``insufficient-evidence`` below the
family-wise floor; ``unsupported`` otherwise.

Pure Python (the exact bounds of :mod:`.exact`); nothing here imports NumPy or SciPy for the
counts of a fine-tuning sweep.

References: C. E. Bonferroni (1936); S. Holm (1979), "A simple sequentially rejective multiple
test procedure", Scand. J. Statist. 6(2), 65-70; C. J. Clopper and E. S. Pearson (1934).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from recipe_audit.stats import checks, exact, floors, tails
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.interval import Interval

__all__ = [
    "BONFERRONI",
    "FAMILY_METHODS",
    "HOLM",
    "FamilyCard",
    "FamilyMember",
    "FamilySeat",
    "check_family_size",
    "family_bounds",
    "family_bounds_at",
    "family_delta",
    "family_sample_floor",
    "family_seats_at",
    "family_tail_bound",
    "member_at",
    "pointwise_p_value",
]

HOLM = "holm"
BONFERRONI = "bonferroni"
#: The family-wise procedures: Holm's step-down (default) and Bonferroni.
FAMILY_METHODS = (HOLM, BONFERRONI)


def check_family_size(family_size) -> int:
    """The family size M: a whole number, at least 1 (at most 10^15)."""
    value = family_size
    if getattr(value, "ndim", None) == 0 and not isinstance(value, (int, float)):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StatsInputError(f"the family size M must be a whole number of recipes, got {value!r}.")
    if isinstance(value, numbers.Integral):
        m = int(value)
    elif math.isfinite(float(value)) and float(value) == math.floor(value):
        m = int(value)
    else:
        raise StatsInputError(f"the family size M must be a whole number of recipes, got {value!r}.")
    if m < 1:
        raise StatsInputError(f"the family size M must be at least 1 (the recipe itself), got {m}.")
    if m > checks.MAX_RERUNS:
        raise StatsInputError(f"the family size M must be at most {checks.MAX_RERUNS_TEXT}, got {m}.")
    return m


def _check_method(method: str) -> str:
    if method not in FAMILY_METHODS:
        raise StatsInputError(f"the family-wise method must be 'holm' or 'bonferroni', got {method!r}.")
    return method


def family_delta(delta, family_size) -> float:
    """The risk each recipe is bounded at under Bonferroni: ``δ / M``.

    >>> family_delta(0.1, 10)
    0.01
    """
    return checks.scaled(checks.check_delta(delta), check_family_size(family_size))


def family_sample_floor(eps=DEFAULT_EPS, delta=DEFAULT_DELTA, family_size=1) -> int:
    """The family-wise sample floor: ``N_min`` at risk ``δ / M``, the fewest reruns at which a
    recipe with no failure can be certified as the choice among M.

    >>> [family_sample_floor(0.1, 0.1, m) for m in (1, 10, 100)]
    [22, 44, 66]
    """
    e = checks.check_eps(eps)
    return floors.budget_floor(e, family_delta(delta, family_size))


def pointwise_p_value(k, n, eps) -> float:
    """The exact p-value ``P(Binomial(n, ε) <= k)`` of the hypothesis "the failure probability
    exceeds ε" (``U <= ε`` at risk α exactly when this is at most α). Returned as a float; values
    at or above one half (``k >= nε``) are returned as 1.0, since no risk below one half certifies
    them.

    >>> round(pointwise_p_value(0, 22, 0.1), 6), pointwise_p_value(5, 10, 0.1)
    (0.098477, 1.0)
    """
    k_i, n_i = checks.check_counts(k, n)
    e = checks.check_eps(eps)
    return math.exp(_log_p(k_i, n_i, e))


def _log_p(k: int, n: int, e: float) -> float:
    if k >= n or n * e <= k:
        return 0.0  # P(X <= k) >= 1/2: never certified at a risk below one half
    if k == 0:
        return n * math.log1p(-e)
    try:
        return tails.log_cdf(k, n, e)
    except tails.TailTooLong:
        # I_{1-e}(n - k, k + 1); SciPy's bdtr takes n as a C int and gives NaN above 2**31 - 1
        p = tails.finite(float(tails.scipy_special().betaincc(float(k + 1), float(n - k), e)),
                         f"The p-value of {k} failures in {n} reruns")
        return math.log(p) if p > 0 else -math.inf  # below the smallest float: below every level


@dataclass(frozen=True)
class FamilyMember:
    """One recipe's reading as a member of a family of ``family_size`` recipes.

    ``upper``: the one-sided exact upper bound at the risk ``upper_level``, which is the family-wise
    risk ``δ / M`` (a bound valid for every member at once), except for a member Holm's step-down
    certifies at its own, larger level while its bound at ``δ / M`` exceeds ε: its ``upper`` is the
    bound at the level that certified it (``upper_level == level``), at most ε. ``lower``: the lower
    bound at ``δ / M``; ``sample_floor``: ``N_min`` at ``δ / M``; ``level``: the risk this recipe
    was tested at (``δ / M`` for Bonferroni, ``δ / (M - r + 1)`` for the r-th smallest p-value
    under Holm); ``p_value``: ``P(Binomial(n, ε) <= k)`` (1.0 for ``k >= nε``); ``rank``: its place
    in increasing p-value order (1 for a lone recipe); ``verdict``: the family-wise verdict;
    ``pointwise_*``: the ordinary card at risk δ; ``more_clean_reruns_needed``: 0 for a certified
    member, else the further clean reruns that would certify it at ``δ / M``.

    >>> a, b = family_bounds([(0, 29), (0, 25)], 0.1, 0.1).members
    >>> b.verdict, b.level, b.upper_level, round(b.upper, 4), round(exact.upper_bound(0, 25, 0.05), 4)
    ('release-supported', 0.1, 0.1, 0.088, 0.1129)
    """

    k: int
    n: int
    eps: float
    delta: float
    family_size: int
    method: str
    family_delta: float
    level: float
    rank: int
    p_value: float
    upper: float
    upper_level: float
    lower: float
    sample_floor: int
    more_clean_reruns_needed: int
    verdict: str
    pointwise_upper: float
    pointwise_lower: float
    pointwise_sample_floor: int
    pointwise_verdict: str

    @property
    def interval(self) -> Interval:
        """``[lower, upper]`` as the :class:`~recipe_audit.stats.interval.Interval` every result shares."""
        return Interval(self.lower, self.upper)

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return asdict(self)


@dataclass(frozen=True)
class FamilyCard:
    """The family-wise verdicts of the recipes given (in their order), among ``family_size``.

    ``untested``: members of the family with no reruns given (counted in M, never certified);
    ``certified``: how many members the procedure certifies.
    """

    eps: float
    delta: float
    family_size: int
    method: str
    family_delta: float
    sample_floor: int
    pointwise_sample_floor: int
    untested: int
    certified: int
    members: tuple[FamilyMember, ...]

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        out = {f: getattr(self, f) for f in ("eps", "delta", "family_size", "method", "family_delta",
                                            "sample_floor", "pointwise_sample_floor", "untested", "certified")}
        out["members"] = [m.to_dict() for m in self.members]
        return out


def _member(k: int, n: int, e: float, d: float, m: int, method: str, level: float, rank: int,
            log_p: float, certified: bool) -> FamilyMember:
    fd = checks.scaled(d, m)
    floor = floors.floor_of(e, fd)
    lower = exact.lower_at(k, n, fd)
    if lower > e:
        verdict = exact.STRONG_UNSUPPORTED
    elif certified:
        verdict = exact.SUPPORTED
    elif n < floor:
        verdict = exact.INSUFFICIENT
    else:
        verdict = exact.UNSUPPORTED
    # the bound at the risk that decided the verdict: δ/M, or Holm's larger level where only it certifies
    at = level if certified and not exact.certifies_at(k, n, e, fd, floor) else fd
    pw = exact.tail_bound_at(k, n, e, d)
    return FamilyMember(
        k=k, n=n, eps=e, delta=d, family_size=m, method=method, family_delta=fd, level=level, rank=rank,
        p_value=math.exp(log_p), upper=exact.capped(exact.upper_at(k, n, at), e, verdict), upper_level=at,
        lower=lower, sample_floor=floor,
        more_clean_reruns_needed=0 if certified else exact.more_needed(k, n, e, fd, floor), verdict=verdict,
        pointwise_upper=pw.upper, pointwise_lower=pw.lower, pointwise_sample_floor=pw.sample_floor,
        pointwise_verdict=pw.verdict,
    )


def family_tail_bound(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA, family_size=1) -> FamilyMember:
    """The card of one recipe chosen from a family of ``family_size``: its bounds at ``δ / M``
    (Bonferroni, which a lone recipe's counts can state; Holm certifies the family's best recipe
    exactly when Bonferroni does).

    >>> fb = family_tail_bound(0, 44, family_size=10)
    >>> fb.verdict, fb.pointwise_verdict, fb.sample_floor
    ('release-supported', 'release-supported', 44)
    >>> family_tail_bound(0, 30, family_size=10).verdict
    'insufficient-evidence'
    """
    k_i, n_i = checks.check_counts(k, n)
    e, d = checks.check_eps(eps), checks.check_delta(delta)
    m = check_family_size(family_size)
    fd = checks.scaled(d, m)
    floor = floors.budget_floor(e, fd)
    return _member(k_i, n_i, e, d, m, BONFERRONI, fd, 1, _log_p(k_i, n_i, e),
                   exact.certifies_at(k_i, n_i, e, fd, floor))


def family_bounds(counts: Sequence[tuple[int, int]], eps=DEFAULT_EPS, delta=DEFAULT_DELTA, family_size=None,
                  method: str = HOLM) -> FamilyCard:
    """Family-wise verdicts for recipes with ``counts = [(k_1, N_1), ...]`` among ``family_size``
    identities (default: as many as given; more when some identities have no reruns here).

    >>> card = family_bounds([(0, 44), (1, 44), (0, 30)], family_size=10)
    >>> [m.verdict for m in card.members]
    ['release-supported', 'unsupported', 'insufficient-evidence']
    >>> [m.pointwise_verdict for m in card.members]
    ['release-supported', 'release-supported', 'release-supported']
    """
    _check_method(method)
    if isinstance(counts, (str, bytes)) or not isinstance(counts, Sequence):
        raise StatsInputError("counts must be a sequence of (failures k, reruns n) pairs.")
    pairs = []
    for item in counts:
        if not isinstance(item, Sequence) or isinstance(item, (str, bytes)) or len(item) != 2:
            raise StatsInputError(f"each entry of counts must be a (failures k, reruns n) pair, got {item!r}.")
        pairs.append(checks.check_counts(*item))
    e, d = checks.check_eps(eps), checks.check_delta(delta)
    m = len(pairs) if family_size is None else check_family_size(family_size)
    if m < len(pairs):
        raise StatsInputError(f"the family size M ({m}) cannot be smaller than the number of recipes "
                              f"given ({len(pairs)}).")
    if m < 1:
        raise StatsInputError("a family needs at least one recipe.")
    return family_bounds_at(pairs, e, d, m, method)


@dataclass(frozen=True)
class FamilySeat:
    """A member's place in its family's test: what Holm's step-down (or Bonferroni) decided from
    every member's counts, which the member's own reading (:func:`member_at`) needs. ``size``: M;
    ``level``: the risk it is tested at; ``rank``: its place in increasing p-value order;
    ``log_p``: the log of its p-value; ``certified``: whether the procedure certifies it."""

    size: int
    method: str
    level: float
    rank: int
    log_p: float
    certified: bool


def family_seats_at(pairs: Sequence[tuple[int, int]], e: float, d: float, m: int,
                    method: str = HOLM) -> tuple[FamilySeat, ...]:
    """The seat of each member with counts ``pairs`` (in their order) in a family of ``m``, for
    counts, ``eps``, ``delta``, ``m`` (at least the pairs given) and a method checked already."""
    fd = checks.scaled(d, m)
    log_ps = [_log_p(k, n, e) for k, n in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (log_ps[i], i))
    seats: dict[int, FamilySeat] = {}
    going = True
    for r, i in enumerate(order, start=1):
        k, n = pairs[i]
        lv = fd if method == BONFERRONI else checks.scaled(d, m - r + 1)
        ok = exact.certifies_at(k, n, e, lv, floors.floor_of(e, lv))
        if method == HOLM:
            ok = ok and going
            going = ok
        seats[i] = FamilySeat(size=m, method=method, level=lv, rank=r, log_p=log_ps[i], certified=ok)
    return tuple(seats[i] for i in range(len(pairs)))


def member_at(k: int, n: int, e: float, d: float, seat: FamilySeat) -> FamilyMember:
    """The reading of the member with counts ``(k, n)`` at its ``seat`` (:func:`family_seats_at` of
    the same counts), for inputs checked already."""
    return _member(k, n, e, d, seat.size, seat.method, seat.level, seat.rank, seat.log_p, seat.certified)


def family_bounds_at(pairs: Sequence[tuple[int, int]], e: float, d: float, m: int, method: str = HOLM) -> FamilyCard:
    """:func:`family_bounds` for counts, ``eps``, ``delta``, a family size ``m`` (at least the pairs
    given) and a method checked already."""
    fd = checks.scaled(d, m)
    floor = floors.budget_floor(e, fd)
    seats = family_seats_at(pairs, e, d, m, method)
    members = tuple(member_at(k, n, e, d, s) for (k, n), s in zip(pairs, seats, strict=True))
    return FamilyCard(eps=e, delta=d, family_size=m, method=method, family_delta=fd, sample_floor=floor,
                      pointwise_sample_floor=floors.floor_of(e, d), untested=m - len(pairs),
                      certified=sum(s.certified for s in seats), members=members)
