"""Acceptance cards, split the way the recipe card is:

* :mod:`.document` — the frozen, typed card (:class:`AcceptanceCard` and its parts), its one JSON
  serialiser and reader, the schema check;
* :mod:`.build` — :func:`build_card`: the statistics' result objects
  (:mod:`recipe_audit.stats.acceptance`) in the card's words, each diagnostic's reason and
  numbers in :mod:`.diagnostics`;
* :mod:`.render` — Markdown, the terminal table and the figures;
* :mod:`.files` — :func:`write_card`, the only writer.

The names below are the package's public API (``from recipe_audit.cards.acceptance import
write_card``); each is defined in one of those modules.
"""

from recipe_audit.cards.acceptance.build import (
    DOES_NOT_PROVE,
    GATE_TITLES,
    build_card,
    cell_card,
    filter_label,
    sensitivity_variant,
    weaker_claims,
)
from recipe_audit.cards.acceptance.diagnostics import (
    gate_json,
    gate_reason,
    installability_json,
    signature_json,
    undefined_text,
)
from recipe_audit.cards.acceptance.document import (
    CARD_KIND,
    CLAIM,
    SCHEMA_FILE,
    SCHEMA_VERSION,
    AcceptanceCard,
    AcceptanceCardError,
    AcceptanceCell,
    BaselineGap,
    CrossTask,
    DeltaDeploy,
    Diagnostic,
    Diagnostics,
    FilterEntry,
    SensitivityEntry,
    Statistic,
    schema,
    validate,
)
from recipe_audit.cards.acceptance.files import write_card
from recipe_audit.cards.acceptance.render import alpha_plot, delta_plot, summary_table, to_markdown

__all__ = [
    "CARD_KIND",
    "CLAIM",
    "DOES_NOT_PROVE",
    "GATE_TITLES",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "AcceptanceCard",
    "AcceptanceCardError",
    "AcceptanceCell",
    "BaselineGap",
    "CrossTask",
    "DeltaDeploy",
    "Diagnostic",
    "Diagnostics",
    "FilterEntry",
    "SensitivityEntry",
    "Statistic",
    "alpha_plot",
    "build_card",
    "cell_card",
    "delta_plot",
    "filter_label",
    "gate_json",
    "gate_reason",
    "installability_json",
    "schema",
    "sensitivity_variant",
    "signature_json",
    "summary_table",
    "to_markdown",
    "undefined_text",
    "validate",
    "weaker_claims",
    "write_card",
]
