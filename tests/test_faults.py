"""Faults (launchers/README.md): a rerun killed with SIGKILL, an interrupted sweep resumed, concurrent
writers into one SQLite store.

A rerun is killed from outside, as an out-of-memory killer or a lost node would: the test watches the
store until the rerun of the target seed is RUNNING, reads the process it runs in from the run's tags
(``keys.TAG_HOST``, ``keys.TAG_PID``) and sends that process SIGKILL."""

from __future__ import annotations

import importlib
import json
import math
import os
import signal
import socket
import time

import pytest
from helpers import procs
from helpers.app import REPO, SMALL, run_app, start_app
from test_launchers import ENV, _runs

from recipe_audit import keys
from recipe_audit.store import rerun_runs, sweeps, tracking


# The kill lands mid-training: RerunLogger writes the loss of the first training step at once, the
# test waits for it in the store, then kills. The recipe is long enough (hundreds of steps at
# 7-9 ms a step here) that the rerun cannot finish between the first step and the kill, even on a
# much faster machine; each test checks the killed rerun did not finish (no final accuracy).
def _fault_args(max_steps: int) -> list[str]:
    return [a for a in SMALL if not a.startswith("recipe.max_steps=")] + [f"recipe.max_steps={max_steps}"]


POLL_TIMEOUT_S = 120


def _by_seed(runs):
    out = {}
    for r in runs:
        if r.data.tags.get("recipe_audit.kind") == "rerun":
            out.setdefault(int(r.data.tags["recipe_audit.seed"]), []).append(r)
    return out


