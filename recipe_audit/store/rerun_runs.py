"""The reruns' runs: opened for a job (nested under the sweep's run, tagged), kept the run MLflow's
fluent API resumes while the job runs, closed with the truth whatever the job's code did to
them; and what a sweep's reruns came to (finished seeds, failures, attempts killed).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from recipe_audit import keys
from recipe_audit.errors import error_line
from recipe_audit.store.sweeps import SweepInfo
from recipe_audit.store.tracking import MAX_METRICS_PER_CALL, MAX_PARAMS_PER_CALL, Store, client_for


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``; lists are kept whole, as JSON."""
    from recipe_audit.store.uris import mask_in_text

    out: dict[str, str] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, name + "."))
        else:
            # recorded as params: a password in a URI (tracking.uri=http://user:pw@host) masked
            out[name] = mask_in_text(json.dumps(v) if isinstance(v, (list, tuple, dict)) else str(v))
    return out


@dataclass(frozen=True)
class NewRerun:
    """A job's rerun to open: what its config says it is (read by the Hydra callback)."""

    run_name: str
    seed: Any
    recipe_id: str
    recipe_name: str
    model: str | None = None  # the config's model.name and task.name, when it has them
    task: str | None = None
    # tags set last, over the ones above (an acceptance cell's own), and tags left out
    own_tags: Mapping[str, str] = field(default_factory=dict)
    without: tuple[str, ...] = ()


def rerun_tags(new: NewRerun, placed: Mapping[str, str] | None = None, sweep: SweepInfo | None = None) -> dict[str, str]:
    """The tags a job's rerun is opened with: what it is (kind, recipe, seed, model, task), where
    it runs (host, pid, SLURM job, ``placed``: its GPUs) and the sweep it belongs to.

    >>> sorted(rerun_tags(NewRerun("r-seed1", 1, "abc", "r")))[:4]
    ['recipe_audit.host', 'recipe_audit.kind', 'recipe_audit.pid', 'recipe_audit.recipe']
    """
    tags = {
        keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: new.recipe_id, keys.TAG_RECIPE_NAME: new.recipe_name[:5000],
        keys.TAG_SEED: str(new.seed), keys.TAG_HOST: socket.gethostname(), keys.TAG_PID: str(os.getpid()),
    }
    for tag, value in ((keys.TAG_MODEL, new.model), (keys.TAG_TASK, new.task)):
        if value:
            tags[tag] = value
    if os.environ.get("SLURM_JOB_ID"):
        tags[keys.TAG_SLURM_JOB_ID] = os.environ["SLURM_JOB_ID"]
    tags.update(placed or {})
    if sweep is not None:
        tags[keys.TAG_SWEEP_ID] = sweep.sweep_id
        tags[keys.TAG_PARENT] = sweep.parent_run_id
    tags = {k: v for k, v in tags.items() if k not in new.without}
    return {**tags, **new.own_tags}


def open_rerun(store: Store, new: NewRerun, *, placed: Mapping[str, str] | None = None,
               sweep: SweepInfo | None = None) -> tuple[str, str]:
    """Open a job's rerun run (nested under ``sweep``'s parent run when there is one); returns its
    run id and artifact URI. This process will close it (:func:`close_rerun`): a writer of this
    process may hand its last metrics to that close (:func:`held_writes`)."""
    run = store.client.create_run(store.experiment_id, run_name=new.run_name, tags=rerun_tags(new, placed, sweep))
    _HELD[run.info.run_id] = HeldWrites()
    return run.info.run_id, run.info.artifact_uri


class HeldWrites:
    """Metrics a writer in the process that will close a rerun (the built-in trainer's rerun
    logger, :mod:`recipe_audit.store.rerun_log`) hands to that close, and what it knows the run
    holds.

    The close writes ``metrics`` in its own ``log_batch``, before the run's status: a rerun's
    last metrics and its params and tags go in one call instead of two, each with its value,
    step and timestamp as the writer made them. A process killed before the close leaves the run
    RUNNING, which the sweep's end closes KILLED (an unfinished rerun, as any rerun killed
    before its end).

    ``sole``: the writer has declared that every metric and param the run holds went through it
    (:meth:`note` saw each one), so the close of a run in a SQL store takes what the run holds
    from :meth:`latest` instead of reading the run back (``get_run``). Only the built-in trainer
    declares it; a task logging through MLflow's own API never does."""

    def __init__(self) -> None:
        self.metrics: list = []  # mlflow.entities.Metric, for the close's batch
        self.sole = False
        self._latest: dict[str, tuple[tuple[int, int, float], float]] = {}

    def note(self, metrics: Iterable[Any]) -> None:
        """The writer wrote (or handed over) ``metrics``, in this order: each key's latest value as
        MLflow's SQL store keeps it (the largest step, then timestamp, then value, the first of
        equals; NaN compared as 0, an infinity stored as the largest float)."""
        for m in metrics:
            value = float(m.value)
            stored = 0.0 if math.isnan(value) else max(-_FLOAT_MAX, min(_FLOAT_MAX, value))
            order = (int(m.step), int(m.timestamp), stored)
            seen = self._latest.get(m.key)
            if seen is None or order > seen[0]:
                self._latest[m.key] = (order, value if math.isnan(value) else stored)

    def latest(self) -> dict[str, float]:
        """Each metric's latest value, as ``get_run(...).data.metrics`` would give it."""
        return {k: v for k, (_order, v) in self._latest.items()}


