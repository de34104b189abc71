"""The recipe_audit Hydra callback: a seed sweep of any Hydra app becomes tracked reruns and a card.

    python train.py -m 'seed=range(59)' hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=eval_accuracy

When the multirun starts (main process), the callback checks its options, the seed key and the
tracking store, and opens the sweep's parent run. For every job, in the job's own process (so
every launcher works: basic, joblib, submitit, Ray), it opens the rerun's MLflow run nested under
the parent, tags it (seed, recipe identity, sweep, host, pid) and points MLflow's own variables at
it (``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME``,
``MLFLOW_TRACKING_URI``), so whatever the task function logs the usual way (``mlflow.start_run()``,
``mlflow.autolog()``, the Hugging Face ``Trainer``'s MLflowCallback) lands in that run; Lightning's
``MLFlowLogger``, which reads neither ``MLFLOW_RUN_ID`` nor, given a store, ``MLFLOW_TRACKING_URI``,
is pointed at the run while the job runs (:mod:`recipe_audit.app.mlflow_loggers`). When the job ends it records the truth whatever the task did
to the run (FAILED with the error's first line when the task raised, FINISHED otherwise), logs a
number or dict of numbers the task returned, the flattened config as params (keys the task logged
itself are left as they are) and restores the environment. When the multirun ends it computes
the recipe card per metric from the tracking store.

A task that raises is a rerun that failed, not the end of the sweep: the callback hands Hydra's
sweeper a completed job (Hydra's basic sweeper would re-raise the error after the batch and never
reach the end of the multirun, so neither the other seeds nor the card would happen), and the
process exits with status 1 after the card when any rerun failed.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from recipe_audit.keys import KIND_ACCEPTANCE_CELL, KIND_RERUN, TAG_HIGHER_IS_BETTER
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS, DEFAULT_TAUS

log = logging.getLogger("recipe_audit")

# MLflow's own variables, read by mlflow.start_run, MlflowClient, the HF Trainer and Lightning
ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
ENV_EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
_ENV_KEYS = (ENV_RUN_ID, ENV_EXPERIMENT_ID, ENV_EXPERIMENT_NAME, ENV_TRACKING_URI)


class OptionError(ValueError):
    """The callback's options or the app's config cannot make a card (one sentence)."""


def _stop(message: str, code: int = 2) -> None:
    """One sentence on stderr and a non-zero exit. ``SystemExit`` passes through Hydra's callback
    dispatcher, which turns any ``Exception`` of a callback into a warning and goes on."""
    from recipe_audit.store.uris import mask_in_text

    print(f"recipe_audit: error: {mask_in_text(message)}", file=sys.stderr)
    sys.exit(code)


def _rank() -> int:
    """This process's rank under ``accelerate launch`` / ``torchrun`` (0 when alone)."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Rerun:
    """The rerun a job is logging into (what the built-in trainer reads through :func:`current_rerun`)."""

    run_id: str
    artifact_uri: str
    tracking_uri: str
    experiment_id: str
    experiment_name: str
    seed: int
    recipe_id: str
    sweep_id: str | None
    # tags a task function in this process adds; written with the rerun's closing batch
    tags: dict[str, str] = field(default_factory=dict, compare=False)


_CURRENT: Rerun | None = None


def current_rerun() -> Rerun | None:
    """The rerun of the job running in this process, if the recipe_audit callback opened one."""
    return _CURRENT


@dataclass
class _Job:
    rerun: Rerun
    params: dict[str, str]
    saved_env: dict[str, str | None]
    label: str
    started: float = field(default_factory=time.monotonic)
    raw_config: Any = None  # the job's config as written (where it builds an MLFlowLogger)
    restore_loggers: Any = None  # puts Lightning's MLFlowLogger back as it was (the job's end)


