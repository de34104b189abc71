"""Recipe cards: from resolved reruns to a card document.

A *card document* is what one card computation produces: a list of entries, one per
(cell, τ), each with the exact tail bound, the verdict and the comparison rules, plus the
reruns behind it and their digest. The document is plain JSON (validated against the schema
shipped in ``recipe_audit/schemas``); rendering and storage live in sibling modules.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recipe_audit import keys, stats

SCHEMA_VERSION = "1.1"
CARD_KIND = "recipe_card"
DIGEST_SCHEME = "content+artifacts/2"
"""The card digest of every card written since schema 1.1 (see :func:`document_digest`)."""
DEFAULT_BOOTSTRAP_B = 2000
DEFAULT_BOOTSTRAP_SEED = 0


class CardError(ValueError):
    """A card cannot be computed from this input (one sentence)."""


@dataclass(frozen=True)
class CardOptions:
    """What a card is asked: bars, budget, risk, and how unfinished reruns are treated."""

    taus: tuple[float, ...]
    eps: float = 0.10
    delta: float = 0.10
    higher_is_better: bool = True
    unfinished: str = "fail"  # "fail": unfinished reruns are failures; "refuse": no card
    bootstrap_B: int = DEFAULT_BOOTSTRAP_B
    bootstrap_seed: int = DEFAULT_BOOTSTRAP_SEED
    band_method: str = "auto"  # the simultaneous band: auto | exact-cp | exact-ks | dkw
    family_size: int | None = None  # M stated by the user (default: the recipe identities counted)
    anytime: bool = False  # read every cell as an open-ended sweep (the confidence sequence)

    def __post_init__(self) -> None:
        if not self.taus:
            raise CardError("Ask for at least one release bar tau.")
        for t in self.taus:
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
                raise CardError(f"The release bar tau must be a finite number, not {t!r}.")
        for name, v in (("eps", self.eps), ("delta", self.delta)):
            if not isinstance(v, (int, float)) or not 0 < v < 1:
                raise CardError(f"{name} must lie strictly between 0 and 1, not {v}.")
        if self.unfinished not in ("fail", "refuse"):
            raise CardError(f"unfinished must be 'fail' or 'refuse', not {self.unfinished!r}.")
        if self.bootstrap_B < 1:
            raise CardError("The bootstrap needs at least one resample.")
        if self.band_method not in ("auto", *stats.BAND_METHODS):
            raise CardError(f"band_method must be one of auto, {', '.join(stats.BAND_METHODS)}, "
                            f"not {self.band_method!r}.")
        if self.family_size is not None and (isinstance(self.family_size, bool) or
                                             not isinstance(self.family_size, int) or self.family_size < 1):
            raise CardError(f"The family size M must be a whole number of recipes, at least 1, not {self.family_size!r}.")


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


def _num(x: Any) -> Any:
    """JSON-safe number: NaN/inf become None."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def _seed_json(s: Any) -> Any:
    return int(s) if isinstance(s, (int, np.integer)) else s


def _duplicate_json(d, tau: float) -> dict[str, Any]:
    """A re-run seed (``reruns.Duplicate``) on the card at ``tau``: its runs, which of them are
    results, the run the seed counts and its value, what that makes the seed at ``tau``, and
    whether its results disagree about the bar (then the seed counts as failing)."""
    return {"seed": _seed_json(d.seed), "run_ids": list(d.run_ids), "values": [_num(v) for v in d.values],
            "results": list(d.results), "decided_by": d.decided_by, "counted_value": _num(d.counted_value),
            "counted_as": d.counts_as(tau), "disagree": bool(d.disagrees(tau)),
            "nondeterministic": bool(d.nondeterministic)}


