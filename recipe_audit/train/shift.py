"""Task shift: score a rerun on the audit sets of *another* task (``audit.extra_tasks``).

A recipe is trained on its own task and scored on that task's audit sets (calibration and domain
shifts). With ``audit.extra_tasks: [entailment]`` the same fine-tuned checkpoint is also scored on
every audit set of the ``entailment`` task, with the model's own tokenizer encoding the other
task's texts (a word-level tokenizer maps the words it never saw to ``[UNK]``, as deployment
would). Those audit sets are named ``entailment/calibration``, ``entailment/shift_people``
(:func:`recipe_audit.keys.task_shift_audit`), so their cards are computed like any other.

Only audit settings change: the recipe identity (model, task, recipe sections) is untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recipe_audit import keys
from recipe_audit.config import ModelConfig, TaskConfig
from recipe_audit.train.tasks import TaskData, TaskError, build_task


@dataclass(frozen=True)
class ExtraAudit:
    """One audit set of another task, encoded for the rerun's model."""

    name: str  # the qualified audit-set name, ``<task>/<audit set>``
    task: TaskData
    audit: str  # the audit set's name within ``task``
    encoded: Any  # ``loop.Encoded``


_CONFIGS: dict[tuple[str, str], TaskConfig] = {}
_ENCODED: dict[tuple, tuple[ExtraAudit, ...]] = {}


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
        from importlib import resources

        path = resources.files("recipe_audit.conf").joinpath("task", f"{name}.yaml")
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
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TaskError(f"Task '{name}' of audit.extra_tasks cannot be configured: {first}") from None
    _CONFIGS[key] = cfg
    return cfg


def prepare_extra_audits(names: Sequence[str], options: Mapping[str, Any], prepared, mcfg: ModelConfig
                         ) -> tuple[ExtraAudit, ...]:
    """Build the other tasks ``names`` and encode all their audit sets with ``prepared.tokenizer``.

    Raises ``TaskError`` (one sentence) for an unknown task, the rerun's own task, or a task whose
    number of labels differs from the rerun's (its predictions would mean nothing there)."""
    from recipe_audit.train.loop import _encode

    if not names:
        return ()
    own = prepared.task
    key = (id(prepared), tuple(names), repr(sorted(options.items())), mcfg.max_length)
    if key in _ENCODED:
        return _ENCODED[key]
    out: list[ExtraAudit] = []
    for name in dict.fromkeys(names):
        tcfg = load_task_config(name, options)
        if tcfg.name == own.name:
            raise TaskError(f"audit.extra_tasks names the rerun's own task '{name}'; its audit sets are "
                            f"already scored (audit.sets).")
        task = build_task(tcfg)
        if task.num_labels != own.num_labels:
            raise TaskError(f"Task '{tcfg.name}' has {task.num_labels} labels and the rerun's task "
                            f"'{own.name}' has {own.num_labels}, so the model cannot be scored on it.")
        for audit, examples in task.audits.items():
            out.append(ExtraAudit(keys.task_shift_audit(tcfg.name, audit), task, audit,
                                  _encode(prepared.tokenizer, examples, mcfg.max_length)))
    _ENCODED[key] = tuple(out)
    return _ENCODED[key]
