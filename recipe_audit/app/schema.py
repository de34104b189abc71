"""The structured configs Hydra validates against: the recipe_audit callback's
(``hydra.callbacks.recipe_audit``, :func:`register`) and the built-in app's groups
(:func:`register_configs`, from the dataclasses of :mod:`recipe_audit.config`).

Registered in Hydra's ConfigStore as the base of ``hydra/callbacks/recipe_audit.yaml``, so an
unknown option (a typo) fails when Hydra composes the config, before any job runs. Light on
purpose: the search-path plugin imports it in every Hydra app at start-up.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from recipe_audit.config import with_audit_options
from recipe_audit.stats.options import option_fields

CALLBACK_TARGET = "recipe_audit.app.callback.RecipeAuditCallback"
#: The OmegaConf resolver the built-in app's YAML derives the callback's identity_exclude with
#: (``${recipe_audit.identity_exclude:recipe}``), registered by :func:`register_configs`.
IDENTITY_EXCLUDE_RESOLVER = "recipe_audit.identity_exclude"
#: The ConfigStore node (in ``hydra/recipe_audit_schemas``) that points each of the callback's audit
#: options at the built-in app's ``audit`` node (``eps: ${audit.eps}``), stored by :func:`register_configs`.
CALLBACK_AUDIT_OPTIONS = "callback_audit_options"


@with_audit_options
class RecipeAuditCallbackConfig:
    _target_: str = CALLBACK_TARGET
    # required: the metric(s) a card is computed on, a metric key each rerun logs (or a task
    # function returns): "eval_accuracy", or a list of them, one card each. Checked, with one
    # sentence, when the multirun starts (a ??? here would fail later, with a traceback)
    metric: Any = None
    # the config key that holds the seed (dotted for a nested key: "trainer.seed")
    seed_key: str = "seed"
    # config keys (dotted) left out of the recipe identity besides the seed and what depends on
    # where or when a job runs (Hydra's runtime, output and logging paths, the clock)
    identity_exclude: list[str] = field(default_factory=list)
    # default: the app's job name (hydra.job.name)
    experiment_name: str | None = None
    # default: $MLFLOW_TRACKING_URI, else the SQLite store ./mlruns/mlflow.db
    tracking_uri: str | None = None
    # continue the interrupted sweep: seeds with a finished rerun of every recipe are not run again
    resume: bool = False
    card_on_multirun_end: bool = True
    # torch threads per rerun the sweep decides for its jobs: "auto" decides once, when the multirun
    # starts, from the free CPUs and the launcher's reruns at once, and hands the number to every job
    # as $RECIPE_AUDIT_THREADS (the built-in app passes its `threads` option); a number is recorded
    # as it is; None (the default in other apps) decides nothing
    threads: Any = None
    # the GPUs the sweep places its reruns on (recipe_audit/app/devices.py), decided once when the
    # multirun starts, logged, handed to the jobs as $RECIPE_AUDIT_DEVICES, tagged on each rerun as
    # recipe_audit.devices: "auto" takes $CUDA_VISIBLE_DEVICES, else nvidia-smi's GPUs (none: nothing
    # happens); a list ([0,1]) names them; "none" places nothing
    devices: Any = "auto"
    # reruns that share one GPU (small models): k to a GPU; 1 gives each rerun GPUs of its own
    reruns_per_gpu: int = 1
    # sign the sweep's cards (recipe_audit/cards/signing.py): the path of an elliptic-curve private
    # key's PEM file; default: $RECIPE_AUDIT_SIGNING_KEY (a path, or the PEM itself: a CI secret),
    # else the cards are not signed. Never the key itself here: Hydra writes this config to disk
    signing_key: str | None = None
    # then the card's options, a field each (with_audit_options), declared once with their defaults
    # and requirements in recipe_audit.stats.options.AuditOptions: the release bars taus, the failure
    # budget eps, the risk delta, family_size, anytime, what unfinished reruns are ("fail" counts them
    # as failures, "refuse" refuses) and the metric's direction higher_is_better


def register() -> None:
    """Store the schema (idempotent) as ``hydra/recipe_audit_schemas/callback`` (under hydra/: not one of the app's groups in its --help)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="hydra/recipe_audit_schemas", name="callback",
                                 node=RecipeAuditCallbackConfig, provider="recipe_audit")


def register_configs() -> None:
    """Store the schemas so YAML files can extend them
    (``defaults: [/hydra/recipe_audit_schemas/model@_here_, _self_]``).

    They live under ``hydra/`` (``hydra/recipe_audit_schemas/<group>``), like the callback's: a
    group of the app's own would list them as options in ``python -m recipe_audit --help``."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from recipe_audit.config import (
        SCHEMA_GROUP,
        AuditConfig,
        DefenseConfig,
        ModelConfig,
        RecipeConfig,
        RunConfig,
        TaskConfig,
        TrackingConfig,
        identity_exclude,
    )

    # ${recipe_audit.identity_exclude:recipe}: the callback's identity_exclude in conf/config.yaml
    # (and :acceptance in conf/experiment/acceptance.yaml), derived from RunConfig's declaration
    OmegaConf.register_new_resolver(IDENTITY_EXCLUDE_RESOLVER, identity_exclude, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=RunConfig)
    # the callback's audit options in the built-in app: ${audit.<option>} for every declared option
    # (conf/config.yaml places this node at hydra.callbacks.recipe_audit)
    cs.store(group=SCHEMA_GROUP, name=CALLBACK_AUDIT_OPTIONS,
             node={f.name: f"${{audit.{f.name}}}" for f in option_fields()}, provider="recipe_audit")
    for group, node in (("model", ModelConfig), ("task", TaskConfig), ("recipe", RecipeConfig),
                        ("audit", AuditConfig), ("tracking", TrackingConfig), ("defense", DefenseConfig)):
        cs.store(group=SCHEMA_GROUP, name=group, node=node, provider="recipe_audit")
    register()  # hydra/callbacks=recipe_audit (also done by the search-path plugin)
    register_plugin()  # hydra/sweeper=curtail


def register_plugin() -> None:
    """Register the plugin classes with Hydra by name. Hydra finds plugins by scanning the
    ``hydra_plugins`` namespace package, which does not see packages of a PEP 660 editable install
    (facebookresearch/hydra#2359, #3252), so the app registers its own sweepers explicitly
    (``Plugins.register``, idempotent). Without the plugin package installed this does nothing."""
    try:
        from hydra_plugins.recipe_audit import plugins
    except ImportError:
        return
    from hydra.core.plugins import Plugins

    for name in ("CurtailingSweeper", "SeedSweeper", "SeedLauncher",
                 # built on optional Hydra plugins: the joblib workers (the 'parallel' extra) and
                 # the submitit launchers that survive a dead rerun (the 'cluster' extra)
                 "SeedJoblibLauncher", "TolerantLocalLauncher", "TolerantSlurmLauncher"):
        if getattr(plugins, name, None) is not None:
            Plugins.instance().register(getattr(plugins, name))


def typed(node: Any, schema: type) -> Any:
    """``node`` (a config node of ``schema``'s shape, or its plain dict) as a ``schema`` dataclass:
    ``OmegaConf.to_object`` on the structured config, so a value of the wrong type fails here, in
    OmegaConf's words."""
    from omegaconf import DictConfig, OmegaConf

    if not (isinstance(node, DictConfig) and OmegaConf.get_type(node) is schema):
        node = OmegaConf.merge(OmegaConf.structured(schema), node)
    return OmegaConf.to_object(node)