def card_entry(cell: Cell, tau: float, opts: CardOptions) -> dict[str, Any]:
    """One entry of the document's ``cells`` list: one cell at one τ."""
    base: dict[str, Any] = {
        "group": {k: (None if v is None else str(v)) for k, v in cell.group.items()},
        "label": cell.label,
        "recipe_id": cell.recipe_id,
        "recipe_summary": cell.recipe_summary,
        "audit_set": cell.audit_set,
        "metric": cell.metric,
        "higher_is_better": opts.higher_is_better,
        "tau": float(tau),
        "eps": opts.eps,
        "delta": opts.delta,
        "n_reruns": cell.n,
        "planned_seeds": [_seed_json(s) for s in cell.planned_seeds],
        "unfinished": [{"seed": _seed_json(s), "reason": r, "run_id": rid} for s, r, rid in cell.unfinished],
        "duplicates": [_duplicate_json(d, tau) for d in cell.duplicates],
        "nondeterministic": bool(cell.disagreeing_duplicates),
        "sweep_run_ids": list(cell.sweep_run_ids),
        "reruns": [{"seed": _seed_json(s), "run_id": rid, "value": _num(v), "status": st}
                   for s, v, rid, st in zip(cell.seeds, cell.values.tolist(), cell.run_ids, cell.statuses,
                                            strict=True)],
        "digest": cell.digest,
    }
    if cell.shift_refusal is not None:
        floor = stats.sample_floor(opts.eps, opts.delta)
        base.update({
            "n_failures": None, "n_unfinished": len(cell.unfinished), "failed_seeds": [],
            "upper_bound": None, "lower_bound": None, "sample_floor": floor,
            "more_clean_reruns_needed": None, "verdict": stats.REFUSED_SHIFT,
            "reason": cell.shift_refusal,
            "rules": {r: False for r in stats.RULES}, "rule_statistics": None,
        })
        return base
    failed = stats.failure_mask(cell.values, tau, higher_is_better=opts.higher_is_better)
    k = int(np.count_nonzero(failed))
    bound = stats.tail_bound(k, cell.n, opts.eps, opts.delta)
    rules = stats.apply_rules(
        cell.values, tau, eps=opts.eps, delta=opts.delta, higher_is_better=opts.higher_is_better,
        B=opts.bootstrap_B, rng=np.random.default_rng(opts.bootstrap_seed),
    )
    base.update({
        "n_failures": k,
        "n_unfinished": len(cell.unfinished),
        "failed_seeds": [_seed_json(s) for s, f in zip(cell.seeds, failed, strict=True) if f],
        "upper_bound": bound.upper,
        "lower_bound": bound.lower,
        "sample_floor": bound.sample_floor,
        "more_clean_reruns_needed": bound.more_clean_reruns_needed,
        "verdict": bound.verdict,
        "reason": _reason(bound, cell, opts),
        "rules": {r: bool(rules.ships[r]) for r in stats.RULES},
        "rule_statistics": {
            "mean": _num(rules.mean), "median": _num(rules.median), "sd": _num(rules.sd),
            "bootstrap_limit": _num(rules.bootstrap_limit), "two_sd_limit": _num(rules.two_sd_limit),
            "bootstrap_percentile": rules.bootstrap_percentile, "bootstrap_B": rules.B,
            "bootstrap_seed": opts.bootstrap_seed, "n_finished": rules.n_finished,
            "n_ignored_by_practice_rules": rules.n_ignored,
        },
    })
    from recipe_audit.cards.band import band_fields
    from recipe_audit.cards.curtail import curtailed_fields

    if cell.extra.get("curtailment"):  # the verdict at the planned N of a curtailed sweep
        base.update(curtailed_fields(cell, k, tau, opts, base["rules"]))
    base["band"] = band_fields(cell, tau, opts)  # the bound valid for every τ at once
    return base


def _reason(bound, cell: Cell, opts: CardOptions) -> str:
    k, n = bound.k, bound.n
    unf = f" ({len(cell.unfinished)} unfinished, counted as failures)" if cell.unfinished else ""
    if bound.verdict == stats.SUPPORTED:
        return (f"{k} of {n} reruns failed{unf}; with confidence {1 - opts.delta:.0%} the next rerun "
                f"fails with probability at most {bound.upper:.3f} ≤ ε = {opts.eps:g}.")
    if bound.verdict == stats.STRONG_UNSUPPORTED:
        return (f"{k} of {n} reruns failed{unf}; even the lower bound {bound.lower:.3f} exceeds "
                f"ε = {opts.eps:g}: the recipe fails too often.")
    if bound.verdict == stats.INSUFFICIENT:
        return (f"{n} reruns are fewer than the sample floor {bound.sample_floor} for ε = {opts.eps:g}, "
                f"δ = {opts.delta:g}: nothing can be certified; at least "
                f"{bound.more_clean_reruns_needed} more clean reruns are needed.")
    return (f"{k} of {n} reruns failed{unf}; the upper bound {bound.upper:.3f} exceeds ε = {opts.eps:g}"
            + (f"; {bound.more_clean_reruns_needed} more clean reruns would be needed." if
               bound.more_clean_reruns_needed else "."))


def installed_versions(packages: Sequence[str]) -> dict[str, str]:
    """``{package: version}`` for those of ``packages`` that are installed, in the order given."""
    from importlib import metadata

    out = {}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def software_versions() -> dict[str, str]:
    return installed_versions(("recipe_audit", "mlflow", "numpy", "scipy", "torch", "transformers", "peft",
                               "hydra-core"))


