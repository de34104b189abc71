"""The anytime card: the confidence sequence against an independent SciPy implementation, its
coverage at every n by brute force (every outcome sequence) and by exact recursion, its floor
against a linear search, the sequential replay and bad input."""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

import recipe_audit.stats.anytime as anytime_mod
from recipe_audit.stats import StatsInputError, clopper_pearson_upper, curtail_plan
from recipe_audit.stats.anytime import (
    anytime_bound,
    anytime_lower,
    anytime_sample_floor,
    anytime_sequence,
    anytime_thresholds,
    anytime_upper,
    anytime_verdict,
    check_max_reruns,
    stop_probabilities,
)

NS = [1, 2, 3, 5, 10, 22, 34, 59, 100, 200]


def _log_m_up(k, n, p):  # the mixture from the incomplete beta function (SciPy), not binomial sums
    return (special.betaln(k + 1, n - k + 1) + np.log(special.betainc(k + 1, n - k + 1, p)) - np.log(p)
            - k * np.log(p) - (n - k) * np.log1p(-p))


def _log_m_lo(k, n, p):
    return (special.betaln(k + 1, n - k + 1) + np.log(special.betaincc(k + 1, n - k + 1, p)) - np.log1p(-p)
            - k * np.log(p) - (n - k) * np.log1p(-p))


def test_doctests():
    assert doctest.testmod(anytime_mod, verbose=False).failed == 0


@pytest.mark.parametrize("delta", [0.1, 0.05])
def test_bounds_match_scipy_root_finding(delta):
    t = -math.log(delta)
    for n in NS:
        for k in range(n + 1):
            u, lo = anytime_upper(k, n, delta), anytime_lower(k, n, delta)
            if k == n:
                assert u == 1.0
            else:
                ref = optimize.brentq(lambda p, k=k, n=n: _log_m_up(k, n, p) - t, max(k / n, 1e-300), 1 - 1e-15,
                                      xtol=1e-17, rtol=1e-13)
                assert u == pytest.approx(ref, rel=1e-9), (k, n)
            if k == 0:
                assert lo == 0.0
            else:
                top = min(k / n, 1 - 1e-15)
                if _log_m_lo(k, n, 1e-300) < t:
                    assert lo == 0.0
                else:
                    ref = optimize.brentq(lambda p, k=k, n=n: _log_m_lo(k, n, p) - t, 1e-300, top, xtol=1e-300, rtol=1e-13)
                    assert lo == pytest.approx(ref, rel=1e-9), (k, n)


def test_mixture_by_numerical_integration():
    """The closed form of the mixture equals the integral it stands for (quad), at a few points."""
    for k, n, p in [(0, 34, 0.1), (3, 59, 0.17), (10, 20, 0.7), (5, 40, 0.3)]:
        num, _ = integrate.quad(lambda th, k=k, n=n: th**k * (1 - th) ** (n - k), 0, p, epsabs=0, epsrel=1e-12)
        ref = num / p / (p**k * (1 - p) ** (n - k))
        assert math.exp(anytime_mod._log_m_up(k, n, p)) == pytest.approx(ref, rel=1e-9)


def test_mixture_is_monotone_on_each_side():
    """The bisection needs M+ increasing above k/n and M- decreasing below it."""
    for n in NS:
        for k in range(n + 1):
            if k < n:
                ps = np.linspace(k / n, 1, 802)[1:-1]
                assert np.all(np.diff(_log_m_up(k, n, ps)) >= -1e-11), (k, n)
            if k > 0:
                ps = np.linspace(0, k / n, 802)[1:-1]
                assert np.all(np.diff(_log_m_lo(k, n, ps)) <= 1e-11), (k, n)


def test_wider_than_the_fixed_n_bound():
    for n in NS:
        ks = np.arange(n + 1)
        u = np.array([anytime_upper(k, n) for k in ks])
        lo = np.array([anytime_lower(k, n) for k in ks])
        assert np.all(u >= np.asarray(clopper_pearson_upper(ks, n, 0.1)))
        assert np.all(lo <= np.asarray(stats.beta.ppf(0.1, np.maximum(ks, 1), n - ks + 1)) + 1e-12 * (ks > 0))
        assert np.all(np.diff(u) > 0) and np.all(np.diff(lo[1:]) > 0)  # both grow with k


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.2, 0.3, 0.5, 0.7])
def test_coverage_at_every_n_brute_force(beta):
    """Every outcome sequence of 14 reruns: P(U_n < beta or L_n > beta at some n <= 14) <= 2 delta,
    each side <= delta."""
    n_max, delta = 14, 0.1
    up = {(k, n): anytime_upper(k, n, delta) for n in range(1, n_max + 1) for k in range(n + 1)}
    lo = {(k, n): anytime_lower(k, n, delta) for n in range(1, n_max + 1) for k in range(n + 1)}
    miss_up = miss_lo = 0.0
    for seq in itertools.product((0, 1), repeat=n_max):
        k = np.cumsum(seq)
        prob = beta ** int(k[-1]) * (1 - beta) ** (n_max - int(k[-1]))
        if any(up[int(k[i]), i + 1] < beta for i in range(n_max)):
            miss_up += prob
        if any(lo[int(k[i]), i + 1] > beta for i in range(n_max)):
            miss_lo += prob
    assert miss_up <= delta and miss_lo <= delta


