"""The acceptance card as a frozen, typed document: :class:`AcceptanceCard`, one
:class:`AcceptanceCell` per defense/baseline pair with its four :class:`Diagnostic` entries, the
progressive filter (:class:`FilterEntry`) and the threshold-sensitivity table
(:class:`SensitivityEntry`).

:meth:`AcceptanceCard.to_json` is the one serialiser: the document validated against
``schemas/acceptance_card.v1.json`` (:func:`validate`, here because reading a card back checks it
first) and written as ``card.json``. It always has ``cells``, ``progressive_filter`` and
``threshold_sensitivity``; with exactly one pair the top level also carries that cell's
``defense``, ``baseline``, ``diagnostics`` (``a``, ``b``, ``c``, ``d``), ``verdict``,
``verdict_reason``, ``weaker_claims`` and ``delta_deploy``. :meth:`AcceptanceCard.from_json` reads
such a document back (``from_json(d).to_json() == d``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from recipe_audit.cards import schemas
from recipe_audit.stats import acceptance as gates
from recipe_audit.stats.interval import Interval

SCHEMA_VERSION = "1.0"
CARD_KIND = "acceptance_card"
SCHEMA_FILE = "acceptance_card.v1.json"
CLAIM = "this fine-tuning recipe reduces an installed evaluation-vs-deployment gap"
DELTA_DEPLOY_NOTE = "reported beside the gates; never rescues a verdict"


class AcceptanceCardError(ValueError):
    """An acceptance card document is invalid or cannot be written (one sentence)."""


def freeze(v: Any) -> Any:
    """A JSON value made read-only: objects become read-only mappings, arrays tuples."""
    if isinstance(v, Mapping):
        return MappingProxyType({k: freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    return v


def thaw(v: Any) -> Any:
    """The JSON value of a frozen one (:func:`freeze` reversed)."""
    if isinstance(v, Mapping):
        return {k: thaw(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return [thaw(x) for x in v]
    return v


EMPTY: Mapping[str, Any] = MappingProxyType({})


def _interval(x) -> Interval | None:
    return None if x is None else Interval(*x)


def _list(x) -> list | None:
    return None if x is None else list(x)


@dataclass(frozen=True)
class Statistic:
    """A diagnostic's test statistic: its name and value (None when not a finite number)."""

    name: str
    value: float | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Statistic | None:
        return None if d is None else cls(name=d["name"], value=d["value"])


