"""What a job came to, as the sweep reports it: the numbers its task returned, the sentence for a
job that left no card metric, the bars it fails, its line in the log, the sweep's progress, and
the channel that hands each job's outcome to a sweeper by job index. Plain data in, plain data out
(no Hydra, no MLflow)."""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_audit.keys import NO_METRIC_ERROR_LEAD

log = logging.getLogger("recipe_audit")


def returned_metrics(value: Any, metrics: Sequence[str]) -> dict[str, float]:
    """What a task function returned, as metrics: a number is the first card metric; a mapping
    gives each of its numeric entries (``{"eval_accuracy": 0.91}``).

    >>> returned_metrics(0.9, ["acc"]), returned_metrics({"acc": 1, "name": "x", "ok": True}, ["acc"])
    ({'acc': 0.9}, {'acc': 1.0})
    """
    def num(v: Any) -> float | None:
        if isinstance(v, bool):
            return None
        try:
            if isinstance(v, numbers.Real):
                return float(v)
            if hasattr(v, "item") and getattr(v, "size", 1) == 1:  # numpy / torch scalars
                return float(v.item())
        except (TypeError, ValueError):
            return None
        return None

    if value is None:
        return {}
    single = num(value)
    if single is not None:
        return {metrics[0]: single} if metrics else {}
    if isinstance(value, Mapping):
        return {str(k): f for k, v in value.items() if (f := num(v)) is not None}
    return {}


NO_METRIC_LEAD = NO_METRIC_ERROR_LEAD  # recipe_audit.keys: a card reader tells such a failure from a crash


def no_metric(value: Any, missing: Sequence[str], metrics: Sequence[str]) -> str:
    """Why a job that ended without error has no card metric: what it returned, what is accepted."""
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    names = ", ".join(f"'{m}'" for m in missing)
    return (f"{NO_METRIC_LEAD}{text} ({type(value).__name__}) and logged no {names}: log the metric to the "
            f"rerun's run (mlflow.log_metric) or return it, as a number (read as '{metrics[0]}') or a mapping "
            "of metric names to numbers")


def disagreement(metric: str, logged: float, returned: float) -> str:
    """Why a job whose run holds one value of the card's metric and whose task returned another
    is recorded FAILED: both values, and what makes them one.

    >>> print(disagreement("acc", 0.1, 0.95)[:67])
    the rerun's run holds acc = 0.1 (logged) but the task returned 0.95
    """
    return (f"the rerun's run holds {metric} = {logged:.6g} (logged) but the task returned {returned:.6g} for it; "
            "neither is taken: log the card's metric once, into the rerun's run (not a run of the task's own, "
            f"nested or started again), or return the value it logged, or return nothing")


@dataclass(frozen=True)
class Bars:
    """The release bars a sweep's reruns are held to: its metrics, bars τ and direction."""

    metrics: tuple[str, ...]
    taus: tuple[float, ...]
    higher_is_better: bool

    def fails(self, outcome: Mapping[str, Any], metric: str) -> list[bool]:
        """Per τ: does this rerun fail the bar? One that did not finish, or never logged the
        metric (or logged NaN), fails every bar, as the card counts it."""
        v = outcome["metrics"].get(metric) if outcome["status"] == "FINISHED" else None
        if v is None or not math.isfinite(v):
            return [True] * len(self.taus)
        return [(v < t) if self.higher_is_better else (v > t) for t in self.taus]

    def tags(self, outcome: Mapping[str, Any]) -> dict[str, str]:
        """``recipe_audit.fails.<metric>.tau_<τ>`` = ``true``/``false`` for each metric and bar
        (:func:`recipe_audit.keys.fails_tag`, the name a card logged later writes too)."""
        from recipe_audit.keys import fails_tag

        out = {}
        for m in self.metrics:
            for t, bad in zip(self.taus, self.fails(outcome, m), strict=True):
                out[fails_tag(m, t)] = "true" if bad else "false"
        return out

    def report(self, label: str, run_id: str, outcome: Mapping[str, Any], secs: float) -> None:
        """The job's line in the log: its metrics and the bars they fail, or why it failed."""
        if outcome["status"] != "FINISHED":
            log.warning("%s FAILED (%s) in %.1fs: run %s", label, outcome.get("error", ""), secs, run_id)
            return
        parts = []
        for m in self.metrics:
            v = outcome["metrics"].get(m)
            if v is None or not math.isfinite(v):
                parts.append(f"{m} never logged (unfinished on the card)")
                continue
            bad = [t for t in self.taus if (v < t if self.higher_is_better else v > t)]
            parts.append(f"{m}={v:.3f}" + (f", fails the bar τ = {', '.join(f'{t:g}' for t in bad)}" if bad else ""))
        log.info("%s: %s (%.1fs) run %s", label, "; ".join(parts), secs, run_id)


