"""Verdicts and their precedence (SPEC 1.5)."""

from __future__ import annotations

import numpy as np
import pytest

from recipe_audit.stats import (
    INSUFFICIENT,
    REFUSED_SHIFT,
    STRONG_UNSUPPORTED,
    SUPPORTED,
    UNSUPPORTED,
    clopper_pearson_lower,
    clopper_pearson_upper,
    sample_floor,
    tail_bound,
    verdict,
    verdict_array,
)


def test_strings_are_the_spec_strings():
    assert INSUFFICIENT == "insufficient-evidence"
    assert SUPPORTED == "release-supported"
    assert STRONG_UNSUPPORTED == "strong-unsupported"
    assert UNSUPPORTED == "unsupported"
    assert REFUSED_SHIFT == "refused-shift"


@pytest.mark.parametrize("eps,delta", [(0.1, 0.1), (0.05, 0.05), (0.2, 0.01)])
def test_floor_boundary(eps, delta):
    n_min = sample_floor(eps, delta)
    assert verdict(0, n_min, eps, delta) == SUPPORTED
    assert verdict(0, n_min - 1, eps, delta) == INSUFFICIENT


def test_strong_unsupported_wins_over_insufficient():
    # N = 5 < N_min = 22 (insufficient) but L(5, 5) = 0.1**(1/5) = 0.63 > 0.1
    assert 5 < sample_floor(0.1, 0.1)
    assert clopper_pearson_lower(5, 5, 0.1) > 0.1
    assert verdict(5, 5) == STRONG_UNSUPPORTED
    assert tail_bound(5, 5).verdict == STRONG_UNSUPPORTED


def test_boundary_of_strong_unsupported():
    # k = n = 1: L = delta**(1/1) = 0.1, which is not > eps = 0.1 (strict), so insufficient-evidence
    assert clopper_pearson_lower(1, 1, 0.1) == pytest.approx(0.1)
    assert verdict(1, 1) == INSUFFICIENT
    assert verdict(2, 2) == STRONG_UNSUPPORTED  # L = 0.1**0.5 = 0.316


def test_unsupported_and_supported_cases():
    assert verdict(3, 30) == UNSUPPORTED
    assert verdict(0, 100) == SUPPORTED
    assert verdict(1, 40) == SUPPORTED  # U(1, 40) = 0.0952 <= 0.1
    assert clopper_pearson_upper(1, 40, 0.1) <= 0.1
    assert verdict(1, 37) == UNSUPPORTED
    assert verdict(30, 40) == STRONG_UNSUPPORTED


def test_verdict_array_matches_scalar():
    n = np.arange(1, 80)
    for k_frac in (0.0, 0.05, 0.2, 1.0):
        k = np.floor(k_frac * n).astype(int)
        arr = verdict_array(k, n, 0.1, 0.1)
        assert arr.shape == n.shape
        assert list(arr) == [verdict(int(a), int(b)) for a, b in zip(k, n, strict=True)]


def test_exactly_one_verdict_and_consistency():
    n_min = sample_floor(0.1, 0.1)
    for n in range(1, 60):
        for k in range(n + 1):
            v = verdict(k, n)
            u = clopper_pearson_upper(k, n, 0.1)
            lo = clopper_pearson_lower(k, n, 0.1)
            if lo > 0.1:
                assert v == STRONG_UNSUPPORTED
            elif n < n_min:
                assert v == INSUFFICIENT
            elif u <= 0.1:
                assert v == SUPPORTED
            else:
                assert v == UNSUPPORTED