_FLOAT_MAX = 1.7976931348623157e308
_HELD: dict[str, HeldWrites] = {}  # run id -> what is handed to its close, for the runs this process opened


def held_writes(run_id: str) -> HeldWrites | None:
    """What a writer of this process hands to the close of ``run_id`` (None: this process did not
    open it, or has closed it)."""
    return _HELD.get(run_id)


def mark_failed(store: Store, run_id: str) -> None:
    """Best effort: the run FAILED (a store whose disk is full may still take this small update)."""
    try:
        store.client.set_terminated(run_id, "FAILED")
    except Exception:  # noqa: BLE001 - the disk is full
        pass


def _process_alive(host: str | None, pid: str | None) -> bool:
    """Whether the process that opened a rerun still runs (True when it ran on another host or
    its pid is unknown: only a process of this host can be looked at)."""
    if host != socket.gethostname() or not (pid or "").isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def close_dead_reruns(info: SweepInfo, only_dead_processes: bool = False,
                      kind: str = keys.KIND_RERUN) -> list[str]:
    """At the end of a multirun every job has returned, so a rerun of the sweep still RUNNING
    belongs to a process that died without closing it (SIGKILL, out of memory, node lost):
    mark it KILLED, with the reason, so the card lists it as unfinished (counted as a failure) under its
    true cause. Returns the run ids closed."""
    client = client_for(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}' "
            "and attributes.status = 'RUNNING'")
    closed = []
    for run in client.search_runs([exp.experiment_id], filter_string=filt, max_results=50000):
        host, pid = run.data.tags.get(keys.TAG_HOST), run.data.tags.get(keys.TAG_PID)
        exiting = host == socket.gethostname() and pid == str(os.getpid())  # this process, at exit
        if only_dead_processes and not exiting and _process_alive(host, pid):
            continue  # mid-sweep: only the reruns whose process is gone
        client.set_tag(run.info.run_id, keys.TAG_ERROR, "the rerun's process died before it finished")
        client.set_terminated(run.info.run_id, "KILLED")
        closed.append(run.info.run_id)
    return closed


def finished_seeds(store: Store, sweep: SweepInfo, metrics: Iterable[str]) -> dict[int, set[str]]:
    """Seed -> the recipe identities of ``sweep`` with a FINISHED rerun of that seed whose every
    metric in ``metrics`` is finite: what a resumed sweep need not run again."""
    metrics = list(metrics)
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{sweep.sweep_id}' and tags.`{keys.TAG_KIND}` = '{keys.KIND_RERUN}' "
            "and attributes.status = 'FINISHED'")
    out: dict[int, set[str]] = {}
    for run in search_all(store.client, store.experiment_id, filt):
        vals = [run.data.metrics.get(m) for m in metrics]
        if not all(v is not None and math.isfinite(v) for v in vals):
            continue
        try:
            seed = int(run.data.tags.get(keys.TAG_SEED, ""))
        except ValueError:
            continue
        out.setdefault(seed, set()).add(run.data.tags.get(keys.TAG_RECIPE_ID, ""))
    return out


class FailedRerun(NamedTuple):
    """A rerun whose latest attempt did not finish: its seed, recipe identity, status (FAILED or
    KILLED) and error tag (None when it has none: a killed process records none)."""

    seed: int | str
    recipe_id: str
    status: str
    error: str | None


