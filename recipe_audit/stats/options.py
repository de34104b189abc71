"""The audit options, checked once for every door: the command line (``recipe-audit bound`` and
``card``), the Python API, the recipe_audit callback of any Hydra app and the built-in app.

Each option has one requirement, in the same words at every door; a door only says how the user
named the option (``--delta``, ``delta``, ``audit.delta``, ``hydra.callbacks.recipe_audit.delta``).
So the same input gets the same answer, or the same sentence, wherever it is typed. ``eps`` and
``delta`` given as text (the command line) keep the decimal typed (:class:`~.checks.Typed`).

Pure Python, like :mod:`.checks`: ``recipe-audit bound`` imports neither NumPy nor SciPy.

>>> audit_options(eps="0.05", delta=0.05)["eps"].exact
Fraction(1, 20)
>>> audit_options(delta=0.7, name=lambda o: f"audit.{o}")
Traceback (most recent call last):
...
recipe_audit.stats.options.OptionError: audit.delta must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5), not 0.7.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal
from fractions import Fraction
from typing import Any

from recipe_audit.stats import checks, floors
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS, DEFAULT_TAUS
from recipe_audit.stats.errors import StatsInputError

__all__ = ["AUDIT_OPTIONS", "REQUIREMENTS", "UNFINISHED", "AuditOptions", "OptionError", "audit_options",
           "check_budget", "check_option", "check_taus_for", "is_accuracy_metric"]

UNFINISHED = ("fail", "refuse")


def _option(default: Any, requirement: str) -> Any:
    return field(default=default, metadata={"requirement": requirement})


@dataclass(frozen=True)
class AuditOptions:
    """The audit options, declared once: each field's name, default and requirement (in the words
    every door uses). Every door takes its defaults from here: the built-in app's ``audit`` schema
    (:class:`recipe_audit.config.AuditConfig`), the callback's schema
    (:class:`recipe_audit.app.schema.RecipeAuditCallbackConfig`), the command line's options, the
    Python API's keywords and the card's :class:`~recipe_audit.cards.model.CardOptions`; a test
    fails when one drifts. Built, it is checked (:func:`check_option`, one sentence) and holds the
    converted values.

    >>> AuditOptions().eps, AuditOptions(taus=0.8).taus
    (0.1, (0.8,))
    """

    taus: tuple[float, ...] = _option(DEFAULT_TAUS, "must be finite numbers, at least one")
    eps: float = _option(DEFAULT_EPS, "must lie strictly between 0 and 1")
    delta: float = _option(DEFAULT_DELTA, "must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5)")
    family_size: int | None = _option(None, f"must lie between 1 and {checks.MAX_RERUNS_TEXT}")
    anytime: bool = _option(False, "must be true or false")
    unfinished: str = _option("fail", "must be 'fail' or 'refuse'")
    higher_is_better: bool = _option(True, "must be true or false")

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, check_option(f.name, getattr(self, f.name)))


#: The audit options' names, in the order they are checked.
AUDIT_OPTIONS = tuple(f.name for f in fields(AuditOptions))
#: What each option must be: the words every door uses.
REQUIREMENTS = {f.name: f.metadata["requirement"] for f in fields(AuditOptions)}
#: recipe_audit's own metrics are accuracies (``accuracy/<audit set>``), in [0, 1].
ACCURACY_PREFIX = "accuracy/"


class OptionError(StatsInputError):
    """An audit option's value is not allowed (one sentence). ``option``: its name here,
    ``requirement``: the words every door uses, ``value``: the value as given."""

    def __init__(self, option: str, value: Any, requirement: str, name: str | None = None) -> None:
        self.option, self.value, self.requirement = option, value, requirement
        super().__init__(f"{name or option} {requirement}, not {_shown(value)}.")


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: Any) -> float | None:
    """A finite real number (text, ``Fraction`` or ``Decimal`` keep their exact value), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, Decimal, Fraction)):
        try:
            t = checks.Typed(value)
        except (StatsInputError, ValueError, ArithmeticError):
            return None
        return t if math.isfinite(t) else None
    if hasattr(value, "ndim") and getattr(value, "ndim", 1) == 0 and hasattr(value, "item"):
        value = value.item()
    if not isinstance(value, numbers.Real):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def check_option(option: str, value: Any, name: str | None = None) -> Any:
    """One option, checked and converted: ``eps`` and ``delta`` to floats (:class:`~.checks.Typed`
    when given exactly), ``family_size`` to an int or None, ``taus`` to a tuple of floats,
    ``unfinished`` to its word, ``anytime`` and ``higher_is_better`` to bools. Raises
    :class:`OptionError` naming the option as ``name`` (default: its own name)."""
    requirement = REQUIREMENTS[option]

    def fail():
        raise OptionError(option, value, requirement, name)

    if option in ("eps", "delta"):
        v = _number(value)
        top = 1.0 if option == "eps" else 0.5
        if v is None or not 0.0 < v < top:
            fail()
        return v
    if option == "family_size":
        if value is None:
            return None
        if isinstance(value, bool):
            fail()
        v = _number(value)
        if v is None or v != math.floor(v) or not 1 <= v <= checks.MAX_RERUNS:
            fail()
        if isinstance(value, numbers.Integral) and not 1 <= int(value) <= checks.MAX_RERUNS:
            fail()  # an int too large for a float's precision
        return int(value) if isinstance(value, numbers.Integral) else int(v)
    if option == "taus":
        items = [value] if isinstance(value, (int, float, str, Decimal, Fraction)) else value
        try:
            items = list(items)
        except TypeError:
            fail()
        got = [_number(t) for t in items]
        if not got or any(t is None for t in got):
            fail()
        return tuple(float(t) for t in got)
    if option == "unfinished":
        if value not in UNFINISHED:
            fail()
        return str(value)
    if option in ("anytime", "higher_is_better"):
        if not isinstance(value, bool) and not (hasattr(value, "dtype") and str(value.dtype) == "bool"):
            fail()
        return bool(value)
    raise KeyError(option)


