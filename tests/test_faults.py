"""Faults (launchers/README.md): a rerun killed with SIGKILL, an interrupted sweep resumed, concurrent
writers into one SQLite store."""

from __future__ import annotations

import importlib
import json

import pytest
from conftest import REPO, SMALL, run_app
from test_launchers import ENV, _runs


def _by_seed(runs):
    out = {}
    for r in runs:
        if r.data.tags.get("recipe_audit.kind") == "rerun":
            out.setdefault(int(r.data.tags["recipe_audit.seed"]), []).append(r)
    return out


@pytest.mark.slow
def test_sigkill_rerun_is_unfinished_on_the_card_ci(store, tmp_path):
    """cluster_local: seed 1's process is killed with SIGKILL at step 5; the sweep goes on, the card
    is computed once and lists seed 1 as unfinished (killed); seeds 0 and 2 finished intact."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=cluster_local", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}", *SMALL],
                   cwd=tmp_path, env_extra={**ENV, "RECIPE_AUDIT_FAULT_SIGKILL": "1:5"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("Recipe cards (") == 1
    seeds = _by_seed(_runs(store))
    assert sorted(seeds) == [0, 1, 2] and all(len(v) == 1 for v in seeds.values())
    assert seeds[1][0].info.status == "KILLED"
    for s in (0, 2):
        assert seeds[s][0].info.status == "FINISHED" and "accuracy/calibration" in seeds[s][0].data.metrics
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 3 and cell["n_unfinished"] == 1
    assert [(u["seed"], u["reason"]) for u in cell["unfinished"]] == [(1, "killed")]


@pytest.mark.slow
def test_resume_trains_only_unfinished_seeds_ci(store, tmp_path):
    """The sequential sweep dies with seed 2 (SIGKILL of the whole process); relaunched with
    tracking.resume=true in the same sweep dir it trains seeds 2 and 3 only; the card has one
    result per seed, no unfinished rerun, and the dead attempt listed as a duplicate."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}", *SMALL]
    first = run_app(args, cwd=tmp_path, env_extra={**ENV, "RECIPE_AUDIT_FAULT_SIGKILL": "2:5"})
    assert first.returncode == -9
    before = _by_seed(_runs(store))
    assert sorted(before) == [0, 1, 2] and before[2][0].info.status == "RUNNING"
    second = run_app([*args, "tracking.resume=true"], cwd=tmp_path, env_extra=ENV)
    assert second.returncode == 0, second.stderr[-3000:]
    runs = _runs(store)
    assert [r.data.tags.get("recipe_audit.kind") for r in runs].count("sweep") == 1  # the same sweep
    after = _by_seed(runs)
    assert {s: len(v) for s, v in after.items()} == {0: 1, 1: 1, 2: 2, 3: 1}  # 0 and 1 not retrained
    assert sorted(r.info.status for r in after[2]) == ["FINISHED", "KILLED"]
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 4 and cell["unfinished"] == []
    assert [d["seed"] for d in cell["duplicates"]] == [2]
    # a third launch trains nothing
    third = run_app([*args, "tracking.resume=true"], cwd=tmp_path, env_extra=ENV)
    assert third.returncode == 0 and (third.stdout + third.stderr).count("skipped (resume)") == 4
    assert len([r for r in _runs(store) if r.data.tags.get("recipe_audit.kind") == "rerun"]) == 5


def test_four_concurrent_sqlite_writers_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))  # spawned writers import it by name too
    bench = importlib.import_module("bench_writers")
    res = bench.run_writers(f"sqlite:///{tmp_path / 'mlflow.db'}", 4, 8, 20)
    assert res["got"]["runs"] == 32 and res["got"]["finished"] == 32
    assert res["got"]["steps"] == 4 * 8 * 20 and res["got"]["final_metrics"] == 32
    assert not any(res["lost"].values())
