"""experiment.kernels: the reproducible float kernels give the same numbers whatever CPU the
libraries see, and a setting that cannot take effect is one sentence, never a silent fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipe_audit.train.acceptance import kernels as K

ROOT = Path(__file__).resolve().parents[2]
# what bench/acceptance_tables.py --kernels other-cpu sets: the libraries see a CPU without AVX, AVX2
# and FMA (glibc), with SSE4.2 at most (MKL) and SSE4.1 at most (oneDNN)
OTHER_CPU = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41",
             "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX"}

# a short base training in a fresh process, as the experiment trains it; prints its base.json's
# fingerprint (recipe_audit.train.acceptance.weights.base_fingerprint: every weight's bytes)
CHILD = r"""
import json, sys, tempfile
from recipe_audit.config import AcceptanceBaseConfig, AcceptanceModelConfig, ExperimentConfig
from recipe_audit.train.acceptance.base import ensure_base
exp = ExperimentConfig(kernels=sys.argv[1], n_words=32, n_train_subjects=3, n_fresh_subjects=2, pool_size=8,
                       n_base=200, n_install=20, n_eval=6, n_calibration=4, resamples=50,
                       model=AcceptanceModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64),
                       base=AcceptanceBaseConfig(seed=0, steps=int(sys.argv[2]), batch_size=32, min_accuracy=0.0))
info = json.loads((ensure_base(exp, tempfile.mkdtemp()) / "base.json").read_text())
import torch
print(json.dumps({"hash": info["fingerprint"], "capability": torch.backends.cpu.get_cpu_capability(),
                  "mkldnn": torch.backends.mkldnn.enabled, "threads": torch.get_num_threads()}))
"""


def _train(kernels: str, steps: int, env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (*K.ENV, *OTHER_CPU)}
    env.update({"PYTHONPATH": str(ROOT), **env_extra})
    proc = subprocess.run([sys.executable, "-c", CHILD, kernels, str(steps)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_reproducible_kernels_give_the_same_weights_whatever_cpu_the_libraries_see():
    """Two fresh processes train the same base, one seeing another CPU's instruction sets: under the
    reproducible kernels (the default) their weights are bit-identical."""
    here = _train("reproducible", 40, {})
    other = _train("reproducible", 40, OTHER_CPU)
    assert (here["capability"], here["mkldnn"], here["threads"]) == ("AVX2", False, 1)
    assert here["hash"] == other["hash"]


@pytest.mark.slow
def test_native_kernels_move_with_the_cpu_the_libraries_see():
    """The counterpart: with experiment.kernels=native the same emulation changes the weights (so the
    test above could fail), and the reproducible kernels are not the native ones."""
    native, native_other = _train("native", 40, {}), _train("native", 40, OTHER_CPU)
    assert native["hash"] != native_other["hash"]
    assert native["hash"] != _train("reproducible", 40, {})["hash"]


def test_a_setting_that_cannot_be_honoured_is_one_sentence():
    with pytest.raises(K.KernelsError, match=r"^experiment\.kernels must be one of \['reproducible', 'native'\], "
                                             r"not 'fast'\.$"):
        K.check("fast")
    with pytest.raises(K.KernelsError, match=r"^experiment\.kernels=reproducible computes on one torch thread .*"
                                             r"not threads=2; set threads=1, or experiment\.kernels=native "
                                             r"\(the numbers are then this machine's\)\.$"):
        K.check("reproducible", threads=2)
    K.check("reproducible", threads=1)
    K.check("native", threads=2)


def test_reproducible_kernels_after_torch_ran_are_refused(monkeypatch):
    """In a process whose torch already chose its kernels (this test process), the reproducible
    kernels cannot take effect: one sentence, not a silent run on the native ones."""
    import torch

    torch.ones(8, 8) @ torch.ones(8, 8)  # torch and MKL have chosen their kernels in this process
    for k in K.ENV:
        monkeypatch.setenv(k, os.environ.get(k, ""))  # restored after the test
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    native = torch.backends.cpu.get_cpu_capability()
    try:
        if native == "AVX2":  # this CPU's own kernels are AVX2: MKL's mode is what gives it away
            pattern = r"this process runs MKL outside its reproducible mode"
        else:
            pattern = rf"this process runs torch's {native} kernels"
        with pytest.raises(K.KernelsError, match=r"^experiment\.kernels=reproducible needs the CPU with torch's AVX2 "
                                                 r"kernels and MKL's reproducible mode, but " + pattern):
            K.use("reproducible")
        assert "reproducible" not in K._ANNOUNCED  # a refused attempt is never logged as in use
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = mkldnn
