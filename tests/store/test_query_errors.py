"""Every QueryError read_runs and collect_reruns raise, with its exact sentence."""

from __future__ import annotations

import pytest
from helpers.read_stores import METRIC

from recipe_audit import keys
from recipe_audit.reruns import QueryError, collect_reruns
from recipe_audit.store.read import read_runs

BACKENDS = ("sql", "client")


def _message(uri: str, experiment: str, backend: str, metric_keys=(METRIC,), **kw) -> str:
    with pytest.raises(QueryError) as err:
        read_runs(uri, experiment, list(metric_keys), backend=backend, **kw)
    assert isinstance(err.value, ValueError)
    return str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_experiment(errors_store, backend):
    uri, _ = errors_store
    assert _message(uri, "nope", backend) == f"No experiment named 'nope' in {uri}."


@pytest.mark.parametrize("backend", BACKENDS)
def test_deleted_experiment(errors_store, backend):
    uri, _ = errors_store
    assert _message(uri, "gone", backend) == f"Experiment 'gone' in {uri} is deleted."


def test_missing_sqlite_file_is_not_created(tmp_path):
    uri = f"sqlite:///{tmp_path / 'absent.db'}"
    assert _message(uri, "exp", "sql") == f"No experiment named 'exp' in {uri} (no such file)."
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_experiment_without_runs(errors_store, backend):
    uri, _ = errors_store
    assert _message(uri, "empty", backend) == "Experiment 'empty' has no runs."


@pytest.mark.parametrize("backend", BACKENDS)
def test_experiment_without_reruns(errors_store, backend):
    uri, _ = errors_store
    assert _message(uri, "only_sweep", backend) == (
        f"Experiment 'only_sweep' has 1 run but no rerun: none is tagged {keys.TAG_KIND}={keys.KIND_RERUN}, "
        "and none is an untagged run that is not the parent of another run."
    )
    assert _message(uri, "only_sweep", backend, filter_kind=keys.KIND_CARD, require_seed=False) == (
        f"Experiment 'only_sweep' has 1 run but none tagged {keys.TAG_KIND}={keys.KIND_CARD}."
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_metric_no_run_has_lists_the_reruns_keys_the_closest_first(rich_store, backend):
    uri, _ = rich_store
    assert _message(uri, "exp", backend, metric_keys=[METRIC, "accuracy/nope"]) == (
        "No run in experiment 'exp' has the metric 'accuracy/nope'; metrics logged there, the closest first: "
        "'accuracy/calibration', 'train_loss', 'train_seconds', 'majority_rate/calibration', "
        "'pred_mode_share/calibration'."
    )  # the metrics of the reruns: not the card run's upper_bound, logged in the same experiment


@pytest.mark.parametrize("backend", BACKENDS)
def test_metric_no_run_has_when_few_keys_exist(byo_store, backend):
    uri, _ = byo_store
    assert _message(uri, "byo", backend, metric_keys=["loss"], seed_key="params.seed") == (
        "No run in experiment 'byo' has the metric 'loss'; metrics logged there: 'val_acc'."
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_key_missing_on_some_runs(errors_store, backend):
    uri, built = errors_store
    assert _message(uri, "seed_gap", backend, metric_keys=["val_acc"], seed_key="params.seed") == (
        f"1 of 3 runs in experiment 'seed_gap' lack the seed key 'params.seed' (for example run {built.runs['gap2']})."
    )
    frame = read_runs(
        uri, "seed_gap", ["val_acc"], seed_key="params.seed", backend=backend, require_seed=False
    )
    assert frame["seed"].isna().sum() == 1
    with pytest.raises(
        QueryError, match=r"^1 of 3 runs have no seed, so they cannot be resolved per seed\.$"
    ):
        collect_reruns(frame, "val_acc")


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_key_on_no_run(byo_store, backend):
    uri, _ = byo_store
    assert _message(uri, "byo", backend, metric_keys=["val_acc"], seed_key="tags.seed") == (
        "None of the 6 runs in experiment 'byo' has the seed key 'tags.seed'; the params and tags there: "
        "'params.seed', 'params.model_name', 'tags.owner'."
    )  # the params that exist, a key named like a seed first
    assert _message(uri, "byo", backend, metric_keys=["val_acc"], seed_key="params.sed") == (
        "None of the 6 runs in experiment 'byo' has the seed key 'params.sed'; the params there: "
        "'params.seed', 'params.model_name'."
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreadable_planned_seeds_tag(errors_store, backend):
    uri, _ = errors_store
    msg = _message(uri, "bad_planned", backend)
    assert msg.startswith("Run ") and msg.endswith(
        f"has an unreadable {keys.TAG_PLANNED_SEEDS} tag '[0, 1' (expected a JSON list of ints)."
    )


def test_malformed_keys(rich_store):
    uri, _ = rich_store
    assert _message(uri, "exp", "sql", seed_key="seed") == (
        "Key 'seed' must start with params., tags., metrics. or attributes. (MLflow's naming)."
    )
    assert _message(uri, "exp", "sql", group_by=["attributes.colour"]).startswith(
        "Unknown run attribute 'attributes.colour'; the attributes are "
    )
    assert _message(uri, "exp", "sql", metric_keys=[]) == "Ask for at least one metric key."
    assert _message(uri, "exp", "magic") == "Unknown backend 'magic'; use 'auto', 'sql', 'server', 'rest' or 'client'."


def test_sql_path_needs_a_database_uri(file_store):
    assert _message(file_store, "exp", "sql") == f"The SQL path needs a database URI, not {file_store}."


def test_not_an_mlflow_database(tmp_path):
    import sqlite3

    db = tmp_path / "other.db"
    sqlite3.connect(db).close()
    uri = f"sqlite:///{db}"
    assert _message(uri, "exp", "sql").startswith(f"Cannot read MLflow's tables in {uri}: ")


def test_password_is_not_shown():
    msg = _message("postgresql://user:secret@127.0.0.1:1/db", "exp", "sql")
    assert "secret" not in msg and "user:***@127.0.0.1:1" in msg


def test_collect_reruns_needs_the_columns_it_resolves(rich_store):
    uri, _ = rich_store
    frame = read_runs(uri, "exp", [METRIC])
    with pytest.raises(
        QueryError, match=r"^The runs were read without the metric 'other'; pass it to read_runs\.$"
    ):
        collect_reruns(frame, "other")
    with pytest.raises(QueryError, match=r"^The runs were read without the group key 'params.x'; pass it"):
        collect_reruns(frame, METRIC, group_by=["params.x"])
