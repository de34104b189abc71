"""Task configs by name, for ``audit.extra_tasks``: composed on the app's config search path
while Hydra runs, else read from the task config files shipped with recipe_audit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recipe_audit.config import TaskConfig
from recipe_audit.errors import first_line
from recipe_audit.train.tasks import TaskError

_CONFIGS: dict[tuple[str, str], TaskConfig] = {}


def load_task_config(name: str, options: Mapping[str, Any] | None = None) -> TaskConfig:
    """The ``TaskConfig`` of the task config file ``name`` (``conf/task/<name>.yaml``, or one on
    the app's config search path when Hydra is running), with ``options`` merged into its
    ``options``. Raises ``TaskError`` (one sentence) for an unknown name."""
    from omegaconf import OmegaConf

    key = (name, repr(sorted((options or {}).items())))
    if key in _CONFIGS:
        return _CONFIGS[key]
    node = None
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import MissingConfigException

    if GlobalHydra.instance().is_initialized():  # inside the app: its config search path
        from hydra import compose

        try:
            node = compose(config_name="config", overrides=[f"task={name}"]).task
        except MissingConfigException:
            raise TaskError(f"audit.extra_tasks names '{name}', which is not a task config.") from None
    if node is None:
        from recipe_audit.app import config_dir

        path = config_dir() / "task" / f"{name}.yaml"
        if not path.is_file():
            raise TaskError(f"audit.extra_tasks names '{name}', which is not a task config.")
        raw = OmegaConf.create(path.read_text(encoding="utf-8"))
        raw.pop("defaults", None)
        node = OmegaConf.merge(OmegaConf.structured(TaskConfig), raw)
    from omegaconf.errors import OmegaConfBaseException

    try:
        node = OmegaConf.merge(OmegaConf.structured(TaskConfig), node)
        if options:
            node = OmegaConf.merge(node, {"options": dict(options)})
        cfg = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:  # e.g. the files task's required paths
        first = first_line(exc)
        raise TaskError(f"Task '{name}' of audit.extra_tasks cannot be configured: {first}") from None
    _CONFIGS[key] = cfg
    return cfg


def extra_task_configs(names: Sequence[str], options: Mapping[str, Any]) -> list[TaskConfig]:
    """The ``TaskConfig`` of each task of ``audit.extra_tasks`` (once each, in order), with
    ``audit.extra_task_options`` merged into its options."""
    return [load_task_config(name, options) for name in dict.fromkeys(names)]
