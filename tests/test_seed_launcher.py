"""The default launcher (``hydra/launcher=seeds``) derives a seed's job configuration from its
recipe's first composed job: the derived configuration must be exactly what Hydra composes."""

from __future__ import annotations

import pytest
from helpers import procs
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from recipe_audit.app import config_dir
from recipe_audit.app.launchers import SeedLauncherBase
from recipe_audit.app.schema import register_configs


class CountingLoader:
    """Hydra's config loader, counting the compositions the launcher asks for."""

    def __init__(self, loader):
        self.loader = loader
        self.composed = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.composed.append(list(sweep_overrides))
        return self.loader.load_sweep_config(master_config, sweep_overrides)


@pytest.fixture
def hydra_loader(tmp_path):
    register_configs()  # the structured-config schemas, as the app does
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(
            "config", overrides=[f"hydra.sweep.dir={tmp_path}", "hydra.job.config.override_dirname.exclude_keys=[task]"],
            run_mode=RunMode.MULTIRUN)
        yield loader, master
    GlobalHydra.instance().clear()


def _launcher(loader, master):
    launcher = SeedLauncherBase()
    counting = CountingLoader(loader)
    launcher.setup(hydra_context=type("Ctx", (), {"config_loader": counting})(), task_function=None,
                   config=master)
    return launcher, counting


JOBS = [[f"seed={s}", f"recipe={r}", "task=entailment", "audit.taus=[0.6,0.7]"]
        for s in (0, 1, 7, 58) for r in ("default", "stable")]


def test_derived_configurations_equal_hydras(hydra_loader):
    loader, master = hydra_loader
    launcher, counting = _launcher(loader, master)
    for job in JOBS:
        got = launcher.job_config(list(job))
        want = loader.load_sweep_config(master, list(job))
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want), job
        assert got.seed == int(job[0].split("=")[1]) and isinstance(got.seed, int)
        assert OmegaConf.is_struct(got) == OmegaConf.is_struct(want)
        assert OmegaConf.get_type(got) is OmegaConf.get_type(want)
    # Hydra composed the first job of each recipe; the six others were derived
    assert counting.composed == [JOBS[0], JOBS[1]]
    # the override_dirname follows the seed (with its exclude_keys honoured)
    assert launcher.job_config(["seed=9", "recipe=stable", "task=entailment", "audit.taus=[0.6,0.7]"]) \
        .hydra.job.override_dirname == "audit.taus=[0.6,0.7],recipe=stable,seed=9"


def test_a_derived_configuration_is_not_shared(hydra_loader):
    """run_job writes into the configuration it is given: the template must stay as composed."""
    loader, master = hydra_loader
    launcher, _ = _launcher(loader, master)
    first = launcher.job_config(["seed=0"])
    first.hydra.runtime.output_dir = "/somewhere"
    second = launcher.job_config(["seed=1"])
    assert OmegaConf.is_missing(second.hydra.runtime, "output_dir")
    assert OmegaConf.to_yaml(second) == OmegaConf.to_yaml(loader.load_sweep_config(master, ["seed=1"]))


def test_the_sweepers_compositions_are_the_launchers(hydra_loader):
    """The seed sweeper composes one job per recipe before the batch runs; the seed launcher keeps
    those compositions, so a recipe is composed once a sweep (not again when its first job runs)."""
    from recipe_audit.app.sweepers import validate_recipes

    loader, master = hydra_loader
    launcher, counting = _launcher(loader, master)
    sweeper = type("Sweeper", (), {"launcher": launcher, "config": master, "hydra_context": launcher.hydra_context})()
    validate_recipes(sweeper, JOBS)
    assert counting.composed == [JOBS[0], JOBS[1]]
    for job in JOBS:
        got = launcher.job_config(list(job))
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(loader.load_sweep_config(master, list(job))), job
    assert counting.composed == [JOBS[0], JOBS[1]]
    with pytest.raises(Exception, match="seed=x"):  # a bad seed: composed, and Hydra's error raised, as before
        validate_recipes(sweeper, [*JOBS, ["seed=x", *JOBS[0][1:]]])


