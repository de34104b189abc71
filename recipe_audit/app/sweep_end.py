"""The end of a sweep, in the launching process: every job has returned (or the sweep stopped
early), so the reruns still RUNNING are dead, the sweep's parent run is closed, the cards are
computed, and the exit status says which reruns did not finish. No Hydra here: the callback
hands plain data in."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from recipe_audit.app.outcomes import NO_METRIC_LEAD
from recipe_audit.app.process import one_line, stop

log = logging.getLogger("recipe_audit")


@dataclass(frozen=True)
class JobsKind:
    """What a sweep's jobs are: the ``recipe_audit.kind`` of their runs, and how the exit sentence
    names the jobs that did not finish and what the card made of them."""

    run_kind: str
    failed_noun: str
    failed_consequence: str


def end_sweep(sweep, kind: JobsKind, *, cards: Callable[[], None] | None, launched_ms: int) -> None:
    """The multirun ended: close the dead reruns and the parent run, compute the cards
    (``cards``; None: no card at the end), name the store, and exit 1 when a rerun did not
    finish or an attempt was killed. A store that cannot be written stops with one sentence."""
    from recipe_audit.store import sqlite

    try:
        _end(sweep, kind, cards, launched_ms)
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a store that went away, a full disk: say so, exit non-zero
        stop(f"the end of sweep {sweep.sweep_id} could not be recorded ({one_line(exc)}); the reruns "
             "that finished are in the store: compute the card with `recipe-audit card` once the store can be "
             "written again.")
    finally:
        sqlite.checkpoint_store(sweep.tracking_uri)


def _end(sweep, kind: JobsKind, cards: Callable[[], None] | None, launched_ms: int) -> None:
    from recipe_audit.release.sweep import print_store
    from recipe_audit.store import rerun_runs, sqlite, sweeps

    sqlite.check_store_file(sweep.tracking_uri)
    for run_id in rerun_runs.close_dead_reruns(sweep, kind=kind.run_kind):  # every job has returned
        log.warning("rerun %s never finished (its process died): recorded as KILLED", run_id)
    sweeps.end_sweep(sweep)
    if cards is not None:
        cards()
    print_store(sweep.tracking_uri)
    failed = rerun_runs.failed_reruns(sweep, kind=kind.run_kind)
    if failed:
        stop(failed_sentence(sweep.sweep_id, failed, kind), code=1)
    killed = rerun_runs.killed_attempts(sweep, since_ms=launched_ms, kind=kind.run_kind)
    if killed:  # a worker lost (out of memory, a node gone): run again and finished, but said
        stop(f"{len(killed)} attempt(s) of sweep {sweep.sweep_id} were killed and run again: "
             f"{', '.join(f'seed {s}' for s in killed)}; every seed finished and the card counts the finished "
             "attempts, but a worker was lost: look at the machine's memory and logs.", code=1)


def failed_sentence(sweep_id: str, failed, kind: JobsKind) -> str:
    """The sweep's last sentence when some of its jobs did not finish (``failed``:
    :class:`recipe_audit.store.rerun_runs.FailedRerun` in seed order): how many, which seeds, what
    the card made of them, and the innermost cause of the first that recorded one, with what sets
    it right when :func:`recipe_audit.errors.known_fix` knows it.

    >>> from recipe_audit.store.rerun_runs import FailedRerun
    >>> print(failed_sentence("s1", [FailedRerun(1, "r", "FAILED", "OSError: disk full (raised as RuntimeError: x)"),
    ...                              FailedRerun(2, "r", "KILLED", None)], JobsKind("rerun", "rerun(s)", "counted")))
    2 rerun(s) of sweep s1 did not finish: seed 1 (failed), seed 2 (killed); counted; the first, seed 1, failed: OSError: disk full (raised as RuntimeError: x).
    """
    many = len({f.recipe_id for f in failed}) > 1
    which = ", ".join(f"{_seed_label(f, many)} ({f.status.lower()})" for f in failed)
    line = f"{len(failed)} {kind.failed_noun} of sweep {sweep_id} did not finish: {which}; {kind.failed_consequence}"
    cause = first_cause(failed)
    return line + (f"; {cause}" if cause else "") + "."


def _seed_label(f, many: bool) -> str:
    """``seed S``, with its recipe's short id when the sweep mixes recipes."""
    return f"seed {f.seed}" + (f" of recipe {f.recipe_id[:8]}" if many else "")


def first_cause(failed) -> str | None:
    """``the first, seed S, failed: <its error> (<the fix>)`` for the first of ``failed`` that
    recorded an error (None when none did), the fix when :func:`recipe_audit.errors.known_fix`
    knows it."""
    from recipe_audit.errors import known_fix

    first = next((f for f in failed if f.error), None)
    if first is None:
        return None
    many = len({f.recipe_id for f in failed}) > 1
    error = first.error.strip().rstrip(".").rstrip()
    fix = known_fix(error)
    return (f"the first, {_seed_label(first, many)}, {first.status.lower()}: {error}"
            + (f" ({fix})" if fix else ""))