def build_document(cells: Sequence[Cell], opts: CardOptions, source: dict[str, Any]) -> dict[str, Any]:
    """The card document for ``cells`` × ``opts.taus``. Unfinished reruns refuse the card when
    ``opts.unfinished == "refuse"`` (raises ``CardError`` naming them)."""
    if not cells:
        raise CardError("There are no reruns to compute a card from.")
    if opts.unfinished == "refuse":
        pending = [(c.label, u) for c in cells for u in c.unfinished if c.shift_refusal is None]
        if pending:
            shown = ", ".join(f"seed {u[0]} ({u[1]})" for _, u in pending[:6])
            raise CardError(f"The card refuses: {len(pending)} rerun(s) are unfinished: {shown}"
                            f"{' ...' if len(pending) > 6 else ''}.")
    entries = [card_entry(c, t, opts) for c in cells for t in opts.taus]
    from recipe_audit.cards.anytime import apply_anytime
    from recipe_audit.cards.family import apply_family

    apply_anytime(entries, cells, opts)  # an open-ended sweep's cells: the confidence sequence
    apply_family(entries, opts.eps, opts.delta, source.get("family_recipe_ids") or (), opts.family_size)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": CARD_KIND,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(),
        "source": source,
        "options": {"taus": [float(t) for t in opts.taus], "eps": opts.eps, "delta": opts.delta,
                    "higher_is_better": opts.higher_is_better, "unfinished": opts.unfinished,
                    "bootstrap_B": opts.bootstrap_B, "bootstrap_seed": opts.bootstrap_seed,
                    "band_method": opts.band_method,
                    **({"family_size": opts.family_size} if opts.family_size is not None else {}),
                    **({"anytime": True} if opts.anytime else {})},
        "cells": entries,
    }
    return seal(doc)


# fields of a card document its content digest leaves out (they are derived from it, or cover files)
SEAL_FIELDS = ("digest", "content_digest", "artifacts")


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def content_digest(doc: dict[str, Any]) -> str:
    """sha256 (hex) of the card's JSON content: every field except :data:`SEAL_FIELDS`, as
    canonical JSON (sorted keys, no whitespace, UTF-8). Any edit of any field changes it."""
    return hashlib.sha256(_canonical({k: v for k, v in doc.items() if k not in SEAL_FIELDS})).hexdigest()


_content_digest = content_digest  # the name seal's keyword hides


def is_legacy(doc: dict[str, Any]) -> bool:
    """Whether the card was written under the previous digest scheme (numbers and verdicts only)."""
    return doc.get("digest_scheme") != DIGEST_SCHEME


def document_digest(doc: dict[str, Any]) -> str:
    """The card digest: sha256 over its content digest and, for every other file of the card
    (Markdown, plots, HTML: the ``artifacts`` manifest, file name -> sha256 of its bytes), the
    name and hash. The JSON is covered field by field, the files byte for byte; a card written
    as JSON alone has an empty manifest.

    The hashed text is ``"recipe_audit card digest 2\n" + content_digest + "\n"`` followed by
    ``"<name>\t<sha256>\n"`` per artifact in name order, UTF-8 encoded."""
    lines = ["recipe_audit card digest 2", content_digest(doc)]
    lines += [f"{name}\t{sha}" for name, sha in sorted((doc.get("artifacts") or {}).items())]
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


def legacy_document_digest(doc: dict[str, Any]) -> str:
    """The digest of cards of schema 1.0: the cells' rerun digests and the numbers and verdicts
    they state only (not the other fields, not the Markdown or plots)."""
    h = hashlib.sha256()
    for e in doc["cells"]:
        h.update(json.dumps([e["digest"], e["tau"], e["n_reruns"], e["n_failures"], e["upper_bound"],
                             e["lower_bound"], e["verdict"], e["rules"]], sort_keys=True).encode())
    return h.hexdigest()


def seal(doc: dict[str, Any], artifacts: dict[str, str] | None = None, *,
         content_digest: str | None = None) -> dict[str, Any]:
    """Set the card's digest fields in place (and return it): ``schema_version``,
    ``digest_scheme``, ``content_digest``, the ``artifacts`` manifest (dropped when None or
    empty: the card is then its JSON alone) and ``digest`` (:func:`document_digest`). Call it
    after the last change to the content. ``content_digest``: the content digest of this very
    content, from a :func:`seal` of it with no change since (it is then not computed again)."""
    for k in SEAL_FIELDS:
        doc.pop(k, None)
    doc["schema_version"] = SCHEMA_VERSION
    doc["digest_scheme"] = DIGEST_SCHEME
    doc["content_digest"] = content_digest or _content_digest(doc)
    if artifacts:
        doc["artifacts"] = dict(sorted(artifacts.items()))
    doc["digest"] = document_digest(doc)
    return doc


def summarise_recipe(params: dict[str, Any]) -> str:
    """A readable one-line summary from a rerun's flattened params (recipe_audit runs)."""
    g = params.get
    if g("recipe.name") is None:
        return ""
    lora = "LoRA r={} alpha={} on {}".format(g("recipe.lora.r"), g("recipe.lora.alpha"),
                                           g("recipe.lora.target_modules")) \
        if str(g("recipe.lora.enabled")).lower() == "true" else "full fine-tune"
    length = f"{g('recipe.max_steps')} steps" if g("recipe.max_steps") not in (None, "None") \
        else f"{g('recipe.epochs')} epochs"
    return (f"{g('recipe.name')}: {g('model.name')} on {g('task.name')}, {g('recipe.optimizer')} "
            f"lr={g('recipe.lr')} {g('recipe.schedule')} warmup={g('recipe.warmup_ratio')}, {length}, "
            f"batch {g('recipe.batch_size')}, {lora}")
