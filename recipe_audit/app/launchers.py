"""The default launcher of ``python -m recipe_audit -m`` (``hydra/launcher=seeds``, set in
``conf/config.yaml``; ``hydra/launcher=basic`` gives Hydra's own).

Hydra's basic launcher runs the jobs one after another in this process and composes each job's
configuration from the config files again (defaults list, YAML, merges), which costs an order
of magnitude more than deriving it as below (``bench/bench_compose.py`` measures both; the docs'
benchmarks page has the numbers) and is a visible share of a short rerun. The jobs of a seed
sweep differ only in ``seed``, so this
launcher composes the first job of each recipe with Hydra and derives every other seed's
configuration from it, setting what ``load_sweep_config`` would have set differently: the
``seed`` value, the job's task overrides and ``hydra.job.override_dirname``. Such a job is run
by :func:`run_seed_job`, which does what Hydra's ``run_job`` does from pieces of the recipe kept
once (see there); job numbering, logging set-up between jobs and callbacks are as in Hydra's
``BasicLauncher``. A job whose overrides differ from a composed one in anything but a plain
integer ``seed=N`` is composed by Hydra and run by Hydra's ``run_job``.
``tests/test_seed_launcher.py`` checks derived configurations equal Hydra's composition, and that
both runners write and show the same.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path

from hydra import version
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import (
    JobReturn,
    JobRuntime,
    JobStatus,
    _flush_loggers,
    configure_log,
    env_override,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)

SEED = "seed"


@cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


@lru_cache(maxsize=4096)  # a sweep asks for each of its seeds' lines a few times
def plain_int_seed(line: str) -> int | None:
    """The integer of a plain ``seed=N`` override; None for anything else (``+seed=``, a sweep, a
    value that is not an integer, a line Hydra cannot parse: Hydra reports it when it composes)."""
    if line.split("=", 1)[0] != SEED:
        return None
    try:
        parsed = _parser().parse_override(line)
    except Exception:
        return None
    value = None if parsed.is_sweep_override() else parsed.value()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SeedLauncherBase(Launcher):
    """Hydra's basic launcher; one composition per recipe, the other seeds derived from it, each
    job run by :func:`run_seed_job` (Hydra's ``run_job`` for a job that is not a seed's)."""

    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function = None
        self.hydra_context = None
        self._recipes: dict[tuple[str, ...], Recipe] = {}

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        runs: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            runs.append(self.run(idx, overrides, job_id=idx))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs

    def run(self, idx: int, overrides: Sequence[str], job_id) -> JobReturn:
        """Run job ``idx``: a seed's job with :func:`run_seed_job`, any other with Hydra's ``run_job``
        (both set ``HydraConfig``)."""
        overrides = list(overrides)
        key = self._key(overrides)
        sweep_config = self._job_config(overrides, key)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = job_id
            sweep_config.hydra.job.num = idx
        recipe = None if key is None else self._recipes.get(key)
        if recipe is None or (sweep_config.hydra.job.chdir is None and not version.base_at_least("1.2")):
            return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                           job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        return run_seed_job(recipe, sweep_config, overrides[recipe.at], job_id, idx, hydra_context=self.hydra_context,
                            task_function=self.task_function)

    def job_config(self, overrides: list[str]) -> DictConfig:
        """The job's composed configuration, as ``config_loader.load_sweep_config`` returns it."""
        return self._job_config(overrides, self._key(overrides))

    def _job_config(self, overrides: list[str], key: tuple[str, ...] | None) -> DictConfig:
        """:meth:`job_config`, the job's recipe (:meth:`_key`) given."""
        if key is not None and key in self._recipes:
            return self._recipes[key].job_config(overrides[self._recipes[key].at])
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        if key is not None:  # kept as bytes: run_job writes into the config it is given
            self._recipes[key] = Recipe(cfg, overrides, self._seed_position(overrides))
        return cfg

    def _key(self, overrides: list[str]) -> tuple[str, ...] | None:
        """The job's recipe: its overrides but the seed's, and where the seed's is (None: not a
        seed's job)."""
        at = self._seed_position(overrides)
        return None if at is None else tuple(overrides[:at] + overrides[at + 1:]) + (f"@{at}",)

    @staticmethod
    def _seed_position(overrides: list[str]) -> int | None:
        """Where the job's one plain ``seed=<integer>`` override is (None: not such a job)."""
        at = [i for i, o in enumerate(overrides) if o.split("=", 1)[0] == SEED]
        return at[0] if len(at) == 1 and plain_int_seed(overrides[at[0]]) is not None else None


