"""The acceptance statistics' vocabulary (statuses, verdicts, mechanism classes, why ρ_AT is
undefined) and their defaults."""

from __future__ import annotations

PASS = "pass"
FAIL = "fail"
NA = "n/a"
CAVEAT = "pass-with-caveat"
MISSING = "missing"
STATUSES = (PASS, FAIL, NA, CAVEAT, MISSING)

FULL_PASS = "full-card pass"
NEAR_MISS = "near miss"
MISSING_EVIDENCE = "missing evidence"
UNDEFINED = "undefined"
VERDICT_FAIL = "fail"
VERDICTS = (FULL_PASS, NEAR_MISS, MISSING_EVIDENCE, UNDEFINED, VERDICT_FAIL)

SHRINKAGE = "shrinkage"
ATTACK_TARGETED = "attack-targeted"
MECHANISM_CLASSES = (SHRINKAGE, ATTACK_TARGETED)

GATES = ("a", "b", "c", "d")

# Why ρ_AT is undefined (:attr:`MechanismSignature.undefined`).
ZERO_TASK_GRADIENT = "zero task gradient"
ZERO_ATTACK_GRADIENT = "zero attack gradient"
NOT_FINITE = "not finite"
ZERO_UPDATE = "zero update"
ORTHOGONAL_TO_TASK = "orthogonal to the task gradient"
UNDEFINED_CAUSES = (ZERO_TASK_GRADIENT, ZERO_ATTACK_GRADIENT, NOT_FINITE, ZERO_UPDATE, ORTHOGONAL_TO_TASK)

DEFAULT_RESAMPLES = 5000
DEFAULT_LEVEL = 0.95
SENSITIVITY_LEVEL = 0.68
DEFAULT_BOUNDARY = 0.6
SENSITIVITY_BOUNDARIES = (0.5, 0.7)
DEFAULT_MARGIN = 0.02
SE_MULTIPLIER = 2.0
SCREEN_SE_MULTIPLIER = 1.0
