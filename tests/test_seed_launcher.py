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
