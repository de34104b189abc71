"""Recipe cards as frozen, typed objects: the card (:class:`RecipeCard`), its entries (one cell at
one τ, :class:`CardEntry`) and their sections, with the one serialiser to the JSON Schema
(``recipe_audit/schemas/recipe_card.v1.json``): ``to_json()`` gives exactly the document that is
validated and written as ``card.json``, and ``from_json()`` reads one back
(``RecipeCard.from_json(d).to_json() == d``, key order included, for every card written since
schema 1.0).

Typed (frozen dataclasses, field names as in the schema): the card, its entries, an entry's
``rule_statistics``, ``band``, ``curtailment``, ``anytime`` and ``family`` sections and its re-run
seeds (``duplicates``); a rerun (``reruns``) and an unfinished rerun (``unfinished``) are named
tuples. Kept as immutable mappings (:class:`FrozenMap`, lists as tuples), where a full type would
only copy the schema: ``group``, ``rules``, ``software``, ``source``, ``options``, ``artifacts``,
``grid``, ``split_audit``, ``responsiveness``, ``shift``, an anytime section's ``looks`` and
``fixed_n``, and a per-rerun list of another shape than today's (an older or hand-edited card).

Every record remembers which fields its JSON had and in what order (``key_order``; empty: every
declared field, in declaration order) and keeps fields the schema does not name (``extra``), so
a card read back is written back byte for byte. A record changed with :meth:`Record.updated`
keeps its order and adds new fields at the end, as a ``dict`` update would.

Over 400 lines, kept whole: every typed section of the card sits beside the one serialiser that
writes it and reads it back exactly (:class:`Record`), which is what the schema promises; apart,
a section's type and its reader could drift.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from operator import itemgetter
from typing import Any, NamedTuple

_SCALARS = frozenset({str, int, float, bool, type(None)})


class FrozenMap(Mapping):
    """An immutable mapping (a JSON object of a card that has no type of its own)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))


EMPTY = FrozenMap()


