"""Diagnostic (c): the mechanism signature ρ_AT of an update, and its class against the claimed one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recipe_audit.stats.acceptance.names import (
    ATTACK_TARGETED,
    DEFAULT_BOUNDARY,
    FAIL,
    MECHANISM_CLASSES,
    NA,
    NOT_FINITE,
    ORTHOGONAL_TO_TASK,
    PASS,
    SENSITIVITY_BOUNDARIES,
    SHRINKAGE,
    ZERO_ATTACK_GRADIENT,
    ZERO_TASK_GRADIENT,
    ZERO_UPDATE,
)
from recipe_audit.stats.errors import StatsInputError


@dataclass(frozen=True)
class MechanismSignature:
    """Projections of an update ΔW on the base model's task and attack gradients (the base
    model, so that every cell is measured with the same ruler).

    ``dot_T = ⟨ΔW, v_T⟩``, ``dot_A = ⟨ΔW, v_A⟩``, ``α_T = dot_T / ‖v_T‖``, ``α_A = dot_A / ‖v_A‖``,
    ``ρ_AT = |α_A| / |α_T|``. ``rho`` is NaN when undefined (``α_T = 0``, a zero gradient, or
    missing numbers); ``undefined`` says why (one of :data:`UNDEFINED_CAUSES`). ``α_T`` counts as 0 when
    ``|α_T| ≤ 1e-10·‖ΔW‖`` (floating-point zero) or exactly 0 when ``‖ΔW‖`` is unknown.
    ``per_parameter`` optionally lists ``(name, numel, dot_T, dot_A)`` per slice parameter.
    """

    alpha_T: float
    alpha_A: float
    dot_T: float | None = None
    dot_A: float | None = None
    norm_T: float | None = None
    norm_A: float | None = None
    norm_update: float | None = None
    n_elements: int | None = None
    source: str = "vectors"
    per_parameter: tuple[tuple[str, int, float, float], ...] = ()

    @property
    def undefined(self) -> str | None:
        """Why ρ_AT is undefined, as one of :data:`UNDEFINED_CAUSES` (None when it is defined)."""
        if self.norm_T is not None and self.norm_T == 0:
            return ZERO_TASK_GRADIENT
        if self.norm_A is not None and self.norm_A == 0:
            return ZERO_ATTACK_GRADIENT
        if not (math.isfinite(self.alpha_T) and math.isfinite(self.alpha_A)):
            return NOT_FINITE
        if self.norm_update is not None and self.norm_update == 0:
            return ZERO_UPDATE
        tol = 1e-10 * self.norm_update if self.norm_update is not None else 0.0
        if abs(self.alpha_T) <= tol:
            return ORTHOGONAL_TO_TASK
        return None

    @property
    def rho(self) -> float:
        if self.undefined is not None:
            return float("nan")
        return abs(self.alpha_A) / abs(self.alpha_T)


def mechanism_signature(delta_w, v_T, v_A, *, names: Sequence[tuple[str, int]] = (),
                        source: str = "vectors") -> MechanismSignature:
    """:class:`MechanismSignature` of the update ``delta_w`` against gradients ``v_T``, ``v_A``.

    All three are flattened to 1-D float64 arrays of equal size (the declared slice, in one fixed
    parameter order). ``names`` optionally gives ``(parameter name, numel)`` segments of that order,
    adding a per-parameter breakdown of the dot products. ρ_AT is scale-free in ΔW: rescaling the
    update by any c ≠ 0 leaves it unchanged.

    >>> s = mechanism_signature([1.0, 0.0], [2.0, 0.0], [0.0, 5.0])
    >>> s.alpha_T, s.alpha_A, s.rho
    (1.0, 0.0, 0.0)
    """
    arrs = []
    for name, v in (("ΔW", delta_w), ("v_T", v_T), ("v_A", v_A)):
        try:
            a = np.asarray(v, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise StatsInputError(f"{name} must be an array of numbers.") from None
        arrs.append(a)
    dw, vt, va = arrs
    if not (dw.size == vt.size == va.size) or dw.size == 0:
        raise StatsInputError(f"ΔW, v_T and v_A must have the same non-zero size, got {dw.size}, {vt.size}, {va.size}.")
    if not (np.all(np.isfinite(dw)) and np.all(np.isfinite(vt)) and np.all(np.isfinite(va))):
        raise StatsInputError("ΔW, v_T and v_A must hold finite numbers only.")
    dot_t, dot_a = float(dw @ vt), float(dw @ va)
    nt, na = float(np.linalg.norm(vt)), float(np.linalg.norm(va))
    at = dot_t / nt if nt > 0 else float("nan")
    aa = dot_a / na if na > 0 else float("nan")
    per = []
    if names:
        if sum(int(k) for _, k in names) != dw.size:
            raise StatsInputError("the parameter segments in names do not add up to the size of ΔW.")
        start = 0
        for nm, k in names:
            sl = slice(start, start + int(k))
            per.append((str(nm), int(k), float(dw[sl] @ vt[sl]), float(dw[sl] @ va[sl])))
            start += int(k)
    return MechanismSignature(alpha_T=at, alpha_A=aa, dot_T=dot_t, dot_A=dot_a, norm_T=nt, norm_A=na,
                              norm_update=float(np.linalg.norm(dw)), n_elements=int(dw.size), source=source,
                              per_parameter=tuple(per))


def signature_from_alphas(alpha_T, alpha_A, *, dot_T=None, dot_A=None, norm_T=None, norm_A=None,
                          norm_update=None, source: str = "given α") -> MechanismSignature:
    """A :class:`MechanismSignature` from α_T and α_A computed elsewhere (no weights shared).

    >>> signature_from_alphas(-2.0, 1.5).rho
    0.75
    """
    vals = {}
    for name, v in (("alpha_T", alpha_T), ("alpha_A", alpha_A), ("dot_T", dot_T), ("dot_A", dot_A),
                    ("norm_T", norm_T), ("norm_A", norm_A), ("norm_update", norm_update)):
        if v is None and name not in ("alpha_T", "alpha_A"):
            vals[name] = None
            continue
        if isinstance(v, (bool, np.bool_)) or v is None:
            raise StatsInputError(f"{name} must be a number, got {v!r}.")
        try:
            vals[name] = float(v)
        except (TypeError, ValueError):
            raise StatsInputError(f"{name} must be a number, got {v!r}.") from None
    for name in ("norm_T", "norm_A", "norm_update"):
        if vals[name] is not None and not vals[name] >= 0:
            raise StatsInputError(f"{name} must be a non-negative number, got {vals[name]!r}.")
    return MechanismSignature(source=source, **{k: vals[k] for k in vals})


def mechanism_class(rho: float, boundary: float = DEFAULT_BOUNDARY) -> str | None:
    """``attack-targeted`` when ``rho < boundary``, else ``shrinkage``; None when rho is undefined.

    >>> mechanism_class(0.59), mechanism_class(0.6), mechanism_class(float("nan"))
    ('attack-targeted', 'shrinkage', None)
    """
    if rho is None or not math.isfinite(rho):
        return None
    return ATTACK_TARGETED if rho < boundary else SHRINKAGE


def _check_class(claimed: str) -> str:
    if claimed not in MECHANISM_CLASSES:
        raise StatsInputError(f"the claimed mechanism class must be one of {list(MECHANISM_CLASSES)}, got {claimed!r}.")
    return claimed


@dataclass(frozen=True)
class GateC:
    """Diagnostic (c): the signed mechanism class of the update against the claimed one."""

    status: str
    claimed_class: str
    signed_class: str | None
    boundary: float
    signature: MechanismSignature
    sensitivity_boundaries: tuple[float, ...] = SENSITIVITY_BOUNDARIES
    notes: tuple[str, ...] = ()

    def class_at(self, boundary: float) -> str | None:
        return mechanism_class(self.signature.rho, boundary)

    def status_at(self, boundary: float) -> str:
        cls = self.class_at(boundary)
        if cls is None:
            return NA
        return PASS if cls == self.claimed_class else FAIL


def gate_c(signature: MechanismSignature, claimed_class: str, *, boundary: float = DEFAULT_BOUNDARY,
           sensitivity_boundaries: Sequence[float] = SENSITIVITY_BOUNDARIES,
           notes: Sequence[str] = ()) -> GateC:
    """Diagnostic (c): **pass** iff the class signed at ``boundary`` equals ``claimed_class``;
    ``n/a`` when ρ_AT is undefined (α_T = 0).

    >>> gate_c(signature_from_alphas(1.0, 0.2), "attack-targeted").status
    'pass'
    >>> gate_c(signature_from_alphas(0.0, 0.2), "shrinkage").status
    'n/a'
    """
    claimed = _check_class(claimed_class)
    b = float(boundary)
    if not (math.isfinite(b) and b > 0):
        raise StatsInputError(f"the ρ_AT boundary must be a positive number, got {boundary!r}.")
    cls = mechanism_class(signature.rho, b)
    status = NA if cls is None else (PASS if cls == claimed else FAIL)
    return GateC(status=status, claimed_class=claimed, signed_class=cls, boundary=b, signature=signature,
                 sensitivity_boundaries=tuple(float(x) for x in sensitivity_boundaries), notes=tuple(notes))
