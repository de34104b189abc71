"""Exact where a user can type: ties read as the decimals typed, counts above 2**31 (where SciPy's
``bdtr``/``bdtrc`` return NaN), and a printed bound that never reads on the other side of ε than
its verdict. Checked against exact rational sums (``fractions``) and against a second computation
of the same tail (Loader's saddle-point sum against SciPy's incomplete beta)."""

from __future__ import annotations

import json
import math
import re
import time
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from helpers import procs

from recipe_audit.cli import main
from recipe_audit.stats import anytime, checks, exact, family, tails
from recipe_audit.stats.anytime import anytime_bound
from recipe_audit.stats.checks import Typed
from recipe_audit.stats.exact import tail_bound, verdict
from recipe_audit.stats.family import family_bounds, family_tail_bound
from recipe_audit.stats.floors import sample_floor


def _decimal(x: Fraction) -> str:
    """A fraction in (0, 1) whose denominator is 2**a 5**b, written out exactly."""
    den, twos, fives = x.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    assert den == 1 and 0 < x < 1, x
    digits = max(twos, fives)
    return "0." + str(x.numerator * 10**digits // x.denominator).rjust(digits, "0")


def _brute_floor(eps: Fraction, delta: Fraction) -> int:
    n, p = 1, 1 - eps
    while p > delta:
        n, p = n + 1, p * (1 - eps)
    return n


def _cdf(k: int, n: int, p: Fraction) -> Fraction:
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))


@pytest.mark.parametrize("eps", ["0.1", "0.2", "0.3", "0.05", "0.25"])
def test_floor_at_ties_typed_as_decimals(eps):
    """δ = (1 - ε)**n typed with every decimal: the floor is n, certified at n, not at n - 1."""
    e = Fraction(eps)
    for n in range(1, 40):
        d = (1 - e) ** n
        if d >= Fraction(1, 2):
            continue
        text = _decimal(d)
        assert Fraction(text) == d and _brute_floor(e, d) == n
        assert sample_floor(eps, text) == n, (eps, text)
        assert tail_bound(0, n, eps, text).verdict == "release-supported"
        if n > 1:
            assert tail_bound(0, n - 1, eps, text).verdict == "insufficient-evidence"
        # one unit more in the last place typed: still a tie broken the same way by brute force
        above = text + "1"
        assert sample_floor(eps, above) == _brute_floor(e, Fraction(above))


@pytest.mark.parametrize("n", range(7, 16))  # 0.9**7 < 0.5
def test_floats_with_up_to_15_digits_read_as_typed(n):
    """A float in Python (or YAML) keeps the decimal typed when it has at most 15 digits."""
    d = Fraction(9, 10) ** n
    text = _decimal(d)
    assert sample_floor(0.1, float(text)) == n == sample_floor(Fraction(1, 10), d)
    assert checks.rational(float(text)) == d


