"""Diagnostic (c)'s inputs per defense cell (:class:`CellMechanism`): the mechanism signature
computed from weights (:func:`mechanism_from_models`, :func:`compute_signatures` for a
:class:`~recipe_audit.acceptance.mechanism_spec.MechanismSpec`) or read from α computed elsewhere
(:func:`read_alphas`).

Diagnostic (c) measures every cell with the same ruler, the **base** model (before the install
fine-tune and before any defense): the gradients and the update ΔW are computed by
:mod:`recipe_audit.train.acceptance.weights` (torch, transformers and peft, imported there inside
its functions); this module turns them into signatures (:mod:`recipe_audit.stats.acceptance`)
and imports no training library itself.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_audit.acceptance.mechanism_spec import MechanismSpec
from recipe_audit.stats import acceptance as gates
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.train.acceptance.calibration import (
    FRAMINGS,
    CalibrationItem,
    MechanismError,
    load_calibration,
)
from recipe_audit.train.acceptance.weights import (
    load_model,
    load_tokenizer,
    loss_gradients,
    slice_names,
    update_vector,
)

__all__ = [
    "CellMechanism",
    "MechanismError",
    "compute_signatures",
    "load_calibration",
    "mechanism_from_models",
    "read_alphas",
]


@dataclass(frozen=True)
class CellMechanism:
    """Diagnostic (c)'s inputs for one cell: the signature, the claimed class, and notes."""

    signature: gates.MechanismSignature
    claimed_class: str
    notes: tuple[str, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)


def _notes_for(outside: Sequence[str], notes: Sequence[str]) -> tuple[str, ...]:
    out = list(notes)
    if outside:
        shown = ", ".join(outside[:4]) + (" …" if len(outside) > 4 else "")
        out.append(f"the update also changes {len(outside)} parameter tensor(s) outside the slice ({shown}); "
                   f"ρ_AT sees only the slice")
    return tuple(out)


def mechanism_from_models(base, tokenizer, items: Sequence[CalibrationItem], slice_patterns: Sequence[str],
                          updates: dict[str, dict[str, Any]], *, claimed_class: str | dict[str, str],
                          model_type: str = "sequence-classification", max_length: int = 128, batch_size: int = 32,
                          task_framings: Sequence[str] = FRAMINGS, attack_framing: str = "eval",
                          tracking_uri: str | None = None) -> dict[str, CellMechanism]:
    """The Python entry point: ``{cell: CellMechanism}`` from an in-memory base model and tokenizer.

    ``updates`` maps cell -> ``{"adapter": path|URI|PeftModel}`` or ``{"finetuned": path|URI|model}``;
    ``claimed_class`` is one class for all cells or a mapping cell -> class. The gradients are
    computed once, on the base.
    """
    names = slice_names(base, slice_patterns)
    v_t, v_a = loss_gradients(base, tokenizer, items, names, model_type=model_type, max_length=max_length,
                              batch_size=batch_size, task_framings=task_framings, attack_framing=attack_framing)
    numel = dict((n, p.numel()) for n, p in base.named_parameters())
    segs = [(n, int(numel[n])) for n in names]
    out = {}
    for cell, upd in updates.items():
        cls = claimed_class.get(cell) if isinstance(claimed_class, dict) else claimed_class
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' must be 'shrinkage' or 'attack-targeted', not {cls!r}.")
        dw, outside, notes = update_vector(base, names, adapter=upd.get("adapter"), finetuned=upd.get("finetuned"),
                                           model_type=model_type, tracking_uri=tracking_uri)
        kind = "LoRA adapter (merged − base)" if upd.get("adapter") is not None else "full fine-tune (fine-tuned − base)"
        try:
            sig = gates.mechanism_signature(dw, v_t, v_a, names=segs, source=f"weights: {kind}")
        except StatsInputError as exc:
            raise MechanismError(f"Cell '{cell}': {exc}") from None
        out[cell] = CellMechanism(signature=sig, claimed_class=cls, notes=_notes_for(outside, notes),
                                  inputs={"slice_parameters": names, "n_calibration_items": len(items),
                                          "update": kind})
    return out


