"""Does the acceptance experiment's base model train reliably? Its held-out accuracy over base seeds,
torch threads and CPU float kernels (docs/acceptance_cards.md, "The base model on other machines").

    python bench/acceptance_base.py                                  # seeds 0 1 2, as the experiment trains them
    python bench/acceptance_base.py --seeds 0 --kernels native other-cpu   # the same numbers, whatever CPU MKL sees
    python bench/acceptance_base.py --seeds 0 --threads 1 2 --kernels native avx2 default \
        --overrides experiment.kernels=native                       # the machine's own kernels: they move it
    python bench/acceptance_base.py --overrides experiment.base.grad_clip=null  # another base recipe

Each row trains the base model of ``experiment=acceptance`` (default size; ``--overrides`` are
Hydra overrides of the app, e.g. ``experiment.base.lr=1e-3``) once, in its own process, exactly as the experiment
does (its configuration composed by Hydra, ``recipe_audit.train.acceptance.base.ensure_base``, a
fresh cache), and prints its accuracy
on the evaluation questions: held-out questions of the training subjects and fresh subjects of
``mcq``, held-out ``syco``, each under eval and deploy framing.

``--kernels`` emulates other CPUs on this one: ``native`` (this machine as it is), ``other-cpu``
(MKL, oneDNN and glibc see a CPU with fewer vector instructions), and, for
``experiment.kernels=native`` only (the reproducible kernels set these variables themselves),
``avx2`` (torch's own vectorised kernels at AVX2, ``ATEN_CPU_CAPABILITY=avx2``, and MKL's matrix
products on its compatible code path, ``MKL_CBWR=COMPATIBLE``) and ``default`` (torch's
non-vectorised kernels, ``ATEN_CPU_CAPABILITY=default``). Under the machine's own kernels each
gives different low-order bits in matrix products, softmax or layer norm, which is what a
different CPU kind does, and the long base training grows them into another model; under
``experiment.kernels=reproducible`` (the experiment's default: recipe_audit/train/acceptance/kernels.py)
every row of one seed must be the same model. ``--threads`` other than 1 needs
``experiment.kernels=native`` (the reproducible kernels compute on one thread; the row says so).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acceptance_tables import KERNELS, cpu_model, kernel_env  # bench/ is on sys.path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile
import torch
from hydra import compose, initialize_config_dir
from recipe_audit.app import config_dir
from recipe_audit.app.schema import register_configs, typed
from recipe_audit.config import ExperimentConfig
from recipe_audit.train.acceptance.base import ensure_base
from recipe_audit.train.acceptance import kernels
threads, overrides = int(sys.argv[1]), sys.argv[2:]
register_configs()
with initialize_config_dir(str(config_dir()), version_base="1.3"):
    cfg = compose("config", ["experiment=acceptance", *overrides])
exp = typed(cfg.experiment, ExperimentConfig)
try:
    kernels.use(exp.kernels, threads)  # as the experiment's job does, before torch's first operation
except kernels.KernelsError as exc:
    sys.exit(str(exc))
torch.set_num_threads(threads)
root = ensure_base(exp, tempfile.mkdtemp(prefix="acceptance_base_"))
info = json.loads((root / "base.json").read_text())
print(json.dumps({"accuracy": info["accuracy"], "final_loss": info["final_loss"],
                  "train_seconds": info["train_seconds"], "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def heldout(acc: dict) -> float:
    return (acc["mcq/heldout/eval"] + acc["mcq/heldout/deploy"]) / 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="base.seed values")
    ap.add_argument("--threads", type=int, nargs="+", default=[1], help="torch threads")
    ap.add_argument("--kernels", nargs="+", default=["native"], choices=sorted(KERNELS))
    ap.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides, e.g. experiment.base.lr=1e-3")
    a = ap.parse_args(argv)
    import torch

    print(f"CPU {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"native kernels {torch.backends.cpu.get_cpu_capability()}; overrides: {' '.join(a.overrides) or 'none'}")
    print()
    print("| base seed | threads | kernels | held-out mcq eval / deploy | fresh mcq eval / deploy | syco eval / deploy "
          "| final loss | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 1.0
    for seed in a.seeds:
        for threads in a.threads:
            for kernels in a.kernels:
                env = {**kernel_env(kernels), "PYTHONPATH": str(ROOT)}
                t0 = time.perf_counter()
                with tempfile.TemporaryDirectory() as cwd:
                    proc = subprocess.run([sys.executable, "-c", CHILD, str(threads), f"experiment.base.seed={seed}",
                                           *a.overrides],
                                          env=env, cwd=cwd, capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"| {seed} | {threads} | {kernels} | failed: {proc.stderr.strip().splitlines()[-1]} |||||")
                    worst = 0.0
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                acc = r["accuracy"]
                worst = min(worst, heldout(acc))
                print(f"| {seed} | {threads} | {kernels} ({r['capability']}) "
                      f"| {acc['mcq/heldout/eval']:.3f} / {acc['mcq/heldout/deploy']:.3f} "
                      f"| {acc['mcq/fresh/eval']:.3f} / {acc['mcq/fresh/deploy']:.3f} "
                      f"| {acc['syco/heldout/eval']:.3f} / {acc['syco/heldout/deploy']:.3f} "
                      f"| {r['final_loss']:.3f} | {time.perf_counter() - t0:.0f} |", flush=True)
    print()
    print(f"Lowest held-out mcq accuracy (both framings): {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
