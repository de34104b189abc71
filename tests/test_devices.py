"""GPUs per rerun (recipe_audit/app/devices.py) on machines described by faking the device list:
``$CUDA_VISIBLE_DEVICES``, ``nvidia-smi -L``'s text, or the ``devices`` option; no GPU needed."""

from __future__ import annotations

import fcntl
import os
import sys

import pytest
from helpers import procs
from helpers.app import REPO, SMALL, run_app
from omegaconf import OmegaConf

from recipe_audit import keys
from recipe_audit.app import devices, threads

BASIC = "hydra_plugins.recipe_audit.plugins.SeedLauncher"
JOBLIB = "hydra_plugins.recipe_audit.plugins.SeedJoblibLauncher"
HYDRA_JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
LOCAL = "hydra_plugins.recipe_audit.plugins.TolerantLocalLauncher"
SLURM = "hydra_plugins.recipe_audit.plugins.TolerantSlurmLauncher"
RAY = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"

SMI = """GPU 0: NVIDIA H200 (UUID: GPU-5c1a8f0e-0000-0000-0000-000000000000)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-77aa0000-0000-0000-0000-000000000000)
  MIG 3g.20gb     Device  0: (UUID: MIG-0a1b2c3d-0000-0000-0000-000000000000)
  MIG 3g.20gb     Device  1: (UUID: MIG-4e5f6a7b-0000-0000-0000-000000000000)
GPU 2: NVIDIA H200 (UUID: GPU-9d9d0000-0000-0000-0000-000000000000)
"""


@pytest.fixture
def machine(monkeypatch):
    """A machine whose GPUs are ``smi`` (nvidia-smi -L's text; None: no nvidia-smi) and ``torch``
    (what torch.cuda.device_count() says), with no $CUDA_VISIBLE_DEVICES unless a test sets it."""
    for k in (devices.CVD, devices.ENV, threads.ENV, "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(devices, "_HELD", None)
    monkeypatch.setattr(devices, "_SAVED", None)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 16)

    def set_(smi: str | None = None, torch: int = 0):
        monkeypatch.setattr(devices, "_nvidia_smi", lambda: None if smi is None else devices.parse_smi(smi))
        monkeypatch.setattr(devices, "_torch_count", lambda: torch)

    set_()
    return set_


def _cfg(target: str, **launcher) -> object:
    return OmegaConf.create({"hydra": {"launcher": {"_target_": target, **launcher}, "sweeper": {}}})


def test_the_gpus_come_from_cuda_visible_devices_else_nvidia_smi_else_torch(machine, monkeypatch):
    machine(smi=SMI, torch=8)
    assert devices.discover() == (["0", "MIG-0a1b2c3d-0000-0000-0000-000000000000",
                                   "MIG-4e5f6a7b-0000-0000-0000-000000000000", "2"], "nvidia-smi -L")
    machine(smi=None, torch=2)
    assert devices.discover() == (["0", "1"], "torch.cuda.device_count()")
    for cvd, seen in (("2,3", ["2", "3"]), ("", []), ("-1", []), ("1,-1,2", ["1"]), ("GPU-ab, 3", ["GPU-ab", "3"])):
        monkeypatch.setenv(devices.CVD, cvd)  # respected as it is: CUDA stops at the first non-device
        assert devices.discover() == (seen, "$CUDA_VISIBLE_DEVICES")


def test_a_machine_without_gpus_decides_nothing_and_touches_nothing(machine):
    config = _cfg(JOBLIB, n_jobs=2)
    placed = devices.decide(config, 59)
    assert placed == devices.Placement() and placed.env() is None and devices.parent_tags(placed) == {}
    devices.hand_to_jobs(placed)
    assert devices.ENV not in os.environ
    assert devices.for_job("/nonexistent") == {} and devices.CVD not in os.environ  # the per-job path