def abandon_sweep(sweep, kind: JobsKind, joblib: bool) -> None:
    """At exit, a sweep that never reached its end (a launcher that raised, as joblib's does when
    a worker is killed; Ctrl-C; a job that stopped the sweep) is recorded as such: its parent
    FAILED with the reason and its reruns whose process is gone KILLED, so nothing is left
    RUNNING. ``joblib``: the sweep ran under joblib's launcher (the sentence says what to use)."""
    from recipe_audit.store import rerun_runs, sqlite, sweeps

    try:
        closed = rerun_runs.close_dead_reruns(sweep, only_dead_processes=True, kind=kind.run_kind)
        if sweeps.sweep_running(sweep):
            sweeps.end_sweep(sweep, "FAILED", error=(
                "the sweep stopped before its end (its launcher raised, a job stopped it, or it was "
                "interrupted); no card was computed for it"))
            print(f"recipe_audit: sweep {sweep.sweep_id} stopped before its end: its parent run is recorded "
                  f"FAILED" + (f" and {len(closed)} unfinished rerun(s) KILLED" if closed else "")
                  + ("; relaunch with resume=true to run the seeds left" if closed or joblib else "")
                  + (" (hydra/launcher=local_parallel goes on when a worker is killed, where joblib's pool "
                     "stops)" if joblib else "") + ".", file=sys.stderr)
        sqlite.checkpoint_store(sweep.tracking_uri)
    except Exception:  # noqa: BLE001 - at exit, with the store perhaps gone: nothing more to do
        pass


def recipe_cards(sweep, metrics, opts, sweep_dir, run_kind: str, signer=None) -> None:
    """The recipe card of each metric, from the tracking store: written to ``<sweep dir>/card/``
    (``card-<metric>`` for several metrics), logged as card runs under the sweep's parent, the
    verdict on the parent's row and first on the experiment's page; signed with ``signer`` (a
    :class:`recipe_audit.cards.signing.SigningKey`) when there is one."""
    from recipe_audit.cards.model import CardError
    from recipe_audit.cards.summary import summary_markdown
    from recipe_audit.release.sweep import cards_for_sweep, publish_cards
    from recipe_audit.store import sweeps

    docs = []
    for metric in metrics:
        stem = "card" if len(metrics) == 1 else "card-" + "".join(
            c if c.isalnum() or c in "-_." else "_" for c in metric)
        try:
            docs.append(cards_for_sweep(sweep, metric, opts, sweep_dir, stem=stem, signer=signer))
        except CardError as exc:
            why = str(nothing_logged(sweep, metric, run_kind) or exc).rstrip(".")
            cause = _crash_cause(sweep, run_kind)  # a card refused while reruns crashed: what crashed them
            stop(f"no card for metric '{metric}' of sweep {sweep.sweep_id}: {why}" + (f"; {cause}" if cause else "")
                 + ".")
    # the verdict where the runs table shows it: on the sweep's own row
    sweeps.tag_sweep_with_cards(sweep, [e.to_json() for d in docs for e in d.cells], summary_markdown(docs))
    publish_cards(sweep.tracking_uri, sweep.experiment_name, docs)  # and first on the experiment's page


def _crash_cause(sweep, kind: str) -> str | None:
    """:func:`first_cause` of the reruns of ``sweep`` that crashed or were killed (None: none, or
    the store cannot say); those that ended for want of the metric are what the card's own
    sentence is about."""
    from recipe_audit.store import rerun_runs

    try:
        return first_cause([f for f in rerun_runs.failed_reruns(sweep, kind=kind)
                            if not (f.error or "").startswith(NO_METRIC_LEAD)])
    except Exception:  # noqa: BLE001 - only a better sentence is at stake
        return None


def nothing_logged(sweep, metric: str, kind: str) -> str | None:
    """What to set when no rerun of ``sweep`` that finished holds any metric at all: the task
    function logged nothing to MLflow and returned no number (lightning-hydra-template without
    an MLflow logger, whose ``train.py`` returns None while its ``optimized_metric`` is unset).
    None when some rerun has a metric (the card's own sentence then lists them)."""
    from recipe_audit import keys
    from recipe_audit.store import rerun_runs

    try:
        # the jobs that ended without an error: FINISHED, or FAILED for want of the metric (outcomes.no_metric)
        finished = [r for r in rerun_runs.sweep_runs(sweep, kind, status=None) if r.info.status == "FINISHED" or (
            r.info.status == "FAILED" and r.data.tags.get(keys.TAG_ERROR, "").startswith(NO_METRIC_LEAD))]
    except Exception:  # noqa: BLE001 - only a better sentence is at stake
        return None
    if not finished or any(r.data.metrics for r in finished):
        return None
    return (f"none of its {len(finished)} finished rerun(s) logged a metric to MLflow and the task function "
            f"returned nothing; log '{metric}' to MLflow from the app (lightning-hydra-template: add logger=mlflow) "
            f"or return it from the task function (lightning-hydra-template returns the metric its optimized_metric "
            f"names: add +optimized_metric={metric}).")
