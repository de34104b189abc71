"""threads=auto: the rule (recipe_audit/app/threads.py) on a machine described by monkeypatching
(a sweep that records its decision: tests/test_launchers.py::test_joblib_two_workers_card_once)."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from recipe_audit.app import threads

BASIC = "hydra_plugins.recipe_audit.plugins.SeedLauncher"
JOBLIB = "hydra_plugins.recipe_audit.plugins.SeedJoblibLauncher"
LOCAL = "hydra_plugins.recipe_audit.plugins.TolerantLocalLauncher"
SLURM = "hydra_plugins.recipe_audit.plugins.TolerantSlurmLauncher"
RAY = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"


@pytest.fixture
def machine(monkeypatch):
    """A machine with ``cpus`` CPUs (all usable unless ``affinity``) at a 1-minute load of ``load``."""
    for k in (threads.ENV, "SLURM_CPUS_PER_TASK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(threads, "_cgroup_quota", lambda path="": None)

    def set_(cpus: int, load: float, affinity: int | None = None, quota: float | None = None):
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity or cpus)), raising=False)
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
        monkeypatch.setattr(threads, "_cgroup_quota", lambda path="": quota)

    return set_


def _cfg(target: str, **launcher) -> object:
    return OmegaConf.create({"hydra": {"launcher": {"_target_": target, **launcher}, "sweeper": {}}})


@pytest.mark.parametrize(("cpus", "load", "expect", "reason"), [
    (2, 0.1, 2, "2 CPUs free, 1 job at a time"),
    (2, 0.6, 1, "1 of 2 CPUs free at load average 0.60, 1 job at a time"),
    (2, 2.3, 1, "0 of 2 CPUs free at load average 2.30, 1 job at a time"),  # never fewer than one
    (16, 3.4, 13, "13 of 16 CPUs free at load average 3.40, 1 job at a time"),
])
def test_the_sequential_launcher_gets_the_free_cpus(machine, cpus, load, expect, reason):
    machine(cpus, load)
    d = threads.decide(_cfg(BASIC), n_jobs=59)
    assert (d.threads, d.reason) == (expect, reason)
    assert d.line() == f"{expect} torch thread{'s' if expect > 1 else ''} per rerun ({reason})"


def test_parallel_workers_share_the_free_cpus(machine):
    machine(16, 0.0)
    assert threads.decide(_cfg(JOBLIB, n_jobs=4), n_jobs=59).threads == 4
    assert threads.decide(_cfg(JOBLIB, n_jobs=4), n_jobs=2).threads == 8  # two jobs: two at a time
    assert threads.decide(_cfg(JOBLIB, n_jobs=-1), n_jobs=59).threads == 1  # joblib: one per CPU
    assert threads.decide(_cfg(JOBLIB, n_jobs=-3), n_jobs=59).threads == 1  # 14 workers, 16 free
    assert threads.decide(_cfg(JOBLIB, n_jobs=32), n_jobs=59).threads == 1
    assert threads.decide(_cfg(LOCAL), n_jobs=4).threads == 4  # submitit local: the batch at once
    assert threads.decide(_cfg(RAY, ray={"remote": {"num_cpus": 4}, "init": {"num_cpus": None}}), n_jobs=59).threads == 4
    machine(16, 8.0)
    d = threads.decide(_cfg(JOBLIB, n_jobs=2), n_jobs=59)
    assert (d.threads, d.reason) == (4, "8 of 16 CPUs free at load average 8.00, 2 jobs at a time")


def test_accelerate_processes_count_as_jobs(machine, monkeypatch):
    machine(8, 0.0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads.decide(_cfg(BASIC), n_jobs=10).threads == 4
    assert threads.decide_in_job().threads == 4


def test_slurm_jobs_use_their_own_cpus_whatever_the_login_node_load(machine, monkeypatch):
    machine(4, 30.0)
    d = threads.decide(_cfg(SLURM, cpus_per_task=8), n_jobs=59)
    assert (d.threads, d.reason) == (8, "cpus_per_task=8 of each SLURM job")
    assert threads.decide(_cfg(SLURM, cpus_per_task=None), n_jobs=59).threads == 1
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")  # a job no sweep decided for
    assert threads.decide_in_job() == threads.Decision(6, "SLURM_CPUS_PER_TASK=6")


def test_an_unknown_launcher_keeps_one_thread(machine):
    machine(16, 0.0)
    d = threads.decide(_cfg("my.own.Launcher"), n_jobs=59)
    assert (d.threads, d.reason) == (1, "unknown launcher Launcher: one thread a rerun")


def test_affinity_and_quota_limit_the_cpus_and_the_load_counts_their_share(machine):
    machine(64, 32.0, affinity=4)  # 4 of 64 CPUs: half the machine busy is 2 of ours
    d = threads.decide(_cfg(BASIC), n_jobs=59)
    assert (d.threads, d.reason) == (2, "2 of 4 CPUs free at load average 2.00, 1 job at a time")
    machine(8, 0.0, quota=2.5)  # a cgroup quota of 2.5 CPUs: 3
    assert threads.decide(_cfg(BASIC), n_jobs=59).threads == 3


def test_a_job_takes_the_sweeps_decision_else_decides_once(machine, monkeypatch, caplog):
    machine(4, 0.0)
    monkeypatch.setattr(threads, "_DECIDED", None)
    monkeypatch.setenv(threads.ENV, "3")
    assert threads.for_job("auto") == 3
    assert threads.for_job(1) == 1 and threads.for_job(0) == 0 and threads.for_job("2") == 2  # explicit wins
    monkeypatch.delenv(threads.ENV)
    with caplog.at_level("INFO", logger="recipe_audit"):
        assert threads.for_job("auto") == 4
        machine(4, 4.0)  # decided once a process: the load it makes itself does not flip it
        assert threads.for_job("AUTO") == 4
    assert [r.getMessage() for r in caplog.records] == ["4 torch threads per rerun (4 CPUs free, 1 job at a time)"]


def test_apply_sets_torch_once_and_threads_0_gets_torchs_own_number_back(monkeypatch):
    import torch

    real, own = torch.set_num_threads, torch.get_num_threads()
    calls = []
    monkeypatch.setattr(threads, "_TORCH_OWN", None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    other = 3 if own == 2 else 2
    try:
        assert threads.apply(0) == 0 and calls == []  # torch's own choice, untouched
        assert threads.apply(other) == other and threads.apply(str(other)) == other
        assert calls == [other] and torch.get_num_threads() == other  # the jobs of a process: set once
        assert threads.apply(0) == 0 and torch.get_num_threads() == own  # not the last job's number
        assert threads.apply(0) == 0 and calls == [other, own]
        assert threads.apply(own) == own and calls == [other, own]  # already so
    finally:
        real(own)


@pytest.mark.parametrize("bad", ["many", -1, 1.5, True, None, 1_000_000, threads.MAX_THREADS + 1, 10**40,
                                 float("inf"), "1e6"])
def test_a_bad_value_is_one_sentence(bad):
    # a million threads once made the tokenizers panic, then the rerun segfaulted (exit 139)
    with pytest.raises(threads.ThreadsError, match="threads must be auto or a whole number from 0 to 1024, not"):
        threads.parse(bad)
    assert threads.parse(threads.MAX_THREADS) == threads.MAX_THREADS


# A sweep that records its decision, every rerun training on it in a worker: end to end in
# tests/test_launchers.py::test_joblib_two_workers_card_once (one sweep for both behaviours).
