"""How many torch threads a rerun of the built-in trainer trains on (its ``threads`` option).

``threads=auto`` (the default) is decided once a sweep, when it starts, in the sweep's main process
(:func:`decide`, from the callback's ``on_multirun_start``): not in each job, whose choice the sweep's
own load would flip. The rule::

    threads = max(1, free CPUs // reruns at once)

* CPUs: the ones this process may run on (``os.sched_getaffinity``), capped by a cgroup CPU quota;
* free CPUs: those less the 1-minute load average rounded to whole CPUs (a share of the load when
  the process may use only some of the machine's CPUs: the load average counts them all);
* reruns at once: the launcher's (basic and seeds launchers 1; local_parallel/joblib ``n_jobs``;
  submitit's local executor every job of a batch; Ray the CPUs over ``ray.remote.num_cpus``, and
  the GPUs over ``ray.remote.num_gpus`` when reruns take GPUs: recipe_audit/app/devices.py), at
  most the sweep's job count, times ``$LOCAL_WORLD_SIZE`` processes per rerun under accelerate.
  A SLURM job has CPUs of its own: its ``cpus_per_task``, whatever the submitting host's load.
  An unknown launcher keeps one thread a rerun.

The number reaches every job through ``$RECIPE_AUDIT_THREADS`` (inherited by the joblib, submitit
and Ray workers this process starts); a job that finds none (a single run, a job started some
other way) decides for itself, counting itself as the only rerun. ``threads=0`` is torch's own
choice (one thread per core), ``threads=n`` is ``n`` threads, as before.

Why not torch's choice on every machine: on a machine busy with other work, the threads of one
rerun wait on each other and a rerun takes many times longer than with one thread; on a quiet
machine more threads are a little faster (``bench/bench_parallel.py --threads-only``; the numbers
are on the benchmarks page of the docs).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("recipe_audit")

ENV = "RECIPE_AUDIT_THREADS"  # the sweep's decision, a whole number, for its jobs
AUTO = "auto"


#: The most torch threads one rerun may ask for: far beyond any machine's cores per process, far
#: below what breaks the libraries (a million threads: a tokenizers panic, then a segfault).
MAX_THREADS = 1024


class ThreadsError(ValueError):
    """A ``threads`` value that is neither ``auto`` nor a whole number from 0 to ``MAX_THREADS``
    (one sentence)."""


def parse(value: Any) -> int | str:
    """``auto`` or a whole number of threads from 0 to ``MAX_THREADS`` (0: torch's own choice).

    >>> parse("auto"), parse(4)
    ('auto', 4)
    """
    wanted = f"threads must be auto or a whole number from 0 to {MAX_THREADS}"
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise ThreadsError(f"{wanted}, not {value}.")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ThreadsError(f"{wanted}, not {value!r}.") from None
    if n < 0 or n != float(value):
        raise ThreadsError(f"{wanted}, not {value!r}.")
    if n > MAX_THREADS:
        raise ThreadsError(f"{wanted}, not {value!r}: more threads than that only slow a rerun down (this "
                           f"machine has {usable_cpus()} usable CPUs) and break the tokenizers' thread pool.")
    return n


@dataclass(frozen=True)
class Decision:
    threads: int  # 0: torch's own choice
    reason: str

    def line(self) -> str:
        """``2 torch threads per rerun (2 CPUs free, 1 job at a time)``: the one line logged."""
        if self.threads == 0:
            return f"torch's own number of threads per rerun ({self.reason})"
        return f"{self.threads} torch thread{'s' if self.threads != 1 else ''} per rerun ({self.reason})"


# -- what the machine offers ---------------------------------------------------------------------


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _cgroup_quota(path: str = "/sys/fs/cgroup/cpu.max") -> float | None:
    """CPUs a cgroup v2 quota allows (``max`` or no file: no quota)."""
    try:
        quota, period = open(path, encoding="ascii").read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by a cgroup CPU quota."""
    cpus = _affinity()
    quota = _cgroup_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def free_cpus() -> tuple[int, int, float | None]:
    """(free CPUs, usable CPUs, the load average counted against them). The load average counts
    the whole machine: when this process may use only some CPUs, only their share of it counts."""
    cpus = usable_cpus()
    load = _load1()
    if load is None:
        return cpus, cpus, None
    host = os.cpu_count() or cpus
    load_here = load * min(1.0, cpus / host)
    busy = min(cpus, int(load_here + 0.5))  # whole CPUs, half up
    return max(cpus - busy, 0), cpus, load_here


# -- how many reruns run at once ------------------------------------------------------------------


def _select(config: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, key, default=None)
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve: not set
        return None


def launcher_jobs(config: Any, cpus: int, n_jobs: int | None) -> tuple[int | None, str]:
    """(reruns the launcher runs at once, its name); ``None``: unknown launcher."""
    target = str(_select(config, "hydra.launcher._target_") or "")
    name = target.rsplit(".", 1)[-1] or "launcher"
    low = target.lower()
    if "joblib" in low:
        n = _select(config, "hydra.launcher.n_jobs")
        n = -1 if n is None else int(n)
        at_once = n if n > 0 else max(1, (os.cpu_count() or 1) + 1 + n)  # joblib: -1 all CPUs, -2 all but one
        name = "local_parallel" if "seedjoblib" in low else "joblib"
    elif "submitit" in low or "tolerantlocal" in low:  # submitit's local executor: a batch at once
        per = int(_select(config, "hydra.launcher.tasks_per_node") or 1)
        batch = _select(config, "hydra.sweeper.max_batch_size")
        at_once = int(batch) if batch else (n_jobs or cpus)
        n_jobs = n_jobs * per if n_jobs else None
        at_once *= per
        name = "cluster_local"
    elif "ray" in low:
        per = float(_select(config, "hydra.launcher.ray.remote.num_cpus") or 1)
        ray_cpus = _select(config, "hydra.launcher.ray.init.num_cpus") or cpus
        at_once = max(1, int(float(ray_cpus) // per))
        gpus_each = _select(config, "hydra.launcher.ray.remote.num_gpus")  # both set by devices.decide on GPUs
        ray_gpus = _select(config, "hydra.launcher.ray.init.num_gpus")
        if gpus_each and ray_gpus:
            at_once = min(at_once, max(1, int(float(ray_gpus) // float(gpus_each))))
        name = "ray"
    elif "basiclauncher" in low or "seedlauncher" in low:
        at_once = 1
    else:
        return None, name
    if n_jobs:
        at_once = min(at_once, n_jobs)
    return max(1, at_once), name


def _world() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def decide(config: Any, n_jobs: int | None = None) -> Decision:
    """``threads=auto`` for a sweep, in its main process (see the module docstring). ``n_jobs``:
    the sweep's job count, when known (no more reruns run at once than there are)."""
    target = str(_select(config, "hydra.launcher._target_") or "").lower()
    if "slurm" in target:
        n = int(_select(config, "hydra.launcher.cpus_per_task") or 1)
        return Decision(n, f"cpus_per_task={n} of each SLURM job")
    free, cpus, load = free_cpus()
    at_once, name = launcher_jobs(config, cpus, n_jobs)
    if at_once is None:
        return Decision(1, f"unknown launcher {name}: one thread a rerun")
    return _rule(free, cpus, load, at_once * _world())


def _rule(free: int, cpus: int, load: float | None, at_once: int) -> Decision:
    n = max(1, free // at_once)
    where = f"{_plural(free, 'CPU')} free" if load is None or free == cpus else (
        f"{free} of {_plural(cpus, 'CPU')} free at load average {load:.2f}")
    return Decision(n, f"{where}, {_plural(at_once, 'job')} at a time")


def decide_in_job() -> Decision:
    """``threads=auto`` in a job no sweep decided for: a SLURM job's own CPUs, else this machine's
    free CPUs for this one rerun (its processes under accelerate)."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.isdigit() and int(slurm) > 0:
        return Decision(int(slurm), f"SLURM_CPUS_PER_TASK={slurm}")
    free, cpus, load = free_cpus()
    return _rule(free, cpus, load, _world())


def from_env() -> int | None:
    text = os.environ.get(ENV, "").strip()
    return int(text) if text.isdigit() else None


# -- in the job ----------------------------------------------------------------------------------

_DECIDED: Decision | None = None  # this process's own decision (logged once)


def for_job(value: Any) -> int:
    """The torch threads a job trains on (0: leave torch's choice): an explicit number as it is;
    ``auto`` the sweep's decision, or this process's own (decided and logged once)."""
    global _DECIDED

    v = parse(value)
    if v != AUTO:
        return int(v)
    n = from_env()
    if n is not None:
        return n
    if _DECIDED is None:
        _DECIDED = decide_in_job()
        log.info("%s", _DECIDED.line())
    return _DECIDED.threads


_TORCH_OWN: int | None = None  # torch's own number of threads, kept when apply first changed it


def apply(value: Any) -> int:
    """Set torch's threads for this job from the ``threads`` option; returns the number (0: torch's choice).

    Torch is asked only when its number differs from the one wanted, so the jobs of one process
    with the same ``threads`` set it once. A job with ``threads=0`` after one that set a number in
    the same process gets torch's own number back (kept when this function first changed it)."""
    global _TORCH_OWN

    n = for_job(value)
    want = n or _TORCH_OWN
    if want:
        import torch

        if torch.get_num_threads() != want:
            if _TORCH_OWN is None:
                _TORCH_OWN = torch.get_num_threads()
            torch.set_num_threads(want)
    return n


def in_use() -> int:
    """The torch threads this process trains on now: what :func:`apply` set, or torch's own choice."""
    import torch

    return torch.get_num_threads()
