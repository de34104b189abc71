"""The one card path (issue 29, 'the store is a door'): a card computation reads the store's runs
once, each plot is drawn once for the card's folder and its card runs, and the card runs hold the
very bytes that were rendered."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.fast_sqlite import no_sync_module, own_copy, written_once  # noqa: F401 (no_sync_module: autouse)
from helpers.store import synthetic_sweep

from recipe_audit import keys
from recipe_audit.cards import files as card_files
from recipe_audit.cards.model import CardOptions
from recipe_audit.release import card_runs, compute
from recipe_audit.release.card_runs import CardOutput
from recipe_audit.release.sweep import cards_for_sweep
from recipe_audit.store import read, read_sql

BIMODAL = {s: (0.5 if s % 7 == 3 else 0.86 + 0.001 * s) for s in range(30)}


class Spy:
    """Counts the calls of ``owner.name`` (the original still runs)."""

    def __init__(self, monkeypatch, owner, name: str) -> None:
        self.calls = 0
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)


def _write_two_recipes(uri: str) -> tuple[str, str]:
    a = synthetic_sweep(uri, BIMODAL, recipe_id="a" * 16, sweep_id="swa")
    b = synthetic_sweep(uri, {s: 0.9 for s in range(30)}, recipe_id="b" * 16, sweep_id="swb")
    return a, b


def _write_one_recipe(uri: str) -> None:
    synthetic_sweep(uri, BIMODAL, recipe_id="a" * 16, extra_params={"recipe.lr": "0.01"})


@pytest.fixture(scope="module")
def written(tmp_path_factory, migrated_mlflow_db):
    """The module's two stores, written once: two recipes (their sweeps' parent run ids), and one
    recipe whose reruns log ``recipe.lr``."""
    return {name: written_once(tmp_path_factory.mktemp(name), migrated_mlflow_db, write)
            for name, write in (("two", _write_two_recipes), ("one", _write_one_recipe))}


@pytest.fixture
def _two_recipes(written):
    """A function giving this test's store its own copy of the two recipes' sweeps."""
    def copy(uri: str) -> tuple[str, str]:
        db, parents = written["two"]
        own_copy(db, uri)
        return parents

    return copy


@pytest.fixture
def one_recipe(written, store):
    """This test's store: its own copy of the one recipe's sweep."""
    return own_copy(written["one"][0], store)


def test_one_card_reads_the_runs_once_and_the_curtailment_record_with_them(store, _two_recipes, monkeypatch):
    from mlflow.tracking import MlflowClient

    parent, _ = _two_recipes(store)
    record = {"version": 1, "sweeper": "curtail", "stop_on": "decision", "batch_size": 4,
              "audit_set": "calibration", "taus": [0.7], "eps": 0.1, "delta": 0.1, "higher_is_better": True,
              "n_planned": 40, "n_launched": 30, "stopped_early": True,
              "groups": [{"overrides": [], "recipe_id": "a" * 16, "n_planned": 40, "n_launched": 30,
                          "launched_seeds": list(range(30)), "stopped_early": True, "failures": [0],
                          "reason": "stopped"}]}
    MlflowClient(tracking_uri=store).set_tag(parent, keys.TAG_CURTAILMENT, json.dumps(record))
    door = Spy(monkeypatch, read, "read_runs")
    snapshots = Spy(monkeypatch, read_sql, "snapshot")
    runs = Spy(monkeypatch, read_sql, "read_sql")
    params = Spy(monkeypatch, read, "read_params")
    get_run = Spy(monkeypatch, MlflowClient, "get_run")
    search = Spy(monkeypatch, MlflowClient, "search_runs")
    card = compute.compute_card(compute.CardRequest(experiment="exp", tracking_uri=store),
                                CardOptions(taus=(0.7, 0.8)))
    # one call of the store door, one connection reading one snapshot: the runs and, in the same
    # read, the params that describe each cell's recipe (no point read of them afterwards)
    assert (door.calls, snapshots.calls, runs.calls) == (1, 1, 1)
    assert (params.calls, get_run.calls, search.calls) == (0, 0, 0)
    assert {e.recipe_summary for e in card.cells} == {"r: None on None, None lr=None None warmup=None, "
                                                      "None epochs, batch None, full fine-tune"}
    curtailed = [e for e in card.cells if e.curtailment]
    assert {e.recipe_id for e in curtailed} == {"a" * 16}  # the record, read with the runs, was applied
    assert all(e.curtailment.n_planned == 40 for e in curtailed)


def test_a_metric_no_run_logged_is_said_from_the_one_read(store, _two_recipes, monkeypatch):
    _two_recipes(store)
    runs = Spy(monkeypatch, read_sql, "read_sql")
    with pytest.raises(ValueError, match="has the metric 'val_loss'; metrics logged there: "):
        compute.compute_card(compute.CardRequest(experiment="exp", tracking_uri=store, metric="val_loss"),
                             CardOptions(taus=(0.7,)))
    assert runs.calls == 1


def test_end_of_sweep_draws_each_plot_once_and_logs_the_files_it_wrote(store, _two_recipes, tmp_path,
                                                                       monkeypatch):
    from mlflow.tracking import MlflowClient

    _two_recipes(store)
    hist = Spy(monkeypatch, card_files, "histogram")
    band = Spy(monkeypatch, card_files, "band_plot")
    md = Spy(monkeypatch, card_files, "to_markdown")
    runs = Spy(monkeypatch, read_sql, "read_sql")
    sweep = SimpleNamespace(experiment_name="exp", tracking_uri=store, sweep_id=None, planned_seeds=range(30))
    card = cards_for_sweep(sweep, "accuracy/calibration", CardOptions(taus=(0.7, 0.8)), tmp_path / "sweep")
    n_cells = len(card.cell_groups())
    assert n_cells == 2 and runs.calls == 1
    # one histogram and one band per cell, shared by the sweep's card and the cell's card run;
    # one Markdown per document (the sweep's card, each cell's card)
    assert (hist.calls, band.calls, md.calls) == (n_cells, n_cells, 1 + n_cells)
    client = MlflowClient(tracking_uri=store)
    card_runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id],
                                   f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")
    assert len(card_runs) == n_cells
    written = {p.name: p.read_bytes() for p in (tmp_path / "sweep" / "card").iterdir()}
    for run in card_runs:
        local = client.download_artifacts(run.info.run_id, "", str(tmp_path / run.info.run_id))
        logged = {p.name: p.read_bytes() for p in sorted(Path(local).iterdir())}
        doc = json.loads(logged["card.json"])
        assert doc["digest"] == run.data.tags["recipe_audit.card_digest"]
        assert doc["artifacts"] == {n: hashlib.sha256(b).hexdigest() for n, b in logged.items() if n != "card.json"}
        # the cell's plots are the sweep card's plots, byte for byte (drawn once, named per card)
        pngs = [b for n, b in logged.items() if n.endswith(".png")]
        assert pngs and all(b in written.values() for b in pngs)


def test_a_reused_card_run_is_not_rendered_again(store, _two_recipes, monkeypatch):
    _two_recipes(store)
    card = compute.compute_card(compute.CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7,)))
    first = CardOutput(card).log(store, "exp")
    rendered = Spy(monkeypatch, card_runs, "render_card")
    again = CardOutput(card).log(store, "exp")
    assert [c.run_id for c in again] == [c.run_id for c in first] and all(c.reused for c in again)
    assert rendered.calls == 0 and not any(c.reused for c in first)


def test_the_command_line_and_the_api_read_the_store_once_for_their_checks_and_the_card(one_recipe, tmp_path,
                                                                                       monkeypatch, capsys):
    from recipe_audit import api, cli

    store = one_recipe
    door = Spy(monkeypatch, read, "read_runs")
    snapshots = Spy(monkeypatch, read_sql, "snapshot")
    params = Spy(monkeypatch, read, "read_params")
    assert cli.main(["card", "--experiment-name", "exp", "--tracking-uri", store, "--json",
                     str(tmp_path / "card.json")]) == 0
    doc = json.loads((tmp_path / "card.json").read_text())
    assert (door.calls, snapshots.calls, params.calls) == (1, 1, 0)
    assert "lr=0.01" in doc["cells"][0]["recipe_summary"]
    card = api.card("exp", tracking_uri=store)
    assert (door.calls, snapshots.calls, params.calls) == (2, 2, 0)
    assert card.cells[0]["recipe_summary"] == doc["cells"][0]["recipe_summary"]


def test_the_gate_takes_the_recipe_params_from_its_history_read(one_recipe, monkeypatch):
    from recipe_audit.release.evidence import GatePolicy, recompute

    store = one_recipe
    params = Spy(monkeypatch, read, "read_params")
    door = Spy(monkeypatch, read, "read_runs")
    ev = recompute(store, "exp", "a" * 16, GatePolicy(tau=0.7, metric="accuracy/calibration"))
    assert (params.calls, door.calls) == (0, 0)
    assert "lr=0.01" in ev.entry["recipe_summary"]


#: Every statistic that computes a reading of a cell (pointwise, at the planned N, family-wise,
#: anytime), checked or kernel: a card calls none of them but through cell_readings_at.
READINGS = ("cell_statistics", "cell_statistics_at", "tail_bound", "tail_bound_at", "apply_rules", "decisions_at",
            "band_bounds", "band_bounds_at", "curtail_state", "curtail_state_at", "family_bounds",
            "family_bounds_at", "family_tail_bound", "member_at", "anytime_bound", "anytime_bound_at",
            "upper_at", "lower_at")


def test_a_card_computes_each_cells_readings_in_one_call(monkeypatch):
    """Every reading of a cell at every τ (bounds, rules, band; at the planned N of a curtailed
    sweep; family-wise; the confidence sequence) comes from one stats call per cell,
    cell_readings_at: no statistic that reads a cell is called by the card outside it."""
    import sys

    import numpy as np

    from recipe_audit.cards import build
    from recipe_audit.cards.model import Cell
    from recipe_audit.stats import cell as stats_cell

    def cell(vals, rid, refused=None, extra=None):
        n = len(vals)
        return Cell(group={}, recipe_id=rid * 16, recipe_summary="",
                    audit_set="calibration", metric="accuracy/calibration", seeds=tuple(range(n)),
                    values=np.asarray(vals, dtype=float), run_ids=tuple(f"run{i}" for i in range(n)),
                    statuses=("FINISHED",) * n, sweep_run_ids=("p" * 32,), planned_seeds=tuple(range(n)),
                    digest="0" * 64, extra=extra or {}, unfinished=(), shift_refusal=refused)

    depth, outside, inside = [0], {}, {}
    real_entry = stats_cell.cell_readings_at
    entry_calls = []

    def entry(*args, **kwargs):
        entry_calls.append(1)
        depth[0] += 1
        try:
            return real_entry(*args, **kwargs)
        finally:
            depth[0] -= 1

    def spy(name, real):
        def counted(*args, **kwargs):
            where = inside if depth[0] else outside
            where[name] = where.get(name, 0) + 1
            return real(*args, **kwargs)
        return counted

    # every recipe_audit module that holds a reading statistic (its own or imported by name)
    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("recipe_audit") and m is not None]:
        for name in READINGS:
            real = vars(mod).get(name)
            if callable(real):
                monkeypatch.setattr(mod, name, spy(name, real))
    monkeypatch.setattr(stats_cell, "cell_readings_at", entry)
    monkeypatch.setattr(build, "cell_readings_at", entry)

    curtailed = {"curtailment": {"sweep_run_id": "p" * 32, "n_planned": 40, "n_launched": 20, "stopped_early": True,
                                 "stop_on": "decision", "batch_size": 4, "sweep_reason": "why",
                                 "sweep_audit_set": "calibration", "sweep_taus": [0.7], "sweep_eps": 0.1,
                                 "sweep_delta": 0.1}}
    cards = [build.build_card([cell([0.9] * 60, "r"), cell([0.9] * 34, "q"), cell([0.9] * 20, "c", extra=curtailed),
                               cell([0.5] * 25, "s", refused="not scored there")],
                              CardOptions(taus=(0.7, 0.8, 0.95), family_size=4), {}),
             build.build_card([cell([0.9] * 60, "r"), cell([0.9] * 40 + [0.5], "b")],
                              CardOptions(taus=(0.7, 0.95), anytime=True, family_size=3), {})]
    assert [len(c.cells) for c in cards] == [12, 4] and len(entry_calls) == 5  # a refused cell has no readings
    assert outside == {}, f"a card computed readings outside cell_readings_at: {outside}"
    # the readings the cards state were all computed in that one call
    assert all(e.family is not None for c in cards for e in c.cells)
    assert [e.curtailment is not None for e in cards[0].cells] == [False] * 6 + [True] * 3 + [False] * 3
    assert any(e.family.upper_bound_level for e in cards[0].cells)  # certified at Holm's own level
    assert all(e.anytime is not None for e in cards[1].cells)
    assert {"cell_statistics_at", "curtail_state_at", "member_at", "anytime_bound_at"} <= set(inside)
