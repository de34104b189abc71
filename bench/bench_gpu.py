"""Benchmark: reruns on a GPU, for the default recipe and ``model=minilm``.

    python bench/bench_gpu.py                       # 16 seeds of each model, 4 reruns sharing the GPU
    python bench/bench_gpu.py --seeds 8 --k 2 --models tiny_bert

For each model, on the first GPU this machine lets reruns use (``recipe_audit.app.devices``:
``$CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``), each side in its own subprocess, imports and a
fresh SQLite store included, wall clock around the whole subprocess:

* **bare loop**: the same trainings in one Python process, no Hydra, no MLflow, no card
  (``bench/bench_sweep.py``'s bare loop with the model chosen; it prints the device it trained on);
  every side trains on ``--threads`` torch threads per rerun (default 1);
* **sweep, one at a time**: ``python -m recipe_audit -m 'seed=range(N)' model=M`` (the default
  launcher, card included): reruns per minute, and sweep / bare;
* **k sharing one GPU**: the same sweep with ``hydra/launcher=local_parallel hydra.launcher.n_jobs=k
  hydra.callbacks.recipe_audit.reruns_per_gpu=k`` on that one GPU: reruns per minute, and its speed
  over one at a time. The reruns' ``recipe_audit.devices`` tags are checked to name that GPU.

The mean calibration accuracy of each side is printed (a GPU's kernels need not be bit-identical
from one process to another, so the sides are compared, not required equal). Without a GPU the
script stops with one sentence.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _first_gpu() -> str:
    """The first GPU reruns may use; exits with one sentence when there is none."""
    import torch

    from recipe_audit.app.devices import discover

    gpus, _ = discover()
    if not gpus or not torch.cuda.is_available():
        sys.exit("bench_gpu: no GPU is visible here ($CUDA_VISIBLE_DEVICES, nvidia-smi -L and torch "
                 f"{torch.__version__} find none it can use); run it on a machine with a GPU.")
    return gpus[0]


def bare(seeds: int, model_choice: str, threads: int) -> None:
    """The trainings alone (bench_sweep.py's bare loop with ``model=model_choice``)."""
    import bench_sweep
    import torch

    from recipe_audit.config import AuditConfig, ModelConfig, RecipeConfig, TaskConfig
    from recipe_audit.train.loop import get_accelerator, prepare_task, select_audits, train_rerun

    if threads:
        torch.set_num_threads(threads)
    choice = bench_sweep._group_defaults()
    model = bench_sweep._load_group("model", model_choice or choice["model"], ModelConfig)
    task = bench_sweep._load_group("task", choice["task"], TaskConfig)
    recipe = bench_sweep._load_group("recipe", choice["recipe"], RecipeConfig)
    audit = bench_sweep._load_group("audit", choice["audit"], AuditConfig)
    prepared = prepare_task(task, model)
    audit_sets = select_audits(prepared.task, audit)
    accs = {}
    for seed in range(seeds):
        result = train_rerun(seed, model, recipe, prepared, audit_sets, eval_batch_size=audit.eval_batch_size,
                             progress=False)
        accs[seed] = result.audits[audit.primary].accuracy
    print("BARE_DEVICE " + str(get_accelerator().device))
    print("BARE_RESULT " + json.dumps(accs))


def _run(cmd: list[str], cwd: Path, env: dict[str, str], what: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench_gpu: {what} failed:\n{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr


def _store(uri: str) -> tuple[dict[int, float], set[str]]:
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    accs, devs = {}, set()
    for r in client.search_runs([exp.experiment_id], max_results=10000):
        if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN and r.info.status == "FINISHED":
            accs[int(r.data.tags[keys.TAG_SEED])] = r.data.metrics[keys.accuracy_key(keys.DEFAULT_AUDIT)]
            devs.add(r.data.tags.get(keys.TAG_DEVICES, "-"))
    return accs, devs


def measure(model: str, seeds: int, k: int, gpu: str, threads: int) -> None:
    env = {**os.environ, "HYDRA_FULL_ERROR": "1", "CUDA_VISIBLE_DEVICES": gpu,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("MLFLOW_TRACKING_URI", None)
    label = "default recipe" if model == "tiny_bert" else f"model={model}"
    print(f"{label}: {seeds} seeds per side, on GPU {gpu}", flush=True)

    wall_b, out = _run([sys.executable, str(Path(__file__).resolve()), "--bare", "--seeds", str(seeds),
                        "--model", model, "--threads", str(threads)], REPO, env, "the bare loop")
    device = [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("BARE_DEVICE ")][-1]
    accs_b = json.loads([ln for ln in out.splitlines() if ln.startswith("BARE_RESULT ")][-1].split(" ", 1)[1])
    print(f"  bare loop (trained on {device})      {wall_b:8.1f} s  {seeds / wall_b * 60:6.1f} reruns/min  "
          f"mean calibration accuracy {sum(accs_b.values()) / len(accs_b):.3f}", flush=True)

    sides = {}
    for name, extra in (("one at a time", []),
                        (f"{k} sharing GPU {gpu}", ["hydra/launcher=local_parallel", f"hydra.launcher.n_jobs={k}",
                                                    f"hydra.callbacks.recipe_audit.reruns_per_gpu={k}"])):
        with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
            uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
            cmd = [sys.executable, "-m", "recipe_audit", "-m", f"seed=range({seeds})", f"model={model}",
                   "progress=false", f"threads={threads}", f"tracking.uri={uri}",
                   f"hydra.sweep.dir={Path(tmp) / 'sweep'}", *extra]
            wall, _ = _run(cmd, Path(tmp), env, f"the sweep ({name})")
            accs, devs = _store(uri)
        if sorted(accs) != list(range(seeds)):
            sys.exit(f"bench_gpu: the sweep ({name}) finished {len(accs)} of {seeds} reruns.")
        if devs != {gpu}:
            sys.exit(f"bench_gpu: the sweep ({name}) tagged its reruns with devices {sorted(devs)}, not GPU {gpu}.")
        sides[name] = wall
        more = (f"sweep / bare = {wall / wall_b:.2f}×" if name == "one at a time" else
                f"{sides['one at a time'] / wall:.2f}× the reruns per minute of one at a time")
        print(f"  sweep, {name:<24} {wall:8.1f} s  {seeds / wall * 60:6.1f} reruns/min  {more}  "
              f"(mean calibration accuracy {sum(accs.values()) / len(accs):.3f})",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=16, help="reruns per side (default 16)")
    ap.add_argument("--k", type=int, default=4, help="reruns sharing the GPU (default 4)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rerun, both sides (default 1)")
    ap.add_argument("--models", default="tiny_bert,minilm", help="models (default: tiny_bert,minilm)")
    ap.add_argument("--model", default="", help=argparse.SUPPRESS)
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    # the script's own check on a machine without a GPU: GPU "0" faked, the reruns train on the CPU
    ap.add_argument("--plumbing-on-cpu", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        bare(args.seeds, args.model, args.threads)
        return
    if args.plumbing_on_cpu:
        gpu, name = "0", "NO GPU: a check of this script on the CPU, not a measurement"
    else:
        import torch

        gpu = _first_gpu()
        name = torch.cuda.get_device_name(0)
    print(f"bench_gpu: {name} (GPU {gpu}), "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    for model in args.models.split(","):
        measure(model.strip(), args.seeds, args.k, gpu, args.threads)


if __name__ == "__main__":
    main()
