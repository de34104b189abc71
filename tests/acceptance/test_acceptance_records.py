"""Evaluation records: every file format, MLflow tables, and one-sentence errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.acceptance_synth import exact, records
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)

from recipe_audit.acceptance.records import (
    RecordsError,
    paired_records,
    read_experiment_tables,
    read_records,
    records_digest,
    validate_records,
)
from recipe_audit.cli import main

CELLS = {"base": (0.4, 0.8), "def": (0.6, 0.8)}


@pytest.fixture
def df():
    return records(CELLS, n_questions=6, n_templates=2, seed=0)


def _write(df: pd.DataFrame, path, fmt):
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "jsonl":
        df.to_json(path, orient="records", lines=True)
    elif fmt == "json":
        path.write_text(json.dumps({"columns": list(df.columns), "data": df.values.tolist()}))
    elif fmt == "json-rows":
        path.write_text(df.to_json(orient="records"))
    else:
        df.to_parquet(path)


@pytest.mark.parametrize("fmt, ext", [("csv", "csv"), ("jsonl", "jsonl"), ("json", "json"), ("json-rows", "json"),
                                      ("parquet", "parquet")])
def test_every_format_reads_the_same(df, tmp_path, fmt, ext):
    path = tmp_path / f"r.{ext}"
    _write(df, path, fmt)
    got = read_records([path])
    assert len(got) == len(df) and records_digest(got) == records_digest(validate_records(df))
    assert set(got["_source"]) == {str(path)}
    assert got["correct"].isin([0, 1]).all()


def test_values_are_normalised(df):
    d = df.copy()
    d["framing"] = d["framing"].str.upper()
    d["correct"] = d["correct"].map({1: "True", 0: "false"})
    d["question_id"] = d["question_id"] + " "
    got = validate_records(d)
    assert set(got["framing"]) == {"eval", "deploy"} and got["correct"].sum() == df["correct"].sum()
    assert not got["question_id"].str.endswith(" ").any()


def test_mlflow_table_artifact_and_experiment(store, df, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    # the store fixture points MLFLOW_TRACKING_URI at a fresh store; no global MLflow state is set
    exp_id = MlflowClient(store).create_experiment("acc")
    half = {c: df[df["cell"] == c] for c in ("base", "def")}
    ids = {}
    for cell, part in half.items():
        with mlflow.start_run(experiment_id=exp_id) as run:
            mlflow.log_table(part, artifact_file="eval_records.json")
        ids[cell] = run.info.run_id
    with mlflow.start_run(experiment_id=exp_id):  # a run without the table is skipped
        mlflow.log_param("x", 1)
    got = read_records([f"runs:/{ids['base']}/eval_records.json", f"runs:/{ids['def']}/eval_records.json"],
                       tracking_uri=store)
    assert records_digest(got) == records_digest(validate_records(df))
    got = read_experiment_tables("acc", "eval_records.json", tracking_uri=store)
    assert records_digest(got) == records_digest(validate_records(df))
    with pytest.raises(RecordsError, match="No run of experiment"):
        read_experiment_tables("acc", "other.json", tracking_uri=store)
    with pytest.raises(RecordsError, match="Cannot download"):
        read_records([f"runs:/{ids['base']}/missing.json"], tracking_uri=store)
    # the same through the command line: one table per run, and a whole experiment
    card = tmp_path / "card.json"
    rc = main(["acceptance", "--records", f"runs:/{ids['base']}/eval_records.json", "--records",
               f"runs:/{ids['def']}/eval_records.json", "--defense", "def", "--baseline", "base",
               "--resamples", "200", "--json", str(card)])
    assert rc == 0 and json.loads(card.read_text())["source"]["n_records"] == len(df)
    rc = main(["acceptance", "--records-experiment", "acc", "--defense", "def", "--baseline", "base",
               "--resamples", "200", "--tracking-uri", store, "--json", str(card)])
    assert rc == 0 and json.loads(card.read_text())["source"]["records_digest"] == records_digest(validate_records(df))


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.drop(columns=["framing"]), "lack the column(s) 'framing'"),
    (lambda d: d.assign(framing=d["framing"].replace("deploy", "prod")), "use 'eval' or 'deploy'"),
    (lambda d: d.assign(split="train"), "use 'heldout' or 'fresh'"),
    (lambda d: d.assign(correct=0.5), "must hold 0 or 1"),
    (lambda d: d.assign(correct="maybe"), "must hold 0 or 1"),
    (lambda d: pd.concat([d, d.iloc[:3]]), "repeat the same"),
    (lambda d: d.assign(cell=None), "empty value"),
    (lambda d: d.iloc[:0], "no rows"),
])
def test_bad_records_one_sentence(df, mutate, needle):
    with pytest.raises(RecordsError) as exc:
        read_records([mutate(df)])
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_missing_column_names_the_file(df, tmp_path):
    path = tmp_path / "r.csv"
    df.drop(columns=["question_id"]).to_csv(path, index=False)
    with pytest.raises(RecordsError, match=r"r\.csv lack the column\(s\) 'question_id'"):
        read_records([path])
    with pytest.raises(RecordsError, match="does not exist"):
        read_records([tmp_path / "nope.csv"])
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(RecordsError, match="unknown extension"):
        read_records([tmp_path / "r.txt"])


def test_pairing_errors_name_the_question(df):
    v = validate_records(df)
    one_framing = v[~((v["question_id"] == "q2") & (v["cell"] == "def") & (v["framing"] == "deploy"))]
    with pytest.raises(RecordsError, match="Question 'q2' .* only under eval framing"):
        paired_records(one_framing, "def", "base", "mcq", "heldout")
    one_cell = v[~((v["question_id"] == "q3") & (v["cell"] == "base"))]
    with pytest.raises(RecordsError, match="Question 'q3' .* scored for cell 'def' but not for cell 'base'"):
        paired_records(one_cell, "def", "base", "mcq", "heldout")
    no_base = v[v["cell"] == "def"]
    with pytest.raises(RecordsError, match="Cell 'base' has no records"):
        paired_records(no_base, "def", "base", "mcq", "heldout")
    assert paired_records(v, "def", "base", "mcq", "fresh") is None
    p = paired_records(v, "def", "base", "mcq", "heldout")
    assert p.n_questions == 6 and p.n_items == len(v)


def test_digest_ignores_row_order_and_sources():
    d = exact({"base": {"eval": [0, 1], "deploy": [1, 1]}, "def": {"eval": [1, 1], "deploy": [1, 1]}})
    a = validate_records(d)
    b = validate_records(d.iloc[::-1].assign(_source="elsewhere"))
    assert records_digest(a) == records_digest(b)
    assert records_digest(a) != records_digest(validate_records(d.assign(correct=1)))