def is_accuracy_metric(metric: str) -> bool:
    """recipe_audit's own accuracy metrics (``accuracy/<audit set>``, ``metrics.`` allowed) lie in [0, 1]."""
    name = metric[len("metrics."):] if metric.startswith("metrics.") else metric
    return name.startswith(ACCURACY_PREFIX) and len(name) > len(ACCURACY_PREFIX)


def check_taus_for(taus: Sequence[float], metrics: Sequence[str], higher_is_better: bool = True) -> None:
    """Refuse a τ outside [0, 1] for an accuracy metric: every rerun would pass it, or fail it,
    whatever it scored, so it is no bar."""
    for m in metrics:
        if not is_accuracy_metric(m):
            continue
        for t in taus:
            if not 0.0 <= t <= 1.0:
                side = "pass" if (t < 0) == higher_is_better else "fail"
                raise StatsInputError(f"The release bar tau = {t:g} lies outside [0, 1], where the accuracy "
                                      f"'{m}' lies, so every rerun would {side} it whatever it scored.")


def check_budget(eps: float, delta: float, family_size: int | None = None, anytime: bool = False) -> None:
    """Refuse a budget no count of reruns up to 10^15 could certify (at risk δ/M for a family,
    with the confidence sequence for an open-ended sweep), with one sentence."""
    d = delta if family_size in (None, 1) else checks.scaled(delta, family_size)
    e, d = checks.check_eps(eps), checks.check_delta(d)
    floors.budget_floor(e, d)
    if anytime:
        from recipe_audit.stats.anytime import anytime_sample_floor_at

        anytime_sample_floor_at(e, d)


def audit_options(*, taus: Any = AuditOptions.taus, eps: Any = AuditOptions.eps, delta: Any = AuditOptions.delta,
                  family_size: Any = AuditOptions.family_size, anytime: Any = AuditOptions.anytime,
                  unfinished: Any = AuditOptions.unfinished, higher_is_better: Any = AuditOptions.higher_is_better,
                  metrics: Sequence[str] = (),
                  name: Callable[[str], str] | None = None, budget: bool = True) -> dict[str, Any]:
    """Every audit option checked, in the order :class:`AuditOptions` declares them (``taus``,
    ``eps``, ``delta``, ``family_size``, ``anytime``, ``unfinished``, ``higher_is_better``), the
    same at every door; then τ against accuracy ``metrics`` (in [0, 1]), and the budget
    (``budget``: an ε small enough that no count up to 10^15 certifies it is refused).
    ``name(option)`` is how the door names an option in its sentence. Returns the checked values."""
    given = {"taus": taus, "eps": eps, "delta": delta, "family_size": family_size, "anytime": anytime,
             "unfinished": unfinished, "higher_is_better": higher_is_better}
    out = {o: check_option(o, given[o], name(o) if name is not None else o) for o in AUDIT_OPTIONS}
    check_taus_for(out["taus"], metrics, out["higher_is_better"])
    if budget:
        check_budget(out["eps"], out["delta"], out["family_size"], out["anytime"])
    return out