@dataclass
class Progress:
    """The sweep's progress, printed after each job when the jobs run in the launching process
    (parallel launchers print their own per-job lines)."""

    pid: int
    total: int
    done: int = 0
    failed: int = 0
    t0: float = field(default_factory=time.monotonic)

    def step(self, failed: bool, tau: float) -> None:
        self.done += 1
        self.failed += int(failed)
        elapsed = time.monotonic() - self.t0
        left = max(self.total - self.done, 0)
        eta = elapsed / self.done * left
        log.info("rerun %d/%d done, %d failed the bar τ = %g so far, %s", self.done, self.total, self.failed, tau,
                 f"about {duration(eta)} left" if left else f"all done in {duration(elapsed)}")


def duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``1h05m``."""
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


OUTCOMES_DIR = "recipe_audit_outcomes"  # in the sweep's folder, while a sweeper reads the jobs' outcomes


class OutcomeChannel:
    """What each job of a sweep came to, handed by job index from the recipe_audit callback (in the
    job's process, whichever launcher runs it: a joblib worker, a SLURM node, a Ray task) to the
    sweeper that asked for it (the curtailing sweeper, in the sweep's process), rather than through
    an attribute added to Hydra's ``JobReturn``.

    The sweeper opens the channel (:meth:`open`: a folder in the sweep's folder, which every job
    can reach) before its first launch; the callback posts each job's outcome there as ``<job
    index>.json`` when the folder exists (:meth:`post`; nothing otherwise: a sweep without such a
    sweeper pays one ``stat`` a job); the sweeper takes each one after its batch returns
    (:meth:`take`) and closes the channel at the end (:meth:`close`), leaving the sweep's folder
    as it was.

    >>> import tempfile
    >>> channel = OutcomeChannel(tempfile.mkdtemp())
    >>> channel.post(3, {"status": "FINISHED"}), channel.open(), channel.post(3, {"status": "FAILED"})
    (None, None, None)
    >>> channel.take(3), channel.take(3), channel.take(4)
    ({'status': 'FAILED'}, None, None)
    >>> channel.close()
    """

    def __init__(self, sweep_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(sweep_dir) / OUTCOMES_DIR

    def open(self) -> None:
        """An empty channel (what an earlier launch of the sweep left there is gone)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)

    def is_open(self) -> bool:
        """Whether a sweeper opened the channel (one ``stat``)."""
        return self.folder.is_dir()

    def post(self, job_index: int, outcome: Mapping[str, Any]) -> None:
        """The outcome of the job ``job_index``, when a sweeper opened the channel (written whole:
        a reader never sees half a file)."""
        if not self.is_open():
            return
        path = self.folder / f"{int(job_index)}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(dict(outcome)), encoding="utf-8")
        os.replace(tmp, path)

    def take(self, job_index: int) -> dict[str, Any] | None:
        """The outcome posted for the job ``job_index`` (None: none was), removed from the channel."""
        path = self.folder / f"{int(job_index)}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        path.unlink(missing_ok=True)
        return json.loads(text)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
