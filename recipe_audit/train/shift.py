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

from collections.abc import Sequence
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


_ENCODED: dict[tuple, tuple[Any, tuple[ExtraAudit, ...]]] = {}  # -> (the prepared task they were encoded for, them)


def prepare_extra_audits(task_configs: Sequence[TaskConfig], prepared, mcfg: ModelConfig) -> tuple[ExtraAudit, ...]:
    """Build the other tasks (``audit.extra_tasks``, their configs as the app loaded them) and
    encode all their audit sets with ``prepared.tokenizer``.

    Raises ``TaskError`` (one sentence) for the rerun's own task, or a task whose number of labels
    differs from the rerun's (its predictions would mean nothing there)."""
    from recipe_audit.train.loop import encode_examples

    if not task_configs:
        return ()
    own = prepared.task
    key = (id(prepared), repr(list(task_configs)), mcfg.max_length)
    hit = _ENCODED.get(key)
    if hit is not None and hit[0] is prepared:  # that very task and tokenizer, not one at its old address
        return hit[1]
    out: list[ExtraAudit] = []
    for tcfg in task_configs:
        if tcfg.name == own.name:
            raise TaskError(f"audit.extra_tasks names the rerun's own task '{tcfg.name}'; its audit sets are "
                            f"already scored (audit.sets).")
        task = build_task(tcfg)
        if task.num_labels != own.num_labels:
            raise TaskError(f"Task '{tcfg.name}' has {task.num_labels} labels and the rerun's task "
                            f"'{own.name}' has {own.num_labels}, so the model cannot be scored on it.")
        for audit, examples in task.audits.items():
            out.append(ExtraAudit(keys.task_shift_audit(tcfg.name, audit), task, audit,
                                  encode_examples(prepared.tokenizer, examples, mcfg.max_length)))
    _ENCODED[key] = (prepared, tuple(out))
    return _ENCODED[key][1]