class Recipe:
    """The pieces of one recipe's jobs, kept from its first job as Hydra composed it (before the
    job ran): the composed configuration, the task's configuration (the composed one without its
    ``hydra`` node) and the Hydra configuration (``HydraConfig``'s masked copy of the ``hydra``
    node), each pickled once, so that a seed's copy is one ``pickle.loads`` (a fraction of a
    ``copy.deepcopy``: no memo, no generic copy protocol) followed by the seed's changes. A pickled
    configuration loads as it was (OmegaConf's own ``__getstate__``/``__setstate__``: the nodes,
    their types, flags and the resolvers' cache; Hydra's joblib and submitit launchers hand each
    job its configuration so); ``tests/test_seed_launcher.py`` checks every node against Hydra's."""

    def __init__(self, composed: DictConfig, overrides: list[str], at: int) -> None:
        self.at = at
        self.composed = pickle.dumps(composed)
        task = pickle.loads(self.composed)
        with read_write(task), open_dict(task):
            del task["hydra"]
        self.task = pickle.dumps(task)
        view = pickle.loads(self.composed)
        OmegaConf.set_readonly(view.hydra, True)  # as HydraConfig.set_config leaves the job's hydra node
        self.hydra = pickle.dumps(OmegaConf.masked_copy(view, "hydra"))
        task_overrides = list(composed.hydra.overrides.task)
        self.seed_in_task = task_overrides.index(overrides[at])
        dirname = composed.hydra.job.config.override_dirname
        self.kv_sep, self.item_sep = dirname.kv_sep, dirname.item_sep
        exclude = set(dirname.exclude_keys)
        # the other overrides' part of override_dirname, parsed once (Hydra parses each line alone)
        parsed = _parser().parse_overrides(task_overrides)
        self.other_lines = dirname_lines([o for i, o in enumerate(parsed) if i != self.seed_in_task], exclude)
        self.seed_in_dirname = SEED not in exclude
        #: config.yaml's and hydra.yaml's texts with marks (:meth:`yaml_files`): [] until the first
        #: job, None where the whole documents are rendered
        self.marked: list[tuple[list[str], list[int]]] | None = []

    def job_config(self, seed_line: str) -> DictConfig:
        """The composed configuration with ``seed_line``'s seed: the seed value, the task
        overrides and ``hydra.job.override_dirname``, as Hydra composes them."""
        cfg = pickle.loads(self.composed)
        cfg[SEED] = plain_int_seed(seed_line)
        self.set_overrides(cfg, seed_line, self.dirname(seed_line))
        return cfg

    def dirname(self, seed_line: str) -> str:
        """``hydra.job.override_dirname`` of the job with ``seed_line``."""
        lines = self.other_lines + [seed_line] if self.seed_in_dirname else self.other_lines
        return join_dirname(lines, kv_sep=self.kv_sep, item_sep=self.item_sep)

    def set_overrides(self, root: DictConfig, seed_line: str, dirname: str) -> None:
        """The job's ``hydra.overrides.task`` and ``hydra.job.override_dirname`` in ``root.hydra``."""
        root.hydra.overrides.task[self.seed_in_task] = seed_line
        root.hydra.job.override_dirname = dirname

    def task_config(self, seed: int) -> DictConfig:
        """The job's task configuration (the composed one without its ``hydra`` node)."""
        task_cfg = pickle.loads(self.task)
        task_cfg[SEED] = seed
        return task_cfg

    def hydra_config(self, seed_line: str, dirname: str, job_id, job_num, output_dir: str | None) -> DictConfig:
        """The job's Hydra configuration as ``HydraConfig`` holds it (a masked copy of the read-only
        ``hydra`` node), with ``hydra.runtime.output_dir`` unless ``output_dir`` is None."""
        hydra_cfg = pickle.loads(self.hydra)
        with read_write(hydra_cfg.hydra), open_dict(hydra_cfg):
            self.set_overrides(hydra_cfg, seed_line, dirname)
            hydra_cfg.hydra.job.id = job_id
            hydra_cfg.hydra.job.num = job_num
            if output_dir is not None:
                with open_dict(hydra_cfg.hydra.runtime):
                    hydra_cfg.hydra.runtime.output_dir = output_dir
        return hydra_cfg

    def varying(self, task_cfg: DictConfig, hydra_cfg: DictConfig) -> tuple[list, list]:
        """The values :meth:`task_config` and :meth:`hydra_config` set, as the configurations hold them (a node converts what
        it is given: ``hydra.job.id`` is a string), in ``config.yaml`` and in ``hydra.yaml``."""
        job = hydra_cfg.hydra.job
        return [task_cfg[SEED]], [hydra_cfg.hydra.overrides.task[self.seed_in_task], job.override_dirname, job.id,
                                  job.num, hydra_cfg.hydra.runtime.output_dir]

    def yaml_files(self, task_cfg: DictConfig, hydra_cfg: DictConfig, job_id, job_num) -> tuple[str, str]:
        """``config.yaml`` and ``hydra.yaml`` of a job: ``OmegaConf.to_yaml`` of ``task_cfg`` and
        ``hydra_cfg``, which differ between the recipe's jobs only in :meth:`varying`'s values.

        The recipe's two documents are rendered once, each of those values replaced by a mark (a
        value of its type whose text occurs nowhere else in the document), and a job's are those
        texts with each mark's text replaced by its value's (cut once at the marks, so that a
        value's text is never searched). That is the job's rendering when every
        value is written as one token (YAML's plain or single-quoted style, no space, no line
        break: a mapping's value or a sequence's item in block style is then written as it would
        be alone, and nothing around it changes with its length); a value that is not is rendered
        with the whole document. The first job of the recipe checks the marked rendering against
        the whole one, and renders in whole every job after it if they ever differ."""
        if self.marked is None:
            return OmegaConf.to_yaml(task_cfg), OmegaConf.to_yaml(hydra_cfg)
        if not self.marked:  # the first job: mark, and check against the whole rendering
            whole = OmegaConf.to_yaml(task_cfg), OmegaConf.to_yaml(hydra_cfg)
            self.marked = self._marked(job_id, job_num)
            if self.marked is not None and self._render(task_cfg, hydra_cfg) != whole:
                self.marked = None
            return whole
        return self._render(task_cfg, hydra_cfg) or (OmegaConf.to_yaml(task_cfg), OmegaConf.to_yaml(hydra_cfg))

    def _render(self, task_cfg: DictConfig, hydra_cfg: DictConfig) -> tuple[str, str] | None:
        texts = []
        for (pieces, order), values in zip(self.marked, self.varying(task_cfg, hydra_cfg), strict=True):
            tokens = yaml_tokens(values)
            if tokens is None:
                return None
            texts.append("".join(p + tokens[i] for p, i in zip(pieces, order, strict=False)) + pieces[-1])
        return texts[0], texts[1]

    def _marked(self, job_id, job_num) -> list[tuple[list[str], list[int]]] | None:
        """Each document cut at the marks put in place of :meth:`varying`'s values: the text around
        them and which value comes at each cut (None: a mark that is not one token occurring once)."""
        def mark(like, n: int):
            return _MARK_INT + n if isinstance(like, int) else f"recipe_audit_mark_{n}_{_MARK_INT}"

        try:
            task_cfg = self.task_config(mark(0, 0))
            hydra_cfg = self.hydra_config(mark("", 1), mark("", 2), mark(job_id, 3), mark(job_num, 4), mark("", 5))
        except Exception:  # a node that does not take a mark of the value's type
            return None
        marked = []
        for cfg, values in zip((task_cfg, hydra_cfg), self.varying(task_cfg, hydra_cfg), strict=True):
            text, tokens = OmegaConf.to_yaml(cfg), yaml_tokens(values)
            if tokens is None or any(text.count(t) != 1 for t in tokens):
                return None
            cuts = sorted((text.index(t), i) for i, t in enumerate(tokens))
            pieces, at = [], 0
            for start, i in cuts:
                if start < at:  # marks that overlap
                    return None
                pieces.append(text[at:start])
                at = start + len(tokens[i])
            marked.append((pieces + [text[at:]], [i for _, i in cuts]))
        return marked