def failed_reruns(info: SweepInfo, kind: str = keys.KIND_RERUN) -> list[FailedRerun]:
    """Each rerun of ``info`` whose latest attempt ended FAILED or KILLED (a seed a resumed sweep
    ran again to the end is not listed; the card still sees every attempt), in seed order.
    ``kind``: the runs' ``recipe_audit.kind`` (an acceptance sweep's cells)."""
    client = client_for(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}'"
    latest: dict[tuple[str, str], Any] = {}
    for run in search_all(client, exp.experiment_id, filt):
        key = (run.data.tags.get(keys.TAG_RECIPE_ID, ""), run.data.tags.get(keys.TAG_SEED, "?"))
        if key not in latest or run.info.start_time > latest[key].info.start_time:
            latest[key] = run
    out = []
    for (recipe, seed), run in latest.items():
        if run.info.status in ("FAILED", "KILLED"):
            out.append(FailedRerun(int(seed) if seed.lstrip("-").isdigit() else seed, recipe, run.info.status,
                                   run.data.tags.get(keys.TAG_ERROR)))
    # seeds in number order (a seed that is no number after them), then recipe
    return sorted(out, key=lambda f: (isinstance(f.seed, str), f.seed if isinstance(f.seed, int) else 0,
                                      str(f.seed), f.recipe_id))


def killed_attempts(info: SweepInfo, since_ms: int, kind: str = keys.KIND_RERUN) -> list[int | str]:
    """The seeds of ``info`` with an attempt started since ``since_ms`` that ended KILLED (its
    process died: a killed worker, whose job the launcher ran again)."""
    client = client_for(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}' "
            f"and attributes.status = 'KILLED' and attributes.start_time >= {int(since_ms)}")
    seeds = {run.data.tags.get(keys.TAG_SEED, "?") for run in search_all(client, exp.experiment_id, filt)}
    return sorted((int(s) if s.lstrip("-").isdigit() else s for s in seeds), key=str)


def sweep_runs(info: SweepInfo, kind: str, status: str | None = "FINISHED") -> list:
    """The runs of ``info`` whose ``recipe_audit.kind`` is ``kind`` (and status ``status``; None: any)."""
    client = client_for(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}'"
    if status is not None:
        filt += f" and attributes.status = '{status}'"
    return search_all(client, exp.experiment_id, filt)