def _poll(what: str, probe, proc, output):
    """``probe()``'s first true value, tried every 0.2 s for at most POLL_TIMEOUT_S while the app
    ``proc`` runs (errors count as not yet: the store may be busy or not created yet)."""
    deadline, error = time.monotonic() + procs.timeout(POLL_TIMEOUT_S), None
    while True:
        try:
            value = probe()
        except Exception as exc:
            value, error = None, exc
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the app exited ({proc.returncode}) before {what}:\n{output.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {POLL_TIMEOUT_S} s (last error: {error!r}):\n{output.read_text()[-3000:]}")
        time.sleep(0.2)


def _sweep_killing(args, cwd, uri, sweep_dir, seed: int, after_s: float, output):
    """Run the sweep ``python -m recipe_audit ARGS`` and, ``after_s`` seconds after the rerun of
    ``seed`` has written its first training step to the store, kill the process training it with
    SIGKILL, from outside.
    Returns (the app's ``Popen``, ended; its stdout and stderr; the killed pid). Every process the
    app started is gone when it returns, whatever happened."""
    from mlflow.tracking import MlflowClient

    proc = start_app(args, cwd=cwd, output=output, env_extra=ENV)
    try:
        # the sweep's parent run is in the store (tables, experiment) once its file is written
        sweep = _poll("sweep file", lambda: sweeps.SweepInfo.from_json((sweep_dir / sweeps.SWEEP_FILE).read_text()),
                      proc, output)
        client = MlflowClient(tracking_uri=uri)
        exp_id = client.get_experiment_by_name(sweep.experiment_name).experiment_id
        filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{sweep.sweep_id}' and tags.`{keys.TAG_KIND}` = '{keys.KIND_RERUN}' "
                f"and tags.`{keys.TAG_SEED}` = '{seed}' and attributes.status = 'RUNNING'")

        def training():  # the rerun of seed, RUNNING, with its first training step written
            runs = client.search_runs([exp_id], filt)
            return [r for r in runs if keys.METRIC_TRAIN_LOSS in r.data.metrics]

        (run,) = _poll(f"a training step of seed {seed}", training, proc, output)
        tags = run.data.tags
        assert tags[keys.TAG_HOST] == socket.gethostname() and keys.TAG_SLURM_JOB_ID not in tags
        pid = int(tags[keys.TAG_PID])
        assert os.getpgid(pid) == proc.pid  # the app's own process, never another one
        time.sleep(after_s)
        status = client.get_run(run.info.run_id).info.status
        assert status == "RUNNING", f"seed {seed} was {status} before the kill: lengthen the recipe"
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=procs.timeout(600))
        # what the sweep started is gone soon after it exits (a worker pool's processes included)
        proc.leftover = True
        for _ in range(50):
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.leftover = False
                break
            time.sleep(0.2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the app and what it started, if still there
        except ProcessLookupError:
            pass
        proc.wait()
    return proc, output.read_text(), pid


@pytest.mark.slow
def test_sigkill_rerun_is_unfinished_on_the_card_ci(store, tmp_path):
    """cluster_local: seed 1's job process is killed with SIGKILL while its rerun runs; the sweep goes
    on, the card is computed once and lists seed 1 as unfinished (killed); seeds 0 and 2 finished intact."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "sweep"
    proc, out, pid = _sweep_killing(
        ["-m", "hydra/launcher=cluster_local", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}",
         *_fault_args(max_steps=600)],  # 4-5 s of training a seed here
        tmp_path, store, sweep_dir, seed=1, after_s=0.2, output=tmp_path / "sweep.log")
    # the card is written; the exit status says that a rerun did not finish
    assert proc.returncode == 1, out[-3000:]
    assert "did not finish: seed 1 (killed)" in out
    assert pid != proc.pid  # seed 1's job process, not the sweep
    assert out.count("Recipe cards (") == 1
    seeds = _by_seed(_runs(store))
    assert sorted(seeds) == [0, 1, 2] and all(len(v) == 1 for v in seeds.values())
    assert seeds[1][0].info.status == "KILLED"
    assert "accuracy/calibration" not in seeds[1][0].data.metrics  # killed before it finished training
    for s in (0, 2):
        assert seeds[s][0].info.status == "FINISHED" and "accuracy/calibration" in seeds[s][0].data.metrics
        assert int(seeds[s][0].data.tags[keys.TAG_PID]) not in (pid, proc.pid)  # a process per job
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 3 and cell["n_unfinished"] == 1
    assert [(u["seed"], u["reason"]) for u in cell["unfinished"]] == [(1, "killed")]


@pytest.mark.slow
def test_resume_trains_only_unfinished_seeds(store, tmp_path):  # CI: test_plugin's resume, by default
    """The sequential sweep dies with seed 2 (SIGKILL of the whole process, which trains every seed);
    relaunched with tracking.resume=true in the same sweep dir it trains seeds 2 and 3 only; the card
    has one result per seed, no unfinished rerun, and the dead attempt listed as a duplicate."""
    sweep_dir = tmp_path / "sweep"
    # 4-5 s of training a seed here, the kill 0.2 s after seed 2's first step
    args = ["-m", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}", *_fault_args(max_steps=600)]
    first, _, pid = _sweep_killing(args, tmp_path, store, sweep_dir, seed=2, after_s=0.2,
                                   output=tmp_path / "first.log")
    assert pid == first.pid and first.returncode == -9  # the sequential launcher trains in the sweep process
    before = _by_seed(_runs(store))
    assert sorted(before) == [0, 1, 2] and before[2][0].info.status == "RUNNING"
    assert "accuracy/calibration" not in before[2][0].data.metrics  # killed before it finished training
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


def test_four_concurrent_sqlite_writers_lose_nothing(tmp_path, monkeypatch, migrated_mlflow_db):
    import shutil

    monkeypatch.syspath_prepend(str(REPO / "bench"))  # spawned writers import it by name too
    bench = importlib.import_module("bench_writers")
    shutil.copy(migrated_mlflow_db, tmp_path / "mlflow.db")  # MLflow's tables made (a new store: the test below)
    res = bench.run_writers(f"sqlite:///{tmp_path / 'mlflow.db'}", 4, 8, 20)
    assert res["got"]["runs"] == 32 and res["got"]["finished"] == 32
    assert res["got"]["steps"] == 4 * 8 * 20 and res["got"]["final_metrics"] == 32
    assert not any(res["lost"].values())


@pytest.mark.slow
def test_a_killed_parallel_worker_is_recorded_and_the_sweep_goes_on_ci(store, tmp_path):
    """hydra/launcher=local_parallel: the worker training seed 1 is killed with SIGKILL. loky ends
    its pool with the jobs it was running; their reruns are recorded KILLED, the lost jobs run
    again, and the sweep ends with every seed finished and one card, exit 1 (a worker was lost),
    leaving no process behind."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep_dir = tmp_path / "sweep"
    proc, out, pid = _sweep_killing(
        ["-m", "hydra/launcher=local_parallel", "seed=range(3)", f"hydra.sweep.dir={sweep_dir}",
         *_fault_args(max_steps=600)],
        tmp_path, store, sweep_dir, seed=1, after_s=0.2, output=tmp_path / "sweep.log")
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "a worker died" in out
    assert "were killed and run again: seed " in out, out[-3000:]
    assert not proc.leftover
    assert pid != proc.pid
    seeds = _by_seed(_runs(store))
    assert sorted(seeds) == [0, 1, 2]
    assert "KILLED" in [r.info.status for r in seeds[1]]
    for s in (0, 1, 2):
        assert "FINISHED" in [r.info.status for r in seeds[s]]
    assert out.count("Recipe cards (") == 1
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 3 and cell["unfinished"] == []
    assert 1 in [d["seed"] for d in cell["duplicates"]]


# --- faults that end in one sentence, in process ----------------------------------------------
# Each row: what the command is given (braces filled in below), its exit status and a fragment of
# the one sentence on stderr. Each was a traceback, an exhausted machine or a silent exit before.

FAULTS = [
    # a SQLite file cut short (a full disk, a copy interrupted): SQLAlchemy's traceback before
    (["gate", "--model-name", "m", "--alias", "a", "--audit", "calibration", "--tau", "0.7", "--tracking-uri",
      "{truncated}"], 2,
     "the tracking store could not be read (database disk image is malformed)"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "{truncated}"], 2, "database disk image is malformed"),
    # a card.json nested 100000 deep: RecursionError before
    (["verify", "{deep}"], 2, "is not a recipe card (its JSON is nested too deeply to read)"),
    (["attach", "--model-name", "m", "--version", "1", "--card", "{deep}", "--tracking-uri", "{uri}"], 2,
     "is not a recipe card (its JSON is nested too deeply to read)"),
    (["verify", "{deep_inside}"], 2, "Not a valid recipe card"),
    # usage errors are exit 2, as argparse's own
    (["gate", "--model-name", "m", "--alias", "a", "--audit", "", "--tracking-uri", "{uri}"], 2,
     "--audit must name an audit set"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "{uri}", "--family-size", "2", "--anytime"], 2,
     "Give --family-size or --anytime, not both"),
]


