"""Argument types shared by every ``recipe-audit`` subcommand (argparse ``type=`` callables).

Each rejects bad text with one short phrase; argparse prefixes the option name. Whole numbers are
checked against their range as Python integers, before anything could overflow."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from recipe_audit.stats.checks import MAX_RERUNS, MAX_RERUNS_TEXT

#: Help text of every ``--tracking-uri``: the true default (recipe_audit.store.tracking.resolve_tracking_uri).
TRACKING_URI_HELP = ("default: $MLFLOW_TRACKING_URI, else the SQLite store mlruns/mlflow.db under the current "
                     "directory (sqlite:///mlruns/mlflow.db)")


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, shortened when long (a pasted line must not become the message)."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


def number(check: Callable[[float], bool] | None = None, requirement: str = "", *,
           integer: bool = False) -> Callable[[str], float]:
    """A parser for finite numbers (whole ones with ``integer``) that pass ``check``; the
    error says ``"<text> <requirement>"``."""

    def parse(text: str):
        try:
            v = int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{shown(text)} is not {kind}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
        if check is not None and not check(v):
            raise argparse.ArgumentTypeError(f"{shown(text, 30)} {requirement}")
        return v

    return parse


def whole(minimum: int = 0, maximum: int | None = None, maximum_text: str | None = None):
    """A parser for whole numbers in ``[minimum, maximum]``."""
    top = maximum_text or (str(maximum) if maximum is not None else "")
    if maximum is None:
        requirement = "is negative" if minimum == 0 else f"must be at least {minimum}"
    else:
        requirement = f"must lie between {minimum} and {top}"
    return number(lambda v: v >= minimum and (maximum is None or v <= maximum), requirement, integer=True)


def audit_option(option: str) -> Callable[[str], object]:
    """A parser for an audit option (``eps``, ``delta``, ``family_size``) checked by the one
    validator every door uses (:mod:`recipe_audit.stats.options`): the same requirement in the same
    words as in Python and in Hydra. ``eps`` and ``delta`` keep the decimal typed
    (``--delta 0.31381059609`` is 31381059609/10**11 exactly, not the nearest simple fraction)."""
    from recipe_audit.stats.options import REQUIREMENTS, OptionError, check_option

    integer = option == "family_size"
    first = number(integer=integer)

    def parse(text: str):
        first(text)  # not a number, not finite: argparse's words
        try:
            return check_option(option, text.strip() if not integer else int(text))
        except OptionError:
            raise argparse.ArgumentTypeError(f"{shown(text, 30)} {REQUIREMENTS[option]}") from None

    return parse


finite = number()
probability = number(lambda v: 0 < v < 1, "must lie strictly between 0 and 1")
#: The failure budget ε, strictly between 0 and 1, as typed.
budget_eps = audit_option("eps")
#: The statistical risk δ: a one-sided bound at confidence below one half is not a bound.
risk = audit_option("delta")
positive = number(lambda v: v > 0, "must be a positive number")
count = number(lambda v: v >= 0, "is negative", integer=True)
failures = whole(0, MAX_RERUNS, MAX_RERUNS_TEXT)
reruns = whole(1, MAX_RERUNS, MAX_RERUNS_TEXT)
#: The size M of the family a recipe was chosen from.
family_size = audit_option("family_size")


def family_or_anytime(a: argparse.Namespace, what: str) -> None:
    """Refuse ``--family-size`` with ``--anytime``: ``what`` reads one or the other."""
    if a.family_size is not None and a.anytime:
        raise ValueError(f"Give --family-size or --anytime, not both: {what} reads either a recipe chosen "
                         "from a family or an open-ended sweep.")