def search_all(client, experiment_id: str, filt: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filt, max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


_PARAM_KEY_OK = re.compile(r"^[\w./\- ]{1,250}$")


def close_rerun(store: Store, run_id: str, *, params: Mapping[str, str] | None = None,
                returned: Mapping[str, float] | None = None, error: BaseException | None = None,
                metrics: Iterable[str] = (), tags_for=None, no_metric=None, disagree=None) -> dict[str, Any]:
    """End a rerun's run with the truth, whatever the job's code did to it: the params and the
    returned metrics it did not log itself, the error (FAILED) or FINISHED. Returns the outcome:
    ``{"run_id", "status", "metrics": {metric: last value or None}, "error"}``. ``tags_for``
    maps that outcome to tags set on the run before it closes (the pass/fail tags per bar).
    ``no_metric``: for a job that ended without error but with some of ``metrics`` neither logged
    nor returned, maps those metrics to the error the run is then recorded FAILED with (what the
    job returned and what is accepted). ``disagree``: for a job that ended without error, whose
    returned value of one of ``metrics`` is not the value its run holds (the task logged another
    one, in a run of its own MLflow resumed as the rerun's), maps ``(metric, logged, returned)``
    to the error the run is then recorded FAILED with; neither value is chosen in silence.
    What a writer of this process handed to the close (:class:`HeldWrites`) is written in the
    same batch, and the run is read back (``get_run``) unless that writer is its only one."""
    from mlflow.entities import Metric, Param, RunTag

    from recipe_audit.store.read_sql import is_sql_uri  # MLflow's SQL store: the rule HeldWrites.note follows

    client = store.client
    held = _HELD.pop(run_id, None)
    held_metrics = held.metrics if held is not None else []
    if held is not None and held.sole and is_sql_uri(store.uri):  # the writer knows all the run holds
        logged, have = held.latest(), set()
    else:
        if held_metrics:  # the run may hold others' writes too: the handed metrics first, then read it back
            for m, p, t in _batches(held_metrics, [], []):
                client.log_batch(run_id, metrics=m, params=p, tags=t)
            held_metrics = []
        run = client.get_run(run_id)
        logged, have = dict(run.data.metrics), set(run.data.params)
    disagreeing = [(m, logged[m], (returned or {})[m]) for m in metrics
                   if m in logged and m in (returned or {}) and not _same_value(logged[m], returned[m])]
    now = int(time.time() * 1000)
    batch_metrics = [Metric(k, float(v), now, 0) for k, v in (returned or {}).items()
                     if k not in logged and _PARAM_KEY_OK.match(k)]
    for m in batch_metrics:
        logged[m.key] = m.value
    batch_metrics = [*held_metrics, *batch_metrics]
    batch_params = [Param(k, v[:6000]) for k, v in sorted((params or {}).items())
                    if k not in have and _PARAM_KEY_OK.match(k)]
    outcome: dict[str, Any] = {"run_id": run_id, "status": "FINISHED",
                               "metrics": {m: logged.get(m) for m in metrics}, "error": None}
    if error is not None:
        outcome["status"] = "FAILED"
        outcome["error"] = error_line(error)  # the innermost cause first (Hydra wraps instantiation errors)
    elif no_metric is not None and (missing := [m for m, v in outcome["metrics"].items() if v is None]):
        outcome["status"] = "FAILED"
        outcome["error"] = no_metric(missing)
    elif disagree is not None and disagreeing:
        outcome["status"] = "FAILED"
        outcome["error"] = disagree(*disagreeing[0])
    tags = dict(tags_for(outcome)) if tags_for is not None else {}
    if outcome["error"]:
        tags[keys.TAG_ERROR] = outcome["error"]
    batch_tags = [RunTag(k, v) for k, v in tags.items()]
    error_text = "".join(traceback.format_exception(error)) if error is not None else None

    def write() -> None:
        # one write for all of it (params, metrics and tags go in one call; MLflow's limits per call)
        for m, p, t in _batches(batch_metrics, batch_params, batch_tags):
            client.log_batch(run_id, metrics=m, params=p, tags=t)
        if error_text is not None:
            try:
                client.log_text(run_id, error_text, "error.txt")
            except Exception:  # noqa: BLE001 - the status matters more than the traceback
                pass
        client.set_terminated(run_id, outcome["status"])

    write()
    return outcome



def _batches(metrics: list, params: list, tags: list):
    """``(metrics, params, tags)`` in ``log_batch`` calls within MLflow's limits (100 params, 100
    tags, 1,000 metrics and 1,000 entries in all a call); one call at least."""
    while True:
        p, params = params[:MAX_PARAMS_PER_CALL], params[MAX_PARAMS_PER_CALL:]
        t, tags = tags[:MAX_PARAMS_PER_CALL], tags[MAX_PARAMS_PER_CALL:]
        room = MAX_METRICS_PER_CALL - len(p) - len(t)
        m, metrics = metrics[:room], metrics[room:]
        yield m, p, t
        if not (metrics or params or tags):
            return


def _same_value(logged: float, returned: float) -> bool:
    """Whether a logged and a returned value are one number (a float32 value and its float64
    copy, a NaN and a NaN, included).

    >>> _same_value(0.1, 0.95), _same_value(0.8999999761581421, 0.9), _same_value(float("nan"), float("nan"))
    (False, True, True)
    """
    if math.isnan(logged) or math.isnan(returned):
        return math.isnan(logged) and math.isnan(returned)
    return math.isclose(logged, returned, rel_tol=1e-6, abs_tol=1e-12)


_RESUMABLE: dict[str, Any] = {"run_id": None}
_MLFLOW_END_RUN: list = []  # MLflow's own ``end_run``, kept the first time it is wrapped


def keep_rerun_resumable(run_id: str | None) -> None:
    """While a job runs, keep its rerun the run MLflow's fluent API resumes (None: the job ended).

    ``mlflow.start_run()`` resumes ``$MLFLOW_RUN_ID`` and ``mlflow.end_run()`` unsets it, so once
    the job's code ends the rerun's run (the Hugging Face ``Trainer``'s MLflowCallback does at the
    end of ``train()``) the next fluent call (the metrics of a ``trainer.evaluate()``, an
    ``mlflow.log_metric``, a ``mlflow.start_run()``) would open a new top-level run outside the
    sweep. For the job's duration ``mlflow.end_run`` is wrapped: when the run it ends is the
    rerun's and no other run is left active, ``$MLFLOW_RUN_ID`` names the rerun again, so that
    call resumes the rerun (the callback closes the run with its true status when the job ends).
    With None, MLflow's own ``end_run`` is put back (unless someone wrapped it since)."""
    import mlflow
    from mlflow.tracking import fluent

    _RESUMABLE["run_id"] = run_id
    if not _MLFLOW_END_RUN:
        if run_id is None:
            return
        _MLFLOW_END_RUN.append(fluent.end_run)
    own = _MLFLOW_END_RUN[0]
    new, old = (_resuming_end_run, own) if run_id is not None else (own, _resuming_end_run)
    for module in (fluent, mlflow):
        if module.end_run is old:
            module.end_run = new


def _resuming_end_run(status: str = "FINISHED") -> None:
    """``mlflow.end_run`` while a job runs (:func:`keep_rerun_resumable`)."""
    from mlflow.tracking import fluent

    ended = fluent.active_run()
    _MLFLOW_END_RUN[0](status)
    rerun = _RESUMABLE["run_id"]
    if rerun and ended is not None and ended.info.run_id == rerun and fluent.active_run() is None:
        os.environ["MLFLOW_RUN_ID"] = rerun
