"""The curtailing sweeper in process: a launcher that returns a chosen result per job and records
its batches, and a sweeper built around it with a small Hydra config."""

from __future__ import annotations

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from recipe_audit.app.curtailing import CurtailingSweeperBase


class FakeLauncher:
    """Returns, per job, ``outcome(overrides)`` as the job's return value; records each batch as
    ``(initial_job_idx, [overrides of each job])``."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.batches = []

    def launch(self, job_overrides, initial_job_idx):
        self.batches.append((initial_job_idx, [list(j) for j in job_overrides]))
        out = []
        for job in job_overrides:
            ov = dict(o.split("=", 1) for o in job)
            ret = JobReturn(overrides=list(job), cfg=OmegaConf.create({}), status=JobStatus.COMPLETED)
            ret.return_value = self.outcome(ov)
            out.append(ret)
        return out


class Sweeper(CurtailingSweeperBase):
    def validate_batch_is_legal(self, batch):  # nothing to compose here
        pass


def make_sweeper(tmp_path, outcome, *, taus=(0.7,), hib=True, **params) -> Sweeper:
    """A curtailing sweeper (``params``: batch_size, stop_on, max_reruns, ...) whose jobs return
    ``outcome(overrides)``; the record goes to ``tmp_path/sweep``."""
    sw = Sweeper(**params)
    sw.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}},
                                  "audit": {"primary": "calibration", "taus": list(taus), "eps": 0.1,
                                            "delta": 0.1, "higher_is_better": hib}})
    sw.hydra_context = type("Ctx", (), {"config_loader": None})()
    sw.launcher = FakeLauncher(outcome)
    return sw
