"""The walk of τ from the card command (issue 40, item 3): a call tracer follows the bar τ through
``recipe-audit card``, in process, and shows the path going down once and back once.

* **No room visited more than twice.** A room is a module of recipe_audit; a visit is a call
  into it from another module that carries τ (τ itself, or a list, tuple, array, dict or frozen
  type holding it). Each distinct way in (calling module and function, function called) counts
  once, so a loop over cells or bars is one visit, and a statistic that re-checks the bar is one
  more; reading a result's field (a property, ``entry["tau"]``) is not a visit.
* **The doors validate once.** Every input check of stats (``check_*``, ``as_count``,
  ``audit_options``) is called from a door (the command line's arguments, the card's options,
  the audit options' own validator), never from a statistic below it nor from the card's builder.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections import defaultdict
from collections.abc import Mapping

import numpy as np
import pytest
from helpers.cli import run_cli
from helpers.store import synthetic_sweep

TAU = 0.7123  # a bar no default or metric value equals, so the tracer follows this one number

#: The modules that may call an input check: the doors.
DOORS = ("recipe_audit.stats.options", "recipe_audit.cards.model", "recipe_audit.commands.", "recipe_audit.cli")


def _carries(v, depth: int = 0) -> bool:
    if isinstance(v, float):
        return v == TAU
    if depth >= 2 or isinstance(v, (str, bytes, int)):
        return False
    if isinstance(v, np.ndarray):
        return v.dtype.kind == "f" and v.size <= 64 and bool(np.any(v == TAU))
    if isinstance(v, (list, tuple)):
        return any(_carries(x, depth + 1) for x in v[:64])
    if isinstance(v, Mapping):
        return any(_carries(x, depth + 1) for x in list(v.values())[:64])
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return any(_carries(getattr(v, f.name, None), depth + 1) for f in dataclasses.fields(v))
    return False


def _reads_a_field(frame) -> bool:
    """A property or a dunder method of a result (``entry.never_ran``, ``entry["tau"]``): reading
    what was computed, not a visit."""
    name = frame.f_code.co_name
    if name.startswith("__") and name.endswith("__"):
        return True
    self = frame.f_locals.get("self") if frame.f_code.co_argcount else None
    return self is not None and isinstance(getattr(type(self), name, None), property)


class Walk:
    """Records, while active, each call from one recipe_audit module into another: the ways into
    each room that carry τ, and every caller of an input check."""

    def __init__(self) -> None:
        self.visits: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        self.checks: set[tuple[str, str, str]] = set()

    def _event(self, frame, event, arg) -> None:
        if event != "call":
            return
        room = frame.f_globals.get("__name__", "")
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        if not room.startswith("recipe_audit") or caller == room:
            return
        code = frame.f_code
        if _reads_a_field(frame):
            return
        way = (caller, back.f_code.co_name if back is not None else "", code.co_name)
        if room.startswith("recipe_audit.stats") and (code.co_name.startswith("check_")
                                                      or code.co_name in ("as_count", "audit_options")):
            self.checks.add(way)
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(_carries(frame.f_locals.get(n)) for n in names):
            self.visits[room].add(way)

    def __enter__(self) -> Walk:
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)

    def shown(self) -> str:
        return "\n".join(f"{room}: {len(ways)}\n" + "\n".join(f"    {c}.{f} -> {g}" for c, f, g in sorted(ways))
                         for room, ways in sorted(self.visits.items(), key=lambda kv: -len(kv[1])))

    def checks_below_the_doors(self) -> list[tuple[str, str, str]]:
        return sorted(w for w in self.checks if not w[0].startswith(DOORS))


@pytest.mark.parametrize("recipes, flags", [(1, ["--anytime"]), (2, ["--family-size", "3"])],
                         ids=["anytime", "family"])
def test_the_walk_of_tau_from_the_card_command_visits_no_room_more_than_twice(store, capsys, recipes, flags):
    for r in range(recipes):
        synthetic_sweep(store, {s: (0.5 if s % 7 == 3 else 0.9) for s in range(24)}, recipe_id=str(r) * 16,
                        sweep_id=f"sw{r}")
    args = ["card", "--experiment-name", "exp", "--tracking-uri", store, "--tau", repr(TAU), *flags]
    for module in ("recipe_audit.commands.card", "recipe_audit.release.compute", "recipe_audit.store.read",
                   "recipe_audit.cards.build", "recipe_audit.cards.summary", "mlflow.tracking"):
        importlib.import_module(module)  # imported before the walk: a traced import is slow and no visit
    with Walk() as walk:
        rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    assert f"τ = {TAU}" in out or f"{TAU}" in out  # the card was computed at this bar
    assert walk.visits["recipe_audit.stats.cell"], walk.shown()  # the tracer saw τ reach the statistics
    over = {room: ways for room, ways in walk.visits.items() if len(ways) > 2}
    assert not over, "rooms visited more than twice:\n" + walk.shown()
    assert walk.checks, "the doors checked nothing?"
    assert not walk.checks_below_the_doors(), walk.checks_below_the_doors()


def test_the_tracer_sees_a_statistic_that_checks_again():
    """The checked public function a caller outside the card uses checks its inputs itself: the
    tracer sees those checks below the doors (so the test above can fail)."""
    from recipe_audit import stats

    with Walk() as walk:
        stats.cell_statistics([0.9] * 30 + [0.5], [TAU])
    below = walk.checks_below_the_doors()
    assert ("recipe_audit.stats.cell", "cell_statistics", "check_metrics") in below, below
    assert walk.visits["recipe_audit.stats.array_checks"], walk.shown()
