"""The MLflow model registry, as attaching cards and the release gate use it
(:mod:`recipe_audit.release.registry` decides; this module only reads and writes).

Every read that can fail for a reason the user should hear raises :class:`RegistryError` with
one sentence; the ``*_or_none`` reads say "absent" instead; the deletions of :meth:`ModelRegistry.undo`
are best effort.
"""

from __future__ import annotations

from typing import Any

from recipe_audit import keys
from recipe_audit.errors import first_line

__all__ = ["MODEL_NAME", "ModelRegistry", "RegistryError"]

MODEL_NAME = "model"  # the name RerunLogger.log_model logs the model under


class RegistryError(ValueError):
    """The registry request cannot be carried out (one sentence)."""


def _error_code(exc: BaseException) -> str:
    return str(getattr(exc, "error_code", ""))


def _absent(exc: BaseException) -> bool:
    return "RESOURCE_DOES_NOT_EXIST" in _error_code(exc) or "not found" in str(exc).lower()


class ModelRegistry:
    """The model registry of one tracking store (its registry URI is the tracking URI)."""

    def __init__(self, tracking_uri: str):
        from mlflow.tracking import MlflowClient

        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    # ---- reads

    def model(self, name: str):
        """The ``RegisteredModel`` ``name``; ``RegistryError`` when there is none."""
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_registered_model(name)
        except MlflowException as exc:
            if _absent(exc):
                raise RegistryError(f"There is no registered model named '{name}'.") from None
            raise RegistryError(f"Cannot read registered model '{name}': {first_line(exc, 300)}") from None

    def _or_none(self, read, *args):
        """``read(*args)``, or None when MLflow says it cannot (absent, or unreadable)."""
        from mlflow.exceptions import MlflowException

        try:
            return read(*args)
        except MlflowException:
            return None

    def model_or_none(self, name: str):
        return self._or_none(self.client.get_registered_model, name)

    def version(self, name: str, version: str | None = None, alias: str | None = None):
        """The ``ModelVersion`` named by ``version`` or ``alias``; ``RegistryError`` (one sentence)
        for an unknown model, version or alias."""
        from mlflow.exceptions import MlflowException

        if (version is None) == (alias is None):
            raise RegistryError("Name the model version with --version or --alias (one of them).")
        self.model(name)
        try:
            if alias is not None:
                return self.client.get_model_version_by_alias(name, alias)
            if not str(version).isdigit():
                raise RegistryError(f"A model version is a positive whole number, not '{version}'.")
            return self.client.get_model_version(name, str(version))
        except MlflowException as exc:
            what = f"alias '{alias}'" if alias is not None else f"version {version}"
            if _absent(exc) or "INVALID_PARAMETER_VALUE" in _error_code(exc):
                raise RegistryError(f"Registered model '{name}' has no {what}.") from None
            raise RegistryError(f"Cannot read {what} of model '{name}': {first_line(exc, 300)}") from None

    def run_or_none(self, run_id: str):
        return self._or_none(self.client.get_run, run_id)

    def experiment_or_none(self, name: str):
        return self._or_none(self.client.get_experiment_by_name, name)

    def experiment_by_id_or_none(self, experiment_id: str):
        return self._or_none(self.client.get_experiment, experiment_id)

    def attached_card_uris(self, experiment_id: str, attached_to: str) -> list[str]:
        """``runs:/<id>/card.json`` of the finished card runs of an experiment tagged
        ``recipe_audit.attached_to = attached_to`` (``<model>/<version>``), newest first."""
        from mlflow.exceptions import MlflowException

        tag = keys.PREFIX + "attached_to"
        try:
            runs = self.client.search_runs(
                [experiment_id], f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}' and tags.`{tag}` = '{attached_to}' "
                                 f"and attributes.status = 'FINISHED'", max_results=1000,
                order_by=["attributes.start_time DESC"])
        except MlflowException:
            return []
        return [f"runs:/{r.info.run_id}/card.json" for r in runs]

    def logged_model(self, run_id: str) -> tuple[str, str | None, Any]:
        """(source URI, logged model id or None, run) of the model a rerun logged (``tracking.log_model
        =true``): its MLflow 3 LoggedModel named ``model``, or an MLmodel in the run's artifacts."""
        from mlflow.exceptions import MlflowException

        run = self.run_or_none(run_id)
        if run is None:
            raise RegistryError(f"There is no run '{run_id}' in the tracking store.")
        found = []
        try:
            page = None
            while True:
                models = self.client.search_logged_models(experiment_ids=[run.info.experiment_id],
                                                          filter_string=f"name = '{MODEL_NAME}'", page_token=page)
                found += [m for m in models if m.source_run_id == run_id]
                page = models.token
                if not page:
                    break
        except MlflowException:
            found = []
        if found:
            model = max(found, key=lambda m: m.creation_timestamp or 0)
            return f"models:/{model.model_id}", model.model_id, run
        try:
            names = {a.path for a in self.client.list_artifacts(run_id, MODEL_NAME)}
        except Exception:  # noqa: BLE001 - an artifact store that cannot list: no model found there
            names = set()
        if f"{MODEL_NAME}/MLmodel" in names:
            return f"runs:/{run_id}/{MODEL_NAME}", None, run
        raise RegistryError(f"Run '{run_id}' logged no model; rerun it with tracking.log_model=true.")

    # ---- writes

    def create_model(self, name: str) -> None:
        self.client.create_registered_model(name)

    def create_version(self, name: str, source: str, run_id: str, model_id: str | None):
        from recipe_audit.store.tracking import use_tracking_uri

        with use_tracking_uri(self.tracking_uri):  # MLflow resolves a models:/ source with the global URI
            return self.client.create_model_version(name, source, run_id=run_id, model_id=model_id)

    def set_version_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.client.set_model_version_tag(name, version, key, value)

    def delete_version_tag(self, name: str, version: str, key: str) -> None:
        self.client.delete_model_version_tag(name, version, key)

    def set_model_tag(self, name: str, key: str, value: str) -> None:
        self.client.set_registered_model_tag(name, key, value)

    def model_tags(self, name: str) -> dict[str, str]:
        return dict(self.client.get_registered_model(name).tags or {})

    def set_description(self, name: str, version: str, description: str) -> None:
        self.client.update_model_version(name, version, description=description)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(name, alias, version)

    def undo(self, name: str, version: str | None, *, created_model: bool, created_version: bool,
             old_tags: dict[str, str | None], old_description: str | None, runs: list[str],
             old_model_tags: dict[str, str | None] | None = None) -> None:
        """Best effort: remove what a failed attach wrote (the version it registered, or the tags
        and description it changed; the model's tags it changed; the model it created; the card
        runs it logged)."""
        def quietly(fn, *args, **kw):
            try:
                fn(*args, **kw)
            except Exception:  # noqa: BLE001 - undoing: whatever can be removed is
                pass

        c = self.client
        if created_version and version is not None:
            quietly(c.delete_model_version, name, version)
        elif version is not None:
            for k, v in old_tags.items():
                if v is None:
                    quietly(c.delete_model_version_tag, name, version, k)
                else:
                    quietly(c.set_model_version_tag, name, version, k, v)
            quietly(c.update_model_version, name, version, description=old_description or "")
        if created_model:
            quietly(c.delete_registered_model, name)
        else:
            for k, v in (old_model_tags or {}).items():
                if v is None:
                    quietly(c.delete_registered_model_tag, name, k)
                else:
                    quietly(c.set_registered_model_tag, name, k, v)
        for rid in runs:
            quietly(c.delete_run, rid)
