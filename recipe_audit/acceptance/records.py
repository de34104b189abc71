"""Evaluation records (one row per scored item): reading, validation, and the paired views the gates need.

One row per scored item, with the columns of :data:`COLUMNS`:

=============  ==================================================================================
``cell``       the model that was scored (a defense cell or a baseline cell), e.g. ``lora_s0``
``task``       the task it was scored on (gate (d) compares two tasks)
``split``      ``heldout`` (held-out questions of the training subjects; gate (a)) or ``fresh``
               (questions of subjects disjoint from training; gate (b))
``question_id``  the question; its templates and framings are one cluster
``template_id``  the prompt template the question was rendered with
``framing``    ``eval`` (the prompt carries evaluation cues) or ``deploy`` (ordinary use)
``correct``    1 when the answer was right, else 0 (booleans and "true"/"false" are accepted)
=============  ==================================================================================

Sources: CSV, JSON Lines (``.jsonl``/``.ndjson``), JSON (a list of row objects, or the
``{"columns": [...], "data": [[...]]}`` table that ``mlflow.log_table`` writes), Parquet; an
MLflow artifact URI (``runs:/RUN_ID/eval_records.json``, ``models:/…``, ``mlflow-artifacts:/…``);
or every run of an experiment that logged a given table (:func:`read_experiment_tables`).

Extra columns are kept but ignored. Every failure is a :class:`RecordsError` with one sentence.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from recipe_audit.errors import first_line
from recipe_audit.stats.acceptance import PairedRecords
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.store import artifacts

__all__ = [
    "COLUMNS",
    "DEPLOY",
    "EVAL",
    "FRESH",
    "HELDOUT",
    "KEY",
    "RecordsError",
    "is_mlflow_uri",
    "paired_records",
    "read_experiment_tables",
    "read_records",
    "read_records_file",
    "records_digest",
    "validate_records",
]

COLUMNS = ("cell", "task", "split", "question_id", "template_id", "framing", "correct")
KEY = ("cell", "task", "split", "question_id", "template_id", "framing")
HELDOUT, FRESH = "heldout", "fresh"
EVAL, DEPLOY = "eval", "deploy"
SPLITS = (HELDOUT, FRESH)
FRAMINGS = (EVAL, DEPLOY)
SOURCE = "_source"
_TRUE = {"1", "1.0", "true", "t", "yes", "y"}
_FALSE = {"0", "0.0", "false", "f", "no", "n"}


class RecordsError(ValueError):
    """Evaluation records cannot be used (one sentence)."""


is_mlflow_uri = artifacts.is_artifact_uri  # runs:/, models:/, mlflow-artifacts:/, dbfs:/


def _short(values, n: int = 6) -> str:
    vals = [str(v) for v in values]
    return ", ".join(f"'{v}'" for v in vals[:n]) + (" …" if len(vals) > n else "")


def _from_json_text(text: str, name: str) -> pd.DataFrame:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise RecordsError(f"The records file {name} is not valid JSON.") from None
    if isinstance(obj, dict) and "columns" in obj and "data" in obj:  # mlflow.log_table
        return pd.DataFrame(obj["data"], columns=obj["columns"])
    if isinstance(obj, dict) and isinstance(obj.get("records"), list):
        obj = obj["records"]
    if isinstance(obj, list) and all(isinstance(r, dict) for r in obj):
        return pd.DataFrame(obj)
    raise RecordsError(f"The JSON records file {name} must hold a list of row objects or an MLflow table "
                       f"({{'columns': [...], 'data': [...]}}).")


def read_records_file(path: str | Path) -> pd.DataFrame:
    """Read one records file (by extension: .csv, .jsonl/.ndjson, .json, .parquet/.pq)."""
    p = Path(path)
    if not p.is_file():
        raise RecordsError(f"The records file {p} does not exist.")
    ext = "".join(p.suffixes[-1:]).lower()
    try:
        if ext == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
        elif ext in (".jsonl", ".ndjson"):
            df = pd.read_json(p, lines=True, dtype=False)
        elif ext == ".json":
            df = _from_json_text(p.read_text(encoding="utf-8"), str(p))
        elif ext in (".parquet", ".pq"):
            df = pd.read_parquet(p)
        else:
            raise RecordsError(f"The records file {p} has an unknown extension '{ext}'; use .csv, .jsonl, .json "
                               f"or .parquet.")
    except RecordsError:
        raise
    except (ValueError, OSError) as exc:  # pandas/pyarrow parse errors
        first = first_line(exc)
        raise RecordsError(f"The records file {p} cannot be read: {first}") from None
    return df


def _read_source(src: str | Path, tracking_uri: str | None) -> pd.DataFrame:
    if isinstance(src, pd.DataFrame):
        return src.copy()
    s = str(src)
    if is_mlflow_uri(s):
        with tempfile.TemporaryDirectory(prefix="recipe-audit-records-") as tmp:
            try:
                local = artifacts.download(s, tmp, tracking_uri)
            except artifacts.ArtifactError as exc:
                raise RecordsError(str(exc)) from None
            if local.is_dir():
                raise RecordsError(f"The MLflow artifact {s} is a directory; name the table file inside it.")
            return read_records_file(local)
    return read_records_file(s)


def read_records(sources: Sequence, *, tracking_uri: str | None = None) -> pd.DataFrame:
    """Read and validate records from files, MLflow artifact URIs or DataFrames; concatenated.

    Each source is checked for the :data:`COLUMNS` on its own, so a missing column names the file.
    The result has a ``_source`` column saying where each row came from.
    """
    if not sources:
        raise RecordsError("Give at least one records source (--records FILE).")
    frames = []
    for src in sources:
        name = "a DataFrame" if isinstance(src, pd.DataFrame) else str(src)
        df = _read_source(src, tracking_uri)
        _check_columns(df, name)
        df = df.copy()
        if SOURCE not in df.columns:
            df[SOURCE] = name
        frames.append(df)
    return validate_records(pd.concat(frames, ignore_index=True))


def read_experiment_tables(experiment: str, artifact_file: str, *, tracking_uri: str | None = None) -> pd.DataFrame:
    """Concatenate the table ``artifact_file`` (as logged by ``mlflow.log_table``) of every run of
    ``experiment`` that has it; runs without it are skipped. Validated like :func:`read_records`."""
    try:
        uris = artifacts.runs_with_artifact(experiment, artifact_file, tracking_uri)
    except artifacts.ArtifactError as exc:
        raise RecordsError(str(exc)) from None
    if not uris:
        raise RecordsError(f"No run of experiment '{experiment}' logged the table '{artifact_file}'.")
    return read_records(uris, tracking_uri=tracking_uri)


def _check_columns(df: pd.DataFrame, name: str) -> None:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise RecordsError(f"The records in {name} lack the column(s) {_short(missing)}; every row needs "
                           f"{', '.join(COLUMNS)}.")


def _as_correct(col: pd.Series) -> pd.Series:
    if col.dtype == bool:
        return col.astype(np.int8)
    if pd.api.types.is_numeric_dtype(col):
        bad = ~col.isin([0, 1])
        if bad.any():
            raise RecordsError(f"The column 'correct' must hold 0 or 1, found {col[bad].iloc[0]!r}.")
        return col.astype(np.int8)
    text = col.astype(str).str.strip().str.lower()
    ok = text.isin(_TRUE | _FALSE)
    if not ok.all():
        raise RecordsError(f"The column 'correct' must hold 0 or 1, found {col[~ok].iloc[0]!r}.")
    return text.isin(_TRUE).astype(np.int8)


def validate_records(df: pd.DataFrame) -> pd.DataFrame:
    """Check and normalise records: key columns as stripped strings, ``split`` and ``framing`` in
    lower case and from their vocabularies, ``correct`` as 0/1, no empty keys, no duplicated
    (cell, task, split, question_id, template_id, framing)."""
    name = "the records"
    _check_columns(df, name)
    out = df.copy()
    if SOURCE not in out.columns:
        out[SOURCE] = "records"
    if len(out) == 0:
        raise RecordsError("The records hold no rows.")
    for c in KEY:
        col = out[c]
        if col.isna().any():
            raise RecordsError(f"The column '{c}' has an empty value (in {out.loc[col.isna(), SOURCE].iloc[0]}).")
        out[c] = col.astype(str).str.strip()
        if (out[c] == "").any():
            raise RecordsError(f"The column '{c}' has an empty value (in {out.loc[out[c] == '', SOURCE].iloc[0]}).")
    if out["correct"].isna().any():
        raise RecordsError(f"The column 'correct' has an empty value (in {out.loc[out['correct'].isna(), SOURCE].iloc[0]}).")
    out["split"] = out["split"].str.lower()
    out["framing"] = out["framing"].str.lower()
    for c, vocab in (("split", SPLITS), ("framing", FRAMINGS)):
        bad = ~out[c].isin(vocab)
        if bad.any():
            raise RecordsError(f"The column '{c}' holds '{out.loc[bad, c].iloc[0]}'; use {' or '.join(repr(v) for v in vocab)}.")
    out["correct"] = _as_correct(out["correct"])
    dup = out.duplicated(list(KEY), keep=False)
    if dup.any():
        row = out.loc[dup].iloc[0]
        where = sorted(set(out.loc[dup, SOURCE]))
        raise RecordsError(
            f"{int(dup.sum())} rows repeat the same (cell, task, split, question_id, template_id, framing), e.g. "
            f"cell '{row['cell']}', question '{row['question_id']}', template '{row['template_id']}', "
            f"framing '{row['framing']}' (in {_short(where, 3)}); was a records source given twice?")
    return out.reset_index(drop=True)


def records_digest(df: pd.DataFrame) -> str:
    """sha256 of the records' :data:`COLUMNS`, independent of row order and of the sources."""
    canon = df[list(COLUMNS)].astype(str).sort_values(list(KEY)).to_csv(index=False)
    return hashlib.sha256(canon.encode()).hexdigest()


