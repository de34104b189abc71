"""Every process a test starts, and every time limit a test waits under, come from here.

- :func:`spawn` starts a process (``subprocess.Popen``'s arguments) and retries a transient
  ``BlockingIOError`` (EAGAIN: the machine is short of processes or threads for a moment) a few
  times with a pause, rather than failing the test on a busy machine;
- :func:`run` is ``subprocess.run`` over :func:`spawn` (on a time-out the process, and the process
  group it leads, is killed before ``TimeoutExpired`` is raised);
- :func:`timeout` scales a limit measured on a quiet machine for this one:
  ``$RECIPE_AUDIT_TEST_TIMEOUT_FACTOR`` if set, else the load per CPU (1 to 4).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

ENV_FACTOR = "RECIPE_AUDIT_TEST_TIMEOUT_FACTOR"
SPAWN_TRIES = 5  # waits 1, 2, 4, 8 s between them


def timeout_factor() -> float:
    """How much longer than on a quiet machine things may take here: ``$RECIPE_AUDIT_TEST_TIMEOUT_FACTOR``,
    else the one-minute load average per CPU, between 1 and 4."""
    if os.environ.get(ENV_FACTOR):
        return max(1.0, float(os.environ[ENV_FACTOR]))
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 1.0
    return min(4.0, max(1.0, load))


def timeout(seconds: float) -> float:
    """A time limit of ``seconds`` on a quiet machine, scaled for this one."""
    return seconds * timeout_factor()


_scaled = timeout  # (run's argument is called timeout, as subprocess.run's)


def spawn(cmd, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)``, retried when the system is short of processes for a moment."""
    for attempt in range(SPAWN_TRIES):
        try:
            return subprocess.Popen(cmd, **kwargs)
        except BlockingIOError:  # EAGAIN from fork/clone
            if attempt == SPAWN_TRIES - 1:
                raise
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def run(cmd, *, timeout: float | None = None, check: bool = False, capture_output: bool = False,
        input: str | bytes | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` through :func:`spawn`. ``timeout`` is a quiet machine's limit in seconds,
    scaled with :func:`timeout` here; when it passes, the process (and its process group, if it
    leads one) is killed and ``subprocess.TimeoutExpired`` raised."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    limit = None if timeout is None else _scaled(timeout)
    with spawn(cmd, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=limit)
        except subprocess.TimeoutExpired:
            kill(proc)
            proc.communicate()
            raise
        except BaseException:
            kill(proc)
            raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


def kill(proc: subprocess.Popen) -> None:
    """End ``proc`` now: its whole process group when it leads one (``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
