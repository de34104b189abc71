"""Every exact tie at the sample floor gets one floor at every door (issue 41).

At ``δ = (1 - ε)**n`` exactly the floor is ``n``. The ties are enumerated in
:mod:`helpers.ties`: the 374 whose δ is a float's shortest ``repr`` with 16 or 17 significant
digits (``0.85**8 = 0.2724905250390625``: the command line gave floor 8 and ``recipe_audit.bound``
floor 9, as for 174 of them), and the 4,060 whose δ has at most 17 decimals. Each is typed at each
door the way a person types it there:

- the command line: ``recipe-audit bound -k 0 -n N --eps E --delta D`` (``cli.main``'s parser and
  ``bound`` command, in process), δ as text;
- Python: ``recipe_audit.bound(0, N, eps=E, delta=D)`` with floats;
- a Hydra override (the callback's ``hydra.callbacks.recipe_audit.delta=D``, the built-in app's
  ``audit.delta=D``): Hydra's override grammar, then the callback's structured config node, then
  the card options the callback builds;
- a YAML file: OmegaConf's YAML reading, into the built-in app's ``audit`` schema.

The whole chain through Hydra's compose and the callback is run for the issue's example in
``tests/test_doors.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
from fractions import Fraction

import pytest
from helpers.ties import decimal_ties, repr_exact_ties
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import recipe_audit
from recipe_audit import cli
from recipe_audit.app.schema import RecipeAuditCallbackConfig
from recipe_audit.cards.model import CardOptions
from recipe_audit.config import AuditConfig
from recipe_audit.stats.floors import sample_floor

SETS = {"repr-exact 16-17 digits": repr_exact_ties(), "at most 17 decimals": decimal_ties()}


def test_the_ties_are_the_ones_the_issue_counts():
    """374 repr-exact ties (the issue says 347; 174 of them moved, as it says) and 4,060 of at most
    17 decimals; each is a tie, checked in rational arithmetic."""
    repr_ties, dec_ties = SETS.values()
    assert len(repr_ties) == 374 and len(dec_ties) == 4060
    assert [t for t in dec_ties if Fraction(repr(float(t[2]))) != Fraction(t[2])] == [NO_FLOAT]
    assert ("0.15", 8, "0.2724905250390625") in repr_ties
    for eps, n, delta in (*repr_ties, *dec_ties):
        assert (1 - Fraction(eps)) ** n == Fraction(delta) < Fraction(1, 2)
    for _, _, delta in repr_ties:
        assert repr(float(delta)) == delta and 16 <= len(delta.split("e")[0].replace(".", "").lstrip("0")) <= 17


def _cli_floor(parser, eps: str, n: int, delta: str) -> tuple[int, str]:
    a = parser.parse_args(["bound", "-k", "0", "-n", str(n), "--eps", eps, "--delta", delta, "--json"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.HANDLERS[a.command](a) == 0
    got = json.loads(out.getvalue())
    return got["sample_floor"], got["verdict"]


_OVERRIDES = OverridesParser.create()


def _override(key: str, text: str):
    """The value Hydra's override grammar gives ``key=text``."""
    return _OVERRIDES.parse_override(f"{key}={text}").value()


#: The one tie of at most 17 decimals that no float carries: 0.9**17 = 0.16677181699666569 and
#: 0.16677181699666568 (below it) have the same nearest float, whose shortest repr is the latter.
NO_FLOAT = ("0.1", 17, "0.16677181699666569")


@pytest.mark.parametrize("which", [
    "repr-exact 16-17 digits", pytest.param("at most 17 decimals", marks=pytest.mark.slow)])
def test_every_tie_has_one_floor_at_every_door(which):
    """The command line's floor (δ as text) and Python's (δ a float) are each ``n``; Hydra's override
    grammar and OmegaConf's YAML reading, through the callback's and the built-in app's schemas,
    hand over exactly Python's float, and the card options they build give floor ``n``."""
    ties = SETS[which]
    parser = cli.build_parser()
    callback_node = OmegaConf.structured(RecipeAuditCallbackConfig)
    audit_node = OmegaConf.structured(AuditConfig)
    yaml = OmegaConf.create("".join(f"t{i}:\n  eps: {e}\n  delta: {d}\n" for i, (e, _, d) in enumerate(ties)))
    wrong: dict[str, list] = {}
    for i, (eps, n, delta) in enumerate(ties):
        if (eps, n, delta) == NO_FLOAT:  # exact as text at every door that takes text; a float reads 18
            assert _cli_floor(parser, eps, n, delta) == (17, "release-supported")
            assert recipe_audit.bound(0, n, eps=eps, delta=delta).sample_floor == 17
            assert recipe_audit.bound(0, n, eps=float(eps), delta=float(delta)).sample_floor == 18
            assert (1 - Fraction(eps)) ** 17 > Fraction(repr(float(delta)))  # the float's decimal: below the tie
            continue
        floors = {}
        floors["command line"], verdict = _cli_floor(parser, eps, n, delta)
        assert verdict == "release-supported"
        py = recipe_audit.bound(0, n, eps=float(eps), delta=float(delta))
        floors["python"] = py.sample_floor
        assert py.verdict == "release-supported"
        if n > 1:
            assert recipe_audit.bound(0, n - 1, eps=float(eps), delta=float(delta)).verdict == "insufficient-evidence"
        callback_node.eps = _override("hydra.callbacks.recipe_audit.eps", eps)
        callback_node.delta = _override("hydra.callbacks.recipe_audit.delta", delta)
        audit_node.eps, audit_node.delta = yaml[f"t{i}"].eps, yaml[f"t{i}"].delta
        for door, node in (("hydra override", callback_node), ("yaml", audit_node)):
            if (node.eps, node.delta) != (float(eps), float(delta)):
                wrong.setdefault(door, []).append((eps, n, delta, node.eps, node.delta))
        if which == "repr-exact 16-17 digits":  # and the card options each Hydra door builds from them
            for door, node in (("hydra override", callback_node), ("yaml", audit_node)):
                opts = CardOptions.from_config(taus=[0.7], eps=node.eps, delta=node.delta)
                floors[door] = sample_floor(opts.eps, opts.delta)
        for door, floor in floors.items():
            if floor != n:
                wrong.setdefault(door, []).append((eps, n, delta, floor))
    assert not wrong, {door: (len(w), w[:3]) for door, w in wrong.items()}
