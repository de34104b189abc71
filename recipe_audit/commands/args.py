"""Argument types shared by every ``recipe-audit`` subcommand (argparse ``type=`` callables).

Each rejects bad text with one short phrase; argparse prefixes the option name. Whole numbers are
checked against their range as Python integers, before anything could overflow."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence

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
    """A parser for an audit option read as a number (``eps``, ``delta``, ``family_size``) checked by
    the one validator every door uses (:mod:`recipe_audit.stats.options`): the same requirement in
    the same words as in Python and in Hydra. ``eps`` and ``delta`` keep the decimal typed
    (``--delta 0.31381059609`` is 31381059609/10**11 exactly, not the nearest simple fraction)."""
    from recipe_audit.stats.options import OptionError, check_option, option_field, requirement

    integer = option_field(option).metadata["cli"] == "whole"
    first = number(integer=integer)

    def parse(text: str):
        first(text)  # not a number, not finite: argparse's words
        try:
            return check_option(option, text.strip() if not integer else int(text))
        except OptionError:
            raise argparse.ArgumentTypeError(f"{shown(text, 30)} {requirement(option)}") from None

    return parse


def audit_arguments(parser: argparse.ArgumentParser, names: Sequence[str], help: Mapping[str, str] | None = None) -> None:
    """Add the audit options ``names`` to ``parser`` as :class:`~recipe_audit.stats.options.AuditOptions`
    declares them: each field's flag, help (``help`` may word one for this command), metavar and
    default; the value lands under the field's name. A number is checked as it is parsed (its
    requirement, argparse's prefix), a switch is a bool (one whose default is true is the flag that
    turns it off: ``--lower-is-better``), ``--tau`` may be repeated; other text reaches the validator
    as typed. A repeated option not given is None: :func:`audit_values` leaves it to its default."""
    from recipe_audit.stats.options import option_fields

    declared = {f.name: f for f in option_fields()}
    for name in names:
        f = declared[name]
        meta = f.metadata
        default = f.default
        shown_default = " ".join(f"{x:g}" for x in default) if isinstance(default, tuple) else default
        kw: dict = {"dest": name, "help": (help or {}).get(name) or meta["help"].format(default=shown_default)}
        if meta["metavar"]:
            kw["metavar"] = meta["metavar"]
        if isinstance(default, bool):
            kw.update(action="store_false" if default else "store_true", default=default)
        elif meta["cli"] == "numbers":
            kw.update(action="extend", nargs="+", type=finite, default=None)
        else:
            kw.update(default=default, **({"type": audit_option(name)} if meta["cli"] in ("number", "whole") else {}))
        parser.add_argument(meta["flag"], **kw)


def audit_values(a: argparse.Namespace) -> dict[str, object]:
    """The audit options the command line was given (those :func:`audit_arguments` added), by name;
    an option not given has its declared default."""
    from recipe_audit.stats.options import option_fields

    out = {}
    for f in option_fields():
        value = getattr(a, f.name, None)
        out[f.name] = f.default if value is None else value
    return out


def audit_flags() -> dict[str, str]:
    """How the command line names each audit option in a sentence of the one validator (``--eps``)."""
    from recipe_audit.stats.options import option_fields

    return {f.name: f.metadata["flag"] for f in option_fields()}


finite = number()
probability = number(lambda v: 0 < v < 1, "must lie strictly between 0 and 1")
positive = number(lambda v: v > 0, "must be a positive number")
count = number(lambda v: v >= 0, "is negative", integer=True)
failures = whole(0, MAX_RERUNS, MAX_RERUNS_TEXT)
reruns = whole(1, MAX_RERUNS, MAX_RERUNS_TEXT)


def family_or_anytime(a: argparse.Namespace, what: str) -> None:
    """Refuse ``--family-size`` with ``--anytime``: ``what`` reads one or the other."""
    if a.family_size is not None and a.anytime:
        raise ValueError(f"Give --family-size or --anytime, not both: {what} reads either a recipe chosen "
                         "from a family or an open-ended sweep.")

