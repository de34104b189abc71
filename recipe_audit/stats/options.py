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
from dataclasses import Field, dataclass, field, fields
from decimal import Decimal
from fractions import Fraction
from typing import Any

from recipe_audit.stats import checks, floors
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS, DEFAULT_TAUS
from recipe_audit.stats.errors import StatsInputError

__all__ = ["UNFINISHED", "AuditOptions", "OptionError", "audit_options", "check_budget", "check_option",
           "check_taus_for", "is_accuracy_metric", "option", "option_field", "option_fields", "refuse_unknown", "requirement"]

UNFINISHED = ("fail", "refuse")


def option(default: Any, requirement: str, check: Callable[[Any], Any], *, flag: str, help: str,
           metavar: str | None = None, cli: str | None = None) -> Any:
    """One audit option's declaration, a field of :class:`AuditOptions`: its ``default``, its
    ``requirement`` (the words every door uses), ``check`` (the value converted, or ``ValueError``,
    ``TypeError`` or ``ArithmeticError`` when it breaks the requirement), and how the command line
    offers it: ``flag``, ``help`` (``{default}`` is the default as shown), ``metavar``, and ``cli``,
    how the text is read: ``"number"`` / ``"whole"`` (checked as it is parsed), ``"numbers"``
    (repeatable), None (a bool is a switch; other text goes to :func:`check_option` as typed)."""
    return field(default=default, metadata={"requirement": requirement, "check": check, "flag": flag,
                                            "help": help, "metavar": metavar, "cli": cli})


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


def _between(top: float) -> Callable[[Any], float]:
    """A number strictly between 0 and ``top`` (:class:`~.checks.Typed` when given exactly)."""

    def check(value: Any) -> float:
        v = _number(value)
        if v is None or not 0.0 < v < top:
            raise ValueError(value)
        return v

    return check


def _count_or_none(value: Any) -> int | None:
    """None, or a whole number from 1 to 10^15."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    v = _number(value)
    if v is None or v != math.floor(v) or not 1 <= v <= checks.MAX_RERUNS:
        raise ValueError(value)
    if isinstance(value, numbers.Integral) and not 1 <= int(value) <= checks.MAX_RERUNS:
        raise ValueError(value)  # an int too large for a float's precision
    return int(value) if isinstance(value, numbers.Integral) else int(v)


def _finite_numbers(value: Any) -> tuple[float, ...]:
    """One finite number or several, at least one, as a tuple of floats."""
    items = [value] if isinstance(value, (int, float, str, Decimal, Fraction)) else value
    got = [_number(t) for t in list(items)]  # not iterable: TypeError
    if not got or any(t is None for t in got):
        raise ValueError(value)
    return tuple(float(t) for t in got)


def _truth(value: Any) -> bool:
    """``True`` or ``False`` (a NumPy bool too), never a number or text."""
    if not isinstance(value, bool) and not (hasattr(value, "dtype") and str(value.dtype) == "bool"):
        raise ValueError(value)
    return bool(value)


def _one_of(words: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in words:
            raise ValueError(value)
        return str(value)

    return check


@dataclass(frozen=True)
class AuditOptions:
    """The audit options, declared once: each field's name, default, type, requirement (in the
    words every door uses), check and command-line flag (:func:`option`). Every door takes them
    from here: the built-in app's ``audit`` schema (:class:`recipe_audit.config.AuditConfig`) and the
    callback's (:class:`recipe_audit.app.schema.RecipeAuditCallbackConfig`) get a field each, the
    built-in app's callback interpolates each from the ``audit`` node, ``recipe-audit card`` an
    option each (:func:`recipe_audit.commands.args.audit_arguments`), the Python API's ``card`` and
    ``card_from_runs`` a keyword each; the callback, the built-in app and the curtailing sweeper
    check them with :func:`audit_options`, and the card's :class:`~recipe_audit.cards.model.CardOptions`
    extends this class. Adding an option is one field here. Built, it is checked (one sentence)
    and holds the converted values.

    >>> AuditOptions().eps, AuditOptions(taus=0.8).taus
    (0.1, (0.8,))
    """

    taus: tuple[float, ...] = option(
        DEFAULT_TAUS, "must be finite numbers, at least one", _finite_numbers, flag="--tau", metavar="T",
        cli="numbers", help="release bar(s) τ; several give a grid (default {default}); for the accuracy metrics "
                            "(accuracy/AUDIT) τ must lie in [0, 1]; a τ beyond every value the reruns logged is "
                            "allowed and noted")
    eps: float = option(DEFAULT_EPS, "must lie strictly between 0 and 1", _between(1.0), flag="--eps", cli="number",
                        help="failure budget ε, strictly between 0 and 1 (default {default:.2f})")
    delta: float = option(DEFAULT_DELTA, "must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5)",
                          _between(0.5), flag="--delta", cli="number",
                          help="statistical risk δ, strictly between 0 and 0.5 (default {default:.2f})")
    family_size: int | None = option(
        None, f"must lie between 1 and {checks.MAX_RERUNS_TEXT}", _count_or_none, flag="--family-size", metavar="M",
        cli="whole", help="the recipes were chosen from a family of M identities (default: the identities the card "
                          "covers on each audit set and τ, plus the experiment's or sweep's others); with M > 1 every "
                          "cell states the family-wise verdict (Holm, δ/M) beside the pointwise one")
    anytime: bool = option(
        False, "must be true or false", _truth, flag="--anytime",
        help="read every cell as an open-ended sweep (seeds added until the card looked good): the confidence "
             "sequence's U_n and L_n, valid at every N at once (a sweep run with hydra.sweeper.stop_on=anytime is "
             "read so without it)")
    unfinished: str = option("fail", "must be 'fail' or 'refuse'", _one_of(UNFINISHED), flag="--unfinished",
                             metavar="{fail,refuse}",
                             help="unfinished reruns count as failures (fail, the default) or refuse the card")
    higher_is_better: bool = option(True, "must be true or false", _truth, flag="--lower-is-better",
                                    help="the metric is a loss: fail when > τ")

    def __post_init__(self) -> None:
        for f in option_fields():
            object.__setattr__(self, f.name, check_option(f.name, getattr(self, f.name)))


def option_fields() -> tuple[Field, ...]:
    """The audit options' fields, in the order they are declared (and checked)."""
    return tuple(f for f in fields(AuditOptions) if "requirement" in f.metadata)


