"""The MLflow stores the store-reading tests (``tests/store/``) read, and their fixtures.

The runs are written with the real MLflow client, the way recipe_audit's tracking writes them (the
contract of keys.py). Every test gets its own SQLite store under its tmp_path
(``sqlite:///{tmp_path}/mlflow.db``): creating an MLflow database runs its migrations (seconds), so
each scenario is written once per session into a template database whose file is copied into the
test's tmp_path. Nothing touches ./mlruns.

The fixtures are defined here and reach those tests through ``tests/store/conftest.py``
(``from helpers.read_stores import *``; ``__all__`` lists the fixtures only), so the autouse one
applies to that folder alone; the test modules import the constants and builders they need.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from helpers.fast_sqlite import commits_without_sync
from recipe_audit import keys
from recipe_audit.store.read_sql import clear_engine_cache

__all__ = [  # the fixtures
    "byo_store_fixture",
    "clean_mlflow_state",
    "empty_store_fixture",
    "errors_store_fixture",
    "file_store_fixture",
    "rich_store_fixture",
    "templates",
]

METRIC = keys.accuracy_key("calibration")
NOW_MS = int(time.time() * 1000)
BASE_MS = NOW_MS - 3_600_000  # runs start an hour ago, one second apart
OLD_MS = NOW_MS - 3 * 86_400_000  # the RUNNING run started three days ago

# what the path-comparison tests (test_read_runs, test_sql_plans, test_read_rest) read: every kind of
# key, present and absent, so two backends that agree on these agree on every column kind
RICH_METRICS = [METRIC, keys.METRIC_TRAIN_LOSS, keys.majority_rate_key("calibration")]
RICH_GROUP = ("tags." + keys.TAG_MODEL,)
RICH_EXTRA = (
    "params.recipe.lr",
    "params.model.name",
    "tags." + keys.TAG_SWEEP_ID,
    "metrics." + keys.METRIC_TRAIN_SECONDS,
    "attributes.user_id",
    "attributes.experiment_id",
    "attributes.artifact_uri",
    "attributes.lifecycle_stage",
    "params.absent",
    "tags.absent",
)
BYO_READ = {  # build_byo's runs, read the way a bring-your-own user reads them
    "metric_keys": ["val_acc"],
    "seed_key": "params.seed",
    "group_by": ["params.model_name"],
    "extra_keys": ["tags.owner"],
}


@dataclass
class Built:
    """Ids of what a builder logged, by role."""

    experiment_id: str = ""
    runs: dict[str, str] = field(default_factory=dict)


class Logger:
    """Writes runs the way recipe_audit's tracking does (the contract of keys.py)."""

    def __init__(self, uri: str, experiment: str) -> None:
        self.client = MlflowClient(tracking_uri=uri)
        self.exp = self.client.create_experiment(experiment)
        self.tick = 0

    def start(self) -> int:
        self.tick += 1
        return BASE_MS + 1000 * self.tick

    def sweep(self, sweep_id: str, planned: list[int] | str) -> str:
        tags = {
            keys.TAG_KIND: keys.KIND_SWEEP,
            keys.TAG_SWEEP_ID: sweep_id,
            keys.TAG_PLANNED_SEEDS: planned if isinstance(planned, str) else json.dumps(planned),
        }
        run = self.client.create_run(self.exp, start_time=self.start(), tags=tags, run_name=sweep_id)
        self.client.set_terminated(run.info.run_id, "FINISHED")
        return run.info.run_id

    def rerun(
        self,
        parent: str | None,
        recipe: str,
        seed: int,
        *,
        status: str = "FINISHED",
        accuracy: float | None = None,
        start: int | None = None,
        error: str | None = None,
        model: str = "m",
        sweep_id: str = "s1",
    ) -> str:
        tags = {
            keys.TAG_KIND: keys.KIND_RERUN,
            keys.TAG_RECIPE_ID: recipe,
            keys.TAG_SEED: str(seed),
            keys.TAG_MODEL: model,
            keys.TAG_TASK: "t",
            keys.TAG_RECIPE_NAME: "lora",
            keys.TAG_SWEEP_ID: sweep_id,
        }
        if parent is not None:
            tags[keys.TAG_PARENT] = parent
        start = self.start() if start is None else start
        run = self.client.create_run(self.exp, start_time=start, tags=tags, run_name=f"{recipe}-{seed}")
        rid = run.info.run_id
        params = [
            Param("seed", str(seed)),
            Param("model.name", model),
            Param("recipe.lr", "0.001"),
        ]
        metrics = [Metric(keys.METRIC_TRAIN_LOSS, 1.0 / (s + 1), start + s, s) for s in range(5)]
        metrics.append(Metric(keys.METRIC_TRAIN_SECONDS, 12.5, start + 10, 0))
        if accuracy is not None:
            metrics += [
                Metric(METRIC, accuracy, start + 20, 0),
                Metric(keys.majority_rate_key("calibration"), 0.5, start + 20, 0),
                Metric(keys.constant_fraction_key("calibration"), 0.6, start + 20, 0),
            ]
        self.client.log_batch(rid, metrics=metrics, params=params)
        if error is not None:
            self.client.set_tag(rid, keys.TAG_ERROR, error)
        if status != "RUNNING":
            self.client.set_terminated(rid, status, end_time=start + 500)
        return rid