_MARK_INT = 7_301_946_285_531  # an integer no configuration holds (checked: each mark occurs once)


def yaml_tokens(values: Sequence) -> list[str] | None:
    """Each value's text in ``OmegaConf.to_yaml``'s rendering as a mapping's value (one rendering
    of them all), if each is one token (plain or single-quoted style, no whitespace); else None."""
    lines = OmegaConf.to_yaml({f"k{i}": v for i, v in enumerate(values)}).split("\n")
    tokens = [line.partition(": ")[2] for line in lines[:-1]]
    if len(lines) != len(values) + 1 or lines[-1] or any(
            line != f"k{i}: {t}" or not t or t[0] == '"' or any(c.isspace() for c in t)
            for i, (line, t) in enumerate(zip(lines, tokens, strict=False))):
        return None
    return tokens


def run_seed_job(recipe: Recipe, config: DictConfig, seed_line: str, job_id, job_num: int, *, hydra_context,
                 task_function) -> JobReturn:
    """Hydra's ``run_job`` (``hydra.core.utils``, Hydra 1.3) for a job of ``recipe`` with ``seed_line``,
    whose ``config`` is :meth:`Recipe.job_config`'s with ``hydra.job.id`` = ``job_id`` and
    ``hydra.job.num`` = ``job_num``, as the seed launchers run it (output in ``hydra.sweep.dir``/
    ``hydra.sweep.subdir``, logging configured), with less work and the same result:

    * ``HydraConfig`` is set once, to the recipe's pickled Hydra configuration with the job's values
      (``HydraConfig.set_config`` makes a masked copy of the whole ``hydra`` node, and ``run_job``
      sets it twice: again once ``hydra.runtime.output_dir`` is known): the output directory is
      written into the job's configuration and into the ``HydraConfig`` copy alike;
    * the task's configuration and ``JobReturn.hydra_cfg`` are the recipe's pickled pieces with the
      job's values (``run_job`` deep-copies the whole configuration and the ``hydra`` node), the
      task's with the resolvers' cache the job's configuration has at that moment, as a deep copy
      would carry it;
    * ``config.yaml`` and ``hydra.yaml`` are written from the recipe's rendering
      (:meth:`Recipe.yaml_files`), byte for byte what ``OmegaConf.to_yaml`` writes;
    * everything else is ``run_job``'s, in its order: the output directory made, ``hydra.job.chdir``,
      the job's logging (``configure_log`` with ``hydra.job_logging``, each job's own ``.log`` file),
      the three ``.hydra/`` files unless ``hydra.output_subdir`` is null, ``hydra.job.env_set`` around
      the callbacks' ``on_job_start`` and the task, a raising task recorded as FAILED with its
      exception, the task name, the loggers flushed, ``on_job_end``, and ``HydraConfig`` and the
      working directory put back.

    Hydra's own ``run_job`` runs every job this does not cover: a job whose overrides are not a
    recipe's with one plain integer ``seed=N`` (composed by Hydra, no recipe), and a job whose
    ``hydra.job.chdir`` is unset under a version base before 1.2 (``run_job`` warns and changes
    directory). ``tests/test_seed_launcher.py`` compares both on the same jobs: the ``.hydra/``
    files byte for byte, the ``JobReturn``, and every node of what the task and the callbacks see."""
    callbacks = hydra_context.callbacks
    old_cwd = os.getcwd()
    orig_hydra_cfg = HydraConfig.instance().cfg
    dirname = str(config.hydra.job.override_dirname)  # the job's, as Recipe.job_config or Hydra set it
    # HydraConfig.set_config: the job's hydra node read-only, HydraConfig a masked copy of it whose
    # parent is the job's configuration (so that ${...} in the hydra node reach the task's keys)
    OmegaConf.set_readonly(config.hydra, True)
    visible = recipe.hydra_config(seed_line, dirname, job_id, job_num, None)
    visible.hydra._set_parent(config)
    HydraConfig.instance().cfg = visible
    output_dir = os.path.join(str(OmegaConf.select(config, "hydra.sweep.dir")),
                              str(OmegaConf.select(config, "hydra.sweep.subdir")))
    for runtime in (config.hydra.runtime, visible.hydra.runtime):
        with read_write(runtime), open_dict(runtime):
            runtime.output_dir = os.path.abspath(output_dir)
    chdir = False
    try:
        ret = JobReturn()
        task_cfg = recipe.task_config(plain_int_seed(seed_line))
        OmegaConf.copy_cache(from_config=config, to_config=task_cfg)
        hydra_cfg = recipe.hydra_config(seed_line, dirname, job_id, job_num, os.path.abspath(output_dir))
        ret.cfg = task_cfg
        ret.hydra_cfg = hydra_cfg
        ret.overrides = OmegaConf.to_container(config.hydra.overrides.task)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        chdir = bool(hydra_cfg.hydra.job.chdir)
        if chdir:
            os.chdir(output_dir)
            ret.working_dir = output_dir
        else:
            ret.working_dir = os.getcwd()
        configure_log(config.hydra.job_logging, config.hydra.verbose)
        if config.hydra.output_subdir is not None:
            hydra_output = Path(config.hydra.runtime.output_dir) / Path(config.hydra.output_subdir)
            hydra_output.mkdir(parents=True, exist_ok=True)
            config_yaml, hydra_yaml = recipe.yaml_files(task_cfg, hydra_cfg, job_id, job_num)
            for name, text in (("config.yaml", config_yaml), ("hydra.yaml", hydra_yaml),
                               ("overrides.yaml", OmegaConf.to_yaml(config.hydra.overrides.task))):
                with open(hydra_output / name, "w", encoding="utf-8") as file:
                    file.write(text)
        with env_override(hydra_cfg.hydra.job.env_set):
            callbacks.on_job_start(config=config, task_function=task_function)
            try:
                ret.return_value = task_function(task_cfg)
                ret.status = JobStatus.COMPLETED
            except Exception as e:
                ret.return_value = e
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=config, job_return=ret)
        return ret
    finally:
        HydraConfig.instance().cfg = orig_hydra_cfg
        if chdir:
            os.chdir(old_cwd)