@pytest.mark.parametrize(("launcher", "per_gpu", "env", "how"), [
    (_cfg(BASIC), 1, "0,1,2,3", "1 job at a time: each sees all of them"),
    (_cfg(JOBLIB, n_jobs=4), 1, "0;1;2;3", "4 jobs at a time: 1 GPU each (0 | 1 | 2 | 3)"),
    (_cfg(JOBLIB, n_jobs=2), 1, "0,1;2,3", "2 jobs at a time: 2 GPUs each (0,1 | 2,3)"),
    (_cfg(HYDRA_JOBLIB, n_jobs=2), 1, "0,1;2,3", "2 jobs at a time: 2 GPUs each (0,1 | 2,3)"),  # Hydra's own
    (_cfg(JOBLIB, n_jobs=3), 1, "0;1;2", "3 jobs at a time: 1 GPU each (0 | 1 | 2)"),
    (_cfg(JOBLIB, n_jobs=6), 1, "0;1;2;3;0;1",
     "6 jobs at a time: 2 reruns share each GPU; set hydra.launcher.n_jobs=4 for 1 GPU each (0 | 1 | 2 | 3 | 0 | 1)"),
    (_cfg(JOBLIB, n_jobs=4), 2, "0;0;1;1", "4 jobs at a time: 2 reruns per GPU (reruns_per_gpu=2) (0 | 0 | 1 | 1)"),
    (_cfg(JOBLIB, n_jobs=3), 3, "0;0;0", "3 jobs at a time: 3 reruns per GPU (reruns_per_gpu=3) (0 | 0 | 0)"),
    (_cfg(LOCAL, gpus_per_node=2), 1, "0,1;2,3;0,1", "3 jobs at a time: 2 reruns share each group of GPUs; "
     "set hydra.sweeper.max_batch_size=2 for 2 GPUs each (gpus_per_node) (0,1 | 2,3 | 0,1)"),
])
def test_concurrent_reruns_get_gpus_of_their_own_or_share_when_asked(machine, launcher, per_gpu, env, how):
    machine(smi="GPU 0: A\nGPU 1: B\nGPU 2: C\nGPU 3: D\n")
    placed = devices.decide(launcher, n_jobs=3 if "LocalLauncher" in str(launcher.hydra.launcher._target_) else 59,
                            reruns_per_gpu=per_gpu)
    assert placed.env() == env
    assert placed.line() == f"GPUs per rerun: 4 GPUs (0,1,2,3, from nvidia-smi -L), {how}"
    assert devices.parent_tags(placed) == {keys.TAG_DEVICES_REASON: placed.line()}


def test_the_devices_option_names_the_gpus_or_turns_placement_off(machine, monkeypatch):
    monkeypatch.setenv(devices.CVD, "0,1,2,3")
    assert devices.decide(_cfg(JOBLIB, n_jobs=2), 59, devices=[2, 3]).env() == "2;3"
    assert devices.decide(_cfg(JOBLIB, n_jobs=2), 59, devices="5,6").env() == "5;6"
    assert devices.decide(_cfg(JOBLIB, n_jobs=2), 59, devices="none") == devices.Placement()


@pytest.mark.parametrize(("option", "value"), [("devices", "many"), ("devices", [0, "x"]), ("devices", 1.5),
                                                ("reruns_per_gpu", 0), ("reruns_per_gpu", "two"),
                                                ("reruns_per_gpu", True), ("reruns_per_gpu", 1.5)])
def test_a_bad_option_is_one_sentence(machine, option, value):
    with pytest.raises(devices.DevicesError, match=rf"^{option} must be .*\.$"):
        devices.decide(_cfg(JOBLIB, n_jobs=2), 59, **{option: value})


def test_slurm_and_ray_place_with_their_own_options_and_threads_agree(machine, monkeypatch):
    machine(smi="GPU 0: A\n")  # the login node's GPU does not count under SLURM
    assert devices.decide(_cfg(SLURM, cpus_per_task=4), 59) == devices.Placement()
    placed = devices.decide(_cfg(SLURM, gpus_per_task=1), 59)
    assert placed.env() == devices.LAUNCHER and "SLURM gives each rerun its GPUs (gpus_per_task=1)" in placed.line()

    machine(smi="GPU 0: A\nGPU 1: B\n")
    config = _cfg(RAY, ray={"init": {"num_cpus": 16}, "remote": {"num_cpus": 1}})
    placed = devices.decide(config, 59, reruns_per_gpu=2)
    assert config.hydra.launcher.ray.remote.num_gpus == 0.5  # set before Hydra builds the launcher
    assert placed.env() == devices.LAUNCHER and "num_gpus=0.5 per Ray task (2 reruns per GPU)" in placed.line()
    # threads=auto counts the reruns Ray runs at once: 2 GPUs / 0.5, not 16 CPUs / 1
    assert threads.launcher_jobs(config, 16, 59) == (4, "ray")
    config.hydra.launcher.ray.remote.num_gpus = 1  # the user's own value is kept
    assert "num_gpus=1 per Ray task (hydra.launcher.ray.remote.num_gpus)" in devices.decide(config, 59).line()
    assert threads.launcher_jobs(config, 16, 59) == (2, "ray")