def build_rich(uri: str) -> Built:
    """Experiment 'exp': recipe r1 with every kind of unfinished and duplicated seed, recipe r2
    with the same model/task tags, a card run and a deleted rerun."""
    log = Logger(uri, "exp")
    b = Built(experiment_id=log.exp)
    r = b.runs
    r["p1"] = log.sweep("s1", [0, 1, 2, 3, 4, 5, 6, 7])
    r["s0a"] = log.rerun(r["p1"], "r1", 0, accuracy=0.9)
    r["s0b"] = log.rerun(r["p1"], "r1", 0, accuracy=0.9)  # duplicate, same value
    r["s1a"] = log.rerun(r["p1"], "r1", 1, accuracy=0.40)
    r["s1b"] = log.rerun(r["p1"], "r1", 1, accuracy=0.45)  # duplicate, different value
    r["s2"] = log.rerun(r["p1"], "r1", 2, status="FAILED", error="RuntimeError: boom")
    r["s3"] = log.rerun(r["p1"], "r1", 3, status="KILLED")
    r["s4"] = log.rerun(r["p1"], "r1", 4, status="RUNNING", start=OLD_MS)
    r["s5"] = log.rerun(r["p1"], "r1", 5, accuracy=float("nan"))
    r["s6"] = log.rerun(r["p1"], "r1", 6)  # finished, never logged the accuracy
    # seed 7 is planned and never logged
    r["s8a"] = log.rerun(r["p1"], "r1", 8, accuracy=0.8)
    r["s8b"] = log.rerun(r["p1"], "r1", 8, status="FAILED")  # newer, but failed: s8a counts
    r["s9"] = log.rerun(r["p1"], "r1", 9, accuracy=float("inf"))
    r["deleted"] = log.rerun(r["p1"], "r1", 10, accuracy=0.1)
    log.client.delete_run(r["deleted"])
    r["p2"] = log.sweep("s2", [0, 1, 2])
    for seed, acc in ((0, 0.70), (1, 0.75), (2, 0.72)):
        r[f"r2s{seed}"] = log.rerun(r["p2"], "r2", seed, accuracy=acc, sweep_id="s2")
    card = log.client.create_run(
        log.exp, tags={keys.TAG_KIND: keys.KIND_CARD, keys.TAG_SWEEP_RUN_ID: r["p1"]}
    )
    log.client.log_metric(card.info.run_id, "upper_bound", 0.5)
    log.client.set_terminated(card.info.run_id, "FINISHED")
    r["card"] = card.info.run_id
    return b


