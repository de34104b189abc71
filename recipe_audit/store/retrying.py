"""Calls to a tracking server that outlast its restart, and writes that a retry cannot double.

A sweep talks to a team's MLflow server for as long as it trains. When the server is restarted,
or its PostgreSQL is, or it is so loaded that a request times out, a call fails although nothing
is wrong with the sweep. :class:`RetryingClient` wraps the sweep's ``MlflowClient`` for an
``http(s)://`` store: a call that fails for such a reason (the connection refused, reset or timed
out; the server answering 5xx or 429 after MLflow's own retries) is made again, every few seconds,
until the server answers or :func:`wait_budget` seconds have passed (``$RECIPE_AUDIT_SERVER_WAIT_S``,
default 120; 0 turns the waiting off). While it waits it says so once, with the reason, and again
every half minute; when the server answers it says after how long.

Making a call again is safe only when doing it twice leaves the store as doing it once. MLflow's
own HTTP client retries every request, POSTs included, after a timeout or a lost connection,
whose first attempt the server may well have carried out. So every write the sweep makes is one
whose repetition is harmless, or is made so here:

- tags, the run's status and end time, artifacts, experiment tags: set again to the same value;
- params: MLflow accepts a param logged again with its value;
- metrics: a metric logged again with its key, value, timestamp and step is one row (the SQL
  store drops the copy); the sweep's metrics carry their own timestamps, so a retry sends the same;
- creating an experiment: an experiment of that name that exists is the one wanted
  (:func:`recipe_audit.store.tracking.open_store` takes it);
- creating a run: every run is created with a tag of its own (:data:`TAG_CREATE_TOKEN`, a random
  token); after the create, and before creating again after a failure, the runs holding the token
  are looked up. The run the server returned (else the earliest) is the run; a second copy that a
  retried request created is closed KILLED, tagged ``recipe_audit.kind = duplicate_create`` and
  the run it copies, so no reader counts it as an attempt (:data:`KIND_DUPLICATE`).

Calls this module does not know (the model registry's) pass through unchanged: MLflow's own
retries apply to them as before. A local SQLite store is not wrapped (its client waits on the
file's lock and needs none of this).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from recipe_audit import keys

log = logging.getLogger("recipe_audit")

WAIT_ENV = "RECIPE_AUDIT_SERVER_WAIT_S"
DEFAULT_WAIT_S = 120.0
TAG_CREATE_TOKEN = keys.TAG_CREATE_TOKEN  # on every run created on a server: a random token that finds it again
KIND_DUPLICATE = keys.KIND_DUPLICATE  # a second copy of a run, made by a retried request, closed at once
TAG_DUPLICATE_OF = keys.TAG_DUPLICATE_OF
SAY_AGAIN_S = 30.0  # while waiting, a line every half minute

#: calls made again after a transient failure: reads, and writes whose repetition is harmless
#: (see the module docstring). ``log_metric`` is not among them: without a timestamp, MLflow
#: stamps each call anew, so a repeat would log a second value.
IDEMPOTENT = frozenset({
    "get_run", "get_experiment", "get_experiment_by_name", "search_runs", "search_experiments",
    "get_metric_history", "list_artifacts", "download_artifacts",
    "log_batch", "log_param", "set_tag", "delete_tag", "set_terminated", "update_run",
    "log_artifact", "log_artifacts", "log_text", "log_dict", "set_experiment_tag",
})


def wait_budget() -> float:
    """Seconds a call waits for the server to answer again (``$RECIPE_AUDIT_SERVER_WAIT_S``,
    default 120; a value that is not a number counts as the default)."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached or could not answer for now (the
    connection refused, reset or timed out; 5xx or 429 after MLflow's retries), rather than that
    the request was wrong (4xx, a validation error), which no waiting mends.

    >>> transient(ValueError("bad"))
    False
    """
    import requests

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, requests.exceptions.SSLError):
            return False  # a certificate does not mend itself
        if isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                          requests.exceptions.RetryError, requests.exceptions.ChunkedEncodingError)):
            return True
        if isinstance(e, requests.exceptions.HTTPError) and e.response is not None:
            return e.response.status_code >= 500 or e.response.status_code == 429
        if getattr(e, "error_code", None) in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
            return True
        e = e.__cause__ or e.__context__
    return False


class RetryingClient:
    """An ``MlflowClient`` whose known calls wait out a server that does not answer for now (see
    the module docstring). ``sleep`` and ``clock`` are the waiting's (tests give their own)."""

    def __init__(self, client: Any, where: str, wait_s: float | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self._client = client
        self._where = where  # the server, credentials masked, as the lines name it
        self._wait_s = wait_budget() if wait_s is None else wait_s
        self._sleep, self._clock = sleep, clock

    @property
    def wrapped(self) -> Any:
        """The ``MlflowClient`` underneath."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name == "create_run":
            return self._create_run
        if name == "create_experiment":
            return self._create_experiment
        if name in IDEMPOTENT and callable(attr):
            return lambda *a, **kw: self.call(name, lambda: attr(*a, **kw))
        return attr

    def call(self, what: str, fn: Callable[[], Any], before_again: Callable[[], Any] | None = None) -> Any:
        """``fn()``, made again while it fails for a transient reason, until the budget is spent
        (then its error is raised). ``before_again``: looked at before each new try; what it
        returns, when not None, is the call's result (a create the server did carry out)."""
        started = None
        said = 0.0
        tries = 0
        while True:
            try:
                result = fn() if tries == 0 or before_again is None else _found_or(before_again, fn)
            except Exception as exc:
                if not transient(exc) or self._wait_s <= 0:
                    raise
                now = self._clock()
                if started is None:
                    started = said = now
                    log.warning("recipe_audit: the tracking server %s did not answer %s (%s); waiting for it, "
                                "up to %.0f s", self._where, what, _reason(exc), self._wait_s)
                elif now - started >= self._wait_s:
                    log.error("recipe_audit: the tracking server %s has not answered for %.0f s; giving up",
                              self._where, now - started)
                    raise
                elif now - said >= SAY_AGAIN_S:
                    said = now
                    log.warning("recipe_audit: still waiting for the tracking server %s (%.0f s of %.0f s)",
                                self._where, now - started, self._wait_s)
                tries += 1
                self._sleep(min(2.0 * tries, 5.0, max(0.1, self._wait_s - (now - started))))
                continue
            if started is not None:
                log.warning("recipe_audit: the tracking server %s answers again (after %.0f s)", self._where,
                            self._clock() - started)
            return result

    def _create_run(self, experiment_id: str, start_time: int | None = None, tags: dict[str, Any] | None = None,
                    run_name: str | None = None):
        token = uuid.uuid4().hex
        tags = {**(tags or {}), TAG_CREATE_TOKEN: token}
        run = self.call("creating a run", lambda: self._client.create_run(experiment_id, start_time, tags, run_name),
                        before_again=lambda: self._one_run(experiment_id, token, None))
        return self.call("looking up the run it created", lambda: self._one_run(experiment_id, token, run)) or run

    def _create_experiment(self, name: str, artifact_location: str | None = None, tags: dict[str, Any] | None = None):
        """The experiment's id; one that a first try created before its answer was lost is it."""
        def existing():
            exp = self._client.get_experiment_by_name(name)
            return exp.experiment_id if exp is not None else None

        return self.call("creating the experiment", lambda: self._client.create_experiment(name, artifact_location, tags),
                         before_again=existing)

    def _one_run(self, experiment_id: str, token: str, returned: Any):
        """The run created with ``token`` (``returned``, the one the server answered with, when
        given; else the earliest), its copies closed as duplicates; None when there is none."""
        found = self._client.search_runs([experiment_id], f"tags.`{TAG_CREATE_TOKEN}` = '{token}'", max_results=50)
        if not found:
            return None
        found = sorted(found, key=lambda r: (r.info.start_time or 0, r.info.run_id))
        keep = next((r for r in found if returned is not None and r.info.run_id == returned.info.run_id), found[0])
        for dup in found:
            if dup.info.run_id != keep.info.run_id:
                self.close_duplicate(dup.info.run_id, keep.info.run_id)
        return keep

    def close_duplicate(self, run_id: str, of: str) -> None:
        """Close a second copy of run ``of`` (KILLED, kind :data:`KIND_DUPLICATE`)."""
        from mlflow.entities import RunTag

        log.warning("recipe_audit: run %s is a second copy of run %s made by a retried request; closed as a "
                    "duplicate", run_id, of)
        self.log_batch(run_id, tags=[RunTag(keys.TAG_KIND, KIND_DUPLICATE), RunTag(TAG_DUPLICATE_OF, of)])
        self.set_terminated(run_id, "KILLED")


def _found_or(look: Callable[[], Any], fn: Callable[[], Any]) -> Any:
    found = look()
    return found if found is not None else fn()


def _reason(exc: BaseException) -> str:
    """Why a call failed, in a few words: what the connection did, else the error's first line."""
    from recipe_audit.errors import first_line
    from recipe_audit.store.uris import mask_in_text

    text = str(exc)
    for said, why in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                      ("RemoteDisconnected", "connection closed by the server"),
                      ("Connection reset", "connection reset"), ("error responses", "it answered with errors")):
        if said in text:
            return why
    return mask_in_text(first_line(exc, 200))
