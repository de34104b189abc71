"""The JSON Schemas shipped in ``recipe_audit/schemas`` and validation against them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """The schema file ``name`` (e.g. ``recipe_card.v1.json``), parsed once per process."""
    return json.loads(resources.files("recipe_audit").joinpath("schemas", name).read_text())


@cache
def validator(name: str) -> Any:
    """A ``jsonschema`` validator for schema ``name``, made once per process. The schema itself is
    not checked against its meta-schema here (``jsonschema.validate`` does so on every call, 40 ms
    of CPU for the recipe card's): the files ship with the package, and
    ``tests/cards/test_cards.py`` checks each of them."""
    import jsonschema

    schema = load(name)
    return jsonschema.validators.validator_for(schema)(schema)


def check(doc: Mapping[str, Any], name: str, error: type[Exception], what: str) -> None:
    """Raise ``error`` with one sentence when ``doc`` does not validate against schema ``name``
    (the error ``jsonschema.validate`` would raise: the best match among all)."""
    import jsonschema

    exc = jsonschema.exceptions.best_match(validator(name).iter_errors(doc))
    if exc is not None:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise error(f"Not a valid {what}: at {where}, {exc.message}.") from None
