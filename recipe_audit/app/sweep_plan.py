"""The sweep's plan, read out of Hydra's config: the seeds it launches, how many recipes, where a
callback option was set, and what a job's rerun is opened with (plain data for the store).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from recipe_audit.app.process import one_line
from recipe_audit.identity import config_identity


class CallbackOptionError(ValueError):
    """The callback's options or the app's config cannot make a card (one sentence)."""


def option_name(config: DictConfig | None, option: str) -> str:
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


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def select_str(d: Mapping[str, Any], dotted: str) -> str | None:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, str) and node else None


def job_config(config: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's config without Hydra's node: resolved, and as written (interpolations unresolved).

    What the task function sees (Hydra removes its node from the task's config), resolved as in a
    copy of the config without that node. Each section is read in place, without copying it (the
    copy was most of this function's time, every job): its interpolations
    resolve against the same keys as in the copy. The one thing the copy resolves differently is
    a reference to Hydra's node itself (``${hydra.job.name}``; the task cannot resolve it either),
    so a config with such a string is read from the copy, as before."""
    keys = [k for k in config if k != "hydra"]
    nodes = dict(config.items_ex(resolve=False))  # a section's node, a value as written
    sections = [k for k in keys if OmegaConf.is_config(nodes[k]) and not OmegaConf.is_interpolation(config, k)
                and not OmegaConf.is_missing(config, k) and config[k] is not None]
    leaves = [k for k in keys if k not in sections]
    raw_leaves = OmegaConf.to_container(OmegaConf.masked_copy(config, leaves), resolve=False)  # a few values
    raw = {k: raw_leaves[k] if k in raw_leaves else OmegaConf.to_container(config[k], resolve=False) for k in keys}
    if _refers_to_hydras_node(raw):
        task = OmegaConf.masked_copy(config, keys)
        return OmegaConf.to_container(task, resolve=True), OmegaConf.to_container(task, resolve=False)
    resolved = {k: _resolved(config, k) for k in keys}
    return resolved, raw


def _resolved(config: DictConfig, key: str) -> Any:
    """``config[key]`` resolved in place, as ``OmegaConf.to_container(..., resolve=True)`` gives it
    (a mandatory value left unset stays ``???``)."""
    if OmegaConf.is_missing(config, key):
        return "???"
    value = config[key]
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


_HYDRA_KEY = re.compile(r"(?<!\w)hydra(?![\w:])")  # the key "hydra", not "hydra:" (the resolver) nor "my_hydra"


def _refers_to_hydras_node(raw: Any) -> bool:
    """Whether a string of ``raw`` (a config as written) may interpolate Hydra's node by its key
    (``${hydra.job.name}``, ``${hydra}``, ``${oc.select:hydra,none}``, ``${..hydra.x}``; Hydra's
    resolver, ``${hydra:job.name}``, is not its node)."""
    if isinstance(raw, str):
        return "${" in raw and _HYDRA_KEY.search(raw) is not None
    if isinstance(raw, dict):
        return any(_refers_to_hydras_node(v) for v in raw.values())
    if isinstance(raw, list):
        return any(_refers_to_hydras_node(v) for v in raw)
    return False


def seed_override(config: DictConfig, seed_key: str) -> str | None:
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

    spec = seed_override(config, seed_key)
    if spec is None:
        value = OmegaConf.select(config, seed_key)
        if not is_int(value):
            raise CallbackOptionError(f"The seed '{seed_key}' must be an integer, not {value!r}.")
        return [value]
    try:
        override = OverridesParser.create().parse_overrides([spec])[0]
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    except Exception as exc:  # noqa: BLE001 - Hydra's parser errors
        raise CallbackOptionError(f"Cannot read the seeds of '{spec}': {one_line(exc)}") from None
    if not values or not all(is_int(v) for v in values):
        raise CallbackOptionError(f"The seed values must be integers, not {spec.split('=', 1)[1]}.")
    return [int(v) for v in values]


def set_seeds(config: DictConfig, seed_key: str, seeds: Sequence[int]) -> None:
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


def n_recipes(config: DictConfig, seed_key: str) -> int | None:
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


def launched_seeds(config: DictConfig, seed_key: str, sweep) -> list[int]:
    try:
        return planned_seeds(config, seed_key)  # after a resume: the seeds left to run
    except CallbackOptionError:
        return list(sweep.planned_seeds)


def job_place(config: DictConfig, uri: str, experiment: str):
    """What every job of this multirun shares, read from Hydra's config (once a process: a look-up
    there walks the config's parents and flags; profiled as a visible share of the callback's
    time per job)."""
    from recipe_audit.app.jobs import JobPlace

    return JobPlace(uri=uri, experiment=experiment,
                    multirun=str(OmegaConf.select(config, "hydra.mode")) == "RunMode.MULTIRUN",
                    sweep_dir=str(OmegaConf.select(config, "hydra.sweep.dir")),
                    run_dir=str(OmegaConf.select(config, "hydra.run.dir")),
                    job_name=str(OmegaConf.select(config, "hydra.job.name")))


def job_rerun(config: DictConfig, place, seed_key: str, identity_exclude: Sequence[str]):
    """A job's rerun as its config says: a :class:`recipe_audit.store.rerun_runs.NewRerun` (its
    name, seed, recipe identity and name, model and task), the job's config resolved and as
    written (interpolations unresolved)."""
    from recipe_audit.store.rerun_runs import NewRerun

    seed = OmegaConf.select(config, seed_key)
    resolved, raw = job_config(config)
    runtime_paths = [OmegaConf.select(config, "hydra.runtime.output_dir"), place.sweep_dir, place.run_dir]
    recipe_id = config_identity(resolved, (seed_key, *identity_exclude), raw=raw,
                                runtime_paths=[str(p) for p in runtime_paths if p], follows=(seed_key,))
    overrides = [o for o in (OmegaConf.select(config, "hydra.overrides.task") or [])
                 if o.split("=", 1)[0].lstrip("+~") != seed_key]
    recipe_name = select_str(resolved, "recipe.name") or " ".join(overrides) or place.job_name
    label = select_str(resolved, "recipe.name") or place.job_name
    new = NewRerun(run_name=f"{label}-seed{seed}", seed=seed, recipe_id=recipe_id, recipe_name=recipe_name,
                   model=select_str(resolved, "model.name"), task=select_str(resolved, "task.name"))
    return new, resolved, raw