@pytest.mark.parametrize("job", [["seed=x"], ["+seed=3"], ["seed=3", "seed=4"], ["seed=true"], ["seed=1.5"]])
def test_anything_but_a_plain_integer_seed_is_composed_by_hydra(hydra_loader, job):
    loader, master = hydra_loader
    launcher, counting = _launcher(loader, master)
    launcher.job_config(["seed=0"])
    try:
        launcher.job_config(list(job))
    except Exception:  # Hydra's own error for a bad seed, as with its basic launcher
        pass
    assert counting.composed == [["seed=0"], job]


def test_the_projects_plugins_are_registered_without_a_plugin_scan(tmp_path):
    """An editable install hides hydra_plugins/ from Hydra's scan: the app registers its sweepers and
    launchers itself, so every preset in recipe_audit/app/hydra_conf/hydra/ resolves from any directory. Checked in a
    process started outside the checkout (where the scan sees only installed plugins)."""
    import json
    import os
    import sys

    code = """if True:
        import json
        from hydra.core.plugins import Plugins
        from hydra.plugins.launcher import Launcher
        from hydra.plugins.sweeper import Sweeper
        from recipe_audit.app.schema import register_configs
        register_configs()
        print(json.dumps(sorted(c.__name__ for c in Plugins.instance().discover(Launcher))
                         + sorted(c.__name__ for c in Plugins.instance().discover(Sweeper))))
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = procs.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                    timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    names = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {"SeedSweeper", "CurtailingSweeper", "SeedLauncher"} <= names
    for optional, wanted in (("hydra_plugins.hydra_joblib_launcher", {"SeedJoblibLauncher"}),
                             ("hydra_plugins.hydra_submitit_launcher",
                              {"TolerantLocalLauncher", "TolerantSlurmLauncher"})):
        try:
            __import__(optional)
        except ImportError:
            continue
        assert wanted <= names, wanted - names


@pytest.mark.parametrize(("kv_sep", "item_sep", "exclude"), [("=", ",", []), (":", "__", ["seed"]),
                                                             ("-", "/", ["recipe", "hydra.x"])])
def test_override_dirname_is_hydras(kv_sep, item_sep, exclude):
    """recipe_audit's override_dirname writes what Hydra's get_overrides_dirname (hydra._internal) does."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from recipe_audit.app.launchers import override_dirname

    overrides = OverridesParser.create().parse_overrides(
        ["seed=3", "recipe=stable", "audit.taus=[0.6,0.7]", "+x.y='a=b'", "~tracking.uri", "hydra.x=1"])
    assert override_dirname(overrides, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude) == \
        get_overrides_dirname(overrides=overrides, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude)


# ----------------------------------------------------------------------------------------------
# The seed launcher's job runner (run_seed_job) against Hydra's run_job, on the same jobs
# ----------------------------------------------------------------------------------------------


def _tree(node, path: str = "hydra-only") -> list:
    """Every node of ``node``: its path, class, metadata (types, flags, key, resolvers' cache), value,
    and whether its parent is the container that holds it."""
    from omegaconf import DictConfig, ListConfig

    out = [(path, type(node).__name__, repr(node._metadata))]
    if isinstance(node, (DictConfig, ListConfig)) and not (node._is_none() or node._is_missing()
                                                           or node._is_interpolation()):
        keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
        for key in keys:
            child = node._get_node(key)
            out.append((f"{path}.{key}", "parent is its container", child._get_parent() is node))
            out += _tree(child, f"{path}.{key}")
    else:
        out.append((path, "value", repr(node._value())))
    return out


class Recorder:
    """Hydra's callbacks' place: what on_job_start and on_job_end see, and what the task sees."""

    def __init__(self):
        self.seen = []

    def _env(self, where, config=None):
        import logging
        import os

        from hydra.core.hydra_config import HydraConfig

        hydra_only = HydraConfig.instance().cfg
        files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        self.seen.append((where, os.getcwd(), os.environ.get("RA_LEAN_TEST"), files, _tree(hydra_only),
                          hydra_only.hydra._get_parent() is config if config is not None else None,
                          None if config is None else _tree(config, "config")))

    def on_job_start(self, config, task_function):
        self._env("on_job_start", config)

    def on_job_end(self, config, job_return):
        self._env("on_job_end", config)
        self.seen.append(("job_return", *_job_return(job_return)))

    def task(self, cfg):
        import logging

        self._env("task")
        self.seen.append(("task config", _tree(cfg, "task")))
        logging.getLogger("lean_test").info("the task of seed %s", cfg.seed)
        if cfg.seed == 7:
            raise ValueError("seed 7 fails")
        return cfg.seed * 0.5