def paired_records(df: pd.DataFrame, defense: str, baseline: str, task: str, split: str) -> PairedRecords | None:
    """The rows of ``defense`` and ``baseline`` on ``task``/``split`` as :class:`PairedRecords`;
    None when neither cell has any row there. A question present in only one cell or one framing
    is a :class:`RecordsError` naming it."""
    sel = df[(df["task"] == task) & (df["split"] == split) & df["cell"].isin([defense, baseline])]
    if sel.empty:
        return None
    where = f"task '{task}', split '{split}'"
    for cell in (defense, baseline):
        if not (sel["cell"] == cell).any():
            other = baseline if cell == defense else defense
            raise RecordsError(f"Cell '{cell}' has no records on {where}, but cell '{other}' does; the matched "
                               f"cells must be scored on the same questions.")
    qsets = {c: set(sel.loc[sel["cell"] == c, "question_id"]) for c in (defense, baseline)}
    for cell, other in ((defense, baseline), (baseline, defense)):
        only = sorted(qsets[cell] - qsets[other])
        if only:
            raise RecordsError(f"Question '{only[0]}' ({where}) is scored for cell '{cell}' but not for cell "
                               f"'{other}' ({len(only)} such question(s)); the matched cells must share the "
                               f"question set.")
    fr = sel.groupby(["cell", "question_id"])["framing"].nunique()
    one = fr[fr < 2]
    if len(one):
        cell, q = one.index[0]
        framing = sel.loc[(sel["cell"] == cell) & (sel["question_id"] == q), "framing"].iloc[0]
        raise RecordsError(f"Question '{q}' ({where}, cell '{cell}') is scored only under {framing} framing "
                           f"({len(one)} such question(s)); every question needs both eval and deploy framing.")
    try:
        return PairedRecords.from_columns(
            sel["question_id"].to_numpy(), sel["template_id"].to_numpy(), (sel["cell"] == defense).to_numpy(),
            (sel["framing"] == DEPLOY).to_numpy(), sel["correct"].to_numpy(),
            label=f"{defense} vs {baseline}, {where}")
    except StatsInputError as exc:
        raise RecordsError(str(exc)[0].upper() + str(exc)[1:]) from None