def option_field(option: str) -> Field:
    """The declared field of one audit option (``KeyError`` for a name that is none)."""
    for f in option_fields():
        if f.name == option:
            return f
    raise KeyError(option)


def refuse_unknown(given, func: str) -> None:
    """A keyword in ``given`` that is no audit option is a ``TypeError``, in Python's own words for
    ``func`` (the API's functions, the callback and :func:`audit_options` say it alike)."""
    unknown = sorted(set(given) - {f.name for f in option_fields()})
    if unknown:
        raise TypeError(f"{func}() got an unexpected keyword argument {unknown[0]!r}")


def requirement(option: str) -> str:
    """What ``option`` must be: the words every door uses."""
    return option_field(option).metadata["requirement"]


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


def check_option(option: str, value: Any, name: str | None = None) -> Any:
    """One option, checked and converted by its declared check (:class:`AuditOptions`): ``eps``
    and ``delta`` to floats (:class:`~.checks.Typed` when given exactly), ``family_size`` to an
    int or None, ``taus`` to a tuple of floats, ``unfinished`` to its word, ``anytime`` and
    ``higher_is_better`` to bools. Raises :class:`OptionError` naming the option as ``name``
    (default: its own name); ``KeyError`` for a name that is no audit option."""
    f = option_field(option)
    try:
        return f.metadata["check"](value)
    except (ValueError, TypeError, ArithmeticError):
        raise OptionError(option, value, f.metadata["requirement"], name) from None


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


def audit_options(*, metrics: Sequence[str] = (), name: Callable[[str], str] | None = None, budget: bool = True,
                  **given: Any) -> dict[str, Any]:
    """Every audit option checked, in the order :class:`AuditOptions` declares them, the same at
    every door (one not given takes its declared default); then τ against accuracy ``metrics`` (in
    [0, 1]), and the budget (``budget``: an ε small enough that no count up to 10^15 certifies it is
    refused). ``name(option)`` is how the door names an option in its sentence. Returns the checked
    values; a keyword that is no audit option is a ``TypeError``."""
    refuse_unknown(given, "audit_options")
    declared = option_fields()
    out = {f.name: check_option(f.name, given.get(f.name, f.default), name(f.name) if name is not None else f.name)
           for f in declared}
    check_taus_for(out["taus"], metrics, out["higher_is_better"])
    if budget:
        check_budget(out["eps"], out["delta"], out["family_size"], out["anytime"])
    return out
