"""Lightning's ``MLFlowLogger`` logs into the job's rerun, for the job's duration.

Lightning's ``MLFlowLogger`` reads neither ``$MLFLOW_RUN_ID`` nor, once it is given a store,
``$MLFLOW_TRACKING_URI``: built as lightning-hydra-template's ``logger=mlflow`` builds it (a file
store in its config, no run id), it would open a run of its own, in a store of its own. While a
job runs, :func:`point_mlflow_loggers` wraps the constructor of the ``MLFlowLogger`` class of
each Lightning package the process has imported (``lightning.pytorch`` and ``pytorch_lightning``
are two copies of it), or that the job's config names: a logger built during the job, from the
config (``hydra.utils.instantiate``) or in the app's own code, gets the rerun's
``tracking_uri``, ``run_id`` and ``experiment_name``; every other argument is passed on as given.
The first logger that changes says so in one line of the job's log. The returned function puts
each class's own constructor back (the callback calls it when the job ends, also when the task
raised). No Hydra or MLflow is imported here.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger("recipe_audit")

# Lightning's MLFlowLogger, under each name a config can give it (lightning 2.x, pytorch_lightning)
LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
MLFLOW_LOGGER_TARGETS = frozenset(f"{package}.loggers{module}.MLFlowLogger" for package in LIGHTNING_PACKAGES
                                  for module in ("", ".mlflow"))
# the logger's own settings that decide where it logs; nothing else it is given is touched
LOGGER_SETTINGS = ("tracking_uri", "run_id", "experiment_name")


def mlflow_logger_paths(raw: Any) -> list[tuple[str | int, ...]]:
    """Where a job's config (as written) builds Lightning's ``MLFlowLogger``: the keys (and list
    indices) of each node whose ``_target_`` is one of :data:`MLFLOW_LOGGER_TARGETS`.

    >>> mlflow_logger_paths({"logger": {"mlflow": {"_target_": "lightning.pytorch.loggers.mlflow.MLFlowLogger"},
    ...                                 "csv": {"_target_": "lightning.pytorch.loggers.csv_logs.CSVLogger"}},
    ...                      "loggers": [{"_target_": "pytorch_lightning.loggers.MLFlowLogger"}]})
    [('logger', 'mlflow'), ('loggers', 0)]
    """
    found: list[tuple[str | int, ...]] = []

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, Mapping):
            if node.get("_target_") in MLFLOW_LOGGER_TARGETS:
                found.append(path)
            for k, v in node.items():
                if isinstance(v, (Mapping, list)):
                    walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, (Mapping, list)):
                    walk(v, (*path, i))

    walk(raw, ())
    return found


def _target_at(raw: Any, path: Sequence[str | int]) -> str:
    node = raw
    for part in path:
        node = node[part]
    return str(node["_target_"])


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _logger_classes(targets: Sequence[str]) -> tuple[list[type], list[str]]:
    """The ``MLFlowLogger`` classes to wrap: each Lightning package's that is imported already,
    and each one ``targets`` names (imported here: the job is about to build it). Returns them
    and, for a named one that cannot be imported, ``'target (error)'``."""
    modules = [f"{package}.loggers.mlflow" for package in LIGHTNING_PACKAGES
               if f"{package}.loggers.mlflow" in sys.modules]
    problems = []
    for target in targets:
        module = target.rsplit(".", 1)[0]
        module = module if module.endswith(".mlflow") else module + ".mlflow"
        if module in modules:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the task meets the same error when it builds the logger
            problems.append(f"{target} ({_first_line(exc)})")
            continue
        modules.append(module)
    classes: list[type] = []
    for module in modules:
        cls = getattr(sys.modules[module], "MLFlowLogger", None)
        if isinstance(cls, type) and "__init__" in cls.__dict__ and cls not in classes:
            classes.append(cls)
    return classes, problems


def point_mlflow_loggers(tracking_uri: str, run_id: str, experiment_name: str, raw_config: Any = None,
                         mask: Callable[[str], str] = str) -> Callable[[], None]:
    """Until the returned function is called, every ``MLFlowLogger`` built in this process logs
    into the run ``run_id`` of the experiment ``experiment_name`` in ``tracking_uri`` (see the
    module docstring). ``raw_config``: the job's config as written, whose ``MLFlowLogger`` nodes
    (:func:`mlflow_logger_paths`) name the logger in the log line and the packages to import;
    ``mask`` hides a URI's credentials in that line. A job that ended without restoring (the
    process stopped by ``sys.exit`` in the task: Hydra then skips the job's end) is restored first."""
    while _LEFT:
        _LEFT.pop()()
    paths = mlflow_logger_paths(raw_config) if raw_config is not None else []
    classes, problems = _logger_classes(sorted({_target_at(raw_config, p) for p in paths}))
    for problem in problems:
        log.warning("recipe_audit: could not point the MLFlowLogger %s at rerun %s: it logs where its config "
                    "says", problem, run_id)
    want = {"tracking_uri": tracking_uri, "run_id": run_id, "experiment_name": experiment_name}
    built: list[int] = []  # how many loggers this job has built

    def pointed(bound: inspect.BoundArguments) -> None:
        """Set the rerun's settings in ``bound`` and say what changed."""
        changed = []
        for key in LOGGER_SETTINGS:
            old = bound.arguments.get(key)
            if old != want[key]:
                bound.arguments[key] = want[key]
                changed.append(f"{key} {'unset' if old is None else mask(str(old))} -> {mask(want[key])}")
        built.append(1)
        if changed:  # the config's one node, when that is what the job builds first
            name = (f"the MLFlowLogger at {'.'.join(str(p) for p in paths[0])}" if len(paths) == 1
                    and len(built) == 1 else "an MLFlowLogger")
            log.info("recipe_audit: %s logs into rerun %s: %s", name, run_id, ", ".join(changed))

    wrapped = [(cls, cls.__dict__["__init__"], _pointing(cls.__dict__["__init__"], pointed)) for cls in classes]
    for cls, _, ours in wrapped:
        cls.__init__ = ours

    def restore() -> None:
        for cls, own, ours in wrapped:
            if cls.__dict__.get("__init__") is ours:  # unless someone wrapped it since
                cls.__init__ = own
        wrapped.clear()
        if restore in _LEFT:
            _LEFT.remove(restore)

    _LEFT.append(restore)
    return restore


_LEFT: list[Callable[[], None]] = []  # the restore of the job running now


def _pointing(own: Callable[..., None], pointed: Callable[[inspect.BoundArguments], None]) -> Callable[..., None]:
    """``own`` (a constructor) with its arguments passed through ``pointed`` first."""
    signature = inspect.signature(own)

    @functools.wraps(own)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind_partial(self, *args, **kwargs)
        except TypeError:  # wrong arguments: the logger's own constructor says so
            own(self, *args, **kwargs)
            return
        pointed(bound)
        own(*bound.args, **bound.kwargs)

    return __init__