@pytest.fixture(scope="module")
def fault_places(tmp_path_factory):
    from helpers.store import synthetic_sweep

    tmp = tmp_path_factory.mktemp("faults")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    synthetic_sweep(uri, {s: 0.9 for s in range(5)})
    truncated = tmp / "truncated.db"
    raw = (tmp / "mlflow.db").read_bytes()
    truncated.write_bytes(raw[: len(raw) // 3])
    deep = tmp / "deep"
    deep.mkdir()
    (deep / "card.json").write_text("[" * 100_000 + "]" * 100_000)
    inside = tmp / "inside"
    inside.mkdir()  # a card-like object whose manifest and cells are nested just under Python's limit
    nested = "[" * 900 + "]" * 900
    (inside / "card.json").write_text(f'{{"kind": "recipe_card", "artifacts": {{"a": {nested}}}, "cells": {nested}}}')
    return {"uri": uri, "truncated": f"sqlite:///{truncated}", "deep": str(deep), "deep_inside": str(inside),
            "tmp": tmp}


@pytest.mark.parametrize("args, code, fragment", FAULTS, ids=[" ".join(c[0])[:50] for c in FAULTS])
def test_a_fault_is_one_sentence(args, code, fragment, fault_places, capsys):
    from helpers.cli import run_cli

    fill = {k: v for k, v in fault_places.items() if isinstance(v, str)}
    rc, out, err = run_cli([a.format(**fill) for a in args], capsys)
    lines = [ln for ln in err.splitlines() if not ln.startswith("20")]  # MLflow's own INFO lines
    assert rc == code, err
    assert len(lines) == 1 and lines[0].startswith("recipe-audit: error: "), err
    assert fragment in lines[0]
    assert "Traceback" not in err and not out


def test_a_tiny_budget_card_is_computed_in_time(fault_places, capsys):
    # numpy was asked for 16.8 TiB at 1e-12 (the band's sample floor), 1e-4 took 596 s: the floor
    # no longer builds bands of the floor's size, so the time is that of the reruns the card reads
    from helpers.cli import run_cli

    out_dir = fault_places["tmp"] / "card-1e-4"
    t0 = time.perf_counter()
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tracking-uri", fault_places["uri"],
                            "--eps", "1e-4", "--anytime", "--out", str(out_dir)], capsys)
    assert rc == 0, err
    assert time.perf_counter() - t0 < procs.timeout(90)
    entry = json.loads((out_dir / "card.json").read_text())["cells"][0]
    floor = entry["band"]["sample_floor"]
    assert abs(floor - math.log(10) / (2 * 1e-4 ** 2)) <= max(2, 1e-12 * floor)  # DKW's closed form
    assert entry["band"]["supported"] is False


