"""Several processes training each rerun together (``accelerate launch --num_processes N -m recipe_audit``).

Every process runs the same Hydra sweep in lock-step and trains each rerun data-parallel; only
the main process (rank 0) touches the tracking store: it opens the sweep's parent run, each
rerun's run, and computes the card. Decisions that depend on the store (resume: is this seed
already finished?) are read by every process from the same store before the main process writes
to it, so every process takes the same branch and the collective operations of training stay
matched.

The processes are the ones ``accelerate launch`` or ``torchrun`` start (``WORLD_SIZE``,
``RANK``); a single process (no ``WORLD_SIZE``) imports nothing here. On CPU processes (a test
of the multi-device path on one machine)::

    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m recipe_audit -m 'seed=range(4)'
"""

from __future__ import annotations

import os
from functools import cache

from recipe_audit.errors import first_line


class DistributedError(RuntimeError):
    """The processes were launched together but are not connected (one sentence)."""


@cache
def world_size() -> int:
    """How many processes train each rerun together (1 without a multi-process launch).

    A launcher that started N processes which ``accelerate`` did not connect (``accelerate
    launch --multi_gpu`` on a machine without GPUs, unless ``ACCELERATE_USE_CPU=true``) would
    have every process train and log every rerun on its own: refused."""
    n = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if n == 1:
        return 1
    from recipe_audit.train.loop import get_accelerator

    try:
        acc = get_accelerator()  # the one Accelerator that trains; it connects the processes
    except (RuntimeError, ValueError) as exc:  # torch.distributed's rendezvous
        msg = first_line(exc)
        raise DistributedError(f"accelerate could not connect the {n} launched processes: {msg}") from None
    if acc.num_processes != n:
        raise DistributedError(
            f"{n} processes were launched (WORLD_SIZE={n}) but accelerate connected {acc.num_processes} "
            f"(distributed type {acc.distributed_type.value}): on a machine without GPUs set "
            "ACCELERATE_USE_CPU=true to train on CPU processes.")
    return n


def rank() -> int:
    if world_size() == 1:
        return 0
    from recipe_audit.train.loop import get_accelerator

    return get_accelerator().process_index


def is_main_process() -> bool:
    return rank() == 0
