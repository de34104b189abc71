"""The card's JSON text, indented as ``json.dumps(doc, indent=2, allow_nan=False)`` writes it,
byte for byte, without running the standard library's pure-Python indenting encoder over every
rerun (it takes seconds for a card of 100,000 reruns; the canonical text the content digest hashes
has no indent, so ``json.dumps`` writes it with its C encoder, as fast as this module would).

The long per-rerun lists of a card (an entry's ``reruns``, ``failed_seeds``, ``planned_seeds``,
``unfinished``) are lists of numbers and strings, or of flat objects that all have the same keys in
the same order. Such a list is written column by column (each column's values encoded by the same
functions ``json`` uses: ``float.__repr__``, ``int.__repr__``, ASCII-escaped strings) into one
line template per item; the rest of the document, with a placeholder in each such list's place, is
written by ``json.dumps`` itself. Anything else (another shape, a type ``json`` would encode some
other way, a non-finite number) is left to ``json.dumps``, which then writes or refuses it as always.
"""

from __future__ import annotations

import json
import math
import uuid
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any

import numpy as np

BULK_MIN_ITEMS = 32  # shorter lists are left to json.dumps
INDENT = 2

_CONSTANTS = {None: "null", True: "true", False: "false"}
_CONSTANT_REPRS = {"None": "null", "True": "true", "False": "false"}
_NON_FINITE_REPRS = frozenset({"nan", "inf", "-inf"})
_SCALARS = frozenset({str, int, float, bool, type(None)})
BULKY = ("reruns", "failed_seeds", "planned_seeds", "unfinished")


def json_number(x: Any) -> Any:
    """A number as a card's JSON holds it: a Python ``bool``, ``int`` or ``float`` (NumPy scalars
    converted), NaN and infinities as None (null), None as None.

    >>> json_number(np.int64(3)), json_number(float("nan")), json_number(np.bool_(True)), json_number(0.5)
    (3, None, True, 0.5)
    """
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def _encode_column(values: list[Any]) -> list[str] | None:
    """The JSON text of each value as ``json.dumps`` writes it, or None when a value is of a type
    this does not handle exactly as ``json`` does (or is a non-finite float)."""
    kinds = set(map(type, values))
    if not kinds <= _SCALARS:
        return None
    if kinds == {str}:
        return list(map(encode_basestring_ascii, values))
    if str in kinds:  # strings mixed with numbers or null: one value at a time
        return [encode_basestring_ascii(v) if type(v) is str else _CONSTANTS[v] if type(v) in (bool, type(None))
                else v.__repr__() for v in values]
    # numbers, booleans and null: repr is json's text for int and float (float.__repr__, int.__repr__)
    texts = list(map(repr, values))
    if float in kinds and not _NON_FINITE_REPRS.isdisjoint(texts):
        return None  # json.dumps(allow_nan=False) refuses it, with its own message
    if kinds & {bool, type(None)}:
        texts = list(map(_CONSTANT_REPRS.get, texts, texts))
    return texts


def _bulk_text(items: list[Any], indent: int) -> str | None:
    """The indented JSON text of the list ``items`` whose opening bracket is on a line indented by
    ``indent`` spaces, or None when it is not a list this module writes (see the module docs)."""
    pad, inner = " " * (indent + INDENT), " " * (indent + 2 * INDENT)
    kinds = set(map(type, items))
    if kinds == {dict}:
        shapes = set(map(tuple, items))
        if len(shapes) != 1:
            return None
        (keys,) = shapes
        if not keys or not all(type(k) is str for k in keys):
            return None
        columns = [_encode_column(list(map(itemgetter(k), items))) for k in keys]
        if any(c is None for c in columns):
            return None
        template = (pad + "{\n" + ",\n".join(inner + encode_basestring_ascii(k).replace("%", "%%") + ": %s"
                                             for k in keys) + "\n" + pad + "}")
        lines = map(template.__mod__, zip(*columns, strict=True))
    else:
        column = _encode_column(items)
        if column is None:
            return None
        lines = (pad + x for x in column)
    return "[\n" + ",\n".join(lines) + "\n" + " " * indent + "]"


def dumps_indented(doc: Any, bulky: tuple[str, ...] = BULKY) -> str:
    """``json.dumps(doc, indent=2, allow_nan=False)``, the same text, with the lists named ``bulky``
    of the entries of ``doc["cells"]`` written in bulk."""

    def plain(obj: Any) -> str:
        return json.dumps(obj, indent=INDENT, allow_nan=False)

    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        return plain(doc)
    token = uuid.uuid4().hex
    parts: dict[str, list[Any]] = {}
    new_cells = []
    for e in cells:
        if isinstance(e, dict):
            swap = {}
            for k in bulky:
                v = e.get(k)
                if type(v) is list and len(v) >= BULK_MIN_ITEMS:
                    mark = f"bulk-{token}-{len(parts)}"
                    parts[mark] = v
                    swap[k] = mark
            if swap:
                e = {**e, **swap}
        new_cells.append(e)
    if not parts:
        return plain(doc)
    text = plain({**doc, "cells": new_cells})
    found = sorted((text.index(f'"{mark}"'), mark) for mark in parts)
    out, pos = [], 0
    for at, mark in found:
        items = parts[mark]
        line = text[text.rindex("\n", 0, at) + 1:at]
        here = len(line) - len(line.lstrip(" "))  # the indentation of the line of the list's key
        bulk = _bulk_text(items, here)
        if bulk is None:  # json's own text, moved right: every line but the first
            bulk = plain(items).replace("\n", "\n" + " " * here)
        out += [text[pos:at], bulk]
        pos = at + len(mark) + 2
    out.append(text[pos:])
    return "".join(out)
