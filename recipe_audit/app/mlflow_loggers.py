"""Lightning's ``MLFlowLogger`` logs into the job's rerun, for the job's duration.

Lightning's ``MLFlowLogger`` reads neither ``$MLFLOW_RUN_ID`` nor, once it is given a store,
``$MLFLOW_TRACKING_URI``: built as lightning-hydra-template's ``logger=mlflow`` builds it (a file
store in its config, no run id), it would open a run of its own, in a store of its own. While a
job runs, :func:`point_mlflow_loggers` wraps the constructor of the ``MLFlowLogger`` class of
each Lightning package the process has imported (``lightning.pytorch`` and ``pytorch_lightning``
are two copies of it), or that the job's config names: a logger built during the job, from the
config (``hydra.utils.instantiate``) or in the app's own code, gets the rerun's
``tracking_uri``, ``run_id`` and ``experiment_name``; every other argument is passed on as given.
A Lightning package first imported while the job runs (the task function imports it) has its
class wrapped as soon as its module is loaded. The first logger that changes says so in one line
of the job's log. The returned function puts each class's own constructor back. This is the
Lightning entry of the metric sources that :mod:`recipe_audit.app.seams` installs around every
job's task and puts back when the job ends, also when the task raised. No Hydra or MLflow is
imported here.
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

    wrapped: list[tuple[type, Callable[..., None], Callable[..., None]]] = []

    def point(cls: type) -> None:
        """Wrap ``cls``'s constructor for this job (once)."""
        if "__init__" in cls.__dict__ and all(cls is not c for c, _, _ in wrapped):
            own = cls.__dict__["__init__"]
            wrapped.append((cls, own, _pointing(own, pointed)))
            cls.__init__ = wrapped[-1][2]

    for cls in classes:
        point(cls)

    def restore() -> None:
        for cls, own, ours in wrapped:
            if cls.__dict__.get("__init__") is ours:  # unless someone wrapped it since
                cls.__init__ = own
        wrapped.clear()
        if restore in _LEFT:
            _LEFT.remove(restore)
        _POINT.clear()

    _LEFT.append(restore)
    _POINT[:] = [point]
    _watch_imports()
    return restore


_LEFT: list[Callable[[], None]] = []  # the restore of the job running now
_POINT: list[Callable[[type], None]] = []  # while a job runs: wraps a logger class for it
_WATCHED: set[str] = set()  # the logger modules whose first import this process watches for


def _watch_imports() -> None:
    """A Lightning package imported for the first time while a job runs (its task function
    imports it: the first job of each worker process) has its ``MLFlowLogger`` pointed at the
    job's rerun as soon as its module is loaded, before the task can build one. wrapt's
    post-import hooks call :func:`_imported` once the module has run; one hook per module and
    process (an imported module is wrapped at each job's start)."""
    import wrapt

    for package in LIGHTNING_PACKAGES:
        module = f"{package}.loggers.mlflow"
        if module not in _WATCHED and module not in sys.modules:
            _WATCHED.add(module)
            wrapt.register_post_import_hook(_imported, module)


def _imported(module: Any) -> None:
    cls = getattr(module, "MLFlowLogger", None)
    if _POINT and isinstance(cls, type):
        _POINT[0](cls)


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