def _job_return(ret) -> tuple:
    return (ret.overrides, ret.working_dir, ret.task_name, ret.status, repr(ret._return_value),
            _tree(ret.cfg, "cfg"), _tree(ret.hydra_cfg))


def _outputs(job_dir) -> dict:
    """The job directory's files; the log's timestamps left out."""
    import re
    from pathlib import Path

    return {str(p.relative_to(job_dir)): re.sub(r"^\[[^]]*\]", "[time]", p.read_text(), flags=re.M)
            for p in sorted(Path(job_dir).rglob("*")) if p.is_file()}


@pytest.fixture
def restored_process():
    """The working directory, environment and root logger as they were (the jobs configure logging)."""
    import logging
    import os

    root = logging.getLogger()
    saved = (os.getcwd(), dict(os.environ), root.level, root.handlers[:])
    yield
    for handler in root.handlers:
        if handler not in saved[3]:
            handler.close()
    os.chdir(saved[0])
    os.environ.clear()
    os.environ.update(saved[1])
    root.setLevel(saved[2])
    root.handlers[:] = saved[3]


@pytest.mark.parametrize("extra", [
    [],
    ["hydra.job.chdir=true", "+hydra.job.env_set.RA_LEAN_TEST=on"],
    ["hydra.output_subdir=null", "hydra.sweep.subdir=${hydra:job.override_dirname}_${seed}"],
], ids=["default", "chdir-env_set", "no-output_subdir-subdir_interpolated"])
def test_seed_jobs_run_as_hydras_run_job_runs_them(tmp_path, restored_process, extra):
    """Each job run by Hydra's run_job (composed by Hydra) and by the seed launcher (composed once per
    recipe, the other seeds derived, run by run_seed_job), one after the other in the same directory:
    the same files (.hydra/ byte for byte, the job's log), JobReturn, and the same configuration,
    HydraConfig, working directory, environment and log file for the callbacks and the task; a
    raising task (seed 7) recorded FAILED by both."""
    import shutil

    from hydra.core.utils import run_job, setup_globals
    from hydra.types import HydraContext

    register_configs()
    GlobalHydra.instance().clear()
    recipes = [["recipe=default", "audit.taus=[0.6,0.7]"], ["recipe=stable", "audit.taus=[0.6,0.7]"],
               ["+note='two words'"]]  # a space in override_dirname: hydra.yaml rendered whole
    jobs = [[f"seed={s}", *r] for s in (0, 3, 7) for r in recipes]
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides=[f"hydra.sweep.dir={tmp_path / 'sweep'}", *extra],
                                           run_mode=RunMode.MULTIRUN)
        setup_globals()
        hydras, leans = Recorder(), Recorder()
        launcher = SeedLauncherBase()
        launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=leans), task_function=leans.task,
                       config=master)
        for idx, job in enumerate(jobs):
            cfg = loader.load_sweep_config(master, list(job))
            cfg.hydra.job.id, cfg.hydra.job.num = idx, idx
            want = run_job(hydra_context=HydraContext(config_loader=loader, callbacks=hydras), task_function=hydras.task,
                           config=cfg, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            job_dir = want.hydra_cfg.hydra.runtime.output_dir
            files = _outputs(job_dir)
            shutil.rmtree(job_dir)
            got = launcher.run(idx, list(job), job_id=idx)
            assert got.hydra_cfg.hydra.runtime.output_dir == job_dir
            assert _outputs(job_dir) == files, job
            assert _job_return(got) == _job_return(want), job
            assert hydras.seen == leans.seen, job
            assert len(files) == (1 if "hydra.output_subdir=null" in extra else 4), files
        assert [w[0] for w in leans.seen].count("job_return") == len(jobs)
        # the recipes' marked renderings were used where each value is one token
        assert [bool(r.marked) for r in launcher._recipes.values()] == \
            ([False] * 3 if "hydra.output_subdir=null" in extra else [True, True, False])
    GlobalHydra.instance().clear()
