"""What a recipe card is computed from and asked: the reruns of one cell (:class:`Cell`) and the
question (:class:`CardOptions`), frozen and typed, with the one error a card raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from recipe_audit import keys, stats
from recipe_audit.stats.options import AuditOptions, audit_options, option_fields

SCHEMA_VERSION = "1.1"
CARD_KIND = "recipe_card"
DIGEST_SCHEME = "content+artifacts/2"
"""The card digest of every card written since schema 1.1 (see :func:`document_digest`)."""
DEFAULT_BOOTSTRAP_B = 2000
DEFAULT_BOOTSTRAP_SEED = 0


class CardError(ValueError):
    """A card cannot be computed from this input (one sentence)."""


@dataclass(frozen=True)
class CardOptions(AuditOptions):
    """What a card is asked: the audit options (bars, budget, risk, how unfinished reruns are
    treated, M, the anytime reading: :class:`~recipe_audit.stats.options.AuditOptions` declares
    them, their defaults and checks), and the card's own: the bootstrap and the band."""

    bootstrap_B: int = DEFAULT_BOOTSTRAP_B
    bootstrap_seed: int = DEFAULT_BOOTSTRAP_SEED
    band_method: str = "auto"  # the simultaneous band: auto | exact-cp | exact-ks | dkw

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None, /, *, metrics: Sequence[str] = (),
                    name: Callable[[str], str] | None = None, **options: Any) -> CardOptions:
        """The card options of an audit configuration, built the same way wherever a card is
        asked for: the built-in app's ``audit`` group, the callback's options, the command line's,
        the Python API's, or the ``options`` a card was computed with. Keys that are not card
        options (``sets``, ``primary``) are ignored, ``options`` override ``config``, a missing
        or None option takes its default, and ``taus`` may be a single number.

        >>> CardOptions.from_config({"taus": [0.7, 0.8], "eps": 0.05, "sets": ["all"]}, delta=0.2).taus
        (0.7, 0.8)
        >>> CardOptions.from_config(taus=0.9).eps
        0.1
        >>> CardOptions.from_config(taus=0.9, delta=0.7, name=lambda o: f"audit.{o}")
        Traceback (most recent call last):
        ...
        recipe_audit.cards.model.CardError: audit.delta must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5), not 0.7.

        Every audit option is checked by the one validator every door uses
        (:func:`recipe_audit.stats.options.audit_options`: the same requirement in the same words
        at the command line, in Python and in Hydra); ``name(option)`` is how the caller's door
        names an option in the sentence (``--eps``, ``audit.eps``), ``metrics`` the metrics the
        card is asked on (τ must lie in [0, 1] for recipe_audit's accuracies).
        """
        merged = {**(config or {}), **options}
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in merged.items() if k in names and v is not None}
        audit = [f.name for f in option_fields()]
        try:
            checked = audit_options(**{k: kw[k] for k in audit if k in kw}, metrics=metrics, name=name)
        except stats.StatsInputError as exc:
            raise CardError(str(exc)) from None
        kw.update({k: checked[k] for k in audit})
        return cls(**kw)

    def __post_init__(self) -> None:
        try:  # the declared checks (an option set directly is checked as from_config checks it)
            super().__post_init__()
        except stats.StatsInputError as exc:
            raise CardError(str(exc)) from None
        if self.bootstrap_B < 1:
            raise CardError("The bootstrap needs at least one resample.")
        if self.band_method not in ("auto", *stats.BAND_METHODS):
            raise CardError(f"band_method must be one of auto, {', '.join(stats.BAND_METHODS)}, "
                            f"not {self.band_method!r}.")


@dataclass(frozen=True)
class Cell:
    """The reruns of one cell, ready for cards (built from a ``reruns.RerunSet``)."""

    group: dict[str, Any]
    recipe_id: str | None
    recipe_summary: str
    audit_set: str | None
    metric: str
    seeds: tuple[Any, ...]
    values: np.ndarray  # aligned with seeds; NaN for unfinished
    run_ids: tuple[str | None, ...]
    statuses: tuple[str, ...]
    unfinished: tuple[tuple[Any, str, str | None], ...] = ()
    duplicates: tuple = ()  # reruns.Duplicate per re-run seed
    disagreeing_duplicates: tuple[Any, ...] = ()
    sweep_run_ids: tuple[str, ...] = ()
    planned_seeds: tuple[Any, ...] = ()
    digest: str = ""
    # set when the recipe was never scored on this audit set (no verdict is carried over)
    shift_refusal: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the door of the reruns' values: a 1-D float array, which the statistics take as it is
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 1 or values.size != len(self.seeds):
            raise CardError(f"A cell's values must be one number per seed ({len(self.seeds)}), "
                            f"got an array of shape {values.shape}.")
        object.__setattr__(self, "values", values)

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def label(self) -> str:
        parts = [f"{k.split('.')[-1]}={v}" for k, v in self.group.items()]
        if self.recipe_id:
            name = self.recipe_summary.split(":", 1)[0] if self.recipe_summary else "recipe"
            parts.insert(0, f"{name} [{self.recipe_id[:8]}]")
        return ", ".join(parts) or "all runs"


def group_json(cell: Cell) -> dict[str, str | None]:
    """The cell's group as a card states it: each value as a string (None stays None)."""
    return {k: (None if v is None else str(v)) for k, v in cell.group.items()}


def audit_set_of(metric: str) -> str | None:
    """``accuracy/shift_x`` -> ``shift_x``: the audit set a recipe_audit metric key names."""
    prefix = keys.accuracy_key("")
    return metric[len(prefix):] if metric.startswith(prefix) else None


def audit_name(metric: str) -> str:
    """The name a card gives its audit set: the audit set a recipe_audit metric key names
    (``accuracy/shift_x`` -> ``shift_x``), else the metric itself (``val_acc``)."""
    return audit_set_of(metric) or metric


def cell_from_rerun_set(rs, recipe_summary: str = "", audit_set: str | None = None) -> Cell:
    """Adapt a ``reruns.RerunSet``. When *no* rerun of the cell ever logged the metric, the
    recipe was not measured on that audit set and the cell refuses."""
    reasons = [u[1] for u in rs.unfinished]
    refusal = None
    if rs.n and reasons.count("missing-metric") == rs.n:
        what = f"audit set '{audit_set}'" if audit_set else f"metric '{rs.metric_key}'"
        refusal = (f"None of the {rs.n} reruns of this recipe was scored on {what}; "
                   f"no card can be carried over from another audit set.")
    return Cell(
        group=dict(rs.group), recipe_id=rs.recipe_id, recipe_summary=recipe_summary,
        audit_set=audit_set if audit_set is not None else audit_name(rs.metric_key),
        metric=rs.metric_key, seeds=tuple(rs.seeds), values=np.asarray(rs.values, dtype=float),
        run_ids=tuple(rs.run_ids), statuses=tuple(rs.statuses), unfinished=tuple(rs.unfinished),
        duplicates=tuple(rs.duplicates), disagreeing_duplicates=tuple(rs.disagreeing_duplicates),
        sweep_run_ids=tuple(rs.sweep_run_ids), planned_seeds=tuple(rs.planned_seeds),
        digest=rs.digest(), shift_refusal=refusal,
    )