def test_accelerate_launches_are_left_to_accelerate(machine, monkeypatch):
    machine(smi="GPU 0: A\nGPU 1: B\n")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    placed = devices.decide(_cfg(BASIC), 59)
    assert placed.env() is None and placed.line().endswith("accelerate/torchrun places each process of a rerun")


def test_each_job_process_takes_a_free_slot_and_a_dead_process_frees_it(machine, monkeypatch, tmp_path):
    monkeypatch.setenv(devices.ENV, "0,1;2,3;4")
    (tmp_path / devices.LOCK_DIR).mkdir()
    other = open(tmp_path / devices.LOCK_DIR / "slot-0.lock", "a")  # noqa: SIM115
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another live worker holds slot 0
    assert devices.for_job(str(tmp_path)) == {keys.TAG_DEVICES: "2,3"}
    assert os.environ[devices.CVD] == "2,3"  # set before the task function runs
    assert devices.for_job(str(tmp_path)) == {keys.TAG_DEVICES: "2,3"}  # the next job of this worker: the same
    other.close()  # that worker died: its slot is free for the one that replaces it
    monkeypatch.setattr(devices, "_HELD", None)  # a new process
    assert devices.for_job(str(tmp_path)) == {keys.TAG_DEVICES: "0,1"}


def test_under_ray_or_slurm_a_job_records_the_devices_its_launcher_gave_it(machine, monkeypatch, tmp_path):
    monkeypatch.setenv(devices.ENV, devices.LAUNCHER)
    assert devices.for_job(str(tmp_path)) == {}
    monkeypatch.setenv(devices.CVD, "3")
    assert devices.for_job(str(tmp_path)) == {keys.TAG_DEVICES: "3"} and os.environ[devices.CVD] == "3"


@pytest.mark.slow  # by default: tests/test_launchers.py::test_joblib_two_workers_card_once, on the same faked GPUs
def test_a_sweep_places_its_parallel_workers_on_faked_gpus(tmp_path, store):
    from mlflow.tracking import MlflowClient

    proc = run_app(["-m", "seed=0,1,2", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2",
                    f"hydra.sweep.dir={tmp_path}/sweep", "tracking.card_on_multirun_end=false", *SMALL],
                   cwd=tmp_path, env_extra={devices.CVD: "0,1"})  # two GPUs, as far as placement knows
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    reruns = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN]
    line = parent.data.tags[keys.TAG_DEVICES_REASON]
    assert line == "GPUs per rerun: 2 GPUs (0,1, from $CUDA_VISIBLE_DEVICES), 2 jobs at a time: 1 GPU each (0 | 1)"
    assert (proc.stdout + proc.stderr).count(line) == 1  # logged once, by the main process
    by_pid = {}
    for r in reruns:
        by_pid.setdefault(r.data.tags[keys.TAG_PID], set()).add(r.data.tags[keys.TAG_DEVICES])
    assert len(reruns) == 3 and all(len(d) == 1 for d in by_pid.values())  # a worker keeps its GPU
    assert len({d for ds in by_pid.values() for d in ds}) == len(by_pid) <= 2  # no two workers on one GPU
    assert {d for ds in by_pid.values() for d in ds} <= {"0", "1"}


def test_the_gpu_bench_stops_with_one_sentence_without_a_gpu():
    proc = procs.run([sys.executable, str(REPO / "bench" / "bench_gpu.py")], capture_output=True, text=True,
                     env={**os.environ, devices.CVD: ""}, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("bench_gpu: no GPU is visible here") and proc.stderr.count("\n") == 1


def test_the_sweeps_variable_is_put_back_when_the_sweep_ends(machine, monkeypatch):
    monkeypatch.setenv(devices.ENV, "what it was")
    devices.hand_to_jobs(devices.Placement(slots=("0", "1"), reason="r"))
    assert os.environ[devices.ENV] == "0;1"
    devices.restore()
    assert os.environ[devices.ENV] == "what it was"
    monkeypatch.delenv(devices.ENV)
    devices.hand_to_jobs(devices.Placement(reason="r", launcher=True))
    assert os.environ[devices.ENV] == devices.LAUNCHER
    devices.restore()
    assert devices.ENV not in os.environ


def test_the_callback_stops_a_bad_option_with_one_sentence(machine, capsys):
    from recipe_audit.app.seams import SweepEnv

    with pytest.raises(SystemExit) as stop:
        SweepEnv().place_devices(_cfg(JOBLIB, n_jobs=2), None, "many", 1)
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("recipe_audit: error: devices must be auto, none or a list of GPUs such as "
                                       "[0,1], not 'many'.\n")
