"""The sweep's parent run: opened when a multirun starts (or reopened to resume it), published to
the jobs, tagged, closed; a card's verdict put on it; the card runs nested under it.

The jobs find the sweep they belong to through ``$RECIPE_AUDIT_SWEEP`` or the sweep directory's
``recipe_audit_sweep.json`` (:func:`current_sweep`), so launchers in other processes or on other
hosts find it too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_audit import keys
from recipe_audit.errors import first_line
from recipe_audit.stats.exact import SUPPORTED
from recipe_audit.store.errors import StoreGone, TrackingError
from recipe_audit.store.tracking import MAX_PARAMS_PER_CALL, Store, client_for

SWEEP_ENV = "RECIPE_AUDIT_SWEEP"
SWEEP_FILE = "recipe_audit_sweep.json"


@dataclass(frozen=True)
class SweepInfo:
    sweep_id: str
    parent_run_id: str
    tracking_uri: str
    experiment_name: str
    planned_seeds: tuple[int, ...]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "planned_seeds": list(self.planned_seeds)})

    @classmethod
    def from_json(cls, text: str) -> SweepInfo:
        d = json.loads(text)
        d["planned_seeds"] = tuple(d["planned_seeds"])
        return cls(**d)


def _write_private(path: Path, text: str) -> None:
    """``text`` to ``path``, readable by its owner only (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def start_sweep(store: Store, planned_seeds: Iterable[int], sweep_dir: Path, overrides: list[str],
                tags: Mapping[str, str] | None = None, higher_is_better: bool | None = None) -> SweepInfo:
    """Open the parent run of a multirun (with ``tags`` besides its own, and the metric's
    direction when ``higher_is_better`` is given: the release gate reads it) and publish it to the
    jobs (environment and a file in the sweep directory, so launchers in other processes or on
    other hosts find it)."""
    import uuid

    from recipe_audit.store.uris import mask_in_text

    seeds = tuple(sorted(set(int(s) for s in planned_seeds)))
    if higher_is_better is not None:
        tags = {**(tags or {}), keys.TAG_HIGHER_IS_BETTER: "true" if higher_is_better else "false"}
    sweep_id = uuid.uuid4().hex[:12]
    client = store.client
    run = client.create_run(
        store.experiment_id, run_name=f"sweep-{sweep_id}",
        tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: sweep_id,
              keys.TAG_PLANNED_SEEDS: json.dumps(list(seeds), separators=(",", ":")),
              "recipe_audit.sweep_dir": str(sweep_dir.resolve()),
              "recipe_audit.overrides": mask_in_text(" ".join(overrides))[:5000], **(tags or {})},
    )
    client.log_param(run.info.run_id, "planned_seeds", _compact_seeds(seeds))
    info = SweepInfo(sweep_id, run.info.run_id, store.uri, store.experiment_name, seeds)
    os.environ[SWEEP_ENV] = info.to_json()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_private(sweep_dir / SWEEP_FILE, info.to_json())
    return info