def build_byo(uri: str, experiment: str = "byo") -> Built:
    """A user's own training runs: params seed and model_name, metric val_acc, a parent 'study'
    run holding some of them, no recipe_audit tag anywhere."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(experiment)
    b = Built(experiment_id=exp)
    study = client.create_run(exp, start_time=BASE_MS, run_name="study")
    b.runs["study"] = study.info.run_id
    rows = [
        ("a", 1, 0.80, "FINISHED", True),
        ("a", 2, 0.60, "FINISHED", True),
        ("a", 3, 0.90, "FINISHED", True),
        ("b", 1, 0.70, "FINISHED", True),
        ("b", 2, None, "FAILED", True),
        ("b", 3, 0.65, "FINISHED", False),
    ]
    for i, (model, seed, acc, status, nested) in enumerate(rows):
        tags = {keys.TAG_PARENT: study.info.run_id} if nested else {}
        run = client.create_run(
            exp, start_time=BASE_MS + 1000 * (i + 1), tags=tags, run_name=f"{model}{seed}"
        )
        rid = run.info.run_id
        metrics = [] if acc is None else [Metric("val_acc", acc, BASE_MS, 0)]
        client.log_batch(
            rid,
            metrics=metrics,
            params=[Param("seed", str(seed)), Param("model_name", model)],
            tags=[RunTag("owner", "me")],
        )
        client.set_terminated(rid, status)
        b.runs[f"{model}{seed}"] = rid
    client.set_terminated(study.info.run_id, "FINISHED")
    # a card recipe_audit logged into the user's experiment must not hide the user's runs
    card = client.create_run(exp, start_time=BASE_MS + 10_000, tags={keys.TAG_KIND: keys.KIND_CARD})
    client.log_metric(card.info.run_id, "val_acc", 0.0)
    client.set_terminated(card.info.run_id, "FINISHED")
    b.runs["card"] = card.info.run_id
    return b


def build_errors(uri: str) -> Built:
    """Experiments for the error cases."""
    client = MlflowClient(tracking_uri=uri)
    b = Built()
    client.create_experiment("empty")
    gap = client.create_experiment("seed_gap")
    for i, params in enumerate(([Param("seed", "1")], [Param("seed", "2")], [])):
        rid = client.create_run(gap, start_time=BASE_MS + i).info.run_id
        client.log_batch(rid, metrics=[Metric("val_acc", 0.5, BASE_MS, 0)], params=params)
        client.set_terminated(rid, "FINISHED")
        b.runs[f"gap{i}"] = rid
    Logger(uri, "only_sweep").sweep("s0", [0, 1])
    bad = Logger(uri, "bad_planned")
    bad.rerun(bad.sweep("s0", "[0, 1"), "r1", 0, accuracy=0.9)
    gone = client.create_experiment("gone")
    client.delete_experiment(gone)
    return b


@pytest.fixture(name="_clean_mlflow_state", autouse=True)
def clean_mlflow_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Restore MLflow's tracking URI (and the MLFLOW_TRACKING_URI variable it sets), fail on a
    leaked active run, drop cached engines."""
    from mlflow.tracking._tracking_service import utils as tracking_utils

    saved_uri = tracking_utils._tracking_uri
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # monkeypatch restores it last
    yield
    leaked = mlflow.active_run()
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(saved_uri)
    clear_engine_cache()
    assert leaked is None, "a test leaked an active MLflow run"


_BUILDERS = {"rich": build_rich, "byo": build_byo, "errors": build_errors}


_TEMPLATES: dict[str, tuple[Path, Built]] = {}  # built once per process, shared by the modules


@pytest.fixture(name="_templates", scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory, migrated_mlflow_db: Path) -> dict[str, tuple[Path, Built]]:
    """The scenario databases, written once (each in a copy of the suite's empty tables, conftest's
    ``migrated_mlflow_db``): name -> (template file, ids)."""
    if _TEMPLATES:
        return _TEMPLATES
    root = tmp_path_factory.mktemp("query_templates")
    empty = root / "empty.db"
    shutil.copy(migrated_mlflow_db, empty)
    out: dict[str, tuple[Path, Built]] = {}
    with commits_without_sync():
        for name, builder in _BUILDERS.items():
            db = root / f"{name}.db"
            shutil.copy(empty, db)
            out[name] = (db, builder(f"sqlite:///{db}"))
    out["empty"] = (empty, Built())
    _TEMPLATES.update(out)
    return _TEMPLATES


def _own_store(templates: dict[str, tuple[Path, Built]], name: str, tmp_path: Path) -> tuple[str, Built]:
    db, built = templates[name]
    target = tmp_path / "mlflow.db"
    shutil.copy(db, target)
    return f"sqlite:///{target}", built


@pytest.fixture(name="rich_store")
def rich_store_fixture(_templates, tmp_path: Path) -> tuple[str, Built]:
    """(uri, ids) of this test's copy of the rich experiment 'exp'."""
    return _own_store(_templates, "rich", tmp_path)


@pytest.fixture(name="byo_store")
def byo_store_fixture(_templates, tmp_path: Path) -> tuple[str, Built]:
    """(uri, ids) of this test's copy of the bring-your-own experiment 'byo'."""
    return _own_store(_templates, "byo", tmp_path)


@pytest.fixture(name="errors_store")
def errors_store_fixture(_templates, tmp_path: Path) -> tuple[str, Built]:
    """(uri, ids) of this test's copy of the error-case experiments."""
    return _own_store(_templates, "errors", tmp_path)


@pytest.fixture(name="empty_store")
def empty_store_fixture(_templates, tmp_path: Path) -> str:
    """URI of this test's copy of an empty (migrated) MLflow database."""
    return _own_store(_templates, "empty", tmp_path)[0]


@pytest.fixture(name="file_store")
def file_store_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """URI of this test's own (empty) file store; MLflow 3 needs an opt-in for it."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()
