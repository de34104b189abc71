"""Several processes per rerun (``accelerate launch``, launchers/README.md): every process trains,
only the main process writes to MLflow, and every process takes the main process's decisions."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from helpers import procs
from helpers.app import SMALL
from test_launchers import _check_sweep, _runs


def _accelerate(args, cwd, *, processes=2, use_cpu=True, timeout=600):
    """``accelerate launch`` of two processes on this machine's CPUs (gloo), as a user tests the
    multi-GPU path without GPUs."""
    exe = shutil.which("accelerate")
    if exe is None:
        pytest.skip("the accelerate command is not installed")
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    if use_cpu:
        env["ACCELERATE_USE_CPU"] = "true"
    cmd = [exe, "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           "-m", "recipe_audit", *args]
    return procs.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_two_processes_one_writer_and_same_resume_decision_ci(store, tmp_path):
    """Two processes train each rerun data-parallel; the store holds one sweep, one run per seed and
    one card, as from one process. Relaunched with tracking.resume=true and one more seed, both
    processes skip the three finished seeds (a process that trained alone would hang the other's
    gradient all-reduce) and only seed 3 is trained and logged."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}", *SMALL]
    first = _accelerate(args, tmp_path)
    reruns, _ = _check_sweep(first, store, sweep_dir, [0, 1, 2])
    assert all(r.info.status == "FINISHED" for r in reruns)
    client_metrics = {r.info.run_id: r.data.metrics for r in reruns}
    assert all("train_loss" in m and "accuracy/calibration" in m for m in client_metrics.values())

    second = _accelerate(["-m", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}", *SMALL, "tracking.resume=true"],
                         tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stdout + second.stderr
    assert out.count("skipped (resume)") == 3  # logged by the main process only
    runs = _runs(store)
    kinds = [r.data.tags.get("recipe_audit.kind") for r in runs]
    assert kinds.count("sweep") == 1  # the same sweep, reopened
    seeds = sorted(int(r.data.tags["recipe_audit.seed"]) for r in runs if r.data.tags.get("recipe_audit.kind") == "rerun")
    assert seeds == [0, 1, 2, 3]


def test_processes_accelerate_did_not_connect_are_refused(new_store, tmp_path):
    """``accelerate launch --multi_gpu`` without GPUs and without ACCELERATE_USE_CPU: two processes
    that accelerate leaves unconnected, each of which would log every rerun on its own. Refused
    with one sentence, before anything is logged."""
    import torch

    if torch.cuda.device_count() > 1:
        pytest.skip("with GPUs accelerate connects the processes")
    proc = _accelerate(["-m", "seed=range(2)", f"hydra.sweep.dir={tmp_path / 'sweep'}", *SMALL], tmp_path,
                       use_cpu=False)
    assert proc.returncode != 0
    assert "accelerate connected 1" in proc.stderr and "ACCELERATE_USE_CPU=true" in proc.stderr
    assert "recipe_audit/" not in proc.stderr  # no traceback from the project (the launcher prints its own)
    assert not (tmp_path / "store" / "mlflow.db").exists() or not _runs(new_store)


def test_a_broken_rendezvous_is_one_sentence(tmp_path):
    """WORLD_SIZE=2 without the rendezvous address torchrun would set: one sentence, exit 2."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
           "ACCELERATE_USE_CPU": "true", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("MASTER_ADDR", None)
    proc = procs.run([sys.executable, "-m", "recipe_audit", *SMALL], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "accelerate could not connect the 2 launched processes" in proc.stderr
    assert "Traceback" not in proc.stderr
