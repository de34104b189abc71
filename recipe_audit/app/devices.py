"""Which GPUs each rerun of a sweep trains on (the callback's ``devices`` and ``reruns_per_gpu`` options).

Decided once a sweep, when it starts, in the sweep's main process (:func:`decide`, from the
callback's ``on_multirun_start``, like ``threads=auto``), logged in one line, and handed to the
jobs through ``$RECIPE_AUDIT_DEVICES``; each job records the devices it got in its rerun's
``recipe_audit.devices`` tag. A machine without GPUs decides nothing: no line, no tag, no variable.

The GPUs: ``devices=auto`` (the default) takes those ``$CUDA_VISIBLE_DEVICES`` names when it is
set (``""`` or ``-1``: none), else the ones ``nvidia-smi -L`` lists (a MIG instance by its UUID),
else, when the app has imported torch already, ``torch.cuda.device_count()``; ``devices=[0,1]``
names them; ``devices=none`` places nothing.

How the launcher's reruns at once (counted as for ``threads=auto``:
:func:`recipe_audit.app.threads.launcher_jobs`) get them:

* on this machine (basic and seeds launchers, ``local_parallel``/``joblib``, ``cluster_local``):
  slots, one per rerun at once, each a ``CUDA_VISIBLE_DEVICES`` value. With ``reruns_per_gpu=1``
  each slot has GPUs of its own (all of them for one rerun at a time, ``G // reruns at once``
  each for several; ``hydra.launcher.gpus_per_node`` of ``cluster_local`` when set); with
  ``reruns_per_gpu=k`` the slots fill the GPUs in order, k to a GPU. More reruns at once than
  that wrap around and share (said in the line). A job process takes the first free slot (an
  exclusive lock on ``<sweep dir>/.recipe_audit_devices/slot-<i>.lock``, held while the process
  lives, so a worker that dies frees its slot) and sets ``CUDA_VISIBLE_DEVICES`` before the task
  function runs, which is before the task's first CUDA call;
* Ray (``hydra/launcher=ray_local``): Ray's own ``num_gpus`` per task, ``1 / reruns_per_gpu``
  unless ``hydra.launcher.ray.remote.num_gpus`` is set (and, for the Ray the sweep starts, the
  GPUs found as ``ray.init.num_gpus`` unless set); Ray sets each task's devices;
* SLURM: its own options (``hydra.launcher.gpus_per_task``, ``gpus_per_node``, ``gres``); SLURM
  sets each job's devices. The login node's GPUs do not count;
* ``accelerate launch``/``torchrun`` (several processes a rerun): theirs to place; nothing here.

Each job tags the ``CUDA_VISIBLE_DEVICES`` it ran with (the launcher's, under Ray and SLURM).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("recipe_audit")

ENV = "RECIPE_AUDIT_DEVICES"  # the sweep's slots for its jobs: "0;1", "0,1;2,3", or LAUNCHER
LAUNCHER = "@launcher"  # the launcher (Ray, SLURM) places the jobs: they record what they got
CVD = "CUDA_VISIBLE_DEVICES"
AUTO = "auto"
LOCK_DIR = ".recipe_audit_devices"


class DevicesError(ValueError):
    """A ``devices`` or ``reruns_per_gpu`` value that cannot be used (one sentence)."""


# -- the options -----------------------------------------------------------------------------------


def parse_devices(value: Any) -> list[str] | str | None:
    """``auto``; a list of device names (``[0, 1]``, ``"0,1"``, ``GPU-…``/``MIG-…`` UUIDs); None for ``none``."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            return AUTO
        if text.lower() in ("none", "cpu", "", "false"):
            return None
        items: list[Any] = text.split(",")
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        try:
            items = list(value)
        except TypeError:
            raise DevicesError(f"devices must be auto, none or a list of GPUs such as [0,1], not {value!r}.") from None
    names = [str(v).strip() for v in items]
    if not names or not all(n and (n.isdigit() or n.startswith(("GPU-", "MIG-"))) for n in names):
        raise DevicesError(f"devices must be auto, none or a list of GPUs such as [0,1], not {value!r}.")
    return names


