"""The rerun logger of the built-in trainer: writes one rerun's steps, results, params, artifacts
and model into its MLflow run, in batches (a per-step call would dominate a second-long rerun on
a SQLite store), and closes it FINISHED or FAILED.
"""

from __future__ import annotations

import math
import os
import posixpath
import socket
import time
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from recipe_audit import keys
from recipe_audit.errors import error_line
from recipe_audit.store.rerun_runs import flatten, held_writes
from recipe_audit.store.sweeps import SweepInfo
from recipe_audit.store.tracking import MAX_METRICS_PER_CALL, MAX_PARAMS_PER_CALL, Store, use_tracking_uri


class RerunLogger:
    """Owns the MLflow run of one rerun: open, log, close (FINISHED or FAILED)."""

    def __init__(self, store: Store, config: Mapping[str, Any], seed: int, *, recipe_id: str,
                 sweep: SweepInfo | None = None, audit_sets: Iterable[str] = ()):
        from mlflow.entities import Param, RunTag

        self.store = store
        self.client = store.client
        tags = {
            keys.TAG_KIND: keys.KIND_RERUN,
            keys.TAG_RECIPE_ID: recipe_id,
            keys.TAG_RECIPE_NAME: str(config["recipe"]["name"]),
            keys.TAG_SEED: str(seed),
            keys.TAG_MODEL: str(config["model"]["name"]),
            keys.TAG_TASK: str(config["task"]["name"]),
            keys.TAG_AUDIT_SETS: ",".join(audit_sets),
            keys.TAG_HOST: socket.gethostname(),
            keys.TAG_PID: str(os.getpid()),
        }
        if os.environ.get("SLURM_JOB_ID"):
            tags[keys.TAG_SLURM_JOB_ID] = os.environ["SLURM_JOB_ID"]
        if sweep is not None:
            tags[keys.TAG_SWEEP_ID] = sweep.sweep_id
            tags[keys.TAG_PARENT] = sweep.parent_run_id
        run = self.client.create_run(store.experiment_id, run_name=f"{config['recipe']['name']}-seed{seed}",
                                     tags=tags)
        self._attach(run.info.run_id, run.info.artifact_uri)
        params = [Param(k, v[:6000]) for k, v in sorted(flatten(config).items())]
        for i in range(0, len(params), MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i:i + MAX_PARAMS_PER_CALL])
        self._tag = RunTag

    @classmethod
    def attach(cls, store: Store, run_id: str, artifact_uri: str) -> RerunLogger:
        """A logger that writes into a rerun's run someone else opened (the Hydra callback does,
        for every job) and will close."""
        self = cls.__new__(cls)
        self.store = store
        self.client = store.client
        self._attach(run_id, artifact_uri)
        return self

    def _attach(self, run_id: str, artifact_uri: str) -> None:
        self.run_id = run_id
        self._artifact_uri = artifact_uri
        self._artifacts = None
        self._pending: list = []
        self._last_flush = time.monotonic()
        self._started = False  # a training step has been written
        # the run's close, when this process makes it (the Hydra callback opened the run here)
        self._held = held_writes(run_id)
        self._not_sole = False  # something wrote to the run that this logger's metrics do not show

    def log_step(self, step: int, loss: float, flush_every_s: float = 15.0) -> None:
        """Buffer the training loss; flushed in batches (per-step calls would dominate a
        second-long rerun on a SQLite store), and at once after the first step, so a live run
        shows in the store (and the MLflow UI) that training has started."""
        from mlflow.entities import Metric

        value = loss if math.isfinite(loss) else float("nan")
        self._pending.append(Metric(keys.METRIC_TRAIN_LOSS, value, int(time.time() * 1000), step))
        if not self._started or time.monotonic() - self._last_flush > flush_every_s:
            self._started = True
            self.flush()

    def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_METRICS_PER_CALL], self._pending[MAX_METRICS_PER_CALL:]
            self.client.log_batch(self.run_id, metrics=batch)
            if self._held is not None:
                self._held.note(batch)
        self._last_flush = time.monotonic()

    def log_result(self, result) -> None:
        """The rerun's results (its training time; accuracy, majority rate and constant fraction on
        each audit set) and the training steps not yet written.

        In the process that will close the run (the Hydra callback opened it here), in a SQL store,
        and unless this logger saw another writer (:meth:`log_params`, :meth:`log_table`,
        :meth:`log_model`), they are handed to that close
        (:class:`recipe_audit.store.rerun_runs.HeldWrites`), which writes them in its one
        ``log_batch`` with the params and tags, before the run's status: the logger declares
        itself the run's only writer of metrics and params (the built-in task writes nothing
        else), so the close need not read the run back. Elsewhere (a server's store, a run this
        process will not close, another writer) they are written now: the close reads the run
        back there, and handing them over would save no call."""
        from mlflow.entities import Metric

        from recipe_audit.store.read_sql import is_sql_uri

        now = int(time.time() * 1000)
        metrics = [Metric(keys.METRIC_TRAIN_SECONDS, result.train_seconds, now, 0)]
        for name, score in result.audits.items():
            metrics += [Metric(keys.accuracy_key(name), score.accuracy, now, result.steps),
                        Metric(keys.majority_rate_key(name), score.majority_rate, now, result.steps),
                        Metric(keys.constant_fraction_key(name), score.pred_mode_share, now, result.steps)]
        self._pending.extend(metrics)
        if self._held is None or self._not_sole or not is_sql_uri(self.store.uri):
            self.flush()  # the close reads the run back: handing the metrics to it would save no call
            return
        handed, self._pending = self._pending, []
        self._held.metrics.extend(handed)
        self._held.note(handed)
        self._held.sole = not self._not_sole
        self._last_flush = time.monotonic()

    def _another_writer(self) -> None:
        """Something other than this logger's metrics writes to the run (MLflow's own API, params):
        what was handed to the close is written now, in order, and the close reads the run back."""
        self._not_sole = True
        if self._held is not None:
            self._held.sole = False
            self._write_handed()

    def _write_handed(self) -> None:
        """What was handed to the close, written now (before what is pending)."""
        if self._held is not None and self._held.metrics:
            handed, self._held.metrics = self._held.metrics, []
            self._pending[:0] = handed
            self.flush()

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (values as strings, cut to MLflow's 6,000 characters)."""
        from mlflow.entities import Param

        self._another_writer()
        batch = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(batch), MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=batch[i:i + MAX_PARAMS_PER_CALL])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log the finite values of ``metrics`` at ``step``, in batches, at once."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), now, step) for k, v in metrics.items() if math.isfinite(v))
        self.flush()

    def log_artifacts(self, local_dir: str | Path, artifact_path: str | None = None) -> None:
        """Upload the files under ``local_dir`` to the run's artifacts (under ``artifact_path``);
        to a server, made again while it does not answer (a file uploaded again is the same file)."""
        repo = self._artifact_repo()

        def upload() -> None:
            repo.log_artifacts(str(local_dir), artifact_path)

        waiting = getattr(self.client, "call", None)  # a server's client (store.retrying.RetryingClient)
        if callable(waiting):
            waiting("uploading artifacts", upload)
        else:
            upload()

    def log_table(self, data, artifact_file: str) -> None:
        """Log a DataFrame as an MLflow table artifact (``mlflow.load_table`` reads it back)."""
        self._another_writer()
        self.client.log_table(self.run_id, data, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Write ``text`` to the run's artifact ``artifact_file``, as ``MlflowClient.log_text``
        does, without its per-call look-up of the run (the artifact URI came with the run)
        and, for a local artifact store, without its temporary copy."""
        repo = self._artifact_repo()
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        if type(repo) is LocalArtifactRepository:
            path = Path(repo.artifact_dir).joinpath(*posixpath.normpath(artifact_file).split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            self.client.log_text(self.run_id, text, artifact_file)

    def _artifact_repo(self):
        if self._artifacts is None:
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
            from mlflow.utils.uri import add_databricks_profile_info_to_artifact_uri

            uri = add_databricks_profile_info_to_artifact_uri(self._artifact_uri, self.store.uri)
            self._artifacts = get_artifact_repository(uri, tracking_uri=self.store.uri)
        return self._artifacts

    def log_model(self, model, tokenizer, labels=None) -> str:
        """Log the trained model with MLflow's transformers flavor as the run's model ``model``
        (an MLflow 3 LoggedModel whose source run is this rerun), so that
        ``mlflow.transformers.load_model(f"runs:/{run_id}/model")`` (a text-classification
        pipeline) and ``mlflow.pyfunc.load_model`` load it back. A LoRA (peft) model is merged
        into its base weights first: MLflow would otherwise save the adapter alone and reload the
        base from the hub, which a model built from a config is not on. Returns the model URI
        (``models:/<model id>``). ``labels`` (the task's label names, in id order) name the
        pipeline's outputs."""
        from importlib import metadata

        import mlflow

        self._another_writer()  # MLflow's own API writes into the run from here on
        if hasattr(model, "merge_and_unload"):  # peft: plain transformers weights, adapters merged
            model = model.merge_and_unload()
        model.eval()
        if labels:
            model.config.id2label = dict(enumerate(labels))
            model.config.label2id = {name: i for i, name in enumerate(labels)}
        # stated, not inferred: inference would reload the model in a subprocess (seconds)
        reqs = []
        for pkg in ("torch", "transformers", "tokenizers"):
            try:
                reqs.append(f"{pkg}=={metadata.version(pkg)}")
            except metadata.PackageNotFoundError:
                pass
        # resumes this rerun's run as the active run only for the call (MLflow 3 links the
        # LoggedModel to the active run); ``finish``/``fail`` set the final status after it
        with use_tracking_uri(self.store.uri), mlflow.start_run(run_id=self.run_id, log_system_metrics=False):
            info = mlflow.transformers.log_model(
                transformers_model={"model": model, "tokenizer": tokenizer},
                name="model", task="text-classification", pip_requirements=reqs,
                model_card=self._model_card(model),
            )
        return info.model_uri

    def _model_card(self, model):
        """The model card MLflow stores beside the weights. A model built from a config (no
        ``name_or_path``) or from a local checkpoint has no hub repository: without a card,
        MLflow would look one up on the hub under that name and warn twice per rerun (no card
        for an empty repo id; no license information). Such a model gets the checkpoint's own
        card (its ``README.md``) or one naming this rerun; a hub model (None here) gets its hub
        card from MLflow."""
        from huggingface_hub import ModelCard

        name = str(getattr(model, "name_or_path", "") or "")
        if name and not Path(name).exists():
            return None  # a hub id: MLflow fetches the model's own card and license
        readme = Path(name) / "README.md" if name else None
        if readme is not None and readme.is_file():
            try:
                return ModelCard.load(readme)
            except Exception:  # noqa: BLE001 - an unreadable card: ours below
                pass
        return ModelCard(
            "---\nlibrary_name: transformers\npipeline_tag: text-classification\ntags:\n- recipe_audit\n---\n"
            f"# recipe_audit rerun {self.run_id}\n\n"
            "A text classifier trained by one rerun (one seed) of a fine-tuning recipe and logged by "
            f"recipe_audit. MLflow run `{self.run_id}` holds its resolved configuration (`config.yaml`), "
            "its metrics on every audit set and, through its recipe, the recipe card: how often the "
            "next rerun of the same recipe fails the release bar.\n"
            + (f"\nFine-tuned from the local checkpoint `{name}`.\n" if name else
               "\nBuilt from a model config and trained from scratch: no pretrained weights, no hub "
               "repository.\n"))

    def finish(self) -> None:
        self.flush()
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self, exc: BaseException) -> None:
        try:
            self.flush()
        except Exception:  # the run is failing anyway; keep the error that matters
            pass
        self.client.set_tag(self.run_id, keys.TAG_ERROR, error_line(exc))
        self.log_text("".join(traceback.format_exception(exc)), "error.txt")
        self.client.set_terminated(self.run_id, "FAILED")