DIAGNOSTIC_KEYS = ("status", "statistic", "threshold", "reason", "title", "does_not_prove", "inputs")


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of a cell: status, statistic, threshold, reason, title and what it does not
    prove; ``detail`` holds the diagnostic's own numbers (``delta_gap``, ``ci_delta_gap``, ``rho_AT``,
    ``gamma_P``, …: the schema's other keys, in the card's order, read-only); ``inputs`` the
    mechanism inputs of (c), when declared."""

    status: str
    statistic: Statistic | None
    threshold: str | None
    reason: str
    title: str
    does_not_prove: str
    detail: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    inputs: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status,
                               "statistic": None if self.statistic is None else self.statistic.to_json(),
                               "threshold": self.threshold, "reason": self.reason}
        out.update(thaw(self.detail))
        out["title"] = self.title
        out["does_not_prove"] = self.does_not_prove
        if self.inputs is not None:
            out["inputs"] = thaw(self.inputs)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Diagnostic:
        return cls(status=d["status"], statistic=Statistic.from_json(d["statistic"]), threshold=d["threshold"],
                   reason=d["reason"], title=d["title"], does_not_prove=d["does_not_prove"],
                   detail=freeze({k: v for k, v in d.items() if k not in DIAGNOSTIC_KEYS}),
                   inputs=freeze(d["inputs"]) if "inputs" in d else None)


@dataclass(frozen=True)
class Diagnostics:
    """The four diagnostics of a cell."""

    a: Diagnostic
    b: Diagnostic
    c: Diagnostic
    d: Diagnostic

    def to_json(self) -> dict[str, Any]:
        return {g: getattr(self, g).to_json() for g in gates.GATES}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Diagnostics:
        return cls(**{g: Diagnostic.from_json(d[g]) for g in gates.GATES})


@dataclass(frozen=True)
class BaselineGap:
    """A baseline gap r_D − r_E with its question-clustered SE, and whether it is installed."""

    gap: float | None
    se: float | None
    n_questions: int
    rate_eval: float | None
    rate_deploy: float | None
    se_multiplier: float
    installable: bool

    def to_json(self) -> dict[str, Any]:
        return {"gap": self.gap, "se": self.se, "n_questions": self.n_questions, "rate_eval": self.rate_eval,
                "rate_deploy": self.rate_deploy, "se_multiplier": self.se_multiplier, "installable": self.installable}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BaselineGap:
        return cls(**{k: d[k] for k in ("gap", "se", "n_questions", "rate_eval", "rate_deploy", "se_multiplier",
                                        "installable")})


@dataclass(frozen=True)
class CrossTask:
    """The cross task of diagnostic (d) and the cells measured on it."""

    task: str
    defense: str | None
    baseline: str | None
    restricted_variant: bool

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "defense": self.defense, "baseline": self.baseline,
                "restricted_variant": self.restricted_variant}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> CrossTask | None:
        return None if d is None else cls(task=d["task"], defense=d["defense"], baseline=d["baseline"],
                                           restricted_variant=d["restricted_variant"])


@dataclass(frozen=True)
class DeltaDeploy:
    """Δdeploy = r_D^R − r_D^0 with its interval: reported beside the gates, never rescues a verdict."""

    estimate: float | None
    interval: Interval | None  # its ends None where not finite numbers
    level: float | None
    method: str
    note: str = DELTA_DEPLOY_NOTE

    def to_json(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "interval": _list(self.interval), "level": self.level,
                "method": self.method, "note": self.note}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DeltaDeploy | None:
        return None if d is None else cls(estimate=d["estimate"], interval=_interval(d["interval"]),
                                           level=d["level"], method=d["method"], note=d["note"])


@dataclass(frozen=True)
class AcceptanceCell:
    """The card of one defense/baseline pair: its four diagnostics, the verdict and its reason, the
    weaker claims that survive, and Δdeploy. ``statuses`` is read off the diagnostics."""

    label: str
    defense: str
    baseline: str
    task: str
    cross: CrossTask | None
    primary_baseline_gap: BaselineGap
    diagnostics: Diagnostics
    verdict: str
    verdict_reason: str
    weaker_claims: tuple[str, ...]
    delta_deploy: DeltaDeploy | None

    @property
    def statuses(self) -> dict[str, str]:
        return {g: getattr(self.diagnostics, g).status for g in gates.GATES}

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "defense": self.defense,
            "baseline": self.baseline,
            "task": self.task,
            "cross": None if self.cross is None else self.cross.to_json(),
            "primary_baseline_gap": self.primary_baseline_gap.to_json(),
            "diagnostics": self.diagnostics.to_json(),
            "statuses": self.statuses,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "weaker_claims": list(self.weaker_claims),
            "delta_deploy": None if self.delta_deploy is None else self.delta_deploy.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AcceptanceCell:
        cell = cls(label=d["label"], defense=d["defense"], baseline=d["baseline"], task=d["task"],
                   cross=CrossTask.from_json(d.get("cross")),
                   primary_baseline_gap=BaselineGap.from_json(d["primary_baseline_gap"]),
                   diagnostics=Diagnostics.from_json(d["diagnostics"]), verdict=d["verdict"],
                   verdict_reason=d["verdict_reason"], weaker_claims=tuple(d["weaker_claims"]),
                   delta_deploy=DeltaDeploy.from_json(d["delta_deploy"]))
        if dict(d["statuses"]) != cell.statuses:
            raise AcceptanceCardError(f"Cell '{cell.label}' lists statuses {dict(d['statuses'])} that are not "
                                      f"its diagnostics' {cell.statuses}.")
        return cell


@dataclass(frozen=True)
class FilterEntry:
    """A row of the progressive filter (see :func:`recipe_audit.stats.acceptance.progressive_filter`)."""

    filter: str
    gates: tuple[str, ...]
    n_cells: int
    n_with_result: int
    n_pass: int

    def to_json(self) -> dict[str, Any]:
        return {"filter": self.filter, "gates": list(self.gates), "n_cells": self.n_cells,
                "n_with_result": self.n_with_result, "n_pass": self.n_pass}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FilterEntry:
        return cls(filter=d["filter"], gates=tuple(d["gates"]), n_cells=d["n_cells"],
                   n_with_result=d["n_with_result"], n_pass=d["n_pass"])


@dataclass(frozen=True)
class SensitivityEntry:
    """A row of the threshold-sensitivity table: a cell re-read with one diagnostic at another threshold."""

    cell: str
    gate: str
    variant: str
    status: str
    status_variant: str
    verdict: str
    verdict_variant: str

    @property
    def verdict_changes(self) -> bool:
        return self.verdict != self.verdict_variant

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "gate": self.gate, "variant": self.variant, "status": self.status,
                "status_variant": self.status_variant, "verdict": self.verdict,
                "verdict_variant": self.verdict_variant, "verdict_changes": self.verdict_changes}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SensitivityEntry:
        row = cls(**{k: d[k] for k in ("cell", "gate", "variant", "status", "status_variant", "verdict",
                                       "verdict_variant")})
        if d["verdict_changes"] != row.verdict_changes:
            raise AcceptanceCardError(f"A threshold-sensitivity row of cell '{row.cell}' says verdict_changes = "
                                      f"{d['verdict_changes']} for verdicts '{row.verdict}' → '{row.verdict_variant}'.")
        return row


# With exactly one cell the top level repeats these keys of it.
_ONE_CELL_KEYS = ("defense", "baseline", "diagnostics", "verdict", "verdict_reason", "weaker_claims", "delta_deploy")


@dataclass(frozen=True)
class AcceptanceCard:
    """The acceptance card: frozen and typed. ``software``, ``source`` and ``options`` are
    read-only mappings (JSON objects as given; arrays become tuples). :meth:`to_json` is the one
    serialiser; :meth:`from_json` reads it back."""

    schema_version: str
    kind: str
    claim: str
    created: str
    software: Mapping[str, str]
    source: Mapping[str, Any]
    options: Mapping[str, Any]
    cells: tuple[AcceptanceCell, ...]
    progressive_filter: tuple[FilterEntry, ...]
    threshold_sensitivity: tuple[SensitivityEntry, ...]
    digest: str

    def content_digest(self) -> str:
        """sha256 over the records digest, the options and every cell's card (not the creation time)."""
        payload = {"records_digest": self.source.get("records_digest"), "options": thaw(self.options),
                   "cells": [c.to_json() for c in self.cells]}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, allow_nan=False).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The card document (validated against the schema and written as ``card.json``)."""
        cells = [c.to_json() for c in self.cells]
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "claim": self.claim,
            "created": self.created,
            "software": thaw(self.software),
            "source": thaw(self.source),
            "options": thaw(self.options),
            "cells": cells,
            "progressive_filter": [r.to_json() for r in self.progressive_filter],
            "threshold_sensitivity": [r.to_json() for r in self.threshold_sensitivity],
        }
        if len(cells) == 1:
            for key in _ONE_CELL_KEYS:
                doc[key] = cells[0][key]
        doc["digest"] = self.digest
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AcceptanceCard:
        """Read a card document back (validated first; :class:`AcceptanceCardError` when invalid)."""
        validate(doc)
        card = cls(schema_version=doc["schema_version"], kind=doc["kind"], claim=doc["claim"], created=doc["created"],
                   software=freeze(doc["software"]), source=freeze(doc["source"]), options=freeze(doc["options"]),
                   cells=tuple(AcceptanceCell.from_json(c) for c in doc["cells"]),
                   progressive_filter=tuple(FilterEntry.from_json(r) for r in doc["progressive_filter"]),
                   threshold_sensitivity=tuple(SensitivityEntry.from_json(r) for r in doc["threshold_sensitivity"]),
                   digest=doc["digest"])
        if len(card.cells) == 1:
            one = doc["cells"][0]
            for key in _ONE_CELL_KEYS:
                if doc.get(key) != one[key]:
                    raise AcceptanceCardError(f"The top-level '{key}' of a one-cell card is not that of its cell.")
        return card


def as_card(card: AcceptanceCard | Mapping[str, Any]) -> AcceptanceCard:
    """The typed card of ``card`` (an :class:`AcceptanceCard`, or its JSON read back)."""
    return card if isinstance(card, AcceptanceCard) else AcceptanceCard.from_json(card)


def schema() -> dict[str, Any]:
    return schemas.load(SCHEMA_FILE)


def validate(doc: Mapping[str, Any]) -> None:
    """Raise :class:`AcceptanceCardError` (one sentence) when ``doc`` is not a valid acceptance card."""
    schemas.check(doc, SCHEMA_FILE, AcceptanceCardError, "acceptance card")
