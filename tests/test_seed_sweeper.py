"""The default sweeper (``hydra/sweeper=seeds``): Hydra's basic sweeper, composing one job per recipe
up front instead of one per seed. Same jobs, order and batches; every composition error still
caught before a rerun starts."""

from __future__ import annotations

import pytest
from helpers.app import SMALL
from helpers.inprocess import run_module_here
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from recipe_audit.app.sweepers import SeedSweeperBase, validate_recipes


class RecordingLoader:
    def __init__(self):
        self.composed = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.composed.append(list(sweep_overrides))


class FakeLauncher:
    def __init__(self):
        self.batches = []

    def launch(self, job_overrides, initial_job_idx):
        self.batches.append((initial_job_idx, [list(j) for j in job_overrides]))
        out = []
        for job in job_overrides:
            ret = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
            ret.return_value = {"calibration": 0.9}
            out.append(ret)
        return out


def _sweeper(tmp_path, max_batch_size=None, params=None):
    sw = SeedSweeperBase(max_batch_size=max_batch_size, params=params)
    sw.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    loader = RecordingLoader()
    sw.hydra_context = type("Ctx", (), {"config_loader": loader})()
    sw.launcher = FakeLauncher()
    return sw, loader


def _basic_batches(arguments, max_batch_size):
    overrides = OverridesParser.create().parse_overrides(arguments)
    return BasicSweeper.split_arguments(overrides, max_batch_size)


def test_one_composition_per_recipe(tmp_path):
    sw, loader = _sweeper(tmp_path)
    batch = [[f"recipe={r}", f"seed={s}"] for r in ("default", "stable") for s in range(5)]
    validate_recipes(sw, batch)
    assert loader.composed == [["recipe=default", "seed=0"], ["recipe=stable", "seed=0"]]


def test_a_seed_that_is_not_an_integer_is_composed(tmp_path):
    sw, loader = _sweeper(tmp_path)
    validate_recipes(sw, [["seed=0"], ["seed=1"], ["seed=x"], ["seed=3"]])
    assert loader.composed == [["seed=0"], ["seed=x"]]  # Hydra reports the bad one as usual


@pytest.mark.parametrize("max_batch_size", [None, 1, 4])
def test_same_jobs_order_and_batches_as_the_basic_sweeper(tmp_path, max_batch_size):
    args = ["seed=range(5)", "recipe=default,stable", "task=sentiment"]
    sw, loader = _sweeper(tmp_path, max_batch_size=max_batch_size, params={"seed": "range(59)"})
    returns = sw.sweep(args)  # the command line's seed= replaces params' seed, as in Hydra
    want = _basic_batches(args, max_batch_size)
    assert [jobs for _, jobs in sw.launcher.batches] == want
    assert [idx for idx, _ in sw.launcher.batches] == [sum(len(b) for b in want[:i]) for i in range(len(want))]
    assert sum(len(r) for r in returns) == 10
    # one composition per recipe and batch
    assert len(loader.composed) == sum(len({job[1] for job in b}) for b in want)
    assert len(loader.composed) == {None: 2, 1: 10, 4: 6}[max_batch_size]
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()


@pytest.mark.parametrize("max_batch_size", [None, 1, 3, 100])
@pytest.mark.parametrize("arguments", [
    [], ["seed=0"], ["seed=range(4)", "recipe=default,stable"], ["seed=1,2", "seed=range(3)", "+x=a,b"],
    ["recipe=glob(*)", "task=sentiment", "audit.taus=[0.6,0.7]"], ["seed=choice(3,1,2)", "~tracking.uri"],
    ["lr=range(0.1,0.3,0.1)", "a.b='x,y'", "seed=sort(3,1,2)"],
])
def test_sweep_batches_are_the_basic_sweepers(arguments, max_batch_size):
    """recipe_audit's sweep_batches (public Override API) makes the jobs and batches of Hydra's
    BasicSweeper.split_arguments (hydra._internal), including a key given twice."""
    from recipe_audit.app.sweepers import sweep_batches

    overrides = OverridesParser.create().parse_overrides(arguments)
    if "recipe=glob(*)" in arguments:  # a glob needs the config loader's options: both refuse alike
        with pytest.raises(Exception) as theirs:
            BasicSweeper.split_arguments(overrides, max_batch_size)
        with pytest.raises(type(theirs.value)):
            sweep_batches(overrides, max_batch_size)
        return
    assert sweep_batches(overrides, max_batch_size) == _basic_batches(arguments, max_batch_size)


def test_an_interval_sweep_is_refused_in_hydras_words():
    from hydra.errors import HydraException

    from recipe_audit.app.sweepers import sweep_batches

    overrides = OverridesParser.create().parse_overrides(["lr=interval(0,1)"])
    with pytest.raises(HydraException) as theirs:
        BasicSweeper.split_arguments(overrides, None)
    with pytest.raises(HydraException) as ours:
        sweep_batches(overrides, None)
    assert str(ours.value) == str(theirs.value)


def test_params_are_swept_when_the_command_line_has_no_seed(tmp_path):
    sw, _ = _sweeper(tmp_path, params={"seed": "range(3)"})
    sw.sweep(["recipe=stable"])
    assert sw.launcher.batches == [(0, [["seed=0", "recipe=stable"], ["seed=1", "recipe=stable"],
                                        ["seed=2", "recipe=stable"]])]


def test_bad_max_batch_size(tmp_path):
    from hydra.errors import HydraException

    with pytest.raises(HydraException, match="max_batch_size"):
        SeedSweeperBase(max_batch_size=0)


def test_composition_error_in_the_second_recipe_stops_before_any_rerun(tmp_path, store):
    from mlflow.tracking import MlflowClient

    proc = run_module_here(["-m", "seed=range(2)", "recipe=default,nope", *SMALL], cwd=tmp_path)  # in this process
    assert proc.returncode != 0 and "nope" in proc.stderr and "Traceback" not in proc.stderr
    exp = MlflowClient(store).get_experiment_by_name("recipe_audit")
    reruns = [] if exp is None else [
        r for r in MlflowClient(store).search_runs([exp.experiment_id])
        if r.data.tags.get("recipe_audit.kind") == "rerun"]
    assert reruns == []
