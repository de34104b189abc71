"""Bad input raises StatsInputError with one clear sentence."""

from __future__ import annotations

import re

import numpy as np
import pytest

from recipe_audit.stats import (
    StatsInputError,
    apply_rules,
    clopper_pearson_lower,
    clopper_pearson_upper,
    evidence_responsiveness,
    held_out_split_audit,
    sample_floor,
    tail_bound,
    verdict,
)


def _one_sentence(msg: str) -> bool:
    return msg.endswith(".") and not re.search(r"[.!?]\s", msg) and msg[0].islower() | msg[0].isupper()


BAD = [
    (lambda: tail_bound(7, 5), r"failures k \(7\) cannot exceed reruns n \(5\)"),
    (lambda: tail_bound(0, 0), r"reruns n must be at least 1, got 0"),
    (lambda: tail_bound(-1, 5), r"cannot be negative"),
    (lambda: tail_bound(2.5, 5), r"whole number, got 2.5"),
    (lambda: tail_bound(True, 5), r"whole number"),
    (lambda: tail_bound("3", 5), r"whole number"),
    (lambda: tail_bound(1, 5, eps=0.0), r"eps must lie strictly between 0 and 1, got 0.0"),
    (lambda: tail_bound(1, 5, eps=1.0), r"eps must lie strictly between 0 and 1"),
    (lambda: tail_bound(1, 5, delta=1.5), r"delta must lie strictly between 0 and 0.5, got 1.5"),
    (lambda: tail_bound(1, 5, delta=-0.1), r"delta must lie strictly between 0 and 0.5"),
    (lambda: tail_bound(1, 5, delta=0.5), r"delta must lie strictly between 0 and 0.5, got 0.5: a one-sided"),
    (lambda: verdict(1, 5, delta=0.9), r"delta must lie strictly between 0 and 0.5, got 0.9"),
    (lambda: tail_bound(1, 10**19), r"reruns n must be at most 10\^15, got 10000000000000000000"),
    (lambda: tail_bound(1, float("inf")), r"reruns n must be a whole number, got inf"),
    (lambda: tail_bound(1, 5, eps=float("nan")), r"eps must lie strictly between 0 and 1, got nan"),
    (lambda: tail_bound(1, 5, eps=1e-320), r"eps = 1e-320 is too small to certify with at most 10\^15 reruns"),
    (lambda: tail_bound(np.array([1, 2]), 5), r"single k and a single n"),
    (lambda: tail_bound(1, 5, delta=float("nan")), r"delta must lie strictly between 0 and 0.5"),
    (lambda: sample_floor(0.1, 0.0), r"delta must lie"),
    (lambda: sample_floor(1.2, 0.1), r"eps must lie"),
    (
        lambda: clopper_pearson_upper(np.array([1, 6]), 5, 0.1),
        r"failures k \(6\) cannot exceed reruns n \(5\)",
    ),
    (lambda: clopper_pearson_lower(1, np.array([3, 0]), 0.1), r"reruns n must be at least 1"),
    (lambda: clopper_pearson_upper(1, 5, np.array([0.1, 1.0])), r"delta must lie"),
    (lambda: clopper_pearson_upper(np.array([0.5]), 5, 0.1), r"whole number, got 0.5"),
    (lambda: verdict(3, 2), r"cannot exceed"),
    (lambda: apply_rules([[0.1]], 0.5), r"1-D"),
    (lambda: apply_rules([0.1], float("nan")), r"tau must be a finite number"),
    (lambda: apply_rules([0.1], 0.5, k=1), r"both"),
    (lambda: apply_rules([0.1, 0.2], 0.5, k=0, n=1), r"cannot be fewer than the finished reruns"),
    (lambda: apply_rules([], 0.5), r"at least one rerun"),
    (lambda: apply_rules([0.1], 0.5, B=0), r"B must be at least 1"),
    (lambda: apply_rules([0.1], 0.5, rng="seed"), r"rng must be"),
    (lambda: held_out_split_audit([([0.5], 0.4)]), r"at least 2"),
    (lambda: held_out_split_audit([([0.5, 0.6], 0.4)], audit_size=2), r"audit_size \(2\)"),
    (lambda: held_out_split_audit([]), r"at least one cell"),
    (lambda: held_out_split_audit([0.5]), r"cell 0 must be an AuditCell"),
    (lambda: evidence_responsiveness([([0.5, 0.6], 0.4)], [0]), r"audit size must be at least 1"),
]


@pytest.mark.parametrize("call,pattern", BAD)
def test_bad_input_raises_one_sentence(call, pattern):
    with pytest.raises(StatsInputError, match=pattern) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert _one_sentence(str(info.value)), str(info.value)


def test_integral_floats_are_accepted():
    assert tail_bound(2.0, 10.0) == tail_bound(2, 10)
