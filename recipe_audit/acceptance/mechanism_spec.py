"""The mechanism config of diagnostic (c): what is declared before the audit, as one typed,
frozen :class:`MechanismSpec` whose values are checked in one place (its ``__post_init__``), so a
spec built in Python and one read from a file (:func:`load_mechanism_spec`) pass the same checks.
A bad value is a :class:`~recipe_audit.train.acceptance.calibration.MechanismError` with one
sentence (``recipe-audit acceptance`` prints it and exits 2).

The declarations:

* a **parameter slice**: glob patterns (``fnmatch``) over the base model's parameter names, e.g.
  ``gpt_neox.layers.*.attention.query_key_value.weight`` or ``bert.encoder.layer.*.attention.self.*.weight``;
  a pattern that matches nothing is an error (when the base model is loaded);
* the **claimed class** of the defense, ``shrinkage`` or ``attack-targeted`` (globally or per cell);
* **calibration items** (:func:`~recipe_audit.train.acceptance.calibration.load_calibration`);
* the **update** of each defense cell: a peft LoRA ``adapter`` directory (or MLflow artifact URI),
  or a ``finetuned`` full model directory (or URI).

The file (YAML or JSON) has the keys ``base_model``, ``calibration``, ``slice`` (a list of
patterns), ``claimed_class``, ``cells`` (``{cell: {adapter: …} | {finetuned: …}, optional
claimed_class}``), and optionally ``tokenizer``, ``model_type``, ``max_length``, ``batch_size``,
``task_framings``, ``attack_framing``. With exactly one defense cell, a top-level ``adapter`` or
``finetuned`` names its update. Relative paths are relative to the file's folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from recipe_audit.acceptance.records import is_mlflow_uri
from recipe_audit.stats import acceptance as gates
from recipe_audit.train.acceptance.calibration import FRAMINGS, MODEL_TYPES, MechanismError

__all__ = ["CellUpdate", "MechanismSpec", "load_mechanism_spec"]


@dataclass(frozen=True)
class CellUpdate:
    """Where one defense cell's update is: a LoRA ``adapter`` or a ``finetuned`` model (one of
    them), as a local path or an MLflow artifact URI; optionally its own claimed class."""

    adapter: str | None = None
    finetuned: str | None = None
    claimed_class: str | None = None


@dataclass(frozen=True)
class MechanismSpec:
    """Inputs of diagnostic (c), declared before the audit (see the module docstring). Built, it
    has been checked: every value is of its kind, every cell has one update and a claimed class."""

    base_model: str
    calibration: str
    slice: tuple[str, ...]
    cells: Mapping[str, CellUpdate]
    claimed_class: str | None = None
    tokenizer: str | None = None
    model_type: str = "sequence-classification"
    max_length: int = 128
    batch_size: int = 32
    task_framings: tuple[str, ...] = FRAMINGS
    attack_framing: str = "eval"
    source: str = ""

    def __post_init__(self) -> None:
        src, in_src = (f" {self.source}", f" in {self.source}") if self.source else ("", "")
        for key in ("base_model", "calibration"):
            if not (isinstance(getattr(self, key), str) and getattr(self, key)):
                raise MechanismError(f"The mechanism config{src} must declare '{key}'.")
        if not (self.slice and all(isinstance(s, str) and s for s in self.slice)):
            raise MechanismError(f"The slice{in_src} must be a list of parameter-name patterns.")
        if not self.cells:
            raise MechanismError(f"The mechanism config{src} names no cell update (cells: {{CELL: {{adapter: PATH}}}}).")
        for cell, u in self.cells.items():
            if bool(u.adapter) == bool(u.finetuned):
                raise MechanismError(f"Cell '{cell}'{in_src} must give exactly one of 'adapter' and 'finetuned'.")
        if self.model_type not in MODEL_TYPES:
            raise MechanismError(f"model_type must be one of {list(MODEL_TYPES)}, not {self.model_type!r}.")
        if not set(self.task_framings) <= set(FRAMINGS) or self.attack_framing not in FRAMINGS:
            raise MechanismError("task_framings and attack_framing must name 'eval' or 'deploy'.")
        for key in ("max_length", "batch_size"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MechanismError(f"{key}{in_src} must be a positive integer, not {v!r}.")
        for cell in self.cells:
            self.claimed_for(cell)
        object.__setattr__(self, "cells", MappingProxyType(dict(self.cells)))

    def claimed_for(self, cell: str) -> str:
        cls = self.cells[cell].claimed_class or self.claimed_class
        if cls is None:
            raise MechanismError(f"The mechanism config declares no claimed class for cell '{cell}'; set "
                                 f"claimed_class to 'shrinkage' or 'attack-targeted'.")
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' is '{cls}'; use 'shrinkage' or 'attack-targeted'.")
        return cls

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "base_model": self.base_model, "tokenizer": self.tokenizer,
                "model_type": self.model_type, "calibration": self.calibration, "slice": list(self.slice),
                "task_loss": f"mean CE(correct answer) over framings {list(self.task_framings)}",
                "attack_loss": f"mean CE(attack answer) under {self.attack_framing} framing",
                "max_length": self.max_length,
                "cells": {c: {k: v for k, v in u.__dict__.items() if v is not None} for c, u in self.cells.items()}}

    @classmethod
    def from_mapping(cls, raw: Any, *, source: str, root: Path,
                     defense_cells: Sequence[str] | None = None) -> MechanismSpec:
        """The spec of a mapping as read from a file (``source``; paths relative to ``root``):
        its keys and their shapes checked here, its values by the spec itself."""
        p = source
        if not isinstance(raw, dict):
            raise MechanismError(f"The mechanism config {p} must be a mapping of keys.")
        known = {f.name for f in fields(cls)} - {"source"} | {"adapter", "finetuned"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise MechanismError(f"The mechanism config {p} has unknown key(s) {unknown}; known: {sorted(known)}.")
        for key in ("base_model", "calibration", "slice"):
            if not raw.get(key):
                raise MechanismError(f"The mechanism config {p} must declare '{key}'.")
        sl = raw["slice"]
        sl = [sl] if isinstance(sl, str) else sl
        if not isinstance(sl, list) or not all(isinstance(s, str) and s for s in sl):
            raise MechanismError(f"The slice in {p} must be a list of parameter-name patterns.")
        cells_raw = dict(raw.get("cells") or {})
        if raw.get("adapter") or raw.get("finetuned"):
            if not defense_cells or len(defense_cells) != 1:
                raise MechanismError(f"A top-level adapter/finetuned in {p} needs exactly one defense cell; use 'cells'.")
            cells_raw.setdefault(defense_cells[0], {k: raw[k] for k in ("adapter", "finetuned") if raw.get(k)})
        cells: dict[str, CellUpdate] = {}
        for cell, u in cells_raw.items():
            u = {"adapter": u} if isinstance(u, str) else (u or {})
            if not isinstance(u, dict) or set(u) - {"adapter", "finetuned", "claimed_class"}:
                raise MechanismError(f"Cell '{cell}' in {p} must give 'adapter' or 'finetuned' (and optionally claimed_class).")
            if bool(u.get("adapter")) == bool(u.get("finetuned")):
                raise MechanismError(f"Cell '{cell}' in {p} must give exactly one of 'adapter' and 'finetuned'.")
            cells[str(cell)] = CellUpdate(adapter=_resolve(u.get("adapter"), root),
                                          finetuned=_resolve(u.get("finetuned"), root),
                                          claimed_class=u.get("claimed_class"))
        if cells and defense_cells is not None:
            extra = sorted(set(cells) - set(defense_cells))
            if extra:
                raise MechanismError(f"The mechanism config names cell '{extra[0]}', which is not a --defense cell.")
        return cls(base_model=_resolve(raw["base_model"], root), calibration=_resolve(raw["calibration"], root),
                   slice=tuple(sl), cells=cells, claimed_class=raw.get("claimed_class"),
                   tokenizer=_resolve(raw.get("tokenizer"), root),
                   model_type=raw.get("model_type", "sequence-classification"),
                   max_length=_given(raw, "max_length", 128), batch_size=_given(raw, "batch_size", 32),
                   task_framings=tuple(raw.get("task_framings") or FRAMINGS),
                   attack_framing=raw.get("attack_framing", "eval"), source=p)


def _given(raw: Mapping[str, Any], key: str, default: int) -> Any:
    v = raw.get(key)
    return default if v is None else v


def _resolve(value: str | None, root: Path) -> str | None:
    if value is None:
        return None
    v = str(value)
    if is_mlflow_uri(v) or "://" in v or Path(v).is_absolute():
        return v
    cand = root / v
    return str(cand) if cand.exists() else v  # a hub id stays as given


def load_mechanism_spec(path: str | Path, *, defense_cells: Sequence[str] | None = None) -> MechanismSpec:
    """Read a mechanism config (YAML or JSON; see the module docstring). Cells not among
    ``defense_cells`` are an error (a typo would otherwise turn into a silently missing
    diagnostic)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The mechanism config {p} does not exist.")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise MechanismError(f"The mechanism config {p} is not valid YAML or JSON.") from None
    return MechanismSpec.from_mapping(raw, source=str(p), root=p.parent, defense_cells=defense_cells)
