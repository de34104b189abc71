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
is pointed at the run while the job runs (all of it installed and put back by
:mod:`recipe_audit.app.seams`). When the job ends it records the truth whatever the task did
to the run (FAILED with the error's first line when the task raised, FINISHED otherwise), logs a
number or dict of numbers the task returned, the flattened config as params (keys the task logged
itself are left as they are) and restores the environment. When the multirun ends it computes
the recipe card per metric from the tracking store.

A task that raises is a rerun that failed, not the end of the sweep: the callback hands Hydra's
sweeper a completed job (Hydra's basic sweeper would re-raise the error after the batch and never
reach the end of the multirun, so neither the other seeds nor the card would happen), and the
process exits with status 1 after the card when any rerun failed.

The callback only translates Hydra's events into plain calls on plain data: the sweep's plan is
read out of Hydra's config by :mod:`recipe_audit.app.sweep_plan`; a job's rerun is opened and
closed by :mod:`recipe_audit.app.jobs` (what its process needs around the task, and Hydra's
``JobReturn``: :mod:`recipe_audit.app.seams`), the
end of the sweep is :mod:`recipe_audit.app.sweep_end`; the runs themselves are the store's
(:mod:`recipe_audit.store.sweeps`, :mod:`recipe_audit.store.rerun_runs`).

At about 410 lines it stays one module: each of Hydra's hooks is a few plain calls, and splitting
the class's hooks apart would scatter one event table.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from recipe_audit.app import jobs, sweep_plan
from recipe_audit.app.outcomes import Bars, OutcomeChannel, Progress
from recipe_audit.app.process import collector_paused, one_line, quiet_interrupts, rank, stop
from recipe_audit.app.seams import SweepEnv, hand_back, job_result, restore_left, sweep_tags
from recipe_audit.app.sweep_end import JobsKind, abandon_sweep, end_sweep, recipe_cards
from recipe_audit.app.sweep_plan import CallbackOptionError, option_name, planned_seeds
from recipe_audit.keys import KIND_ACCEPTANCE_CELL, KIND_RERUN
from recipe_audit.stats.options import option_fields, refuse_unknown

log = logging.getLogger("recipe_audit")

__all__ = ["AcceptanceSweepCallback", "CallbackOptionError", "RecipeAuditCallback"]  # CallbackOptionError: sweep_plan's


class RecipeAuditCallback(Callback):
    """See the module docstring; options are :class:`recipe_audit.app.schema.RecipeAuditCallbackConfig`."""

    run_kind = KIND_RERUN  # the recipe_audit.kind of the run each job opens
    # how the exit sentence names the jobs that did not finish, and what the card made of them
    failed_noun = "rerun(s)"
    failed_consequence = "the card counts them as failures"

    def __init__(self, metric: Any, seed_key: str = "seed", identity_exclude: Sequence[str] = (),
                 experiment_name: str | None = None, tracking_uri: str | None = None, resume: bool = False,
                 card_on_multirun_end: bool = True, threads: Any = None, devices: Any = "auto",
                 reruns_per_gpu: Any = 1, signing_key: str | None = None, _target_: str | None = None,
                 **options: Any) -> None:
        metrics = [metric] if isinstance(metric, str) else list(metric or [])
        self.metrics = [str(m) for m in metrics]
        # the card's options (taus, eps, delta, ...: recipe_audit.stats.options.AuditOptions declares them
        # and their defaults), as given: checked with one sentence when the sweep starts (card_options)
        refuse_unknown(options, type(self).__name__)
        self.options = {**{f.name: f.default for f in option_fields()}, **options}
        self.seed_key = str(seed_key)
        self.identity_exclude = tuple(str(k) for k in identity_exclude or ())
        self.experiment_name = experiment_name
        self.tracking_uri = tracking_uri
        self.resume = bool(resume)
        self.card_on_multirun_end = bool(card_on_multirun_end)
        self.threads = threads  # None: the app's own business; "auto" or a number: see seams.SweepEnv
        self.devices, self.reruns_per_gpu = devices, reruns_per_gpu  # GPUs per rerun: see seams.SweepEnv
        self.signing_key = signing_key
        self._signer = None  # the key the cards are signed with (loaded by _check, when the sweep starts)
        self._env = SweepEnv()  # what the sweep hands its jobs through the environment
        self.sweep = None
        self._job: jobs.Job | None = None
        self._uri: str | None = None
        self._experiment: str | None = None
        self._progress: Progress | None = None
        self._place: jobs.JobPlace | None = None  # what every job of the multirun shares
        self._parent_checked: list[bool] = []  # this process checked the sweep's parent run is in its store

    # -- options ----------------------------------------------------------------------------

    @property
    def taus(self) -> tuple[Any, ...]:
        """The release bars each rerun is held to, as given."""
        return tuple(self.options["taus"] or ())

    @property
    def higher_is_better(self) -> bool:
        return bool(self.options["higher_is_better"])

    def card_options(self, config: DictConfig | None = None):
        """The card's options (one constructor for the sweep's card and the curtailing sweeper).
        A bad value is named as the user set it: ``audit.eps`` in the built-in app, whose callback
        options interpolate its ``audit`` section, ``hydra.callbacks.recipe_audit.eps`` elsewhere."""
        from recipe_audit.cards.model import CardError, CardOptions

        def name(option: str) -> str:
            return option_name(config, option)

        if not self.metrics or not all(self.metrics):
            raise CallbackOptionError(f"{name('metric')} names no metric; give the key your training code logs, "
                              "e.g. metric=eval_accuracy.")
        try:  # the one validator of every door (recipe_audit.stats.options): the same words as the CLI's
            return CardOptions.from_config({**self.options, "taus": list(self.taus)}, metrics=self.metrics, name=name)
        except CardError as exc:
            raise CallbackOptionError(str(exc)) from None

    def signer(self, config: DictConfig | None = None):
        """The key the sweep's cards are signed with (:class:`recipe_audit.cards.signing.SigningKey`):
        the ``signing_key`` option's file, else ``$RECIPE_AUDIT_SIGNING_KEY``; None: unsigned."""
        from recipe_audit.cards.signing import SigningError, SigningKey

        value = str(self.signing_key or "").strip()
        try:
            if value.startswith("-----BEGIN"):
                raise SigningError(f"{option_name(config, 'signing_key')} holds a key itself, which Hydra writes to "
                                   f"the sweep's folder in clear: give the path of its file, or put the key in "
                                   f"$RECIPE_AUDIT_SIGNING_KEY.")
            return SigningKey.load(value) if value else SigningKey.from_environment()
        except SigningError as exc:
            raise CallbackOptionError(str(exc)) from None

    def _store_names(self, config: DictConfig) -> tuple[str, str]:
        from recipe_audit.store import tracking

        uri = tracking.resolve_tracking_uri(self.tracking_uri)
        name = self.experiment_name or str(OmegaConf.select(config, "hydra.job.name") or "recipe_audit")
        return uri, name

    def _check(self, config: DictConfig) -> None:
        """Everything that would make every job or the card fail, before any job runs."""
        self.card_options(config)
        self._signer = self.signer(config)
        if OmegaConf.select(config, self.seed_key, throw_on_missing=False) is None and not sweep_plan.seed_override(
                config, self.seed_key):
            keys = ", ".join(sorted(str(k) for k in config if k != "hydra")[:20]) or "none"
            raise CallbackOptionError(f"The seed key '{self.seed_key}' is not in the app's config (its top-level keys: "
                              f"{keys}); set hydra.callbacks.recipe_audit.seed_key.")

    def _open_store(self, config: DictConfig):
        from recipe_audit.store import tracking
        from recipe_audit.store.uris import mask_in_text

        uri, name = self._store_names(config)
        try:
            store = tracking.open_store(uri, name)
        except tracking.TrackingError as exc:
            raise CallbackOptionError(mask_in_text(str(exc))) from None
        self._uri, self._experiment = store.uri, store.experiment_name
        return store

    def bars(self) -> Bars:
        """The release bars each rerun is held to (its pass/fail tags, its line in the log)."""
        return Bars(tuple(self.metrics), self.taus, self.higher_is_better)

    def bar_tags(self, outcome: dict[str, Any]) -> dict[str, str]:
        """``recipe_audit.fails.<metric>.tau_<τ>`` = ``true``/``false`` for each metric and bar."""
        return self.bars().tags(outcome)

    def _n_jobs(self, config: DictConfig) -> int | None:
        """The sweep's jobs: seeds x recipes (None: the seeds cannot be read)."""
        try:
            return len(planned_seeds(config, self.seed_key)) * (sweep_plan.n_recipes(config, self.seed_key) or 1)
        except CallbackOptionError:
            return None

    def _jobs_kind(self) -> JobsKind:
        return JobsKind(self.run_kind, self.failed_noun, self.failed_consequence)

    def _refuse_a_secret_in_the_uri(self, config: DictConfig) -> None:
        """A password in the tracking URI of the config (an override such as
        ``tracking.uri=http://user:pw@host``, the callback's own option, a config file) is refused
        before Hydra writes anything: Hydra would write it into the sweep's files (``multirun.yaml``,
        ``.hydra/``), the rerun's config artifact would hold it, and the process list shows a
        command line to every local user. One sentence naming ``MLFLOW_TRACKING_USERNAME`` /
        ``MLFLOW_TRACKING_PASSWORD``, exit 2."""
        from recipe_audit.store.uris import secret_in_uri

        sentence = secret_in_uri(self.tracking_uri if isinstance(self.tracking_uri, str) else None,
                                 option_name(config, "tracking_uri"),
                                 "Hydra would write it into the sweep's files (multirun.yaml, .hydra/) and each rerun's "
                                 "config, where other users can read it, as they can read a command line in the "
                                 "process list")
        if sentence:
            stop(sentence)
        for override in [*(OmegaConf.select(config, "hydra.overrides.task") or []),
                         *(OmegaConf.select(config, "hydra.overrides.hydra") or [])]:
            key = str(override).split("=", 1)[0]
            if key.rsplit(".", 1)[-1] == "MLFLOW_TRACKING_PASSWORD" and "=" in str(override):
                stop(f"The override {key}=... would put the tracking server's password into the sweep's files "
                     "(multirun.yaml, .hydra/), where other users can read it, as they can read a command line in "
                     "the process list: export MLFLOW_TRACKING_PASSWORD in the environment instead.")

    # -- a single run ----------------------------------------------------------------------------

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._refuse_a_secret_in_the_uri(config)  # before Hydra writes the run's .hydra/ files
        if rank() != 0:
            return
        try:
            self._check(config)
            self._open_store(config)
        except CallbackOptionError as exc:
            stop(str(exc))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if rank() == 0 and getattr(self, "_uri", None):  # which run and store the run went to
            from recipe_audit.release.sweep import print_store

            if getattr(self, "_single_run_id", None):  # on a line of its own: attach --run-id takes it
                print(f"Run id: {self._single_run_id}")
            print_store(self._uri)

    # -- the multirun ------------------------------------------------------------------------------

    @collector_paused  # what the start builds lives as long as the sweep: frozen at its end
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.errors import HydraException

        from recipe_audit.app.sweepers import check_sweeper_config
        from recipe_audit.store import sweeps

        self._refuse_a_secret_in_the_uri(config)  # before Hydra writes multirun.yaml and the jobs' .hydra/
        try:
            self._check(config)
            seeds = planned_seeds(config, self.seed_key)
            check_sweeper_config(config, len(seeds))  # before the store holds anything of this sweep
            store = self._open_store(config)
        except (CallbackOptionError, HydraException) as exc:
            stop(str(exc))
        sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = [str(o) for o in config.hydra.overrides.task]
        sweep = None
        if self.resume:  # every process reads the same store before anyone writes: same decision
            try:
                sweep = sweeps.reopen_sweep(store, seeds, sweep_dir, overrides, write=rank() == 0,
                                            seed_key=self.seed_key)
            except sweeps.ResumeMismatch as exc:
                stop(str(exc))
        if sweep is not None:
            left = self._unfinished_seeds(store, sweep, config)
            if rank() == 0:
                log.info("resuming sweep %s: %d of %d planned seeds to run", sweep.sweep_id, len(left),
                         len(sweep.planned_seeds))
            if not left:
                self.sweep = sweep
                self._launched_ms = int(time.time() * 1000)  # this launch runs no attempt: none was killed
                if rank() == 0:
                    log.info("every planned seed has a finished rerun: nothing to run")
                    self.on_multirun_end(config)
                sys.exit(0)
            sweep_plan.set_seeds(config, self.seed_key, left)
        # the GPUs before threads: under Ray it sets the GPUs a task takes; both in every process of
        # an accelerate launch (its own jobs)
        placed = self._env.place_devices(config, self._n_jobs(config), self.devices, self.reruns_per_gpu)
        decided = self._env.decide_threads(config, self.threads, self._n_jobs(config))
        if rank() != 0:
            return
        tags = sweep_tags(decided, placed)
        if sweep is None:  # the metric's direction is recorded as the sweep starts (the release gate reads it)
            sweep = sweeps.start_sweep(store, seeds, sweep_dir, overrides, tags=tags,
                                       higher_is_better=self.higher_is_better)
        elif tags:
            sweeps.tag_sweep(sweep, tags)
        self.sweep = sweep
        self._launcher = str(OmegaConf.select(config, "hydra.launcher._target_") or "")
        atexit.register(self._abandoned)
        quiet_interrupts(lambda: self.sweep is not None)  # Ctrl-C: the line _abandoned prints, no traceback
        self._launched_ms = int(time.time() * 1000)  # this launch's attempts start from here
        self._progress = Progress(os.getpid(), len(sweep_plan.launched_seeds(config, self.seed_key, sweep))
                                  * (sweep_plan.n_recipes(config, self.seed_key) or 1))
        from recipe_audit.store.uris import mask_credentials

        log.info("sweep %s: %d planned seeds, parent run %s in %s", sweep.sweep_id, len(sweep.planned_seeds),
                 sweep.parent_run_id, mask_credentials(store.uri))
        # What is alive now (Hydra, MLflow, SQLAlchemy, the app's modules) lives as long as the sweep. Frozen out of
        # the garbage collector's reach, it is not walked again by every full collection the jobs trigger. Nothing
        # of a job is alive yet, so nothing a job leaves behind is kept. Not collected first: the start's garbage
        # (about 12,500 objects, 2 MB: Hydra's composed configs, alembic's migration scripts, no file or
        # connection) is frozen with it, where a collection to reclaim it walks the whole set-up (0.2 s CPU)
        import gc

        gc.freeze()

    def _abandoned(self) -> None:
        """At exit, a sweep that never reached its end is recorded as such
        (:func:`recipe_audit.app.sweep_end.abandon_sweep`). Normal ends clear ``self.sweep`` first.
        What a job interrupted in this process (Ctrl-C) left installed is put back after it."""
        self._env.restore()
        sweep, self.sweep = self.sweep, None
        if sweep is not None:
            abandon_sweep(sweep, self._jobs_kind(), joblib="joblib" in getattr(self, "_launcher", ""))
        restore_left()

    def _unfinished_seeds(self, store, sweep, config: DictConfig) -> list[int]:
        """The planned seeds not yet finished for every recipe of the sweep. A seed is finished for
        a recipe when a FINISHED rerun of it logged every card metric (finite). Seeds finished for
        some recipes of a grid only are run again for all (an extra, honest draw of that seed)."""
        from recipe_audit.store import rerun_runs

        n_recipes = sweep_plan.n_recipes(config, self.seed_key)
        done = rerun_runs.finished_seeds(store, sweep, self.metrics)
        skipped = [s for s in sweep.planned_seeds if n_recipes is not None and len(done.get(s, ())) >= n_recipes]
        for s in skipped if rank() == 0 else ():
            log.info("seed %d: finished rerun exists for every recipe, skipped (resume)", s)
        return [s for s in sweep.planned_seeds if s not in skipped]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._env.restore()
        if self.sweep is None or rank() != 0:
            return
        sweep, self.sweep = self.sweep, None
        end_sweep(sweep, self._jobs_kind(), cards=(lambda: self._cards(sweep, config)) if self.card_on_multirun_end
                  else None, launched_ms=getattr(self, "_launched_ms", 0))

    def _cards(self, sweep, config: DictConfig) -> None:
        recipe_cards(sweep, self.metrics, self.card_options(config), Path(str(config.hydra.sweep.dir)), self.run_kind,
                     signer=self._signer)

    # -- every job, in the job's own process --------------------------------------------------------

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if rank() != 0:
            return
        from recipe_audit.store import tracking

        try:
            self._job = self._open_rerun(config)
        except tracking.StoreGone as exc:  # nothing this sweep records can be kept: stop it
            stop(f"{exc} Relaunch the sweep once the store is back.")
        except Exception as exc:  # noqa: BLE001 - the job still runs; the card counts it as never logged
            from recipe_audit.store.uris import mask_in_text

            seed = OmegaConf.select(config, self.seed_key)
            jobs.stop_on_full_disk(exc, self._job_place(config).uri, seed,
                                   self._abandoned if getattr(self, "sweep", None) is not None else None)
            if self._job_place(config).uri.startswith(("http://", "https://")):  # a server that did not come back
                jobs.stop_if_store_gone(self._job_place(config).uri, seed)
            log.error("recipe_audit: could not open the rerun's run (%s); this seed counts as unfinished",
                      mask_in_text(one_line(exc)))
            self._job = None
            return
        self._job.seams.install()

    def _open_rerun(self, config: DictConfig) -> jobs.Job:
        from recipe_audit.store.rerun_runs import flatten

        place = self._job_place(config)
        new, resolved, raw = sweep_plan.job_rerun(config, place, self.seed_key, self.identity_exclude)
        new = self._job_run(new, resolved)
        return jobs.open_job(place, new, label=f"seed {new.seed}", params=flatten(resolved), raw_config=raw,
                             parent_checked=self._parent_checked)

    def _job_run(self, new, resolved: dict[str, Any]):
        """The rerun a job opens (a subclass whose jobs are not reruns of a recipe names and tags
        them its own way)."""
        return new

    def _job_place(self, config: DictConfig) -> jobs.JobPlace:
        if self._place is None:
            self._place = sweep_plan.job_place(config, *self._store_names(config))
        return self._place

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        job, self._job = self._job, None
        if job is None:
            return
        try:
            job.seams.task_returned()
            self._close_rerun(config, job, job_return)
        except Exception:
            if job.rerun.tracking_uri.startswith(("http://", "https://")):  # a server that did not come back
                jobs.stop_if_store_gone(job.rerun.tracking_uri, job.rerun.seed)
            raise
        finally:
            job.seams.restore()

    def _close_rerun(self, config: DictConfig, job: jobs.Job, job_return: Any) -> None:
        returned, error = job_result(job_return)
        outcome = jobs.close_job(job, returned, error, bars=self.bars(), kind=self.run_kind, bar_tags=self.bar_tags,
                                 on_disk_full=self._abandoned if getattr(self, "sweep", None) is not None else None)
        if self._job_place(config).multirun:  # to a sweeper that asked for it (the curtailing sweeper)
            OutcomeChannel(self._job_place(config).sweep_dir).post(int(config.hydra.job.num), outcome)
        else:
            self._single_run_id = job.rerun.run_id  # printed when the run ends
        self._report(job, outcome)
        if self._progress is not None and self._progress.pid == os.getpid():  # jobs in this process
            self._progress.step(any(self.bars().fails(outcome, self.metrics[0])[:1]), self.taus[0])
        if self._job_place(config).multirun:  # a failed rerun is recorded as such; the sweep goes on
            hand_back(job_return)

    def _report(self, job: jobs.Job, outcome: dict[str, Any]) -> None:
        self.bars().report(job.label, job.rerun.run_id, outcome, time.monotonic() - job.started)


class AcceptanceSweepCallback(RecipeAuditCallback):
    """``experiment=acceptance``: every job (one defense cell x one seed) gets its run the way a
    rerun does, opened and closed here (FAILED with its error when the job raises, the sweep going
    on; exit 1 at the end), tagged as an acceptance cell; when the multirun ends, the acceptance
    cards of its defense cells. A cell has no release bar: no pass/fail tags, no bar count."""

    run_kind = KIND_ACCEPTANCE_CELL
    failed_noun = "acceptance cell(s)"
    failed_consequence = "the acceptance card leaves them out"

    def _job_run(self, new, resolved: dict[str, Any]):
        import dataclasses

        from recipe_audit import keys
        from recipe_audit.acceptance.experiment import cell_run
        from recipe_audit.app.schema import typed
        from recipe_audit.config import DefenseConfig, ExperimentConfig

        name, cell_tags = cell_run(typed(resolved["experiment"], ExperimentConfig),
                                   typed(resolved["defense"], DefenseConfig), int(new.seed))
        return dataclasses.replace(new, run_name=name, own_tags=cell_tags, without=(keys.TAG_MODEL, keys.TAG_TASK))

    def _open_rerun(self, config: DictConfig) -> jobs.Job:
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

    def _report(self, job: jobs.Job, outcome: dict[str, Any]) -> None:
        if outcome["status"] != "FINISHED":  # a finished cell logged its own line
            super()._report(job, outcome)

    def _cards(self, sweep, config: DictConfig) -> None:
        from recipe_audit.acceptance.experiment import AcceptanceCardError, acceptance_card_for_sweep
        from recipe_audit.app.schema import typed
        from recipe_audit.config import ExperimentConfig

        try:
            acceptance_card_for_sweep(sweep, typed(config.experiment, ExperimentConfig), Path(str(config.hydra.sweep.dir)))
        except AcceptanceCardError as exc:  # cells finished, yet no card: not a sweep that succeeded
            stop(str(exc))