def test_a_budget_past_the_rerun_limit_is_refused_at_once(fault_places, capsys):
    # at 1e-12 the band's sample floor is 1.15e24 reruns, past the 10^15 the statistics accept:
    # one sentence, exit 2, at once, and no card written (it was computed with that floor before)
    from helpers.cli import run_cli

    out_dir = fault_places["tmp"] / "card-1e-12"
    t0 = time.perf_counter()
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tracking-uri", fault_places["uri"],
                            "--eps", "1e-12", "--anytime", "--out", str(out_dir)], capsys)
    lines = [ln for ln in err.splitlines() if not ln.startswith("20")]  # MLflow's own INFO lines
    assert rc == 2, err
    assert len(lines) == 1 and "eps = 1e-12 is too small to certify" in lines[0], err
    assert "1.15e+24" in lines[0] and "Traceback" not in err
    assert time.perf_counter() - t0 < procs.timeout(90)
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_a_new_sqlite_store_is_created_safely_while_a_plain_client_creates_it(tmp_path):
    """A plain MlflowClient (which migrates a new store without a lock) and a sweep's first look
    start on the same new SQLite file at the same instant: before, the sweep's side failed 4 times
    in 4 ("Online migration expected to match one row", "table ... already exists"); now the store
    is made whole beside its place and linked there, or the other's migration is waited for."""
    import subprocess
    import sys

    from helpers import procs

    # the child imports MLflow, says so, and is told the instant at which both start
    plain = ("import sys, time\n"
             "from mlflow.tracking import MlflowClient\n"
             "print('ready', flush=True)\n"
             "t = float(sys.stdin.readline())\n"
             "while time.time() < t: time.sleep(0.001)\n"
             "MlflowClient(sys.argv[1]).search_experiments()\n")
    for i in range(1):  # failed 4 times in 4 before the fix; the slow suite need not repeat it
        uri = f"sqlite:///{tmp_path / f'store{i}' / 'mlflow.db'}"
        (tmp_path / f"store{i}").mkdir()
        child = procs.spawn([sys.executable, "-c", plain, uri], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        try:
            import mlflow.tracking  # noqa: F401 - imported before the start, as in the child

            assert child.stdout.readline() == "ready\n", child.stderr.read()[-2000:]  # ("" if it died)
            at = time.time() + 0.5
            child.stdin.write(f"{at}\n")
            child.stdin.flush()
            while time.time() < at:
                time.sleep(0.001)
            store = tracking.open_store(uri, f"exp{i}")
            _, err = child.communicate(timeout=procs.timeout(120))
        finally:
            if child.poll() is None:
                child.kill()
        assert child.returncode == 0, err[-2000:]
        assert store.client.get_experiment_by_name(f"exp{i}") is not None
        assert not list((tmp_path / f"store{i}").glob(".mlflow.db.*.new"))


@pytest.mark.parametrize("where, bad", [("open", 0), ("close", 1)])
def test_a_full_disk_stops_the_sweep_in_one_sentence(tmp_path, store, monkeypatch, where, bad):
    """The store's disk fills while seed ``bad`` opens (or closes) its rerun: one sentence naming
    the way out, no traceback (MLflow's SQL store logged one per failed write: 14 in one sweep), the
    next seed not run, nothing left RUNNING (the parent FAILED), exit 2; once space is back (after
    the full disk at the open), ``tracking.resume=true`` runs the seeds left and ends the sweep,
    nothing RUNNING. The full disk is played in process (a 6 MB tmpfs gave the same sentence, by
    hand: mount needs root)."""
    import logging
    import sqlite3

    from helpers.app import SMALL
    from helpers.inprocess import run_module_here
    from mlflow.tracking import MlflowClient

    def full():
        err = sqlite3.OperationalError("database or disk is full")
        logging.getLogger("mlflow.store.db.utils").error("SQLAlchemy database error.", exc_info=err)
        return RuntimeError("(sqlite3.OperationalError) database or disk is full")

    real_open, real_close = rerun_runs.open_rerun, rerun_runs.close_rerun

    def opening(store_, new, **kw):
        if str(new.seed) == str(bad):
            raise full() from sqlite3.OperationalError("database or disk is full")
        return real_open(store_, new, **kw)

    def closing(store_, run_id, **kw):
        if store_.client.get_run(run_id).data.tags.get(keys.TAG_SEED) == str(bad):
            raise full() from sqlite3.OperationalError("database or disk is full")
        return real_close(store_, run_id, **kw)

    args = ["-m", f"seed=range({bad + 2})", *SMALL, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    with monkeypatch.context() as m:
        m.setattr(rerun_runs, *(("open_rerun", opening) if where == "open" else ("close_rerun", closing)))
        proc = run_module_here(args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout and "counts as unfinished" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("recipe_audit: error")]
    assert len(errors) == 1 and "is full" in errors[0] and f"seed {bad} and the sweep stop here" in errors[0], errors
    assert "tracking.resume=true" in errors[0]
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("recipe_audit").experiment_id
    runs = client.search_runs([exp])
    assert "RUNNING" not in [r.info.status for r in runs]
    reruns = sorted(r.data.tags.get(keys.TAG_SEED, "") for r in runs if r.data.tags.get(keys.TAG_KIND) == "rerun")
    assert reruns == [str(s) for s in range(bad + (where == "close"))]  # the seed after it never ran
    assert [r.info.status for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP] == ["FAILED"]
    if where == "close":  # the resume below is the same for both
        return
    # space is back: the same command with tracking.resume=true runs what is left and ends the sweep
    again = run_module_here([*args, "tracking.resume=true"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = client.search_runs([exp])
    assert "RUNNING" not in [r.info.status for r in runs], [(r.data.tags, r.info.status) for r in runs]
    finished = sorted(r.data.tags[keys.TAG_SEED] for r in runs
                      if r.data.tags.get(keys.TAG_KIND) == "rerun" and r.info.status == "FINISHED")
    assert finished == [str(s) for s in range(bad + 2)]
    parents = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
