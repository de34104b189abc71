"""A recipe's identity: one hash for every seed of one recipe, different for another recipe.

Pure: the standard library only (no MLflow, no Hydra). The writer tags each rerun with it
(``recipe_audit.recipe_id``); a card groups reruns by it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

RECIPE_SECTIONS = ("model", "task", "recipe")


def recipe_identity(config: Mapping[str, Any]) -> str:
    """A stable hash of what determines a training run except its seed: the model, task and
    recipe sections of the resolved config. Seed, audit, tracking and runtime settings (progress
    bars, thread count) are excluded, so every seed of one recipe has the same identity."""
    payload = {k: config[k] for k in RECIPE_SECTIONS}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# raw (unresolved) values that depend on where and when a job runs, not on what it trains
RUNTIME_INTERPOLATIONS = ("${hydra:", "${now:", "${oc.env:MLFLOW_")


def config_identity(resolved: Mapping[str, Any], exclude: Iterable[str] = (), *,
                    raw: Mapping[str, Any] | None = None, runtime_paths: Iterable[str] = (),
                    follows: Iterable[str] = ()) -> str:
    """A stable hash of a job's resolved config without the keys that do not make the recipe:
    the dotted paths in ``exclude`` (the seed, for one), every value whose unresolved form
    (``raw``) reads Hydra's runtime, the clock or MLflow's run variables, every value whose
    unresolved form interpolates one of the keys in ``follows`` (dotted paths: ``trainer.seed:
    ${seed}`` is the seed again), and every string value that lies under one of
    ``runtime_paths`` (the job's output directory, the sweep directory): a value that differs
    between two seeds of one recipe only because each job writes elsewhere.

    >>> a = {"seed": 1, "lr": 0.1, "out": "/sweep/0/ckpt"}
    >>> b = {"seed": 2, "lr": 0.1, "out": "/sweep/1/ckpt"}
    >>> config_identity(a, ["seed"], runtime_paths=["/sweep"]) == config_identity(b, ["seed"], runtime_paths=["/sweep"])
    True
    >>> config_identity(a, ["seed"]) == config_identity({**a, "lr": 0.2}, ["seed"])
    False
    >>> raw, one, two = {"trainer": {"seed": "${seed}"}}, {"seed": 1, "trainer": {"seed": 1}}, {"seed": 2, "trainer": {"seed": 2}}
    >>> config_identity(one, ["seed"], raw=raw, follows=["seed"]) == config_identity(two, ["seed"], raw=raw, follows=["seed"])
    True
    """
    roots = tuple(str(p).rstrip("/") for p in runtime_paths if p)
    drop = {tuple(k.split(".")) for k in exclude}
    markers = RUNTIME_INTERPOLATIONS + tuple(f"${{{k}}}" for k in follows)

    def keep(path: tuple[str, ...], value: Any, raw_value: Any) -> bool:
        if path in drop:
            return False
        if isinstance(raw_value, str) and any(m in raw_value for m in markers):
            return False
        return not (isinstance(value, str) and any(value == r or value.startswith(r + "/") for r in roots))

    def prune(node: Any, raw_node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                rv = raw_node.get(k) if isinstance(raw_node, Mapping) else None
                if keep(path + (str(k),), v, rv):
                    out[k] = prune(v, rv, path + (str(k),))
            return out
        return node

    payload = prune(resolved, raw if raw is not None else {}, ())
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
