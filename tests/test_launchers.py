"""Parallel and cluster launchers (launchers/README.md): jobs in other processes find the sweep
parent, the card is computed once, at the end, in the launching process."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO, SMALL, run_app

# the editable install's import hook is invisible to Hydra's plugin scan outside the checkout
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _runs(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    return client.search_runs([exp.experiment_id], max_results=1000)


def _check_sweep(proc, uri, sweep_dir, seeds):
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert out.count("Recipe cards (") == 1, out[-3000:]  # the card once, by the launching process
    runs = _runs(uri)
    kinds = [r.data.tags.get("recipe_audit.kind") for r in runs]
    assert kinds.count("sweep") == 1 and kinds.count("card") == 1
    parent = next(r for r in runs if r.data.tags.get("recipe_audit.kind") == "sweep")
    reruns = [r for r in runs if r.data.tags.get("recipe_audit.kind") == "rerun"]
    assert sorted(int(r.data.tags["recipe_audit.seed"]) for r in reruns) == seeds
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in reruns)
    card = json.loads((sweep_dir / "card" / "card.json").read_text())
    assert card["cells"][0]["n_reruns"] == len(seeds)
    return reruns, card


def test_joblib_two_workers_card_once(store, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=local_parallel", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}", *SMALL],
                   cwd=tmp_path, env_extra=ENV)
    reruns, card = _check_sweep(proc, store, sweep_dir, [0, 1, 2, 3])
    assert all(r.info.status == "FINISHED" for r in reruns)
    assert card["cells"][0]["unfinished"] == []


@pytest.mark.slow
def test_submitit_local_card_once_ci(store, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=cluster_local", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}", *SMALL],
                   cwd=tmp_path, env_extra=ENV)
    reruns, _ = _check_sweep(proc, store, sweep_dir, [0, 1, 2])
    assert all(r.info.status == "FINISHED" for r in reruns)