def tag_sweep(info: SweepInfo, tags: Mapping[str, str]) -> None:
    """Set tags on the sweep's parent run (a resumed sweep's new decisions)."""
    from mlflow.entities import RunTag

    client_for(info.tracking_uri).log_batch(info.parent_run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def sweep_running(info: SweepInfo) -> bool:
    """Whether the sweep's parent run is still open."""
    return client_for(info.tracking_uri).get_run(info.parent_run_id).info.status == "RUNNING"


def end_sweep(info: SweepInfo, status: str = "FINISHED", error: str | None = None) -> None:
    """Close the sweep's parent run; ``error`` (one sentence) is why a sweep stopped early."""
    if error:
        client_for(info.tracking_uri).set_tag(info.parent_run_id, keys.TAG_ERROR, error[:5000])
    client_for(info.tracking_uri).set_terminated(info.parent_run_id, status)
    if os.environ.get(SWEEP_ENV) == info.to_json():
        del os.environ[SWEEP_ENV]


def current_sweep(sweep_dir: Path | None) -> SweepInfo | None:
    """The sweep a multirun job belongs to, if the sweep callback opened one."""
    text = os.environ.get(SWEEP_ENV)
    if not text and sweep_dir is not None and (sweep_dir / SWEEP_FILE).is_file():
        text = (sweep_dir / SWEEP_FILE).read_text()
    return SweepInfo.from_json(text) if text else None


def _compact_seeds(seeds: tuple[int, ...]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"range({seeds[0]}, {seeds[-1] + 1})"
    return ",".join(map(str, seeds))[:6000]


def check_sweep_parent(store: Store, sweep: SweepInfo) -> None:
    """Raise :class:`StoreGone` when the sweep's parent run is not in ``store``: a job process
    opening a store recreated since the sweep started would file its rerun under no sweep."""
    from mlflow.exceptions import MlflowException

    try:
        store.client.get_run(sweep.parent_run_id)
    except MlflowException:
        raise StoreGone(f"The sweep's parent run {sweep.parent_run_id} is not in the tracking store "
                        f"{store.uri}: the store was deleted or replaced since the sweep started.") from None


_RESUME_IGNORED = ("tracking.resume", "hydra.")


def _overrides_key(overrides: Iterable[str]) -> str:
    from recipe_audit.store.uris import mask_in_text

    # as the sweep's tag records them: a password in an override masked
    return " ".join(mask_in_text(o) for o in overrides if not o.lstrip("+~").startswith(_RESUME_IGNORED))


class ResumeMismatch(TrackingError):
    """``resume=true`` in the directory of a sweep of another recipe (one sentence, naming both)."""


def _recipe_overrides(overrides: Iterable[str], seed_key: str) -> str:
    """The overrides that choose the recipe: without the seeds (a resumed sweep may plan more)."""
    return _overrides_key(o for o in overrides if o.split("=", 1)[0].lstrip("+~") != seed_key)


def reopen_sweep(store: Store, planned_seeds: Iterable[int], sweep_dir: Path,
                 overrides: list[str], write: bool = True, seed_key: str = "seed") -> SweepInfo | None:
    """The interrupted sweep to continue (``tracking.resume=true``): the one recorded in
    ``sweep_dir`` (relaunch with the same ``hydra.sweep.dir``), else the most recent sweep of the
    experiment launched with the same overrides. Its parent run is reopened (RUNNING), its planned
    seeds become the union of both plans, and it is published to the jobs as ``start_sweep``
    does. None when there is nothing to resume. Raises ``ResumeMismatch`` when the sweep recorded
    in ``sweep_dir`` was launched with other overrides than ``overrides`` (the seeds aside): its
    card would be shown for a recipe this launch did not ask for."""
    from mlflow.entities import RunStatus

    client = store.client
    old: SweepInfo | None = None
    if (sweep_dir / SWEEP_FILE).is_file():
        old = SweepInfo.from_json((sweep_dir / SWEEP_FILE).read_text())
        if (old.tracking_uri, old.experiment_name) != (store.uri, store.experiment_name):
            old = None
    if old is not None:
        try:
            recorded = client.get_run(old.parent_run_id).data.tags.get("recipe_audit.overrides")
        except Exception:  # noqa: BLE001 - a parent run that is gone: nothing recorded to compare
            recorded = None
        if recorded is not None:
            was, now = _recipe_overrides(recorded.split(), seed_key), _recipe_overrides(overrides, seed_key)
            if was != now:
                raise ResumeMismatch(
                    f"resume=true: the sweep in {sweep_dir} (sweep {old.sweep_id}) ran the recipe "
                    f"'{was or 'with no overrides'}', this launch asks for '{now or 'with no overrides'}'; "
                    "relaunch with that sweep's overrides to resume it, or give another hydra.sweep.dir to "
                    "start a new sweep.")
    if old is None:
        want = _overrides_key(overrides)
        for run in client.search_runs([store.experiment_id],
                                      filter_string=f"tags.`{keys.TAG_KIND}` = '{keys.KIND_SWEEP}'",
                                      order_by=["attributes.start_time DESC"], max_results=200):
            tags = run.data.tags
            if _overrides_key(tags.get("recipe_audit.overrides", "").split()) == want:
                old = SweepInfo(tags[keys.TAG_SWEEP_ID], run.info.run_id, store.uri, store.experiment_name,
                                tuple(json.loads(tags.get(keys.TAG_PLANNED_SEEDS, "[]"))))
                break
    if old is None:
        return None
    seeds = tuple(sorted(set(old.planned_seeds) | {int(s) for s in planned_seeds}))
    info = SweepInfo(old.sweep_id, old.parent_run_id, store.uri, store.experiment_name, seeds)
    if not write:  # another rank under accelerate launch: the same decision, the main process writes
        return info
    client.update_run(old.parent_run_id, status=RunStatus.to_string(RunStatus.RUNNING))
    client.set_tag(old.parent_run_id, keys.TAG_PLANNED_SEEDS, json.dumps(list(seeds), separators=(",", ":")))
    os.environ[SWEEP_ENV] = info.to_json()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_private(sweep_dir / SWEEP_FILE, info.to_json())
    return info


def log_sweep_files_run(info: SweepInfo, run_name: str, tags: Mapping[str, str], local_dir: str | Path,
                        metrics: Mapping[str, float] | None = None) -> str:
    """A run nested under the sweep's parent holding the files under ``local_dir`` (a card the
    sweep computed at its end), its tags and metrics; FINISHED, or FAILED with the error when a
    write fails (which is raised). Returns its run id."""
    from mlflow.entities import Metric

    client = client_for(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    all_tags = {keys.TAG_SWEEP_ID: info.sweep_id, keys.TAG_SWEEP_RUN_ID: info.parent_run_id,
                keys.TAG_PARENT: info.parent_run_id, **tags}
    run = client.create_run(exp.experiment_id, run_name=run_name, tags=all_tags)
    rid = run.info.run_id
    try:
        client.log_artifacts(rid, str(local_dir))
        now = int(time.time() * 1000)
        client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])
        client.set_terminated(rid, "FINISHED")
    except Exception as exc:
        try:
            client.set_tag(rid, keys.TAG_ERROR, f"{type(exc).__name__}: {first_line(exc, 500)}")
            client.set_terminated(rid, "FAILED")
        except Exception:  # noqa: BLE001 - the write that failed is the error to raise
            pass
        raise
    return rid


def tag_sweep_with_cards(info: SweepInfo, entries: list[dict[str, Any]], description: str) -> None:
    """Put the sweep's card where the runs table shows it: on the sweep's parent run, the verdict
    as a tag and U, L, N, k as metrics (for one cell; several cells get one tag each, keyed by
    the cell's label and τ) and the card's summary as the run's description."""
    from mlflow.entities import Metric, RunTag

    client = client_for(info.tracking_uri)
    now = int(time.time() * 1000)
    tags, metrics = [RunTag("mlflow.note.content", description[:20000])], []
    cells = {e["label"] for e in entries}
    for i, e in enumerate(entries):
        if len(cells) == 1:  # one recipe: the first τ plain, like a card run; others suffixed
            sfx = "" if i == 0 else f"/tau_{e['tau']:g}"
        else:
            slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(e["label"]))[:120]
            sfx = f"/{slug}/tau_{e['tau']:g}"
        tags.append(RunTag(keys.PREFIX + "verdict" + sfx, str(e["verdict"])))
        for name in ("upper_bound", "lower_bound", "n_reruns", "n_failures"):
            if e.get(name) is not None:
                metrics.append(Metric(name + sfx, float(e[name]), now, 0))
    if len(cells) > 1:
        ok = sum(1 for e in entries if e["verdict"] == SUPPORTED)
        tags.append(RunTag(keys.PREFIX + "verdict", f"{ok} of {len(entries)} cells release-supported"))
    tags.append(RunTag("mlflow.runName", sweep_run_name(info.sweep_id, entries)))
    for i in range(0, max(len(tags), len(metrics)), MAX_PARAMS_PER_CALL):
        client.log_batch(info.parent_run_id, metrics=metrics[i:i + MAX_PARAMS_PER_CALL],
                         tags=tags[i:i + MAX_PARAMS_PER_CALL])


