"""The tolerant submitit launchers submit exactly as Hydra's submitit launchers do (same executor,
same parameters, same job arguments), then wait for every job and turn a dead one into a failed
rerun instead of aborting the multirun."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

submitit = pytest.importorskip("submitit")
hsl = pytest.importorskip("hydra_plugins.hydra_submitit_launcher.submitit_launcher")
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf  # noqa: E402

from hydra_plugins.recipe_audit.plugins import (  # noqa: E402
    TolerantLocalLauncher,
    TolerantSlurmLauncher,
)

JOBS = [["seed=0", "recipe=stable"], ["seed=1", "recipe=stable"]]


def _launcher(cls, conf, tmp_path, **extra):
    params = {k: v for k, v in OmegaConf.to_container(OmegaConf.structured(conf)).items() if k != "_target_"}
    params.update(submitit_folder=str(tmp_path / ".submitit"), timeout_min=17, cpus_per_task=1, **extra)
    launcher = cls(**params)
    launcher.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    return launcher


def _submitted_by(launcher, monkeypatch):
    """What ``launch`` hands to submitit: the executor's parameters and the per-job arguments."""
    seen = {}

    def map_array(executor, fn, *args):
        seen["params"] = dict(executor._executor.parameters)
        seen["cluster"] = executor.cluster
        seen["fn"] = fn
        seen["args"] = [list(a) for a in args]
        return []

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    if hasattr(launcher, "_submit"):
        launcher._submit(JOBS, 5)
    else:
        launcher.launch(JOBS, 5)
    return seen


@pytest.mark.parametrize("stock, tolerant, conf, extra", [
    (hsl.LocalLauncher, TolerantLocalLauncher, LocalQueueConf, {}),
    (hsl.SlurmLauncher, TolerantSlurmLauncher, SlurmQueueConf, {"partition": "cpu", "max_num_timeout": 3}),
])
def test_submits_like_hydra(stock, tolerant, conf, extra, tmp_path, monkeypatch):
    if conf is SlurmQueueConf:  # building submitit's SLURM executor checks for srun; submitting is faked
        monkeypatch.setattr("submitit.slurm.slurm.SlurmExecutor.affinity", classmethod(lambda cls: 1))
    want = _submitted_by(_launcher(stock, conf, tmp_path, **extra), monkeypatch)
    got = _submitted_by(_launcher(tolerant, conf, tmp_path, **extra), monkeypatch)
    assert got["cluster"] == want["cluster"]
    assert got["params"] == want["params"] and got["params"]  # same resources, time limit, etc.
    assert isinstance(got["fn"], tolerant)  # the launcher itself runs each job, as in Hydra
    # overrides, sweep dir key, job numbers from the initial index, job ids; the singleton state
    assert got["args"][:4] == want["args"][:4] == [
        JOBS, ["hydra.sweep.dir"] * 2, [5, 6], ["job_id_for_5", "job_id_for_6"]]


def test_a_dead_job_becomes_a_failed_rerun(tmp_path):
    class Dead:
        def results(self):
            raise submitit.core.utils.UncompletedJobError("Job 123 (task: 0) with path ... has not produced any output")

    class Done:
        def results(self):
            from hydra.core.utils import JobReturn, JobStatus

            ret = JobReturn(overrides=JOBS[0], status=JobStatus.COMPLETED)
            ret.return_value = {"calibration": 0.9}
            return [ret]

    launcher = _launcher(TolerantLocalLauncher, LocalQueueConf, tmp_path)
    ok = launcher._result(Done(), JOBS[0], 0)
    dead = launcher._result(Dead(), JOBS[1], 1)
    assert ok.return_value == {"calibration": 0.9}
    assert dead.return_value is None and dead.overrides == JOBS[1]
