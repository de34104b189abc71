"""Curtailment: stop launching reruns once the card's verdict at the planned N is settled.

A sweep plans ``N`` reruns. After ``m`` of them (``k`` failures, unfinished reruns counted as
failures), ``r = N - m`` remain, so the failures at ``N`` will be some ``k' in [k, k + r]``. As a
function of ``k'`` the card's verdict at ``N`` is monotone: ``release-supported`` for
``k' <= a`` (the failure budget), then ``unsupported`` (``insufficient-evidence`` when
``N < N_min``), then ``strong-unsupported`` for ``k' >= b`` (``U`` and ``L`` both increase with
``k'``). Hence everything still possible is decided by the two ends of the range:

* the **verdict** at ``N`` is determined when ``verdict(k, N) == verdict(k + r, N)``;
* the **release decision** at ``N`` (ship iff ``release-supported``) is determined when
  ``k > a`` (no completion can be supported: the common, cheap stop for failing recipes) or
  ``k + r <= a`` (even if every remaining rerun fails, the recipe is supported).

``stop_on="decision"`` stops on the second, ``stop_on="verdict"`` on the first (it also waits to
tell ``unsupported`` from ``strong-unsupported``). Either way the decision equals the full sweep's,
so curtailment changes no error rate.

What a curtailed sweep can state at ``N`` without the remaining reruns (:func:`curtail_state`):
``U(k + r, N)`` is a valid ``1 - δ`` upper bound (it is at least the full sweep's ``U``, whatever
the remaining reruns do), and ``L(k, N)`` a valid lower bound. The curtailed verdict applies the
card's verdict rules to these two bounds: ``release-supported`` iff ``N >= N_min`` and
``U(k + r, N) <= ε``; ``strong-unsupported`` iff ``L(k, N) > ε``; otherwise ``unsupported`` (or
``insufficient-evidence``). It equals the full sweep's verdict whenever the verdict is determined,
and is the most favourable verdict still possible at ``N`` when only the decision is.

References: A. Wald (1947), *Sequential Analysis*, Wiley (curtailed inspection); C. Jennison and
B. W. Turnbull (2000), *Group Sequential Methods with Applications to Clinical Trials*, Chapman &
Hall/CRC, ch. 10 (stochastic curtailment; deterministic curtailment is its zero-risk case);
Clopper & Pearson (1934), Biometrika 26(4), 404-413.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from recipe_audit.stats.array_checks import (
    check_count_arrays,
    check_positive_int,
    make_rng,
)
from recipe_audit.stats.bounds import clopper_pearson_lower, clopper_pearson_upper, sample_floor
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.exact import INSUFFICIENT, STRONG_UNSUPPORTED, SUPPORTED, UNSUPPORTED, release_rule
from recipe_audit.stats.verdicts import verdict_array

__all__ = [
    "STOP_ON",
    "CurtailPlan",
    "CurtailSimulation",
    "CurtailState",
    "curtail_plan",
    "curtail_sequence",
    "curtail_state",
    "curtail_state_at",
    "curtailed_verdict_array",
    "curtail_determined",
    "simulate_curtailment",
]

#: What a curtailing sweep waits for: the release decision at N, or the exact verdict at N.
STOP_ON = ("decision", "verdict")


def _check_stop_on(stop_on: str) -> str:
    if stop_on not in STOP_ON:
        raise StatsInputError(f"stop_on must be 'decision' or 'verdict', got {stop_on!r}.")
    return stop_on


@dataclass(frozen=True)
class CurtailPlan:
    """The verdict at a planned ``n_planned`` as a function of the final failures ``k' = 0..N``.

    ``supported_max_k``: largest ``k'`` that is ``release-supported`` (-1: none, e.g. N < N_min);
    ``strong_min_k``: smallest ``k'`` that is ``strong-unsupported`` (``N + 1``: none).
    ``verdicts[k']`` is the card's verdict for ``k'`` failures in ``N`` reruns.
    """

    n_planned: int
    eps: float
    delta: float
    sample_floor: int
    supported_max_k: int
    strong_min_k: int
    verdicts: tuple[str, ...]

    def to_dict(self) -> dict:
        """Plain-JSON representation (without the verdict table)."""
        return {"n_planned": self.n_planned, "eps": self.eps, "delta": self.delta,
                "sample_floor": self.sample_floor, "supported_max_k": self.supported_max_k,
                "strong_min_k": self.strong_min_k}


@lru_cache(maxsize=256)
def _plan(n: int, eps: float, delta: float) -> CurtailPlan:
    v = verdict_array(np.arange(n + 1), n, eps, delta)
    sup = np.flatnonzero(v == SUPPORTED)
    strong = np.flatnonzero(v == STRONG_UNSUPPORTED)
    return CurtailPlan(n_planned=n, eps=eps, delta=delta, sample_floor=sample_floor(eps, delta),
                       supported_max_k=int(sup.max()) if sup.size else -1,
                       strong_min_k=int(strong.min()) if strong.size else n + 1,
                       verdicts=tuple(str(x) for x in v))


def curtail_plan(n_planned: int, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA) -> CurtailPlan:
    """The thresholds of the verdict at a planned ``N`` (cached).

    >>> p = curtail_plan(59)
    >>> p.supported_max_k, p.strong_min_k
    (2, 10)
    """
    n = check_positive_int("planned reruns N", n_planned)
    return _plan(n, check_eps(eps), check_delta(delta))


def _counts(k, m, n_planned):
    """Validate failures ``k`` among ``m >= 1`` reruns done of ``n_planned``; int64 arrays."""
    n = check_positive_int("planned reruns N", n_planned)
    k_arr, m_arr = check_count_arrays(k, m)
    if np.any(m_arr > n):
        raise StatsInputError(f"reruns done m ({int(np.max(m_arr))}) cannot exceed the planned N ({n}).")
    k_arr, m_arr = np.broadcast_arrays(k_arr, m_arr)
    return k_arr, m_arr, n


def curtail_determined(k, m, n_planned, eps=DEFAULT_EPS, delta=DEFAULT_DELTA, stop_on: str = "decision"):
    """Whether, after ``m`` of ``n_planned`` reruns with ``k`` failures, the verdict at ``N``
    (``stop_on="verdict"``) or the release decision at ``N`` (``"decision"``) no longer depends on
    the remaining reruns. Vectorised over ``k`` and ``m``; a bool for scalar input.

    >>> curtail_determined(3, 10, 59), curtail_determined(2, 10, 59), curtail_determined(3, 10, 59, stop_on="verdict")
    (True, False, False)
    """
    _check_stop_on(stop_on)
    k_arr, m_arr, n = _counts(k, m, n_planned)
    plan = curtail_plan(n, eps, delta)
    hi = k_arr + (n - m_arr)
    if stop_on == "verdict":
        v = np.asarray(plan.verdicts)
        out = v[k_arr] == v[hi]
    else:
        a = plan.supported_max_k
        out = (k_arr > a) | (hi <= a)
    out = np.asarray(out, dtype=bool)
    return bool(out) if out.ndim == 0 else out


def curtailed_verdict_array(k, m, n_planned, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> np.ndarray:
    """The verdict at ``N`` a curtailed sweep states: the verdict rules applied to the valid bounds
    ``U(k + r, N)`` and ``L(k, N)`` (see the module docstring). Equals ``verdict(k, N)`` when
    ``m == N``. Vectorised; returns a string array."""
    k_arr, m_arr, n = _counts(k, m, n_planned)
    e = check_eps(eps)
    d = check_delta(delta)
    upper = np.asarray(clopper_pearson_upper(k_arr + (n - m_arr), n, d))
    lower = np.asarray(clopper_pearson_lower(k_arr, n, d))
    n_min = sample_floor(e, d)
    out = np.full(k_arr.shape, UNSUPPORTED if n >= n_min else INSUFFICIENT, dtype="<U21")
    out[release_rule(k_arr + (n - m_arr), n, upper, e, n_min)] = SUPPORTED
    out[lower > e] = STRONG_UNSUPPORTED
    return out


@dataclass(frozen=True)
class CurtailState:
    """Where a curtailing sweep stands after ``m`` of ``n_planned`` reruns with ``k`` failures.

    ``k_range_at_n``: the failures still possible at ``N``; ``possible_verdicts``: the verdicts
    still possible at ``N``, in order of increasing failures; ``verdict_determined`` /
    ``decision_determined``: whether they no longer depend on the remaining reruns; ``stop``: the
    one of the two ``stop_on`` asks for; ``verdict``, ``upper``, ``lower``: what the sweep can
    state now (:func:`curtailed_verdict_array`, ``U(k + r, N)``, ``L(k, N)``);
    ``upper_if_rest_pass``: ``U(k, N)``, the full sweep's bound if every remaining rerun passed
    (:func:`recipe_audit.cards.curtail.curtail_reason` says it in one sentence).
    """

    k: int
    m: int
    n_planned: int
    remaining: int
    eps: float
    delta: float
    stop_on: str
    k_range_at_n: tuple[int, int]
    possible_verdicts: tuple[str, ...]
    verdict_determined: bool
    decision_determined: bool
    stop: bool
    verdict: str
    upper: float
    lower: float
    upper_if_rest_pass: float
    supported_max_k: int

    @property
    def stopped_early(self) -> bool:
        """True when the sweep stops with reruns left to launch."""
        return self.stop and self.remaining > 0

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return {"k": self.k, "m": self.m, "n_planned": self.n_planned, "remaining": self.remaining,
                "eps": self.eps, "delta": self.delta, "stop_on": self.stop_on,
                "k_range_at_n": list(self.k_range_at_n), "possible_verdicts": list(self.possible_verdicts),
                "verdict_determined": self.verdict_determined,
                "decision_determined": self.decision_determined, "stop": self.stop,
                "stopped_early": self.stopped_early, "verdict": self.verdict, "upper": self.upper,
                "lower": self.lower, "upper_if_rest_pass": self.upper_if_rest_pass,
                "supported_max_k": self.supported_max_k}


def curtail_state(k: int, m: int, n_planned: int, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA,
                  stop_on: str = "decision") -> CurtailState:
    """Where a sweep stands after ``m`` of ``n_planned`` reruns with ``k`` failures (scalars).

    >>> s = curtail_state(3, 10, 59)
    >>> s.stop, s.verdict, s.possible_verdicts
    (True, 'unsupported', ('unsupported', 'strong-unsupported'))
    >>> curtail_state(0, 57, 59).verdict
    'release-supported'

    References: Clopper & Pearson (1934); Jennison & Turnbull (2000), ch. 10.
    """
    _check_stop_on(stop_on)
    k_arr, m_arr, n = _counts(k, m, n_planned)
    if k_arr.ndim:
        raise StatsInputError("curtail_state takes a single k and m; use curtail_determined() for arrays.")
    return curtail_state_at(int(k_arr), int(m_arr), n, check_eps(eps), check_delta(delta), stop_on)


def curtail_state_at(k_i: int, m_i: int, n: int, e: float, d: float, stop_on: str) -> CurtailState:
    """:func:`curtail_state` for counts (``0 <= k <= m <= n``), ``eps``, ``delta`` and ``stop_on``
    checked already."""
    r = n - m_i
    plan = curtail_plan(n, e, d)
    possible = tuple(dict.fromkeys(plan.verdicts[k_i:k_i + r + 1]))
    v_det = len(possible) == 1
    d_det = bool(curtail_determined(k_i, m_i, n, e, d, "decision"))
    stop = v_det if stop_on == "verdict" else d_det
    return CurtailState(
        k=k_i, m=m_i, n_planned=n, remaining=r, eps=e, delta=d, stop_on=stop_on,
        k_range_at_n=(k_i, k_i + r), possible_verdicts=possible, verdict_determined=v_det,
        decision_determined=d_det, stop=stop, verdict=str(curtailed_verdict_array(k_i, m_i, n, e, d)),
        upper=float(clopper_pearson_upper(k_i + r, n, d)), lower=float(clopper_pearson_lower(k_i, n, d)),
        upper_if_rest_pass=float(clopper_pearson_upper(k_i, n, d)), supported_max_k=plan.supported_max_k,
    )


def _checkpoints(n: int, batch_size: int) -> np.ndarray:
    return np.unique(np.r_[np.arange(batch_size, n, batch_size), n])


def curtail_sequence(failures, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA, batch_size: int = 1,
                     stop_on: str = "decision") -> CurtailState:
    """Replay a curtailing sweep over the outcomes of all ``N = len(failures)`` planned reruns
    (True = failed), launched ``batch_size`` at a time in order; returns the state where it stops.

    >>> curtail_sequence([True] * 5 + [False] * 54, batch_size=4).m
    4
    """
    f = np.asarray(failures)
    if f.ndim != 1 or f.size == 0 or f.dtype != np.bool_:
        raise StatsInputError("failures must be a non-empty 1-D boolean array (True = the rerun failed).")
    b = check_positive_int("batch_size", batch_size)
    _check_stop_on(stop_on)
    n = int(f.size)
    checks = _checkpoints(n, b)
    k_at = np.cumsum(f)[checks - 1]
    first = int(np.argmax(curtail_determined(k_at, checks, n, eps, delta, stop_on)))  # m = N always settles
    return curtail_state(int(k_at[first]), int(checks[first]), n, eps, delta, stop_on)


@dataclass(frozen=True)
class CurtailSimulation:
    """Reruns used by a curtailing sweep, simulated for one true failure probability.

    ``mean_used`` (and ``quantiles_used`` at 10/50/90 %) of ``n_planned``; ``fraction_of_planned``
    = ``mean_used / n_planned``; ``stopped_early``: share of sweeps that stopped before ``N``;
    ``decision_agrees`` / ``verdict_agrees``: share whose curtailed decision / verdict equals the
    full sweep's on the same outcomes (the decision always does; the verdict does whenever
    ``stop_on="verdict"``); ``full_ship_rate``: share the full sweep ships.
    """

    failure_prob: float
    n_planned: int
    batch_size: int
    stop_on: str
    eps: float
    delta: float
    n_sims: int
    mean_used: float
    quantiles_used: tuple[float, float, float]
    fraction_of_planned: float
    stopped_early: float
    decision_agrees: float
    verdict_agrees: float
    full_ship_rate: float
    seed: int | None
    rng: str

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        out = dict(self.__dict__)
        out["quantiles_used"] = list(self.quantiles_used)
        return out


def simulate_curtailment(failure_prob: float, n_planned: int = 59, *, eps: float = DEFAULT_EPS,
                         delta: float = DEFAULT_DELTA, batch_size: int = 4, stop_on: str = "decision",
                         n_sims: int = 20000, rng=None) -> CurtailSimulation:
    """Simulate ``n_sims`` sweeps of ``n_planned`` reruns failing independently with probability
    ``failure_prob``, curtailed after every batch of ``batch_size``; vectorised.

    Randomness: one ``rng.random((n_sims, n_planned)) < failure_prob`` draw (rerun ``j`` of sweep
    ``i`` fails when its uniform is below the failure probability). ``rng``: Generator, int seed
    or None (``default_rng(0)``).
    """
    p = float(failure_prob)
    if not 0.0 <= p <= 1.0:
        raise StatsInputError(f"the failure probability must lie in [0, 1], got {failure_prob!r}.")
    n = check_positive_int("planned reruns N", n_planned)
    b = check_positive_int("batch_size", batch_size)
    sims = check_positive_int("n_sims", n_sims)
    _check_stop_on(stop_on)
    e = check_eps(eps)
    d = check_delta(delta)
    gen, seed, info = make_rng(rng)
    fails = gen.random((sims, n)) < p
    cum = np.cumsum(fails, axis=1)
    checks = _checkpoints(n, b)
    k_at = cum[:, checks - 1]  # (sims, checkpoints)
    det = curtail_determined(k_at, np.broadcast_to(checks, k_at.shape), n, e, d, stop_on)
    first = np.argmax(det, axis=1)  # the last checkpoint (m = N) is always determined
    used = checks[first]
    k_stop = k_at[np.arange(sims), first]
    k_full = cum[:, -1]
    full_v = verdict_array(k_full, n, e, d)
    cur_v = curtailed_verdict_array(k_stop, used, n, e, d)
    q = np.quantile(used, [0.1, 0.5, 0.9])
    return CurtailSimulation(
        failure_prob=p, n_planned=n, batch_size=b, stop_on=stop_on, eps=e, delta=d, n_sims=sims,
        mean_used=float(used.mean()), quantiles_used=(float(q[0]), float(q[1]), float(q[2])),
        fraction_of_planned=float(used.mean() / n), stopped_early=float(np.mean(used < n)),
        decision_agrees=float(np.mean((full_v == SUPPORTED) == (cur_v == SUPPORTED))),
        verdict_agrees=float(np.mean(full_v == cur_v)), full_ship_rate=float(np.mean(full_v == SUPPORTED)),
        seed=seed, rng=info,
    )
