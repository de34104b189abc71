"""Calibration items of diagnostic (c): the prompts the base model's gradients are taken on
(:func:`load_calibration`), and :class:`MechanismError`, the one-sentence error of every step of
diagnostic (c) from weights.

A calibration file is CSV, JSONL or JSON (a list of objects), one row per item:

==================  ===========================================================================
``eval_text``       the prompt in eval framing (carries evaluation cues)
``deploy_text``     the same prompt in deploy framing
``label``           the index of the correct answer (class index, or option index)
``attack_label``    the index of the answer the attack pushes toward under eval framing
``eval_text_pair``, ``deploy_text_pair``  optional second segments (sentence-pair tasks)
``options``         causal LMs only: the answer options (JSON list; in CSV a JSON string)
``question_id``     optional, for reference
==================  ===========================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MODEL_TYPES = ("sequence-classification", "causal-lm")
FRAMINGS = ("eval", "deploy")


class MechanismError(ValueError):
    """Diagnostic (c) cannot be computed from these inputs (one sentence)."""


@dataclass(frozen=True)
class CalibrationItem:
    eval_text: str
    deploy_text: str
    label: int
    attack_label: int
    eval_text_pair: str | None = None
    deploy_text_pair: str | None = None
    options: tuple[str, ...] | None = None
    question_id: str | None = None

    def text(self, framing: str) -> tuple[str, str | None]:
        if framing == "eval":
            return self.eval_text, self.eval_text_pair
        return self.deploy_text, self.deploy_text_pair


def _int_field(row: dict, key: str, where: str) -> int:
    v = row.get(key)
    try:
        if isinstance(v, bool) or v is None or (isinstance(v, float) and not v.is_integer()):
            raise ValueError
        return int(str(v).strip()) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        raise MechanismError(f"Calibration {where} needs a whole-number '{key}', got {v!r}.") from None


def load_calibration(path: str | Path) -> tuple[CalibrationItem, ...]:
    """Calibration items from CSV, JSONL or JSON (a list of objects); see the module docstring."""
    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The calibration file {p} does not exist.")
    ext = p.suffix.lower()
    try:
        if ext == ".csv":
            import csv

            with p.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        elif ext in (".jsonl", ".ndjson"):
            rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif ext == ".json":
            rows = json.loads(p.read_text(encoding="utf-8"))
        else:
            raise MechanismError(f"The calibration file {p} must be .csv, .jsonl or .json, not '{ext}'.")
    except json.JSONDecodeError:
        raise MechanismError(f"The calibration file {p} is not valid JSON.") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise MechanismError(f"The calibration file {p} must hold at least one item (rows of named fields).")
    items = []
    for i, row in enumerate(rows):
        where = f"item {i + 1} of {p.name}"
        for key in ("eval_text", "deploy_text"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise MechanismError(f"Calibration {where} needs a non-empty '{key}'.")
        opts = row.get("options")
        if isinstance(opts, str) and opts.strip():
            try:
                opts = json.loads(opts)
            except json.JSONDecodeError:
                raise MechanismError(f"Calibration {where}: 'options' must be a JSON list of strings.") from None
        if opts in ("", None):
            opts = None
        elif not (isinstance(opts, list) and opts and all(isinstance(o, str) for o in opts)):
            raise MechanismError(f"Calibration {where}: 'options' must be a list of strings.")
        pair = {k: (row.get(k) or None) for k in ("eval_text_pair", "deploy_text_pair")}
        items.append(CalibrationItem(
            eval_text=row["eval_text"], deploy_text=row["deploy_text"], label=_int_field(row, "label", where),
            attack_label=_int_field(row, "attack_label", where), options=tuple(opts) if opts else None,
            question_id=None if row.get("question_id") in (None, "") else str(row["question_id"]), **pair))
    return tuple(items)