class RecipeAuditCallback(Callback):
    """See the module docstring; options are :class:`recipe_audit.app.schema.RecipeAuditCallbackConfig`."""

    run_kind = KIND_RERUN  # the recipe_audit.kind of the run each job opens
    # how the exit sentence names the jobs that did not finish, and what the card made of them
    failed_noun = "rerun(s)"
    failed_consequence = "the card counts them as failures"

    def __init__(self, metric: Any, higher_is_better: bool = True, taus: Sequence[float] = DEFAULT_TAUS,
                 eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA, seed_key: str = "seed",
                 identity_exclude: Sequence[str] = (), experiment_name: str | None = None,
                 tracking_uri: str | None = None, unfinished: str = "fail", resume: bool = False,
                 card_on_multirun_end: bool = True, threads: Any = None, devices: Any = "auto",
                 reruns_per_gpu: Any = 1, _target_: str | None = None) -> None:
        metrics = [metric] if isinstance(metric, str) else list(metric or [])
        self.metrics = [str(m) for m in metrics]
        self.higher_is_better = bool(higher_is_better)
        self.taus = tuple(taus or ())
        self.eps, self.delta = eps, delta
        self.seed_key = str(seed_key)
        self.identity_exclude = tuple(str(k) for k in identity_exclude or ())
        self.experiment_name = experiment_name
        self.tracking_uri = tracking_uri
        self.unfinished = unfinished
        self.resume = bool(resume)
        self.card_on_multirun_end = bool(card_on_multirun_end)
        self.threads = threads  # None: the app's own business; "auto" or a number: see _decide_threads
        self._threads_env: tuple[bool, str | None] | None = None  # $RECIPE_AUDIT_THREADS before the sweep
        self.devices, self.reruns_per_gpu = devices, reruns_per_gpu  # GPUs per rerun: see _place_devices
        self.sweep = None
        self._job: _Job | None = None
        self._uri: str | None = None
        self._experiment: str | None = None
        self._progress: _Progress | None = None
        self._const: dict[str, Any] | None = None
        self._parent_seen = False  # this process checked the sweep's parent run is in its store

    # -- options ----------------------------------------------------------------------------

    def card_options(self, config: DictConfig | None = None):
        """The card's options (one constructor for the sweep's card and the curtailing sweeper).
        A bad value is named as the user set it: ``audit.eps`` in the built-in app, whose callback
        options interpolate its ``audit`` section, ``hydra.callbacks.recipe_audit.eps`` elsewhere."""
        from recipe_audit.cards.model import CardError, CardOptions

        def name(option: str) -> str:
            return _option_name(config, option)

        if not self.metrics or not all(self.metrics):
            raise OptionError(f"{name('metric')} names no metric; give the key your training code logs, "
                              "e.g. metric=eval_accuracy.")
        try:  # the one validator of every door (recipe_audit.stats.options): the same words as the CLI's
            return CardOptions.from_config(taus=list(self.taus), eps=self.eps, delta=self.delta,
                                           higher_is_better=self.higher_is_better, unfinished=self.unfinished,
                                           metrics=self.metrics, name=name)
        except CardError as exc:
            raise OptionError(str(exc)) from None

    def _store_names(self, config: DictConfig) -> tuple[str, str]:
        from recipe_audit.store import tracking

        uri = tracking.resolve_tracking_uri(self.tracking_uri)
        name = self.experiment_name or str(OmegaConf.select(config, "hydra.job.name") or "recipe_audit")
        return uri, name

    def _check(self, config: DictConfig) -> None:
        """Everything that would make every job or the card fail, before any job runs."""
        self.card_options(config)
        if OmegaConf.select(config, self.seed_key, throw_on_missing=False) is None and not _seed_override(
                config, self.seed_key):
            keys = ", ".join(sorted(str(k) for k in config if k != "hydra")[:20]) or "none"
            raise OptionError(f"The seed key '{self.seed_key}' is not in the app's config (its top-level keys: "
                              f"{keys}); set hydra.callbacks.recipe_audit.seed_key.")

    def _open_store(self, config: DictConfig):
        from recipe_audit.store import tracking
        from recipe_audit.store.uris import mask_in_text

        uri, name = self._store_names(config)
        try:
            store = tracking.open_store(uri, name)
        except tracking.TrackingError as exc:
            raise OptionError(mask_in_text(str(exc))) from None
        self._uri, self._experiment = store.uri, store.experiment_name
        return store

    # -- a single run ----------------------------------------------------------------------------

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if _rank() != 0:
            return
        try:
            self._check(config)
            self._open_store(config)
        except OptionError as exc:
            _stop(str(exc))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if _rank() == 0 and getattr(self, "_uri", None):  # which store the run went to
            from recipe_audit.release.sweep import print_store

            print_store(self._uri)

    # -- the multirun ------------------------------------------------------------------------------

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.errors import HydraException

        from recipe_audit.app.sweepers import check_sweeper_config
        from recipe_audit.store import tracking

        try:
            self._check(config)
            seeds = planned_seeds(config, self.seed_key)
            check_sweeper_config(config, len(seeds))  # before the store holds anything of this sweep
            store = self._open_store(config)
        except (OptionError, HydraException) as exc:
            _stop(str(exc))
        sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = [str(o) for o in config.hydra.overrides.task]
        sweep = None
        if self.resume:  # every process reads the same store before anyone writes: same decision
            try:
                sweep = tracking.reopen_sweep(store, seeds, sweep_dir, overrides, write=_rank() == 0,
                                              seed_key=self.seed_key)
            except tracking.ResumeMismatch as exc:
                _stop(str(exc))
        if sweep is not None:
            left = self._unfinished_seeds(store, sweep, config)
            if _rank() == 0:
                log.info("resuming sweep %s: %d of %d planned seeds to run", sweep.sweep_id, len(left),
                         len(sweep.planned_seeds))
            if not left:
                self.sweep = sweep
                if _rank() == 0:
                    log.info("every planned seed has a finished rerun: nothing to run")
                    self.on_multirun_end(config)
                sys.exit(0)
            _set_seeds(config, self.seed_key, left)
        placed = self._place_devices(config)  # before threads: under Ray it sets the GPUs a task takes
        decided = self._decide_threads(config)  # in every process of an accelerate launch: its own jobs
        if _rank() != 0:
            return
        tags = {**decided_tags(decided), **_devices().parent_tags(placed)}
        if sweep is None:  # the metric's direction is recorded as the sweep starts (the release gate reads it)
            tags[TAG_HIGHER_IS_BETTER] = "true" if self.higher_is_better else "false"
            sweep = tracking.start_sweep(store, seeds, sweep_dir, overrides, tags=tags)
        elif tags:
            tracking.tag_sweep(sweep, tags)
        self.sweep = sweep
        self._launcher = str(OmegaConf.select(config, "hydra.launcher._target_") or "")
        atexit.register(self._abandoned)
        self._launched_ms = int(time.time() * 1000)  # this launch's attempts start from here
        self._progress = _Progress(os.getpid(), len(_launched_seeds(config, self.seed_key, sweep))
                                   * (_n_recipes(config, self.seed_key) or 1))
        from recipe_audit.store.uris import mask_credentials

        log.info("sweep %s: %d planned seeds, parent run %s in %s", sweep.sweep_id, len(sweep.planned_seeds),
                 sweep.parent_run_id, mask_credentials(store.uri))
        # What is alive now (Hydra, MLflow, SQLAlchemy, the app's modules) lives as long as the sweep. Frozen out of the garbage collector's reach, it is
        # not walked again by every full collection the jobs trigger. Nothing of a job is alive
        # yet, so nothing a job leaves behind is kept.
        import gc

        gc.collect()
        gc.freeze()

    def _decide_threads(self, config: DictConfig):
        """``threads=auto``: the torch threads of every rerun, decided once, now (recipe_audit/app/threads.py),
        logged in one line and handed to the jobs as ``$RECIPE_AUDIT_THREADS``. A number is the
        decision as it is. None (the option unset): nothing."""
        from recipe_audit.app import threads

        if self.threads is None:
            return None
        try:
            value = threads.parse(self.threads)
        except threads.ThreadsError as exc:
            _stop(str(exc))
        if value == threads.AUTO:
            try:
                n_jobs = len(planned_seeds(config, self.seed_key)) * (_n_recipes(config, self.seed_key) or 1)
            except OptionError:
                n_jobs = None
            decided = threads.decide(config, n_jobs)
        else:
            decided = threads.Decision(int(value), f"threads={value}")
        if _rank() == 0:
            log.info("%s", decided.line())
        if self._threads_env is None:
            self._threads_env = (threads.ENV in os.environ, os.environ.get(threads.ENV))
        os.environ[threads.ENV] = str(decided.threads)
        return decided

    def _place_devices(self, config: DictConfig):
        """The GPUs of every rerun, decided once, now (recipe_audit/app/devices.py), logged in one
        line and handed to the jobs as ``$RECIPE_AUDIT_DEVICES``; nothing on a machine without GPUs."""
        devices = _devices()
        try:
            try:
                n_jobs = len(planned_seeds(config, self.seed_key)) * (_n_recipes(config, self.seed_key) or 1)
            except OptionError:
                n_jobs = None
            placed = devices.decide(config, n_jobs, self.devices, self.reruns_per_gpu)
        except devices.DevicesError as exc:
            _stop(str(exc))
        if placed.reason and _rank() == 0:
            log.info("%s", placed.line())
        devices.hand_to_jobs(placed)
        return placed

    def _restore_threads_env(self) -> None:
        from recipe_audit.app import threads

        _devices().restore()
        saved, self._threads_env = self._threads_env, None
        if saved is None:
            return
        if saved[0]:
            os.environ[threads.ENV] = saved[1] or ""
        else:
            os.environ.pop(threads.ENV, None)

    def _abandoned(self) -> None:
        """At exit, a sweep that never reached its end (a launcher that raised, as joblib's does
        when a worker is killed; Ctrl-C; a job that stopped the sweep) is recorded as such: its
        parent FAILED with the reason and its reruns whose process is gone KILLED, so nothing is
        left RUNNING. Normal ends clear ``self.sweep`` first."""
        self._restore_threads_env()
        sweep, self.sweep = self.sweep, None
        if sweep is None:
            return
        from recipe_audit.store import tracking

        try:
            closed = tracking.close_dead_reruns(sweep, only_dead_processes=True, kind=self.run_kind)
            if tracking.sweep_running(sweep):
                tracking.end_sweep(sweep, "FAILED", error=(
                    "the sweep stopped before its end (its launcher raised, a job stopped it, or it was "
                    "interrupted); no card was computed for it"))
                joblib = "joblib" in getattr(self, "_launcher", "")
                print(f"recipe_audit: sweep {sweep.sweep_id} stopped before its end: its parent run is recorded "
                      f"FAILED" + (f" and {len(closed)} unfinished rerun(s) KILLED" if closed else "")
                      + ("; relaunch with resume=true to run the seeds left" if closed or joblib else "")
                      + (" (hydra/launcher=local_parallel goes on when a worker is killed, where joblib's pool "
                         "stops)" if joblib else "") + ".", file=sys.stderr)
            tracking.checkpoint_store(sweep.tracking_uri)
        except Exception:  # noqa: BLE001 - at exit, with the store perhaps gone: nothing more to do
            pass

    def _unfinished_seeds(self, store, sweep, config: DictConfig) -> list[int]:
        """The planned seeds not yet finished for every recipe of the sweep. A seed is finished for
        a recipe when a FINISHED rerun of it logged every card metric (finite). Seeds finished for
        some recipes of a grid only are run again for all (an extra, honest draw of that seed)."""
        from recipe_audit.store import tracking

        n_recipes = _n_recipes(config, self.seed_key)
        done = tracking.finished_seeds(store, sweep, self.metrics)
        skipped = [s for s in sweep.planned_seeds if n_recipes is not None and len(done.get(s, ())) >= n_recipes]
        for s in skipped if _rank() == 0 else ():
            log.info("seed %d: finished rerun exists for every recipe, skipped (resume)", s)
        return [s for s in sweep.planned_seeds if s not in skipped]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._restore_threads_env()
        if self.sweep is None or _rank() != 0:
            return
        sweep, self.sweep = self.sweep, None
        from recipe_audit.store import tracking

        try:
            self._end(sweep, config)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a store that went away, a full disk: say so, exit non-zero
            _stop(f"the end of sweep {sweep.sweep_id} could not be recorded ({_one_line(exc)}); the reruns "
                  "that finished are in the store: compute the card with `recipe-audit card` once the store can be "
                  "written again.")
        finally:
            tracking.checkpoint_store(sweep.tracking_uri)

    def _end(self, sweep, config: DictConfig) -> None:
        from recipe_audit.store import tracking


        tracking.check_store_file(sweep.tracking_uri)
        for run_id in tracking.close_dead_reruns(sweep, kind=self.run_kind):  # every job has returned
            log.warning("rerun %s never finished (its process died): recorded as KILLED", run_id)
        tracking.end_sweep(sweep)
        if self.card_on_multirun_end:
            self._cards(sweep, config)
        from recipe_audit.release.sweep import print_store

        print_store(sweep.tracking_uri)
        failed = tracking.failed_reruns(sweep, kind=self.run_kind)
        if failed:
            many = len({r for _, r, _ in failed}) > 1
            which = ", ".join(f"seed {s}" + (f" of recipe {r[:8]}" if many else "") + f" ({st.lower()})"
                              for s, r, st in failed)
            _stop(f"{len(failed)} {self.failed_noun} of sweep {sweep.sweep_id} did not finish: {which}; "
                  f"{self.failed_consequence}.", code=1)
        killed = tracking.killed_attempts(sweep, since_ms=getattr(self, "_launched_ms", 0), kind=self.run_kind)
        if killed:  # a worker lost (out of memory, a node gone): run again and finished, but said
            _stop(f"{len(killed)} attempt(s) of sweep {sweep.sweep_id} were killed and run again: "
                  f"{', '.join(f'seed {s}' for s in killed)}; every seed finished and the card counts the finished "
                  "attempts, but a worker was lost: look at the machine's memory and logs.", code=1)

    def _cards(self, sweep, config: DictConfig) -> None:
        from recipe_audit.cards.model import CardError
        from recipe_audit.cards.summary import summary_markdown
        from recipe_audit.release.sweep import cards_for_sweep, publish_cards
        from recipe_audit.store import tracking

        opts = self.card_options(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        docs = []
        for metric in self.metrics:
            stem = "card" if len(self.metrics) == 1 else "card-" + "".join(
                c if c.isalnum() or c in "-_." else "_" for c in metric)
            try:
                docs.append(cards_for_sweep(sweep, metric, opts, sweep_dir, stem=stem))
            except CardError as exc:
                _stop(f"no card for metric '{metric}' of sweep {sweep.sweep_id}: "
                      f"{_nothing_logged(sweep, metric, self.run_kind) or exc}")
        # the verdict where the runs table shows it: on the sweep's own row
        tracking.tag_sweep_with_cards(sweep, [e.to_json() for d in docs for e in d.cells], summary_markdown(docs))
        publish_cards(sweep.tracking_uri, sweep.experiment_name, docs)  # and first on the experiment's page

    # -- every job, in the job's own process --------------------------------------------------------

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _CURRENT

        if _rank() != 0:
            return
        from recipe_audit.store import tracking

        try:
            self._job = self._open_rerun(config)
        except tracking.StoreGone as exc:  # nothing this sweep records can be kept: stop it
            _stop(f"{exc} Relaunch the sweep once the store is back.")
        except Exception as exc:  # noqa: BLE001 - the job still runs; the card counts it as never logged
            from recipe_audit.store.uris import mask_in_text

            log.error("recipe_audit: could not open the rerun's run (%s); this seed counts as unfinished",
                      mask_in_text(_one_line(exc)))
            self._job = None
            return
        _CURRENT = self._job.rerun
        for k, v in ((ENV_RUN_ID, self._job.rerun.run_id), (ENV_EXPERIMENT_ID, self._job.rerun.experiment_id),
                     (ENV_EXPERIMENT_NAME, self._job.rerun.experiment_name),
                     (ENV_TRACKING_URI, self._job.rerun.tracking_uri)):
            os.environ[k] = v
        tracking.keep_rerun_resumable(self._job.rerun.run_id)
        from recipe_audit.app.mlflow_loggers import point_mlflow_loggers
        from recipe_audit.store.uris import mask_credentials

        rerun = self._job.rerun
        self._job.restore_loggers = point_mlflow_loggers(rerun.tracking_uri, rerun.run_id, rerun.experiment_name,
                                                         raw_config=self._job.raw_config, mask=mask_credentials)

    def _open_rerun(self, config: DictConfig) -> _Job:
        from recipe_audit import keys
        from recipe_audit.store import tracking

        const = self._job_constants(config)
        placed = _devices().for_job(const["sweep_dir"])  # CUDA_VISIBLE_DEVICES, before the task runs
        store = tracking.open_store(const["uri"], const["experiment"])
        tracking.check_store_file(store.uri)
        sweep = tracking.current_sweep(Path(const["sweep_dir"])) if const["multirun"] else None
        if sweep is not None and not self._parent_seen:
            tracking.check_sweep_parent(store, sweep)  # once a process: the store is the sweep's
            self._parent_seen = True
        seed = OmegaConf.select(config, self.seed_key)
        resolved, raw = _job_config(config)
        runtime_paths = [OmegaConf.select(config, "hydra.runtime.output_dir"), const["sweep_dir"], const["run_dir"]]
        recipe_id = tracking.config_identity(resolved, (self.seed_key, *self.identity_exclude), raw=raw,
                                             runtime_paths=[str(p) for p in runtime_paths if p])
        overrides = [o for o in (OmegaConf.select(config, "hydra.overrides.task") or [])
                     if o.split("=", 1)[0].lstrip("+~") != self.seed_key]
        recipe_name = _select_str(resolved, "recipe.name") or " ".join(overrides) or const["job_name"]
        label = _select_str(resolved, "recipe.name") or const["job_name"]
        tags = {
            keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: recipe_id, keys.TAG_RECIPE_NAME: recipe_name[:5000],
            keys.TAG_SEED: str(seed), keys.TAG_HOST: socket.gethostname(), keys.TAG_PID: str(os.getpid()),
        }
        for tag, path in ((keys.TAG_MODEL, "model.name"), (keys.TAG_TASK, "task.name")):
            if _select_str(resolved, path):
                tags[tag] = _select_str(resolved, path)
        if os.environ.get("SLURM_JOB_ID"):
            tags[keys.TAG_SLURM_JOB_ID] = os.environ["SLURM_JOB_ID"]
        tags.update(placed)
        if sweep is not None:
            tags[keys.TAG_SWEEP_ID] = sweep.sweep_id
            tags[keys.TAG_PARENT] = sweep.parent_run_id
        run_name, tags = self._job_run(resolved, seed, f"{label}-seed{seed}", tags)
        run = store.client.create_run(store.experiment_id, run_name=run_name, tags=tags)
        saved = {k: os.environ.get(k) for k in _ENV_KEYS}
        rerun = Rerun(run.info.run_id, run.info.artifact_uri, store.uri, store.experiment_id,
                      store.experiment_name, int(seed) if _is_int(seed) else seed, recipe_id,
                      sweep.sweep_id if sweep else None)
        return _Job(rerun, tracking.flatten(resolved), saved, f"seed {seed}", raw_config=raw)

    def _job_run(self, resolved: dict[str, Any], seed: Any, run_name: str,
                 tags: dict[str, str]) -> tuple[str, dict[str, str]]:
        """The name and tags of a job's run (a subclass whose jobs are not reruns of a recipe
        names and tags them its own way)."""
        return run_name, tags

    def _job_constants(self, config: DictConfig) -> dict[str, Any]:
        """What every job of this multirun shares, read from Hydra's config once a process (a
        look-up there walks the config's parents and flags; profiled as a visible share of the
        callback's time per job)."""
        if self._const is None:
            uri, name = self._store_names(config)
            self._const = {
                "uri": uri, "experiment": name,
                "multirun": str(OmegaConf.select(config, "hydra.mode")) == "RunMode.MULTIRUN",
                "sweep_dir": str(OmegaConf.select(config, "hydra.sweep.dir")),
                "run_dir": str(OmegaConf.select(config, "hydra.run.dir")),
                "job_name": str(OmegaConf.select(config, "hydra.job.name")),
            }
        return self._const

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        global _CURRENT

        job, self._job = self._job, None
        if job is None:
            return
        try:
            from recipe_audit.store import tracking

            tracking.keep_rerun_resumable(None)
            self._close_rerun(config, job, job_return)
        finally:
            _CURRENT = None
            if job.restore_loggers is not None:
                job.restore_loggers()
            for k, v in job.saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _close_rerun(self, config: DictConfig, job: _Job, job_return: Any) -> None:
        from hydra.core.utils import JobStatus

        from recipe_audit.store import tracking

        _end_fluent_run()
        store = tracking.open_store(job.rerun.tracking_uri, job.rerun.experiment_name)
        try:
            tracking.check_store_file(store.uri)
        except tracking.StoreGone as exc:
            _stop(f"{exc} Seed {job.rerun.seed} and the sweep stop here; relaunch once the store is back.")
        failed = job_return.status == JobStatus.FAILED
        error = job_return._return_value if failed else None
        returned = None if failed else job_return._return_value
        try:
            outcome = self._close_in_store(store, job, returned, error)
        except Exception as exc:
            if tracking.disk_full(exc):  # every later write fails the same way: one sentence, stop
                try:  # a small update may still fit: nothing left RUNNING where it can be helped
                    store.client.set_terminated(job.rerun.run_id, "FAILED")
                except Exception:  # noqa: BLE001 - the disk is full
                    pass
                if getattr(self, "sweep", None) is not None:  # the sweep's own process: its parent too
                    self._abandoned()
                _stop(f"The disk of the tracking store {store.uri} is full ({_one_line(exc)[:200]}); seed "
                      f"{job.rerun.seed} and the sweep stop here. Free space, then relaunch the same command with "
                      "tracking.resume=true (the seeds that finished are kept).")
            raise
        outcome["recipe_id"] = job.rerun.recipe_id
        job_return.recipe_audit = outcome  # read by recipe_audit's curtailing sweeper
        self._report(job, outcome)
        if self._progress is not None and self._progress.pid == os.getpid():  # jobs in this process
            self._progress.step(any(self.fails(outcome, self.metrics[0])[:1]), self.taus[0])
        if failed and self._job_constants(config)["multirun"]:
            # the rerun is recorded as FAILED; the sweep goes on (see the module docstring)
            job_return.status = JobStatus.COMPLETED
            job_return._return_value = None

    def _close_in_store(self, store, job: _Job, returned: Any, error: Any) -> dict[str, Any]:
        from recipe_audit.store import tracking

        return tracking.close_rerun(store, job.rerun.run_id, params=job.params,
                                       returned=_returned_metrics(returned, self.metrics),
                                       error=error if isinstance(error, BaseException) else None,
                                       metrics=self.metrics,
                                       tags_for=lambda o: {**job.rerun.tags, **self.bar_tags(o)},
                                       no_metric=(lambda missing: _no_metric(returned, missing, self.metrics))
                                       if self.run_kind == KIND_RERUN else None)

    def fails(self, outcome: dict[str, Any], metric: str) -> list[bool]:
        """Per τ: does this rerun fail the bar? One that did not finish, or never logged the
        metric (or logged NaN), fails every bar, as the card counts it."""
        v = outcome["metrics"].get(metric) if outcome["status"] == "FINISHED" else None
        if v is None or not math.isfinite(v):
            return [True] * len(self.taus)
        return [(v < t) if self.higher_is_better else (v > t) for t in self.taus]

    def bar_tags(self, outcome: dict[str, Any]) -> dict[str, str]:
        """``recipe_audit.fails.<metric>.tau_<τ>`` = ``true``/``false`` for each metric and bar
        (:func:`recipe_audit.keys.fails_tag`, the name a card logged later writes too)."""
        from recipe_audit.keys import fails_tag

        out = {}
        for m in self.metrics:
            for t, bad in zip(self.taus, self.fails(outcome, m), strict=True):
                out[fails_tag(m, t)] = "true" if bad else "false"
        return out

    def _report(self, job: _Job, outcome: dict[str, Any]) -> None:
        secs = time.monotonic() - job.started
        if outcome["status"] != "FINISHED":
            log.warning("%s FAILED (%s) in %.1fs: run %s", job.label, outcome.get("error", ""), secs,
                        job.rerun.run_id)
            return
        parts = []
        for m in self.metrics:
            v = outcome["metrics"].get(m)
            if v is None or not math.isfinite(v):
                parts.append(f"{m} never logged (unfinished on the card)")
                continue
            bad = [t for t in self.taus if (v < t if self.higher_is_better else v > t)]
            parts.append(f"{m}={v:.3f}" + (f", fails the bar τ = {', '.join(f'{t:g}' for t in bad)}" if bad else ""))
        log.info("%s: %s (%.1fs) run %s", job.label, "; ".join(parts), secs, job.rerun.run_id)


def _devices():
    from recipe_audit.app import devices

    return devices


def _nothing_logged(sweep, metric: str, kind: str) -> str | None:
    """What to set when no rerun of ``sweep`` that finished holds any metric at all: the task
    function logged nothing to MLflow and returned no number (lightning-hydra-template without
    an MLflow logger, whose ``train.py`` returns None while its ``optimized_metric`` is unset).
    None when some rerun has a metric (the card's own sentence then lists them)."""
    from recipe_audit import keys
    from recipe_audit.store import tracking

    try:
        # the jobs that ended without an error: FINISHED, or FAILED for want of the metric (_no_metric)
        finished = [r for r in tracking.sweep_runs(sweep, kind, status=None) if r.info.status == "FINISHED" or (
            r.info.status == "FAILED" and r.data.tags.get(keys.TAG_ERROR, "").startswith(_NO_METRIC_LEAD))]
    except Exception:  # noqa: BLE001 - only a better sentence is at stake
        return None
    if not finished or any(r.data.metrics for r in finished):
        return None
    return (f"none of its {len(finished)} finished rerun(s) logged a metric to MLflow and the task function "
            f"returned nothing; log '{metric}' to MLflow from the app (lightning-hydra-template: add logger=mlflow) "
            f"or return it from the task function (lightning-hydra-template returns the metric its optimized_metric "
            f"names: add +optimized_metric={metric}).")


def decided_tags(decided) -> dict[str, str]:
    """The sweep parent's record of its torch threads decision (nothing when none was made)."""
    from recipe_audit import keys

    if decided is None:
        return {}
    return {keys.TAG_THREADS: str(decided.threads), keys.TAG_THREADS_REASON: decided.line()}


@dataclass
class _Progress:
    """The sweep's progress, printed after each job when the jobs run in the launching process
    (parallel launchers print their own per-job lines)."""

    pid: int
    total: int
    done: int = 0
    failed: int = 0
    t0: float = field(default_factory=time.monotonic)

    def step(self, failed: bool, tau: float) -> None:
        self.done += 1
        self.failed += int(failed)
        elapsed = time.monotonic() - self.t0
        left = max(self.total - self.done, 0)
        eta = elapsed / self.done * left
        log.info("rerun %d/%d done, %d failed the bar τ = %g so far, %s", self.done, self.total, self.failed, tau,
                 f"about {_duration(eta)} left" if left else f"all done in {_duration(elapsed)}")


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _launched_seeds(config: DictConfig, seed_key: str, sweep) -> list[int]:
    try:
        return planned_seeds(config, seed_key)  # after a resume: the seeds left to run
    except OptionError:
        return list(sweep.planned_seeds)


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    """``Type: first line`` (the error tag of a rerun that raised)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


def _option_name(config: DictConfig | None, option: str) -> str:
    """Where the user set a callback option: the key it interpolates (``${audit.eps}`` -> ``audit.eps``),
    else its own key."""
    own = f"hydra.callbacks.recipe_audit.{option}"
    if config is None:
        return own
    try:
        raw = OmegaConf.to_container(config.hydra.callbacks.recipe_audit, resolve=False).get(option)
    except Exception:  # noqa: BLE001 - only a nicer name is at stake
        return own
    if isinstance(raw, str) and raw.startswith("${") and raw.endswith("}") and raw.count("${") == 1 \
            and ":" not in raw:
        return raw[2:-1]
    return own


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _select_str(d: Mapping[str, Any], dotted: str) -> str | None:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, str) and node else None


def _job_config(config: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's config without Hydra's node: resolved, and as written (interpolations unresolved)."""
    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    raw = OmegaConf.to_container(task, resolve=False)
    resolved = OmegaConf.to_container(task, resolve=True)
    return resolved, raw


def _returned_metrics(value: Any, metrics: Sequence[str]) -> dict[str, float]:
    """What a task function returned, as metrics: a number is the first card metric; a mapping
    gives each of its numeric entries (``{"eval_accuracy": 0.91}``)."""
    def num(v: Any) -> float | None:
        if isinstance(v, bool):
            return None
        try:
            import numbers

            if isinstance(v, numbers.Real):
                return float(v)
            if hasattr(v, "item") and getattr(v, "size", 1) == 1:  # numpy / torch scalars
                return float(v.item())
        except (TypeError, ValueError):
            return None
        return None

    if value is None:
        return {}
    single = num(value)
    if single is not None:
        return {metrics[0]: single} if metrics else {}
    if isinstance(value, Mapping):
        return {str(k): f for k, v in value.items() if (f := num(v)) is not None}
    return {}


_NO_METRIC_LEAD = "the task returned "


def _no_metric(value: Any, missing: Sequence[str], metrics: Sequence[str]) -> str:
    """Why a job that ended without error has no card metric: what it returned, what is accepted."""
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    names = ", ".join(f"'{m}'" for m in missing)
    return (f"{_NO_METRIC_LEAD}{text} ({type(value).__name__}) and logged no {names}: log the metric to the "
            f"rerun's run (mlflow.log_metric) or return it, as a number (read as '{metrics[0]}') or a mapping "
            "of metric names to numbers")


def _end_fluent_run() -> None:
    """A run the task left active in MLflow's fluent API is ended, so the next job in this process
    does not log into it (its final status is set right after)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        while mlflow.active_run() is not None:
            mlflow.end_run()
    except Exception:  # noqa: BLE001 - the run's status is set by the callback anyway
        pass


def _seed_override(config: DictConfig, seed_key: str) -> str | None:
    """The sweep's value of the seed key: the command line's override, else hydra.sweeper.params."""
    spec = None
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    if seed_key in params:
        spec = f"{seed_key}={params[seed_key]}"
    for ov in OmegaConf.select(config, "hydra.overrides.task") or []:
        if ov.split("=", 1)[0].lstrip("+~") == seed_key:
            spec = ov.lstrip("+")
    return spec


def planned_seeds(config: DictConfig, seed_key: str = "seed") -> list[int]:
    """The seeds the multirun will launch: the command line's ``seed=`` override if any, else
    ``hydra.sweeper.params.seed``, else the single configured seed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    spec = _seed_override(config, seed_key)
    if spec is None:
        value = OmegaConf.select(config, seed_key)
        if not _is_int(value):
            raise OptionError(f"The seed '{seed_key}' must be an integer, not {value!r}.")
        return [value]
    try:
        override = OverridesParser.create().parse_overrides([spec])[0]
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    except Exception as exc:  # noqa: BLE001 - Hydra's parser errors
        raise OptionError(f"Cannot read the seeds of '{spec}': {_one_line(exc)}") from None
    if not values or not all(_is_int(v) for v in values):
        raise OptionError(f"The seed values must be integers, not {spec.split('=', 1)[1]}.")
    return [int(v) for v in values]


def _set_seeds(config: DictConfig, seed_key: str, seeds: Sequence[int]) -> None:
    """Make the sweep launch only ``seeds``: Hydra reads the sweep's overrides and the sweeper's
    params from this config after ``on_multirun_start``."""
    from omegaconf import open_dict, read_write

    value = ",".join(str(s) for s in seeds)
    with read_write(config.hydra), open_dict(config.hydra):
        task = [str(o) for o in config.hydra.overrides.task]
        hit = [i for i, o in enumerate(task) if o.split("=", 1)[0].lstrip("+~") == seed_key]
        if hit:
            prefix = task[hit[-1]].split("=", 1)[0]
            task[hit[-1]] = f"{prefix}={value}"
            config.hydra.overrides.task = task
        params = OmegaConf.select(config, "hydra.sweeper.params")
        if params is not None and seed_key in params:
            config.hydra.sweeper.params[seed_key] = value
        elif not hit:
            config.hydra.overrides.task = [*task, f"{seed_key}={value}"]


def _n_recipes(config: DictConfig, seed_key: str) -> int | None:
    """How many recipes (jobs per seed) the sweep has: the product of the other sweep overrides'
    sizes. None when it cannot be counted without composing (a glob)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    specs = [f"{k}={v}" for k, v in (OmegaConf.select(config, "hydra.sweeper.params") or {}).items()]
    specs += [str(o) for o in OmegaConf.select(config, "hydra.overrides.task") or []]
    by_key: dict[str, int] = {}
    try:
        for ov in OverridesParser.create().parse_overrides(specs):
            if ov.key_or_group == seed_key:
                continue
            by_key[ov.get_key_element()] = len(list(ov.sweep_iterator())) if ov.is_sweep_override() else 1
    except Exception:  # noqa: BLE001 - a glob sweep needs the config loader
        return None
    n = 1
    for size in by_key.values():
        n *= size
    return n


class AcceptanceSweepCallback(RecipeAuditCallback):
    """``experiment=acceptance``: every job (one defense cell x one seed) gets its run the way a
    rerun does, opened and closed here (FAILED with its error when the job raises, the sweep going
    on; exit 1 at the end), tagged as an acceptance cell; when the multirun ends, the acceptance
    cards of its defense cells. A cell has no release bar: no pass/fail tags, no bar count."""

    run_kind = KIND_ACCEPTANCE_CELL
    failed_noun = "acceptance cell(s)"
    failed_consequence = "the acceptance card leaves them out"

    def _job_run(self, resolved: dict[str, Any], seed: Any, run_name: str,
                 tags: dict[str, str]) -> tuple[str, dict[str, str]]:
        from recipe_audit import keys
        from recipe_audit.acceptance.experiment import cell_run
        from recipe_audit.app.schema import typed
        from recipe_audit.config import DefenseConfig, ExperimentConfig

        name, cell_tags = cell_run(typed(resolved["experiment"], ExperimentConfig),
                                   typed(resolved["defense"], DefenseConfig), int(seed))
        kept = {k: v for k, v in tags.items() if k not in (keys.TAG_MODEL, keys.TAG_TASK)}
        return name, {**kept, **cell_tags}

    def _open_rerun(self, config: DictConfig) -> _Job:
        from recipe_audit.acceptance.experiment import cell_name

        job = super()._open_rerun(config)
        job.label = f"cell {cell_name(str(OmegaConf.select(config, 'defense.name')), job.rerun.seed)}"
        # what a cell is made of; the app's recipe sections (model, task, recipe) do not apply
        job.params = {k: v for k, v in job.params.items() if k.split(".", 1)[0] in ("experiment", "defense", "seed")}
        return job

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        super().on_multirun_start(config, **kwargs)
        self._progress = None  # its line counts failures of a release bar

    def bar_tags(self, outcome: dict[str, Any]) -> dict[str, str]:
        return {}

    def _report(self, job: _Job, outcome: dict[str, Any]) -> None:
        if outcome["status"] != "FINISHED":  # a finished cell logged its own line
            super()._report(job, outcome)

    def _cards(self, sweep, config: DictConfig) -> None:
        from recipe_audit.acceptance.experiment import acceptance_card_for_sweep
        from recipe_audit.app.schema import typed
        from recipe_audit.config import ExperimentConfig

        acceptance_card_for_sweep(sweep, typed(config.experiment, ExperimentConfig), Path(str(config.hydra.sweep.dir)))