def freeze(value: Any) -> Any:
    """A JSON value made immutable: objects become :class:`FrozenMap`, arrays tuples."""
    t = type(value)
    if t in _SCALARS:
        return value
    if isinstance(value, dict):
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    if t is list or t is tuple:
        return tuple(v if type(v) in _SCALARS else freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON value of a frozen one (:func:`freeze`, a record): dicts and lists again."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is tuple:
        return [v if type(v) in _SCALARS else thaw(v) for v in value]
    if t is FrozenMap:
        return {k: (v if type(v) in _SCALARS else thaw(v)) for k, v in value._data.items()}
    if isinstance(value, Record):
        return value.to_json()
    return value


def _record_loader(cls):
    def load(v):
        return cls.from_json(v) if type(v) is dict else freeze(v)
    return load


def _records_loader(cls):
    def load(v):
        if type(v) is not list:
            return freeze(v)
        return tuple(cls.from_json(x) if type(x) is dict else freeze(x) for x in v)
    return load


def _rows_loader(cls):
    """A per-rerun list of flat objects with exactly the fields of the named tuple ``cls``, in its
    order: a tuple of ``cls``; any other shape is frozen as read."""
    keys = cls._fields
    get = itemgetter(*keys)

    def load(v):
        if type(v) is list and all(type(x) is dict and tuple(x) == keys for x in v):
            return tuple(map(cls._make, map(get, v)))
        return freeze(v)
    return load


def _rows_dumper(cls):
    def dump(v):
        if type(v) is tuple and v and all(type(x) is cls for x in v):
            return [x._asdict() for x in v]
        return thaw(v)
    return dump


def typed(kind: Any, default: Any = None) -> Any:
    """A record field whose JSON value is a record of class ``kind`` (``(kind,)``: an array of
    them; ``[kind]``: an array of the named tuple ``kind``)."""
    return field(default=default, metadata={"json": kind})


_CODECS: dict[type, tuple] = {}


class Record:
    """The serialisation shared by the card's records (frozen dataclasses whose last two fields
    are ``key_order`` and ``extra``)."""

    __slots__ = ()

    @classmethod
    def _codec(cls) -> tuple[tuple[str, ...], dict, dict]:
        c = _CODECS.get(cls)
        if c is None:
            names, loaders, dumpers = [], {}, {}
            for f in fields(cls):
                if f.name in ("key_order", "extra"):
                    continue
                kind = f.metadata.get("json")
                names.append(f.name)
                if isinstance(kind, tuple):
                    loaders[f.name], dumpers[f.name] = _records_loader(kind[0]), thaw
                elif isinstance(kind, list):
                    loaders[f.name], dumpers[f.name] = _rows_loader(kind[0]), _rows_dumper(kind[0])
                elif kind is not None:
                    loaders[f.name], dumpers[f.name] = _record_loader(kind), thaw
                else:
                    loaders[f.name], dumpers[f.name] = freeze, thaw
            c = _CODECS[cls] = (tuple(names), loaders, dumpers)
        return c

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]):
        """The record of a JSON object (as :meth:`to_json` gives it, or read from a file)."""
        names, loaders, _ = cls._codec()
        kw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in doc.items():
            load = loaders.get(k)
            if load is None:
                extra[k] = freeze(v)
            else:
                kw[k] = load(v)
        return cls(**kw, key_order=tuple(doc), extra=FrozenMap(extra) if extra else EMPTY)

    @classmethod
    def of(cls, **fields_: Any):
        """The record with ``fields_``, its JSON in their order: how a card builds its records
        directly. A value is given typed (a record, a tuple) or as plain JSON (frozen here); a name
        the type does not declare is kept in ``extra``."""
        names, loaders, _ = cls._codec()
        own = {k: loaders[k](v) if isinstance(v, (dict, list)) else v for k, v in fields_.items() if k in names}
        extra = {k: freeze(v) for k, v in fields_.items() if k not in names}
        return cls(**own, key_order=tuple(fields_), extra=FrozenMap(extra) if extra else EMPTY)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the record: plain dicts, lists, strings, numbers, booleans and None."""
        names, _, dumpers = self._codec()
        order = self.key_order or names + tuple(self.extra)
        out = {}
        for k in order:
            dump = dumpers.get(k)
            out[k] = thaw(self.extra[k]) if dump is None else dump(getattr(self, k))
        return out

    def has(self, name: str) -> bool:
        """Whether the record's JSON has the field ``name`` (an absent one reads as None)."""
        return name in (self.key_order or self._codec()[0])

    def updated(self, **changes: Any):
        """The record with ``changes`` (values frozen: plain JSON may be given); a field it did not
        have is added at the end of its JSON, as a ``dict`` update would."""
        names, loaders, _ = self._codec()
        order = list(self.key_order or names + tuple(self.extra))
        order += [k for k in changes if k not in order]
        own = {k: loaders[k](v) if isinstance(v, (dict, list)) else v for k, v in changes.items() if k in names}
        extra = {k: freeze(v) for k, v in changes.items() if k not in names}
        return replace(self, **own, key_order=tuple(order),
                       extra=FrozenMap({**self.extra, **extra}) if extra else self.extra)


def _order() -> Any:
    return field(default=(), repr=False, compare=False)


def _extra() -> Any:
    return field(default=EMPTY, repr=False)


class Rerun(NamedTuple):
    """One rerun of a cell (an item of an entry's ``reruns``)."""

    seed: Any
    run_id: str | None
    value: float | None
    status: str


class UnfinishedRerun(NamedTuple):
    """A rerun that did not finish with a result (an item of an entry's ``unfinished``)."""

    seed: Any
    reason: str
    run_id: str | None