def parse_per_gpu(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit() \
            or int(value) < 1:
        raise DevicesError(f"reruns_per_gpu must be a whole number from 1, not {value!r}.")
    return int(value)


# -- what the machine offers -----------------------------------------------------------------------


def _from_cvd(text: str) -> list[str]:
    """The devices ``CUDA_VISIBLE_DEVICES`` names; CUDA stops at the first one that is not a device."""
    out = []
    for d in (d.strip() for d in text.split(",")):
        if not d or d.startswith("-"):
            break
        out.append(d)
    return out


def _nvidia_smi() -> list[str] | None:
    """``nvidia-smi -L``'s GPUs, each by index, or a MIG instance by its UUID (CUDA shows those in
    place of their GPU); None: no nvidia-smi, or it failed."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(out)


def parse_smi(text: str) -> list[str]:
    gpus: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("GPU ") and ":" in s:
            gpus.append((s[4:s.index(":")].strip(), []))
        elif s.startswith("MIG ") and "UUID: " in s and gpus:
            gpus[-1][1].append(s.split("UUID: ", 1)[1].rstrip(")").strip())
    return [d for index, migs in gpus for d in (migs or [index])]


def _torch_count() -> int:
    torch = sys.modules.get("torch")  # only when the app imported it: importing torch takes a second
    try:
        return int(torch.cuda.device_count()) if torch is not None else 0
    except Exception:  # noqa: BLE001 - a broken CUDA install: no GPUs to place
        return 0


def discover() -> tuple[list[str], str]:
    """(the GPUs this machine lets reruns use, where that list came from)."""
    if CVD in os.environ:
        return _from_cvd(os.environ[CVD]), f"${CVD}"
    smi = _nvidia_smi()
    if smi is not None:
        return smi, "nvidia-smi -L"
    n = _torch_count()
    return [str(i) for i in range(n)], "torch.cuda.device_count()"


# -- the decision ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    slots: tuple[str, ...] = ()  # the CUDA_VISIBLE_DEVICES of each slot (one slot per rerun at once)
    reason: str = ""  # the logged line, less its start; "" when there is nothing to say
    launcher: bool = False  # the launcher (Ray, SLURM) places each job
    gpus: int = 0  # the GPUs placed on

    def line(self) -> str:
        return f"GPUs per rerun: {self.reason}"

    def env(self) -> str | None:
        """``$RECIPE_AUDIT_DEVICES`` for the jobs (None: leave it unset)."""
        return LAUNCHER if self.launcher else ";".join(self.slots) if self.slots else None


def _select(config: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, key, default=None)
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve: not set
        return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _world() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def decide(config: Any, n_jobs: int | None = None, devices: Any = AUTO, reruns_per_gpu: Any = 1) -> Placement:
    """Where the sweep's reruns train (see the module docstring). ``n_jobs``: the sweep's job count,
    when known. Under Ray this sets ``hydra.launcher.ray.remote.num_gpus`` when it is unset (the
    launcher is built from the config after the callback's ``on_multirun_start``)."""
    from recipe_audit.app import threads

    wanted = parse_devices(devices)
    per_gpu = parse_per_gpu(reruns_per_gpu)
    if wanted is None:
        return Placement()
    target = str(_select(config, "hydra.launcher._target_") or "")
    if "slurm" in target.lower():
        asked = [f"{k}={v}" for k in ("gpus_per_task", "gpus_per_node", "gres")
                 if (v := _select(config, f"hydra.launcher.{k}")) not in (None, "", 0)]
        if not asked:
            return Placement()
        return Placement(reason=f"SLURM gives each rerun its GPUs ({', '.join(asked)})", launcher=True)
    gpus, source = (wanted, "devices") if wanted != AUTO else discover()
    if not gpus:
        return Placement()
    where = f"{_plural(len(gpus), 'GPU')} ({','.join(gpus)}, from {source})"
    if _world() > 1:
        return Placement(reason=f"{where}: accelerate/torchrun places each process of a rerun")
    low = target.lower()
    if "ray" in low and "launcher" in low:
        return _ray(config, gpus, where, per_gpu)
    at_once, name = threads.launcher_jobs(config, threads.usable_cpus(), n_jobs)
    if at_once is None:
        return Placement(reason=f"{where}: unknown launcher {name}, its reruns see the GPUs as they are")
    local = name == "cluster_local"  # submitit's local executor runs a batch of the sweeper's at once
    return _slots(gpus, where, at_once, per_gpu, _select(config, "hydra.launcher.gpus_per_node") if local else None,
                  "hydra.sweeper.max_batch_size" if local else "hydra.launcher.n_jobs")


def _ray(config: Any, gpus: list[str], where: str, per_gpu: int) -> Placement:
    from omegaconf import open_dict

    each = _select(config, "hydra.launcher.ray.remote.num_gpus")
    if each in (None, 0):
        each = 1 / per_gpu
        with open_dict(config):
            config.hydra.launcher.ray.remote.num_gpus = each
        how = f"num_gpus={each:g} per Ray task" + (f" ({per_gpu} reruns per GPU)" if per_gpu > 1 else "")
    else:
        how = f"num_gpus={each} per Ray task (hydra.launcher.ray.remote.num_gpus)"
    if _select(config, "hydra.launcher.ray.init.address") is None and _select(
            config, "hydra.launcher.ray.init.num_gpus") is None:  # the Ray this sweep starts: these GPUs
        with open_dict(config):
            config.hydra.launcher.ray.init.num_gpus = len(gpus)
    return Placement(reason=f"{where}: {how}; Ray sets each task's devices", launcher=True, gpus=len(gpus))


def _slots(gpus: list[str], where: str, at_once: int, per_gpu: int, per_rerun: Any, knob: str) -> Placement:
    g = len(gpus)
    if per_rerun:  # cluster_local's gpus_per_node
        per, share = int(per_rerun), 1
        if per > g:
            raise DevicesError(f"hydra.launcher.gpus_per_node={per} asks for more GPUs than the {g} there are.")
        each = f"{_plural(per, 'GPU')} each (gpus_per_node)"
    elif per_gpu == 1:
        per, share = max(1, g // at_once), 1
        each = "each sees all of them" if at_once == 1 and per == g else f"{_plural(per, 'GPU')} each"
    else:
        per, share = 1, per_gpu
        each = f"{per_gpu} reruns per GPU (reruns_per_gpu={per_gpu})"
    groups = [gpus[i * per:(i + 1) * per] for i in range(g // per)]
    slots = [",".join(groups[(s // share) % len(groups)]) for s in range(at_once)]
    room = len(groups) * share
    how = each if at_once <= room else (
        f"{math.ceil(at_once / len(groups))} reruns share each {'GPU' if per == 1 else 'group of GPUs'}; set "
        f"{knob}={room} for {each}")
    shown = "" if at_once == 1 or at_once > 8 else f" ({' | '.join(slots)})"
    return Placement(slots=tuple(slots), reason=f"{where}, {_plural(at_once, 'job')} at a time: {how}{shown}", gpus=g)


def parent_tags(placement: Placement | None) -> dict[str, str]:
    """The sweep parent's record of the placement (nothing when none was made)."""
    from recipe_audit import keys

    if placement is None or not placement.reason:
        return {}
    return {keys.TAG_DEVICES_REASON: placement.line()}


# -- in the main process ---------------------------------------------------------------------------

_SAVED: tuple[bool, str | None] | None = None  # $RECIPE_AUDIT_DEVICES before the sweep


def hand_to_jobs(placement: Placement) -> None:
    """Set ``$RECIPE_AUDIT_DEVICES`` for the jobs this process starts (or runs itself)."""
    global _SAVED

    if _SAVED is None:
        _SAVED = (ENV in os.environ, os.environ.get(ENV))
    value = placement.env()
    if value is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = value


def restore() -> None:
    global _SAVED

    saved, _SAVED = _SAVED, None
    if saved is None:
        return
    if saved[0]:
        os.environ[ENV] = saved[1] or ""
    else:
        os.environ.pop(ENV, None)


# -- in the job ------------------------------------------------------------------------------------

_HELD: tuple[str, int, Any] | None = None  # this process's slot: (lock dir, slot, its open lock file)


def _claim(lock_dir: Path, n: int) -> int:
    """The first slot no other live process holds (kept for this process's life); when every
    slot is held, one by process id (sharing it)."""
    global _HELD

    if _HELD is not None and _HELD[0] == str(lock_dir):
        return _HELD[1]
    try:
        import fcntl
    except ImportError:  # not on a POSIX system
        return os.getpid() % n
    lock_dir.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        f = open(lock_dir / f"slot-{i}.lock", "a")  # noqa: SIM115 - held open while the process lives
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        if _HELD is not None:
            _HELD[2].close()  # a slot of an earlier sweep this process served
        _HELD = (str(lock_dir), i, f)
        return i
    return os.getpid() % n


def for_job(sweep_dir: str) -> dict[str, str]:
    """In the job's process, before the task runs: set ``CUDA_VISIBLE_DEVICES`` to the job's slot;
    the rerun's tag (nothing when the sweep placed nothing)."""
    plan = os.environ.get(ENV)
    if not plan:
        return {}
    from recipe_audit import keys

    if plan == LAUNCHER:
        got = os.environ.get(CVD)
        return {keys.TAG_DEVICES: got} if got else {}
    slots = plan.split(";")
    mine = slots[0] if len(slots) == 1 else slots[_claim(Path(sweep_dir) / LOCK_DIR, len(slots))]
    if os.environ.get(CVD) != mine:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            log.warning("CUDA started in this process before the rerun: it keeps the GPUs it saw, not %s=%s",
                        CVD, mine)
        os.environ[CVD] = mine
    return {keys.TAG_DEVICES: mine}