def override_dirname(overrides: Sequence[Override], *, kv_sep: str, item_sep: str,
                     exclude_keys: Sequence[str]) -> str:
    """``hydra.job.override_dirname`` as Hydra's config loader writes it (its own function is in
    ``hydra._internal``): the overrides whose key is not excluded, as typed, sorted, joined by
    ``item_sep``, each ``=`` written as ``kv_sep``."""
    return join_dirname(dirname_lines(overrides, exclude_keys), kv_sep=kv_sep,
                        item_sep=item_sep)


def dirname_lines(overrides: Sequence[Override], exclude_keys) -> list[str]:
    """The lines of ``overrides`` that ``hydra.job.override_dirname`` holds: as typed, those whose
    key is not in ``exclude_keys``."""
    return [o.input_line for o in overrides if o.key_or_group not in exclude_keys]


def join_dirname(lines: Sequence[str], *, kv_sep: str, item_sep: str) -> str:
    """:func:`override_dirname` of the overrides ``lines`` (their keys not excluded)."""
    return item_sep.join(sorted(lines)).replace("=", kv_sep)


# ----------------------------------------------------------------------------------------------
# Parallel workers (hydra/launcher=local_parallel: Hydra's joblib launcher)
# ----------------------------------------------------------------------------------------------

_WORKER: tuple[str, SeedLauncherBase] | None = None  # per worker process: (sweep dir, its launcher)


def execute_job_in_worker(idx: int, overrides: Sequence[str], hydra_context, config: DictConfig, task_function,
                          singleton_state) -> JobReturn:
    """One job in a joblib worker process: ``hydra_joblib_launcher._core.execute_job``, except that the
    job's configuration comes from a :class:`SeedLauncherBase` the worker keeps for the sweep, so each
    worker composes one job per recipe and derives the other seeds'."""
    from hydra.core.singleton import Singleton

    global _WORKER
    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_dir = str(config.hydra.sweep.dir)
    if _WORKER is None or _WORKER[0] != sweep_dir:
        launcher = SeedLauncherBase()
        launcher.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        _WORKER = (sweep_dir, launcher)
    return _WORKER[1].run(idx, overrides, job_id=f"{config.hydra.job.name}_{idx}")  # Hydra's joblib job id
