"""The table every read backend produces: the runs of one experiment, column by column.

:mod:`recipe_audit.store.read_sql` and :mod:`recipe_audit.store.read_client` each read an
experiment's runs into a :class:`RawRuns`; :func:`recipe_audit.store.read.read_runs` turns it into
the frame callers see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

__all__ = ["ATTRIBUTES", "RawRuns", "floats", "objects", "redact"]

ATTRIBUTES = {
    # attribute name -> column of MLflow's ``runs`` table
    "run_id": "run_uuid",
    "run_name": "name",
    "status": "status",
    "start_time": "start_time",
    "end_time": "end_time",
    "user_id": "user_id",
    "artifact_uri": "artifact_uri",
    "lifecycle_stage": "lifecycle_stage",
    "experiment_id": "experiment_id",
}
"""The run attributes a key ``attributes.X`` can name, and their columns in MLflow's ``runs`` table."""

_DBL_MAX = 1.7976931348623157e308  # MLflow's SQL store writes +/-inf as +/-DBL_MAX


@dataclass
class RawRuns:
    """What a backend read: one entry per active run of the experiment, column-wise.

    ``columns`` holds numpy arrays: ``run_id``, ``run_name``, ``status``, ``start_time``,
    ``end_time`` (object) and one array per requested key, named ``tags.X`` / ``params.X`` /
    ``attributes.X`` (object, None when absent) or ``metrics.X`` (float, NaN when absent or logged
    as NaN, +/-inf for +/-DBL_MAX) with ``logged.X`` (bool: was metric X logged at all).
    ``parents`` maps a parent run id to its (sweep id, planned seeds) tag values, ``curtailment`` a
    parent run id to its curtailment tag (those that have one) and ``errors`` a run id to its error
    tag (runs that did not finish only). ``keys_of(kind, run_ids)`` gives the
    ``kind`` keys (``metrics``, ``params``, ``tags``) some of ``run_ids`` have, for messages only
    (the client paths kept them while reading; the SQL path asks the database then).
    """

    experiment_id: str
    columns: dict[str, np.ndarray]
    parents: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    curtailment: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    keys_of: Callable[[str, list[str]], Iterable[str]] = lambda _kind, _run_ids: ()


def objects(values: Iterable[Any]) -> np.ndarray:
    """An object array (never a str array), for values that may be None."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def floats(values: Iterable[Any]) -> np.ndarray:
    """Floats with None -> NaN and MLflow's +/-DBL_MAX -> +/-inf."""
    out = np.array(list(values), dtype=float)
    out[out >= _DBL_MAX] = np.inf
    out[out <= -_DBL_MAX] = -np.inf
    return out


def redact(uri: str) -> str:
    """The URI without a password, for messages."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