@dataclass(frozen=True)
class Duplicate(Record):
    """A seed run more than once (an item of an entry's ``duplicates``)."""

    seed: Any = None
    run_ids: tuple[str, ...] = ()
    values: tuple[float | None, ...] = ()
    results: tuple[bool, ...] | None = None  # absent on cards of an earlier version
    decided_by: str | None = None
    counted_value: float | None = None
    counted_as: Any = None
    disagree: bool = False
    nondeterministic: bool = False
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class RuleStatistics(Record):
    """What the practice rules computed on the finished reruns of a cell."""

    mean: float | None = None
    median: float | None = None
    sd: float | None = None
    bootstrap_limit: float | None = None
    two_sd_limit: float | None = None
    bootstrap_percentile: float | None = None
    bootstrap_B: int | None = None
    bootstrap_seed: int | None = None
    n_finished: int | None = None
    n_ignored_by_practice_rules: int | None = None
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class Band(Record):
    """The simultaneous band at an entry's τ (valid for every τ at once)."""

    method: str | None = None
    label: str | None = None
    fallback: bool | None = None
    delta: float | None = None
    n: int | None = None
    n_unlaunched_counted_as_failures: int = 0
    c: float | None = None
    local_level: float | None = None
    coverage: float | None = None
    sample_floor: int | None = None
    k: int | None = None
    upper_bound: float | None = None
    pointwise_upper_bound: float | None = None
    supported: bool | None = None
    certified_tau_limit: float | None = None
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class Curtailment(Record):
    """A curtailing sweep's plan and where it stopped (the entry's bounds are at the planned N)."""

    n_planned: int | None = None
    n_launched: int | None = None
    remaining: int | None = None
    stopped_early: bool | None = None
    stop_on: str | None = None
    batch_size: int | None = None
    sweep_run_id: str | None = None
    sweep_reason: str | None = None
    sweep_audit_set: str | None = None
    sweep_taus: tuple[float, ...] | None = None
    sweep_eps: float | None = None
    sweep_delta: float | None = None
    k_range_at_n: tuple[int, ...] | None = None
    possible_verdicts: tuple[str, ...] | None = None
    verdict_determined: bool | None = None
    decision_determined: bool | None = None
    upper_if_rest_pass: float | None = None
    explanation: str | None = None
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class AnytimeReading(Record):
    """The confidence sequence's reading of an open-ended sweep's cell (``looks``: mappings with
    ``n``, ``k``, ``upper``, ``lower``, ``verdict``; ``fixed_n``: the fixed-N reading)."""

    method: str | None = None
    rule: str | None = None
    upper_bound: float | None = None
    lower_bound: float | None = None
    sample_floor: int | None = None
    verdict: str | None = None
    n_looks: int | None = None
    looks: tuple[Mapping[str, Any], ...] = ()
    batch_size: int | None = None
    max_reruns: int | None = None
    stop_reason: str | None = None
    sweep_run_id: str | None = None
    sweep_taus: tuple[float, ...] | None = None
    fixed_n: Mapping[str, Any] = EMPTY
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class FamilyReading(Record):
    """The family-wise reading of an entry of a card over several recipe identities."""

    size: int | None = None
    method: str | None = None
    delta: float | None = None
    members: tuple[str, ...] = ()
    recipe_ids: tuple[str | None, ...] = ()
    untested: int | None = None
    sample_floor: int | None = None
    pointwise_verdict: str | None = None
    why: str | None = None
    upper_bound: float | None = None
    lower_bound: float | None = None
    level: float | None = None
    p_value: float | None = None
    rank: int | None = None
    verdict: str | None = None
    more_clean_reruns_needed: int | None = None
    upper_bound_level: float | None = None  # present where upper_bound is at Holm's level, not at delta
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class CardEntry(Record):
    """One cell (recipe, group, audit set) at one τ: the bound, the verdict, the rules and the
    reruns behind them. Sections an entry may lack (``band`` on a refused cell, ``curtailment``,
    ``reading``, ``anytime``, ``family``) are None when absent."""

    group: Mapping[str, str | None] = EMPTY
    label: str = ""
    recipe_id: str | None = None
    recipe_summary: str = ""
    audit_set: str | None = None
    metric: str = ""
    higher_is_better: bool = True
    tau: float = 0.0
    eps: float = 0.0
    delta: float = 0.0
    n_reruns: int = 0
    planned_seeds: tuple[Any, ...] = ()
    unfinished: tuple[UnfinishedRerun, ...] = typed([UnfinishedRerun], ())
    duplicates: tuple[Duplicate, ...] = typed((Duplicate,), ())
    nondeterministic: bool = False
    sweep_run_ids: tuple[str, ...] = ()
    reruns: tuple[Rerun, ...] = typed([Rerun], ())
    digest: str = ""
    n_failures: int | None = None
    n_unfinished: int = 0
    failed_seeds: tuple[Any, ...] = ()
    upper_bound: float | None = None
    lower_bound: float | None = None
    sample_floor: int | None = None
    more_clean_reruns_needed: int | None = None
    verdict: str = ""
    reason: str = ""
    rules: Mapping[str, bool] = EMPTY
    rule_statistics: RuleStatistics | None = typed(RuleStatistics)
    band: Band | None = typed(Band)
    curtailment: Curtailment | None = typed(Curtailment)
    reading: str | None = None
    anytime: AnytimeReading | None = typed(AnytimeReading)
    family: FamilyReading | None = typed(FamilyReading)
    # the entry's own fixed-N reading when a family-wise (asked for) or anytime reading leads it
    pointwise: Mapping[str, Any] | None = None
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()

    def __post_init__(self) -> None:
        if not self.key_order:  # every declared field is in the JSON: the sections that are absent too
            absent = ("curtailment", "reading", "anytime", "family", "pointwise")
            names = tuple(n for n in self._codec()[0] if n not in absent)
            object.__setattr__(self, "key_order", names + tuple(self.extra))

    @property
    def never_ran(self) -> int:
        """How many of the entry's planned reruns never started (its unfinished reruns that never
        logged a run: an interrupted sweep's seeds), counted among its failures."""
        return sum(1 for u in self.unfinished if u.reason == "never-logged")

    @property
    def cell_key(self) -> tuple:
        """What the entries of one cell share: (recipe id, group items, audit set, metric)."""
        return (self.recipe_id, tuple(sorted(self.group.items())), self.audit_set, self.metric)