def _never_ran(entry: dict[str, Any]) -> str:
    """`` (3 never ran)`` for an entry whose planned reruns did not all start, else nothing."""
    m = sum(1 for u in entry.get("unfinished") or () if u.get("reason") == "never-logged")
    return f" ({m} never ran)" if m else ""


def sweep_run_name(sweep_id: str, entries: list[dict[str, Any]]) -> str:
    """The sweep's run name once its card is known, what matters first, so the runs table's one
    default text column (narrow: it shows the first twenty characters or so) shows it: ``6/59
    fail τ 0.7 · unsupported · U 0.172 · sweep-<id>`` (each τ of the card, ``;`` between; ``6/59
    fail τ 0.7 (3 never ran)`` when planned reruns never started); several
    recipes or metrics: ``1 of 4 cells release-supported · sweep-<id>``.

    >>> sweep_run_name("ab12", [{"label": "default", "metric": "m", "tau": 0.7, "verdict": "unsupported",
    ...                          "n_failures": 6, "n_reruns": 59, "upper_bound": 0.1717}])
    '6/59 fail τ 0.7 · unsupported · U 0.172 · sweep-ab12'
    >>> sweep_run_name("ab12", [{"label": "default", "metric": "m", "tau": 0.7, "verdict": "unsupported",
    ...                          "n_failures": 9, "n_reruns": 59, "upper_bound": 0.2358,
    ...                          "unfinished": [{"seed": 57, "reason": "never-logged"}, {"seed": 58, "reason": "never-logged"}]}])
    '9/59 fail τ 0.7 (2 never ran) · unsupported · U 0.236 · sweep-ab12'
    """
    if len({(e["label"], e["metric"]) for e in entries}) > 1:
        ok = sum(1 for e in entries if e["verdict"] == SUPPORTED)
        verdict = f"{ok} of {len(entries)} cells release-supported"
    else:
        verdict = "; ".join(
            f"τ {e['tau']:g} · {e['verdict']}" if e.get("upper_bound") is None else
            f"{e['n_failures']}/{e['n_reruns']} fail τ {e['tau']:g}{_never_ran(e)} · {e['verdict']} · "
            f"U {e['upper_bound']:.3f}" for e in entries)
    tail = f" · sweep-{sweep_id}"
    if len(verdict) + len(tail) > 250:  # MLflow's run_name column holds 250
        verdict = verdict[:249 - len(tail)] + "…"
    return verdict + tail
