"""collect_reruns: one result per seed, unfinished and duplicated seeds, cells, digests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers import procs
from helpers.read_stores import METRIC, NOW_MS, OLD_MS

from recipe_audit import keys
from recipe_audit.reruns import (
    NEVER_LOGGED,
    REASONS,
    QueryError,
    RerunSet,
    check_single_recipe,
    collect_reruns,
)
from recipe_audit.store.read import read_runs

GROUP = ["tags." + keys.TAG_MODEL]


def _cells(uri: str, **kw) -> dict[str, RerunSet]:
    frame = read_runs(uri, "exp", [METRIC], group_by=GROUP)
    return {c.recipe_id: c for c in collect_reruns(frame, METRIC, **kw)}


def test_one_result_per_seed_with_every_unfinished_reason(rich_store):
    uri, built = rich_store
    ids = built.runs
    r1 = _cells(uri, now_ms=NOW_MS)["r1"]
    assert r1.group == {"tags." + keys.TAG_MODEL: "m"}
    assert r1.metric_key == METRIC and r1.experiment == "exp"
    assert r1.seeds == tuple(range(10))
    assert r1.n == 10
    expected = [0.9, 0.40, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, 0.8, np.nan]  # seed 1: its worst
    np.testing.assert_array_equal(r1.values, expected)
    assert r1.run_ids == (
        ids["s0b"],
        ids["s1a"],
        ids["s2"],
        ids["s3"],
        ids["s4"],
        ids["s5"],
        ids["s6"],
        None,
        ids["s8a"],
        ids["s9"],
    )
    assert r1.statuses == (
        "FINISHED",
        "FINISHED",
        "FAILED",
        "KILLED",
        "RUNNING",
        "FINISHED",
        "FINISHED",
        NEVER_LOGGED,
        "FINISHED",
        "FINISHED",
    )
    assert r1.unfinished == (
        (2, "failed", ids["s2"]),
        (3, "killed", ids["s3"]),
        (4, "stale-running", ids["s4"]),  # started three days before now
        (5, "nan-metric", ids["s5"]),
        (6, "missing-metric", ids["s6"]),
        (7, "never-logged", None),
        (9, "nan-metric", ids["s9"]),  # +inf
    )
    assert {u[1] for u in r1.unfinished} <= set(REASONS)
    assert r1.planned_seeds == tuple(range(8))
    assert r1.sweep_run_ids == (ids["p1"],)
    np.testing.assert_array_equal(r1.finished_values, [0.9, 0.40, 0.8])


def test_duplicates_are_listed_and_the_worst_result_decides(rich_store):
    uri, built = rich_store
    ids = built.runs
    r1 = _cells(uri)["r1"]
    dups = {d.seed: d for d in r1.duplicates}
    assert set(dups) == {0, 1, 8}
    assert dups[0][:4] == ((0, (ids["s0a"], ids["s0b"]), (0.9, 0.9), (True, True)))
    assert dups[0].decided_by == ids["s0b"]  # equal results: the most recent
    assert dups[1][:4] == (1, (ids["s1a"], ids["s1b"]), (0.40, 0.45), (True, True))
    assert dups[1].decided_by == ids["s1a"]  # the older, worse result counts: a rerun is no second chance
    assert dups[8].run_ids == (ids["s8a"], ids["s8b"]) and math.isnan(dups[8].values[1])
    assert dups[8].results == (True, False) and dups[8].decided_by == ids["s8a"]
    assert r1.disagreeing_duplicates == (1,)  # seed 8's failed duplicate is not a disagreement
    # about a bar: seed 1's results (0.40, 0.45) disagree only between them
    assert [t for t in (0.3, 0.4, 0.42, 0.45, 0.5) if dups[1].disagrees(t)] == [0.42, 0.45]
    assert dups[1].counts_as(0.42) == "fail" and dups[1].counts_as(0.4) == "pass"
    assert not any(dups[8].disagrees(t) for t in (0.5, 0.85, 0.95))  # one result: nothing to disagree with


def test_failures_count_below_tau_and_every_unfinished(rich_store):
    uri, _ = rich_store
    r1 = _cells(uri)["r1"]
    assert r1.failures(0.3) == 7  # only the unfinished
    assert r1.failures(0.40) == 7  # not below: equal passes
    assert r1.failures(0.42) == 8  # seed 1 finished at 0.40 and at 0.45: one failing result fails the seed
    assert r1.failures(0.5) == 8
    assert r1.failures(0.85) == 9
    assert r1.failures(1.0) == 10
    lower = _cells(uri, higher_is_better=False)["r1"]
    assert lower.failures(0.85) == 7 + 1  # 0.9 is above
    assert lower.failures(0.42) == 7 + 3  # lower is better: seed 1's worst result is 0.45


def _frame(rows: list[tuple[str, str, int, int, float | None]]) -> pd.DataFrame:
    """Runs of one cell: (run id, status, start, seed, metric or None when not logged)."""
    return pd.DataFrame({
        "run_id": [r[0] for r in rows],
        "status": [r[1] for r in rows],
        "start_time": pd.array([r[2] for r in rows], dtype="Int64"),
        "seed": [str(r[3]) for r in rows],
        "recipe_id": pd.Series(["rid"] * len(rows), dtype=object),
        "m": [math.nan if r[4] is None else r[4] for r in rows],
        "logged[m]": [r[4] is not None for r in rows],
    })


def test_a_rerun_seed_fails_when_any_finished_rerun_fails():
    """Seed shopping: seed 3 finished at 0.4, a later rerun of it at 0.95; the seed fails τ = 0.7."""
    rows = [(f"r{s}", "FINISHED", s, s, 0.9) for s in range(5)] + [("late", "FINISHED", 99, 3, 0.95)]
    rows[3] = ("r3", "FINISHED", 3, 3, 0.4)
    (cell,) = collect_reruns(_frame(rows), "m")
    assert cell.n == 5 and cell.failures(0.7) == 1
    assert cell.run_ids[3] == "r3" and cell.values[3] == 0.4
    (dup,) = cell.duplicates
    assert dup.seed == 3 and dup.decided_by == "r3" and dup.disagrees(0.7) and not dup.disagrees(0.3)
    assert cell.disagreeing_duplicates == (3,)
    # the other order (the passing result first) counts the same
    rows[3], rows[5] = ("r3", "FINISHED", 3, 3, 0.95), ("late", "FINISHED", 99, 3, 0.4)
    (cell,) = collect_reruns(_frame(rows), "m")
    assert cell.failures(0.7) == 1 and cell.duplicates[0].decided_by == "late"


def test_a_killed_attempt_then_a_finished_rerun_is_no_disagreement():
    """The killed attempt logged 0.4 before it was killed; the finished rerun (0.95) is the result."""
    rows = [("killed", "KILLED", 1, 0, 0.4), ("crashed", "FAILED", 2, 0, None), ("done", "FINISHED", 3, 0, 0.95),
            ("nometric", "FINISHED", 4, 0, None)]
    (cell,) = collect_reruns(_frame(rows), "m")
    assert cell.values.tolist() == [0.95] and cell.run_ids == ("done",) and cell.unfinished == ()
    (dup,) = cell.duplicates
    assert dup.results == (False, False, True, False) and dup.decided_by == "done"
    assert not dup.disagrees(0.7) and not dup.nondeterministic and dup.counts_as(0.7) == "pass"
    assert cell.disagreeing_duplicates == () and cell.failures(0.7) == 0


def test_a_finished_rerun_with_a_nan_metric_is_a_failing_result():
    rows = [("a", "FINISHED", 1, 0, 0.95), ("b", "FINISHED", 2, 0, math.nan)]
    (cell,) = collect_reruns(_frame(rows), "m")
    assert cell.run_ids == ("b",) and cell.unfinished == ((0, "nan-metric", "b"),) and cell.failures(0.1) == 1
    assert cell.duplicates[0].disagrees(0.7) and cell.duplicates[0].counts_as(0.7) == "fail"
    # lower is better: -inf is no better than any value; the seed still fails
    rows = [("a", "FINISHED", 1, 0, 0.2), ("b", "FINISHED", 2, 0, -math.inf)]
    (cell,) = collect_reruns(_frame(rows), "m", higher_is_better=False)
    assert cell.run_ids == ("b",) and cell.failures(0.5) == 1


def test_no_result_for_a_seed_keeps_its_most_recent_attempt():
    rows = [("old", "FAILED", 1, 0, None), ("new", "KILLED", 2, 0, 0.9)]
    (cell,) = collect_reruns(_frame(rows), "m")
    assert cell.run_ids == ("new",) and cell.unfinished == ((0, "killed", "new"),)
    assert cell.duplicates[0].counts_as(0.5) == "unfinished"


def test_running_is_stale_only_after_stale_after_s(rich_store):
    uri, built = rich_store
    s4 = built.runs["s4"]
    fresh = _cells(uri, now_ms=OLD_MS + 60_000)["r1"]
    assert (4, "running", s4) in fresh.unfinished
    assert (4, "stale-running", s4) in _cells(uri, now_ms=OLD_MS + 86_400_000 + 1)["r1"].unfinished
    assert (4, "running", s4) in _cells(uri, now_ms=NOW_MS, stale_after_s=10 * 86_400)["r1"].unfinished
    assert (4, "stale-running", s4) in _cells(uri, now_ms=2 * NOW_MS)["r1"].unfinished


def test_planned_seeds_argument_overrides_the_sweep_tags(rich_store):
    uri, _ = rich_store
    cells = _cells(uri, planned_seeds=["0", 1, 11])
    r1, r2 = cells["r1"], cells["r2"]
    assert r1.planned_seeds == (0, 1, 11)
    assert 7 not in r1.seeds and 11 in r1.seeds
    assert (11, "never-logged", None) in r1.unfinished
    assert r2.seeds == (0, 1, 2, 11) and r2.unfinished == ((11, "never-logged", None),)


def test_two_recipes_with_equal_group_values_are_never_pooled(rich_store):
    uri, built = rich_store
    cells = _cells(uri)
    assert set(cells) == {"r1", "r2"}
    r2 = cells["r2"]
    assert r2.group == cells["r1"].group
    assert r2.seeds == (0, 1, 2) and r2.unfinished == () and r2.duplicates == ()
    np.testing.assert_array_equal(r2.values, [0.70, 0.75, 0.72])
    assert r2.sweep_run_ids == (built.runs["p2"],)
    with pytest.raises(QueryError) as err:
        check_single_recipe(list(cells.values()))
    assert str(err.value) == (
        "Runs of 2 recipes are mixed in experiment 'exp'; group them with --group-by or pick one with --recipe-id."
    )
    check_single_recipe([r2])  # one recipe: fine
    frame = read_runs(uri, "exp", [METRIC])
    only_r2 = collect_reruns(frame[frame["recipe_id"] == "r2"], METRIC)
    assert [c.recipe_id for c in only_r2] == ["r2"]


def test_bring_your_own_cells_take_their_identity_from_the_group_values(byo_store):
    uri, built = byo_store
    frame = read_runs(uri, "byo", ["val_acc"], seed_key="params.seed", group_by=["params.model_name"])
    cells = collect_reruns(frame, "val_acc")
    assert [(c.recipe_id, c.group) for c in cells] == [
        (None, {"params.model_name": "a"}),
        (None, {"params.model_name": "b"}),
    ]
    a, b = cells
    assert a.seeds == (1, 2, 3) and b.seeds == (1, 2, 3)
    np.testing.assert_array_equal(a.values, [0.8, 0.6, 0.9])
    assert b.unfinished == ((2, "failed", built.runs["b2"]),)
    assert a.planned_seeds == () and a.sweep_run_ids == (built.runs["study"],)
    assert b.sweep_run_ids == (built.runs["study"],)  # b3 is not nested
    with pytest.raises(QueryError, match="Runs of 2 recipes are mixed"):
        check_single_recipe(cells)
    (pooled,) = collect_reruns(frame, "val_acc", group_by=[])
    assert pooled.n == 3 and len(pooled.duplicates) == 3  # without group_by: one identity, seeds repeat


def test_several_group_keys_with_absent_values(byo_store):
    uri, _ = byo_store
    group = ["params.model_name", "params.absent", "tags.owner"]
    frame = read_runs(uri, "byo", ["val_acc"], seed_key="params.seed", group_by=group)
    cells = collect_reruns(frame, "val_acc")
    assert [c.group for c in cells] == [
        {"params.model_name": "a", "params.absent": None, "tags.owner": "me"},
        {"params.model_name": "b", "params.absent": None, "tags.owner": "me"},
    ]
    assert [c.n for c in cells] == [3, 3]


def test_rows_with_and_without_a_recipe_id_are_separate_cells():
    frame = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "status": ["FINISHED", "FINISHED"],
            "start_time": pd.array([1, 2], dtype="Int64"),
            "seed": ["1", "1"],
            "recipe_id": pd.Series(["rid", None], dtype=object),
            "m": [0.5, 0.6],
        }
    )
    cells = collect_reruns(frame, "m")
    assert [(c.recipe_id, c.seeds, c.duplicates) for c in cells] == [(None, (1,), ()), ("rid", (1,), ())]


def test_seeds_compare_as_integers_and_sort_numerically():
    frame = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d"],
            "status": ["FINISHED"] * 4,
            "start_time": pd.array([1, 2, 3, 4], dtype="Int64"),
            "seed": ["10", "2", "2.0", " 3"],
            "recipe_id": pd.Series([None] * 4, dtype=object),
            "m": [0.1, 0.2, 0.3, 0.4],
        }
    )
    (cell,) = collect_reruns(frame, "m")
    assert cell.seeds == (2, 3, 10)
    assert [d[:4] for d in cell.duplicates] == [(2, ("b", "c"), (0.2, 0.3), (True, True))]
    assert cell.disagreeing_duplicates == (2,)
    np.testing.assert_array_equal(cell.values, [0.2, 0.4, 0.1])  # seed 2 counts its worse result


def test_rerun_set_is_frozen_and_its_values_read_only(rich_store):
    uri, _ = rich_store
    r1 = _cells(uri)["r1"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r1.seeds = ()  # type: ignore[misc]
    with pytest.raises(ValueError):
        r1.values[0] = 0.0


def test_digest_is_the_documented_sha256_and_tracks_the_results(rich_store):
    uri, _ = rich_store
    r1 = _cells(uri)["r1"]
    h = hashlib.sha256()
    for seed, run_id, value in zip(r1.seeds, r1.run_ids, r1.values.tolist(), strict=True):
        h.update(json.dumps([seed, run_id, repr(float(value))]).encode() + b"\n")
    assert r1.digest() == h.hexdigest()
    assert _cells(uri)["r1"].digest() == r1.digest()  # stable across reads
    changed = dataclasses.replace(r1, values=np.where(np.arange(10) == 0, 0.91, r1.values))
    assert changed.digest() != r1.digest()


@pytest.mark.parametrize("seeds, run_ids", [
    ((0, 1, 2, 3), ("a", "b", None, "d")),
    (("s0", "], [", "x], [y", 7), ("a", "], [", None, "é")),  # the row separator inside strings
    ((5,), (None,)),
    ((), ()),
])
def test_digest_of_all_rows_at_once_is_the_per_row_sha256(rich_store, seeds, run_ids):
    """The digest is computed from one json.dumps of all the rows; it is the documented per-row
    sha256 whatever the seeds and run ids hold (a separator-like string falls back to rows)."""
    uri, _ = rich_store
    values = np.array([0.5, float("nan"), 1e-300, -0.0][:len(seeds)])
    rs = dataclasses.replace(_cells(uri)["r1"], seeds=seeds, run_ids=run_ids, values=values)
    h = hashlib.sha256()
    for seed, run_id, value in zip(seeds, run_ids, values.tolist(), strict=True):
        h.update(json.dumps([seed, run_id, repr(float(value))]).encode() + b"\n")
    assert rs.digest() == h.hexdigest()


def test_sql_and_search_runs_give_the_same_cells(rich_store):
    uri, _ = rich_store
    by_path = []
    for backend in ("sql", "client"):
        frame = read_runs(uri, "exp", [METRIC], group_by=GROUP, backend=backend)
        by_path.append(collect_reruns(frame, METRIC, now_ms=NOW_MS))
    assert [c.digest() for c in by_path[0]] == [c.digest() for c in by_path[1]]
    assert [c.unfinished for c in by_path[0]] == [c.unfinished for c in by_path[1]]

    def dups(cells: list[RerunSet]) -> list:
        return [(d.seed, d.run_ids, tuple(repr(v) for v in d.values), d.results, d.decided_by)
                for c in cells for d in c.duplicates]

    assert dups(by_path[0]) == dups(by_path[1])


def test_empty_frame_gives_no_cells(rich_store):
    uri, _ = rich_store
    frame = read_runs(uri, "exp", [METRIC])
    assert collect_reruns(frame.iloc[:0], METRIC) == []
    with pytest.raises(QueryError, match="There are no reruns"):
        check_single_recipe([])


def test_resolving_reruns_imports_neither_mlflow_nor_sqlalchemy():
    import sys

    code = ("import sys, recipe_audit.reruns; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'mlflow', 'sqlalchemy'}))")
    out = procs.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