def test_the_issue_example_on_the_command_line(capsys):
    assert main(["bound", "-k", "0", "-n", "11", "--eps", "0.1", "--delta", "0.31381059609", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["sample_floor"], out["verdict"]) == (11, "release-supported")
    assert out["upper_bound"] <= 0.1


def test_typed_keeps_more_digits_than_a_float():
    """0.9**16 has 16 decimals: as text it is exact (the float alone would not say which)."""
    d = Fraction(9, 10) ** 16
    assert sample_floor("0.1", _decimal(d)) == 16
    assert sample_floor("0.1", _decimal(d) + "0000000001") == 16
    assert sample_floor("0.1", _decimal(d - Fraction(1, 10**30))) == 17
    assert Typed(_decimal(d)).exact == d


@pytest.mark.parametrize("k, n, eps", [(1, 10, "0.5"), (3, 12, "0.5"), (1, 20, "0.1"), (2, 25, "0.2"),
                                       (1, 60, "0.05")])
def test_exact_ties_with_failures(k, n, eps):
    """δ = P(Binomial(n, ε) <= k) exactly: U = ε, so the verdict certifies; a hair less does not."""
    e = Fraction(eps)
    tie = _cdf(k, n, e)
    assert tie < Fraction(1, 2)
    text = _decimal(tie)
    floor = sample_floor(eps, text)
    assert n >= floor
    assert verdict(k, n, eps, text) == "release-supported"
    assert tail_bound(k, n, eps, text).upper <= float(e)
    below = _decimal(tie - Fraction(1, 10 ** (len(text) + 2)))
    assert verdict(k, n, eps, below) == "unsupported"
    assert exact.more_clean_reruns_needed(k, n, eps, below) == 1 or verdict(k, n + 1, eps, below) != "release-supported"


# ---------------------------------------------------------------------------------------------
# Bounded time on the exact tie path
# ---------------------------------------------------------------------------------------------


def _decimal_cdf(k: int, n: int, eps: str) -> Decimal:
    """P(Binomial(n, eps) <= k) to about 60 digits: the terms by their ratio, in decimal arithmetic
    (a second computation, independent of the integer sum the verdict takes)."""
    with localcontext() as ctx:
        ctx.prec = 70
        e = Decimal(eps)
        term = (1 - e) ** n
        total = term
        for j in range(k):
            term = term * (n - j) / (j + 1) * e / (1 - e)
            total += term
        return +total


@pytest.mark.parametrize("k, n, eps, delta", [
    (3000, 79000, "0.04", "0.001767456930998235"),  # the issue's: 168 s
    (3700, 7407, "0.5123456789012345", None),  # at the size limit: a 54-bit denominator, 7,407 reruns
    (500, 57142, "0.01", None),
    (4000, 39000, "0.123", None),  # MAX_TERMS failures
])
def test_the_exact_tie_path_answers_within_a_second(k, n, eps, delta):
    """A δ within rounding of the tail sends the verdict to the exact sum; it answers within a
    second (on a quiet machine; scaled for the load here) and agrees with a 70-digit decimal sum."""
    tail = _decimal_cdf(k, n, eps)
    delta = delta or repr(float(tail))  # the float nearest the tail: within rounding, not equal
    assert abs(tail - Decimal(delta)) > tail * Decimal(10) ** -40  # so 70 digits decide it
    exact._exact_sum_at_most.cache_clear()
    calls = exact._exact_sum_at_most.cache_info().misses
    t0 = time.perf_counter()
    tb = tail_bound(k, n, eps, delta)
    elapsed = time.perf_counter() - t0
    assert exact._exact_sum_at_most.cache_info().misses > calls  # the exact path was taken
    assert elapsed < procs.timeout(1.0), elapsed
    certified = tail <= Decimal(delta)
    assert (tb.verdict == "release-supported") == (certified and n >= tb.sample_floor)
    assert (tb.more_clean_reruns_needed == 0) == (tb.verdict == "release-supported")


def test_a_tie_beyond_the_exact_sum_is_refused_at_once():
    """One rerun past the size the exact sum takes (5 bits a rerun at eps = 0.04): one sentence, at once."""
    k, n = 3000, exact._EXACT_TIE_BITS // 5 + 1
    delta = repr(float(_decimal_cdf(k, n, "0.04")))
    t0 = time.perf_counter()
    with pytest.raises(exact.StatsInputError, match="too close to decide in floating point and too large to sum"):
        tail_bound(k, n, "0.04", delta)
    assert time.perf_counter() - t0 < procs.timeout(1.0)


# ---------------------------------------------------------------------------------------------
# Above 2**31: no NaN reaches a verdict
# ---------------------------------------------------------------------------------------------


def test_anytime_above_2_31_the_issue_example(capsys):
    ab = anytime_bound(999850000, 10**10, 0.1, 0.1)
    assert ab.verdict == "release-supported" and math.isfinite(ab.upper)
    assert 0.09999 < ab.upper <= 0.1 and ab.upper == pytest.approx(0.0999996, abs=5e-7)
    assert main(["bound", "-k", "999850000", "-n", "10000000000", "--anytime", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "release-supported" and out["upper_bound"] == ab.upper


@pytest.mark.parametrize("n", [3 * 10**9, 10**11, 10**13, 10**15])
@pytest.mark.parametrize("rate", [0.09, 0.0999, 0.09999, 0.101])
def test_no_nan_above_2_31(n, rate):
    """Anytime and family-wise readings over a range of counts above 2**31: every bound finite,
    every verdict agreeing with its own bounds."""
    k = int(n * rate)
    ab = anytime_bound(k, n, 0.1, 0.1)
    assert math.isfinite(ab.upper) and math.isfinite(ab.lower)
    assert ab.lower <= k / n <= ab.upper
    assert (ab.verdict == "release-supported") == (ab.upper <= 0.1)
    assert (ab.verdict == "strong-unsupported") == (ab.lower > 0.1)
    card = family_bounds([(k, n), (k + 1, n)], 0.1, 0.1, family_size=5)
    for m in card.members:
        assert math.isfinite(m.p_value) and math.isfinite(m.upper) and math.isfinite(m.lower)
        assert (m.verdict == "release-supported") == (m.upper <= 0.1)
    fb = family_tail_bound(k, n, 0.1, 0.1, 7)
    assert (fb.verdict == "release-supported") == (fb.upper <= 0.1)


@pytest.mark.parametrize("p", [0.1, 0.10001, 0.1001])
def test_large_n_tails_two_ways(monkeypatch, p):
    """Above 2**31 the mixture's tails come from SciPy's incomplete beta; Loader's saddle-point sum,
    allowed enough terms, is a second computation of the same numbers."""
    k, n = 299_990_000, 3 * 10**9
    via_beta_up = anytime._log_m_up(k, n, p)
    via_beta_lo = anytime._log_m_lo(k, n, p - 2e-5) if k > n * (p - 2e-5) else None
    p_beta = family._log_p(k, n, p)
    monkeypatch.setattr(tails, "MAX_TERMS", 10**7)
    assert anytime._log_m_up(k, n, p) == pytest.approx(via_beta_up, rel=1e-9, abs=1e-9)
    if via_beta_lo is not None:
        assert anytime._log_m_lo(k, n, p - 2e-5) == pytest.approx(via_beta_lo, rel=1e-9, abs=1e-9)
    assert family._log_p(k, n, p) == pytest.approx(p_beta, rel=1e-9, abs=1e-9)


def test_a_nan_is_refused_not_read():
    with pytest.raises(exact.StatsInputError, match="could not be computed exactly"):
        tails.finite(float("nan"), "The upper bound")


# ---------------------------------------------------------------------------------------------
# A printed bound never contradicts the printed verdict
# ---------------------------------------------------------------------------------------------

_CASES = [("0", "2", "0.3", "0.49"), ("0", "11", "0.1", "0.31381059609"), ("0", "22", "0.1", "0.1"),
          ("0", "21", "0.1", "0.1"), ("6", "59", "0.1", "0.1"), ("1", "38", "0.1", "0.1"),
          ("2", "38", "0.1", "0.1"), ("1", "10", "0.5", "0.0107421875"), ("0", "4", "0.2", "0.4096"),
          ("999850000", "10000000000", "0.1", "0.1"), ("12", "30", "0.1", "0.1")]


@pytest.mark.parametrize("k, n, eps, delta", _CASES)
@pytest.mark.parametrize("extra", [[], ["--family-size", "3"], ["--anytime"]])
def test_printed_bounds_agree_with_the_verdicts(capsys, k, n, eps, delta, extra):
    assert main(["bound", "-k", k, "-n", n, "--eps", eps, "--delta", delta, *extra]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()[1:]
    uppers = [m for line in lines for m in re.findall(r"\bU(?:_n)? = ([^,]+),", line)]
    verdicts = re.findall(r"verdict: ([a-z-]+)", text)
    assert len(uppers) == len(verdicts) >= 1
    for u, v in zip(uppers, verdicts, strict=True):
        if "tie; certified" in u:
            assert v == "release-supported"
            continue
        assert (float(u) <= float(eps)) == (v == "release-supported"), (u, v)
    assert main(["bound", "-k", k, "-n", n, "--eps", eps, "--delta", delta, *extra, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for reading in (out, out.get("pointwise") or out):
        assert (reading["upper_bound"] <= float(eps)) == (reading["verdict"] == "release-supported")


@pytest.mark.parametrize("k, n, eps", [(1, 10, "0.5"), (2, 25, "0.2"), (1, 20, "0.1")])
def test_the_array_verdicts_decide_ties_as_the_scalar_one(k, n, eps):
    """The card's array path (verdict_array) and the scalar verdict agree at an exact tie."""
    from recipe_audit.stats.verdicts import verdict_array

    text = _decimal(_cdf(k, n, Fraction(eps)))
    for d in (text, float(text)) if len(text) <= 17 else (text,):
        got = verdict_array([k, k, 0], [n, n + 1, n], Typed(eps), Typed(d) if isinstance(d, str) else d)
        assert got.tolist() == [verdict(k, n, eps, d), verdict(k, n + 1, eps, d), verdict(0, n, eps, d)]
        assert got[0] == "release-supported"


def test_a_tie_too_large_to_sum_exactly_is_refused_not_guessed(monkeypatch, capsys):
    """Where the exact rational sum would be too large to take, a tail within rounding of δ is
    refused in one sentence, not decided in floating point (shown by lowering the size limit on
    a tie small enough to check: with the limit, it certifies exactly)."""
    text = _decimal(_cdf(1, 20, Fraction("0.1")))
    assert verdict(1, 20, "0.1", text) == "release-supported"
    monkeypatch.setattr(exact, "_EXACT_TIE_BITS", 1)
    with pytest.raises(exact.StatsInputError, match=r"too close to decide in floating point"):
        verdict(1, 20, "0.1", text)
    far = _decimal(_cdf(1, 20, Fraction("0.1")) / 2)  # far from the tie: decided as before
    assert verdict(1, 20, "0.1", far) == "unsupported"
    assert main(["bound", "-k", "1", "-n", "20", "--eps", "0.1", "--delta", text]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no verdict is given" in err and "Traceback" not in err