def compute_signatures(spec: MechanismSpec, *, tracking_uri: str | None = None) -> dict[str, CellMechanism]:
    """Diagnostic (c)'s inputs for every cell of ``spec``, from weights."""
    items = load_calibration(spec.calibration)
    with contextlib.ExitStack() as stack:
        base, d = load_model(spec.base_model, spec.model_type, stack, tracking_uri, "base model")
        tokenizer = load_tokenizer(spec.tokenizer or str(d), stack, tracking_uri)
        updates = {c: ({"adapter": u.adapter} if u.adapter else {"finetuned": u.finetuned}) for c, u in spec.cells.items()}
        return mechanism_from_models(
            base, tokenizer, items, spec.slice, updates, claimed_class={c: spec.claimed_for(c) for c in spec.cells},
            model_type=spec.model_type, max_length=spec.max_length, batch_size=spec.batch_size,
            task_framings=spec.task_framings, attack_framing=spec.attack_framing, tracking_uri=tracking_uri)


def read_alphas(path: str | Path, defense_cells: Sequence[str], *, claimed_class: str | None = None) -> dict[str, CellMechanism]:
    """α_T and α_A computed elsewhere (no weights shared), from JSON.

    Either ``{"cells": {CELL: {"alpha_T": …, "alpha_A": …, …}}, "claimed_class": …}`` or, with one
    defense cell, a flat ``{"alpha_T": …, "alpha_A": …}``. Optional per cell: ``dot_T``, ``dot_A``,
    ``norm_T``, ``norm_A``, ``norm_update``, ``claimed_class``, ``slice`` (informational). The
    claimed class comes from the cell, else the file, else ``claimed_class``.
    """
    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The α file {p} does not exist.")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise MechanismError(f"The α file {p} is not valid JSON.") from None
    if not isinstance(raw, dict):
        raise MechanismError(f"The α file {p} must hold a JSON object.")
    if "cells" in raw:
        cells = raw["cells"]
        if not isinstance(cells, dict):
            raise MechanismError(f"'cells' in {p} must map cell names to α values.")
    elif "alpha_T" in raw:
        if len(defense_cells) != 1:
            raise MechanismError(f"The α file {p} gives one α pair; with several defense cells use 'cells'.")
        cells = {defense_cells[0]: raw}
    else:
        raise MechanismError(f"The α file {p} must give 'alpha_T' and 'alpha_A' (or 'cells').")
    out = {}
    for cell, v in cells.items():
        if cell not in defense_cells:
            raise MechanismError(f"The α file names cell '{cell}', which is not a --defense cell.")
        if not isinstance(v, dict) or "alpha_T" not in v or "alpha_A" not in v:
            raise MechanismError(f"Cell '{cell}' in {p} needs 'alpha_T' and 'alpha_A'.")
        cls = v.get("claimed_class") or raw.get("claimed_class") or claimed_class
        if cls is None:
            raise MechanismError(f"No claimed class for cell '{cell}': declare claimed_class in {p.name} or "
                                 f"--claimed-class.")
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' is '{cls}'; use 'shrinkage' or 'attack-targeted'.")
        try:
            sig = gates.signature_from_alphas(v["alpha_T"], v["alpha_A"], dot_T=v.get("dot_T"), dot_A=v.get("dot_A"),
                                           norm_T=v.get("norm_T"), norm_A=v.get("norm_A"),
                                           norm_update=v.get("norm_update"), source=f"given α ({p.name})")
        except StatsInputError as exc:
            raise MechanismError(f"Cell '{cell}' in {p.name}: {exc}") from None
        if not (math.isfinite(sig.alpha_T) and math.isfinite(sig.alpha_A)):
            raise MechanismError(f"Cell '{cell}' in {p.name}: alpha_T and alpha_A must be finite numbers.")
        out[str(cell)] = CellMechanism(signature=sig, claimed_class=cls, notes=(),
                                       inputs={"alphas_file": str(p), "slice": v.get("slice") or raw.get("slice")})
    return out