@dataclass(frozen=True)
class RecipeCard(Record):
    """A recipe card: for each cell and τ, one :class:`CardEntry` (``cells``), with what it was
    computed from (``source``), asked (``options``), and its digests. ``split_audit``,
    ``responsiveness`` and ``shift`` are present only on the cards that asked for them."""

    schema_version: str = ""
    kind: str = ""
    created: str = ""
    software: Mapping[str, str] = EMPTY
    source: Mapping[str, Any] = EMPTY
    options: Mapping[str, Any] = EMPTY
    cells: tuple[CardEntry, ...] = typed((CardEntry,), ())
    grid: tuple[Any, ...] | None = None
    split_audit: Mapping[str, Any] | None = None
    shift: Mapping[str, Any] | None = None
    responsiveness: Mapping[str, Any] | None = None
    digest_scheme: str | None = None
    content_digest: str | None = None
    artifacts: Mapping[str, str] | None = None
    digest: str = ""
    key_order: tuple[str, ...] = _order()
    extra: Mapping[str, Any] = _extra()

    def __post_init__(self) -> None:
        if not self.key_order:
            names = tuple(n for n in self._codec()[0] if n not in ("grid", "split_audit", "shift", "responsiveness",
                                                                   "artifacts"))
            object.__setattr__(self, "key_order", names + tuple(self.extra))

    def sealed(self, artifacts: Mapping[str, str] | None = None, *, content_digest: str | None = None) -> RecipeCard:
        """The card with its digest fields set (:func:`recipe_audit.cards.digest.seal`)."""
        from recipe_audit.cards.digest import seal

        return self.with_seal_of(seal(self.to_json(), dict(artifacts) if artifacts else None,
                                      content_digest=content_digest))

    def with_seal_of(self, doc: Mapping[str, Any]) -> RecipeCard:
        """This card with the digest fields of ``doc``, which is this card's own JSON as
        :func:`~recipe_audit.cards.digest.seal` sealed it: the same card as
        ``RecipeCard.from_json(doc)`` without typing every entry again."""
        art = doc.get("artifacts")
        return replace(self, schema_version=doc["schema_version"], digest_scheme=doc["digest_scheme"],
                       content_digest=doc["content_digest"], artifacts=None if art is None else freeze(art),
                       digest=doc["digest"], key_order=tuple(doc))

    def cell_groups(self) -> dict[tuple, list[CardEntry]]:
        """Entries grouped by cell (recipe, group, audit set, metric), in card order."""
        out: dict[tuple, list[CardEntry]] = {}
        for e in self.cells:
            out.setdefault(e.cell_key, []).append(e)
        return out