@pytest.mark.parametrize("beta", [0.1, 0.101, 0.12, 0.2])
def test_coverage_of_the_stopping_rule_exact(beta):
    """Looking after every rerun up to 300: P(ever release-supported | beta >= eps) <= delta, exactly,
    while the fixed-N card read after every rerun ships far more often."""
    looks = list(range(1, 301))
    th = [anytime_thresholds(n) for n in looks]
    cs = stop_probabilities(beta, looks, [a for a, _ in th], [looks[-1] + 1] * len(looks))
    assert cs["p_supported"] <= 0.1
    naive = stop_probabilities(beta, looks, [curtail_plan(n).supported_max_k for n in looks],
                               [looks[-1] + 1] * len(looks))
    if beta <= 0.101:
        assert naive["p_supported"] > 0.2


def test_verdict_agrees_with_the_bounds_it_states():
    """The verdict is decided on the mixture at eps; it must agree with the U_n and L_n printed."""
    for eps in (0.1, 0.2):
        floor = anytime_sample_floor(eps, 0.1)
        for n in [3, 20, 34, 59, 120]:
            for k in range(n + 1):
                b = anytime_bound(k, n, eps, 0.1)
                strong = b.lower > eps
                supported = not strong and n >= floor and b.upper <= eps
                assert (b.verdict == "strong-unsupported") == strong
                assert (b.verdict == "release-supported") == supported, (k, n, eps)


def test_stop_probabilities_against_simulation():
    looks = list(range(5, 201, 5))
    th = [anytime_thresholds(n) for n in looks]
    a, s = [x for x, _ in th], [y for _, y in th]
    exact_r = stop_probabilities(0.05, looks, a, s)
    rng = np.random.default_rng(3)
    k = np.cumsum(rng.random((40000, 200)) < 0.05, axis=1)[:, np.asarray(looks) - 1]
    ship, bad = k <= np.asarray(a), k >= np.asarray(s)
    stop = ship | bad
    first = np.where(stop.any(axis=1), np.argmax(stop, axis=1), len(looks) - 1)
    used = np.asarray(looks)[first]
    shipped = ship[np.arange(k.shape[0]), first]
    se = math.sqrt(0.25 / k.shape[0])
    assert shipped.mean() == pytest.approx(exact_r["p_supported"], abs=4 * se)
    assert used.mean() == pytest.approx(exact_r["mean_reruns"], rel=0.02)
    total = exact_r["p_supported"] + exact_r["p_strong"] + exact_r["p_neither"]
    assert total == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("eps,delta", [(0.1, 0.1), (0.05, 0.05), (0.2, 0.1), (0.1, 0.4), (0.3, 0.45),
                                       (0.01, 0.1), (0.5, 0.2)])
def test_floor_against_linear_search(eps, delta):
    floor = anytime_sample_floor(eps, delta)
    clean = [n for n in range(1, floor + 200) if anytime_upper(0, n, delta) <= eps]
    assert clean[0] == floor
    assert clean == list(range(floor, floor + 200))  # and every n beyond it certifies
    assert anytime_bound(0, floor, eps, delta).verdict == "release-supported"
    assert anytime_bound(0, floor - 1, eps, delta).verdict == "insufficient-evidence"


def test_floor_numbers():
    assert anytime_sample_floor(0.1, 0.1) == 34
    assert anytime_sample_floor(1e-6, 0.1) > anytime_sample_floor(1e-5, 0.1) > 10**5


def test_verdict_and_thresholds_agree():
    for n in [5, 20, 34, 59, 120]:
        a, s = anytime_thresholds(n)
        for k in range(n + 1):
            v = anytime_verdict(k, n)
            assert (v == "release-supported") == (k <= a)
            assert (v == "strong-unsupported") == (k >= s)


def test_sequence_replay():
    outcomes = [False] * 10 + [True] * 9 + [False] * 30
    s = anytime_sequence(outcomes, batch_size=5, max_reruns=100)
    assert s.stop and s.stop_reason == "strong-unsupported"
    assert [x.n for x in s.looks] == [5, 10, 15, 20]
    assert s.card.n == 20 and s.card.k == 9
    s = anytime_sequence([False] * 3 + [True] + [False] * 16, batch_size=5, max_reruns=20)
    assert s.stop_reason == "maximum" and s.looks[-1].n == 20
    s = anytime_sequence([False] * 12, batch_size=5, max_reruns=200)
    assert not s.stop and s.stop_reason is None and [x.n for x in s.looks] == [5, 10, 12]
    assert s.to_dict()["looks"][0] == {"n": 5, "k": 0, "upper": s.looks[0].upper, "lower": 0.0,
                                       "verdict": "insufficient-evidence"}


@pytest.mark.parametrize("call,fragment", [
    (lambda: check_max_reruns(None, 5), "needs a maximum number of reruns"),
    (lambda: check_max_reruns(0, 5), "the maximum number of reruns must be at least 1"),
    (lambda: check_max_reruns(100, 0), "the batch size must be at least 1"),
    (lambda: check_max_reruns(100, 2.5), "the batch size must be a whole number"),
    (lambda: anytime_sequence([False] * 5, max_reruns=3), "more than its maximum of 3"),
    (lambda: anytime_sequence([], max_reruns=3), "at least one rerun"),
    (lambda: anytime_sequence([0, 1], max_reruns=3), "must be booleans"),
    (lambda: anytime_upper(3, 2), "cannot exceed reruns n"),
    (lambda: anytime_bound(0, 5, eps=0.1, delta=0.5), "strictly between 0 and 0.5"),
    (lambda: anytime_bound(0, 5, eps=1e-300), "too small"),
    (lambda: stop_probabilities(0.1, [5, 3], [0, 0], [6, 6]), "increasing"),
    (lambda: stop_probabilities(1.5, [5], [0], [6]), "must lie in [0, 1]"),
])
def test_bad_input_one_sentence(call, fragment):
    with pytest.raises(StatsInputError) as info:
        call()
    msg = str(info.value)
    assert fragment in msg and msg.endswith(".") and "\n" not in msg
