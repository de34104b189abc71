"""Paired evaluation records of a defense cell and its matched baseline, one task and one split
(:class:`PairedRecords`), and the gaps every diagnostic reads off their four strata."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recipe_audit.stats.errors import StatsInputError

# Strata of a paired record set, in this order along the last axis of every (…, 4) array.
B_EVAL, B_DEPLOY, R_EVAL, R_DEPLOY = 0, 1, 2, 3
STRATUM_NAMES = ("baseline/eval", "baseline/deploy", "defense/eval", "defense/deploy")


@dataclass(frozen=True, eq=False)
class PairedRecords:
    """Scored items of one task and one split, for a defense cell and its matched baseline.

    Arrays are 1-D, one entry per scored item, all of length ``n_items``:

    * ``question`` — int codes ``0 .. n_questions − 1`` into ``question_ids``;
    * ``template`` — int codes of the template ids (any labels);
    * ``defense`` — True for the defense cell R, False for the baseline cell 0;
    * ``deploy`` — True for deploy framing, False for eval framing;
    * ``correct`` — 0/1.

    Every question appears in both cells under both framings (checked by :meth:`from_columns`),
    so a resampled question brings items of all four strata.
    """

    question: np.ndarray
    template: np.ndarray
    defense: np.ndarray
    deploy: np.ndarray
    correct: np.ndarray
    question_ids: tuple[str, ...]
    label: str = ""

    @classmethod
    def from_columns(cls, question_id, template_id, defense, deploy, correct, *, label: str = "") -> PairedRecords:
        """Build from parallel columns (question and template ids may be any labels).

        Raises :class:`StatsInputError` (one sentence) on ragged columns, a ``correct`` value
        other than 0/1, or a question missing from a cell or a framing.
        """
        where = f" ({label})" if label else ""
        cols = {name: np.asarray(v) for name, v in (("question_id", question_id), ("template_id", template_id),
                                                      ("defense", defense), ("deploy", deploy),
                                                      ("correct", correct))}
        lengths = {v.shape for v in cols.values()}
        if any(v.ndim != 1 for v in cols.values()) or len(lengths) != 1:
            raise StatsInputError(f"the record columns{where} must be 1-D and of equal length.")
        n = len(cols["correct"])
        if n == 0:
            raise StatsInputError(f"there are no scored items{where}.")
        try:
            corr = cols["correct"].astype(np.float64)
        except (TypeError, ValueError):
            raise StatsInputError(f"correct{where} must hold 0 or 1 for every item.") from None
        if not np.all((corr == 0.0) | (corr == 1.0)):
            bad = corr[~((corr == 0.0) | (corr == 1.0))][0]
            raise StatsInputError(f"correct{where} must be 0 or 1 for every item, got {bad!r}.")
        labels, q = np.unique(cols["question_id"].astype(str), return_inverse=True)
        _, t = np.unique(cols["template_id"].astype(str), return_inverse=True)
        dfn = cols["defense"].astype(bool)
        dpl = cols["deploy"].astype(bool)
        out = cls(question=q.astype(np.int64), template=t.astype(np.int64), defense=dfn, deploy=dpl,
                  correct=corr, question_ids=tuple(str(x) for x in labels), label=label)
        _, counts = out.unit_sums("question")
        lacking = counts == 0
        if np.any(lacking):
            qi, si = np.argwhere(lacking)[0]
            cell, framing = STRATUM_NAMES[si].split("/")
            raise StatsInputError(
                f"question '{labels[qi]}'{where} has no item for the {cell} cell under {framing} framing; "
                f"every question must be scored in both cells under both framings."
            )
        return out

    @property
    def n_items(self) -> int:
        return int(self.correct.size)

    @property
    def n_questions(self) -> int:
        return len(self.question_ids)

    def stratum(self) -> np.ndarray:
        """Stratum index per item: 0 baseline/eval, 1 baseline/deploy, 2 defense/eval, 3 defense/deploy."""
        return 2 * self.defense.astype(np.int64) + self.deploy.astype(np.int64)

    def unit_sums(self, unit: str = "question") -> tuple[np.ndarray, np.ndarray]:
        """Per resampling unit and stratum: correct counts ``S`` and item counts ``N``, each (U, 4).

        ``unit="question"`` clusters all templates and framings of a question (they are
        not independent evidence);
        ``unit="item"`` treats each (question, template) as its own unit (the labelled, too narrow
        comparison).
        """
        if unit == "question":
            codes, n_units = self.question, self.n_questions
        elif unit == "item":
            pair = self.question * (int(self.template.max()) + 1) + self.template
            _, codes = np.unique(pair, return_inverse=True)
            n_units = int(codes.max()) + 1
        else:
            raise StatsInputError(f"unit must be 'question' or 'item', got {unit!r}.")
        flat = codes * 4 + self.stratum()
        S = np.bincount(flat, weights=self.correct, minlength=n_units * 4).reshape(n_units, 4)
        N = np.bincount(flat, minlength=n_units * 4).reshape(n_units, 4).astype(np.float64)
        return S, N

    def rates(self) -> np.ndarray:
        """Pooled accuracy of the four strata, shape (4,)."""
        S, N = self.unit_sums("question")
        return S.sum(axis=0) / N.sum(axis=0)

    def question_rates(self) -> np.ndarray:
        """Per-question accuracy of the four strata, shape (n_questions, 4)."""
        S, N = self.unit_sums("question")
        return S / N


def gaps(rates: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(gap^0, gap^R, Δgap, Δdeploy) from rates with strata on the last axis."""
    gap0 = rates[..., B_DEPLOY] - rates[..., B_EVAL]
    gapr = rates[..., R_DEPLOY] - rates[..., R_EVAL]
    return gap0, gapr, gapr - gap0, rates[..., R_DEPLOY] - rates[..., B_DEPLOY]


@dataclass(frozen=True)
class GapEstimates:
    """What diagnostics (a) and (b) both report of one defense/baseline pair: the ``status`` and
    the point estimates of its records: ``delta_gap`` (Δgap = gap^R − gap^0), ``delta_deploy``
    (defense − baseline deploy accuracy), ``gap_baseline`` and ``gap_defense`` (each cell's
    deploy − eval accuracy) and the four pooled ``rates`` (in :data:`STRATUM_NAMES` order).
    :class:`~.heldout.GateA` and :class:`~.fresh.GateB` add their intervals and standard errors."""

    status: str
    delta_gap: float
    delta_deploy: float
    gap_baseline: float
    gap_defense: float
    rates: tuple[float, float, float, float]


def gap_estimates(rates: np.ndarray) -> dict[str, float | tuple[float, ...]]:
    """The point-estimate fields of :class:`GapEstimates` from pooled ``rates`` (shape (4,))."""
    gap0, gapr, dgap, ddep = gaps(rates)
    return {"delta_gap": float(dgap), "delta_deploy": float(ddep), "gap_baseline": float(gap0),
            "gap_defense": float(gapr), "rates": tuple(float(x) for x in rates)}


def sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size >= 2 else float("nan")
