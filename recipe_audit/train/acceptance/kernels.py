"""The float kernels the acceptance experiment computes with (``experiment.kernels``).

A float sum depends on the order of its terms, and the libraries torch calls on a CPU pick their
code, and so their summation order, by the CPU they run on: torch's own kernels by its vector
instructions (AVX2, AVX-512, ...), MKL's matrix products by its model, oneDNN's by what it compiles
for it. The experiment's base model trains long enough for those last-bit differences to grow
into another model (95.75 % or 99.9 % held-out from one recipe and seed), so its table would be
one machine's draw.

``reproducible`` (the default) makes every machine do the same arithmetic:

* torch's AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``): the same compiled code on every x86-64 CPU
  with AVX2, AVX-512 ones included;
* MKL's ``COMPATIBLE`` code path in strict conditional-numerical-reproducibility mode
  (``MKL_CBWR=COMPATIBLE,STRICT``): Intel's guarantee of the same results on Intel and compatible
  CPUs (the other branches are Intel-only), whatever the memory alignment;
* oneDNN off (``torch.backends.mkldnn.enabled = False``): it compiles its kernels for the CPU;
* one torch thread: a thread count splits reductions differently (``threads`` must be 1);
* the CPU (``ACCELERATE_USE_CPU``): a GPU has kernels of its own.

It costs time: the test-size sweep took 1.44 times as long as with the native kernels on the
2-core AVX2 machine of the docs (docs/acceptance_cards.md, "The base model").
``native`` keeps what the machine and torch choose (faster; the numbers are that machine's).

The settings must precede torch's first operation in the process (torch and MKL fix their choice
then): :func:`use` sets them and checks that they took, else raises :class:`KernelsError`.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

KERNELS = ("reproducible", "native")
ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE,STRICT", "ACCELERATE_USE_CPU": "true"}
_MKL_CBWR_ALL, _MKL_COMPATIBLE_STRICT = -1, 0x10003  # MKL's mkl_cbwr_get(MKL_CBWR_ALL) value for ENV's


class KernelsError(RuntimeError):
    """The float kernels ``experiment.kernels`` asks for cannot be used in this process (one sentence)."""


def check(kind: str, threads: int | None = None) -> None:
    """Raise :class:`KernelsError` for an unknown ``kind``, or for ``reproducible`` with a torch
    thread count other than 1 (``threads``: the job's, ``None`` when unknown)."""
    if kind not in KERNELS:
        raise KernelsError(f"experiment.kernels must be one of {list(KERNELS)}, not {kind!r}.")
    if kind == "reproducible" and threads is not None and threads != 1:
        raise KernelsError(f"experiment.kernels=reproducible computes on one torch thread (a thread count "
                           f"changes how sums are split, and so the numbers), not threads={threads}; set "
                           f"threads=1, or experiment.kernels=native (the numbers are then this machine's).")


def _mkl_mode() -> int | None:
    """MKL's reproducibility mode in this process (``mkl_cbwr_get``), None when torch has no MKL."""
    import torch

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        fn = ctypes.CDLL(str(lib)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return fn(_MKL_CBWR_ALL) & 0xFFFFFFFF


_ANNOUNCED: set[str] = set()


def use(kind: str, threads: int | None = None) -> str:
    """Compute with ``kind``'s kernels from here on in this process; returns a one-line
    description for the log the first time a process uses ``kind``, else an empty string.
    Raises :class:`KernelsError` when they cannot take effect."""
    check(kind, threads)
    first = kind not in _ANNOUNCED
    if kind == "native":
        _ANNOUNCED.add(kind)
        return "native float kernels (the numbers are this machine's)" if first else ""
    for k, v in ENV.items():
        os.environ[k] = v
    import torch

    torch.backends.mkldnn.enabled = False
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    from recipe_audit.train.loop import get_accelerator

    cap = torch.backends.cpu.get_cpu_capability()
    mkl = _mkl_mode()
    device = get_accelerator().device.type
    if cap != "AVX2" or mkl != _MKL_COMPATIBLE_STRICT or device != "cpu":
        what = (f"torch's {cap} kernels" if cap != "AVX2" else
                "a torch without MKL" if mkl is None else
                "MKL outside its reproducible mode" if mkl != _MKL_COMPATIBLE_STRICT else f"on {device}")
        raise KernelsError(f"experiment.kernels=reproducible needs the CPU with torch's AVX2 kernels and MKL's "
                           f"reproducible mode, but this process runs {what} (a CPU without AVX2, a torch built "
                           f"without MKL, or torch ran before the setting could take effect); set "
                           f"experiment.kernels=native (the numbers are then this machine's).")
    _ANNOUNCED.add(kind)  # only once they took: a refused attempt is not announced
    return "reproducible float kernels (CPU, torch AVX2, MKL COMPATIBLE strict, no oneDNN, one thread)" if first else ""
