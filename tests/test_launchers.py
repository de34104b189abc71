"""Parallel and cluster launchers (launchers/README.md): jobs in other processes find the sweep
parent, the card is computed once, at the end, in the launching process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
from helpers import procs
from helpers.app import REPO, SMALL, run_app

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
    """Two workers: every rerun nested under the sweep, the card once; threads=auto decided once,
    by the sweep (logged once, recorded on the parent), and every rerun trained on it in a worker
    (the sweep's end to end test of threads=auto; the rule itself: tests/test_threads.py). On a
    machine of two GPUs as far as placement knows ($CUDA_VISIBLE_DEVICES=0,1; the rules:
    tests/test_devices.py), each worker keeps a GPU of its own."""
    from recipe_audit import keys
    from recipe_audit.app import devices

    sweep_dir = tmp_path / "sweep"
    small = [a for a in SMALL if not a.startswith("threads=")]
    proc = run_app(["-m", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", "seed=range(4)", "threads=auto",
                    f"hydra.sweep.dir={sweep_dir}", *small], cwd=tmp_path, env_extra={**ENV, devices.CVD: "0,1"})
    reruns, card = _check_sweep(proc, store, sweep_dir, [0, 1, 2, 3])
    assert all(r.info.status == "FINISHED" for r in reruns)
    assert card["cells"][0]["unfinished"] == []
    (parent,) = [r for r in _runs(store) if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    n = parent.data.tags[keys.TAG_THREADS]
    line = parent.data.tags[keys.TAG_THREADS_REASON]
    assert line.startswith(f"{n} torch thread") and "2 jobs at a time)" in line
    assert (proc.stdout + proc.stderr).count(line) == 1  # logged once, by the main process
    assert {r.data.tags[keys.TAG_THREADS] for r in reruns} == {n}  # in the workers too
    assert os.getpid() not in {int(r.data.tags[keys.TAG_PID]) for r in reruns}
    # GPUs: the placement decided once, logged once; a worker keeps its GPU, no two workers share one
    line = parent.data.tags[keys.TAG_DEVICES_REASON]
    assert line == "GPUs per rerun: 2 GPUs (0,1, from $CUDA_VISIBLE_DEVICES), 2 jobs at a time: 1 GPU each (0 | 1)"
    assert (proc.stdout + proc.stderr).count(line) == 1
    by_pid = {}
    for r in reruns:
        by_pid.setdefault(r.data.tags[keys.TAG_PID], set()).add(r.data.tags[keys.TAG_DEVICES])
    assert all(len(d) == 1 for d in by_pid.values())
    assert len({d for ds in by_pid.values() for d in ds}) == len(by_pid) <= 2
    assert {d for ds in by_pid.values() for d in ds} <= {"0", "1"}


@pytest.mark.slow
def test_submitit_local_card_once_ci(store, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=cluster_local", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}", *SMALL],
                   cwd=tmp_path, env_extra=ENV)
    reruns, _ = _check_sweep(proc, store, sweep_dir, [0, 1, 2])
    assert all(r.info.status == "FINISHED" for r in reruns)


def _ray_pids(temp_dir: str) -> set[int]:
    """Processes of the Ray instance whose session lives under ``temp_dir`` (gcs_server, raylet,
    monitors name it on their command line) and their descendants (agents, workers)."""
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(d.name)] = (ppid, cmd)
    pids = {pid for pid, (_, cmd) in procs.items() if temp_dir in cmd} - {os.getpid()}
    while True:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in pids} - pids
        if not more:
            return pids
        pids |= more


@pytest.fixture
def ray_temp_dir():
    """A Ray temp dir of this test's own (short: Ray's socket paths must stay under 108 bytes), so
    the processes of the Ray instance the sweep starts can be told from any other Ray on the
    machine; whatever of them is left after the test is killed, by pid."""
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to find the Ray processes")
    temp_dir = tempfile.mkdtemp(prefix="ra-ray-")
    yield temp_dir
    for pid in _ray_pids(temp_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_ray_local_card_once_ci(store, tmp_path, ray_temp_dir):
    """hydra/launcher=ray_local: a local Ray instance started by the sweep, each rerun a Ray task in
    a worker process; the card once, by the launching process; Ray gone when the sweep exits."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=ray_local", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}",
                    f"+hydra.launcher.ray.init._temp_dir={ray_temp_dir}", *SMALL],
                   cwd=tmp_path, env_extra={**ENV, "RAY_USAGE_STATS_ENABLED": "0"}, timeout=300)
    reruns, card = _check_sweep(proc, store, sweep_dir, [0, 1, 2])
    assert all(r.info.status == "FINISHED" for r in reruns)
    assert card["cells"][0]["unfinished"] == []
    assert "Started a local Ray instance" in proc.stderr  # the jobs did run on Ray
    deadline = time.monotonic() + procs.timeout(15)  # the driver stops its Ray instance when it exits
    while _ray_pids(ray_temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_pids(ray_temp_dir), "the sweep left Ray processes running"
