"""A sweep logged the way recipe_audit logs one (the contract of keys.py), without training."""

from __future__ import annotations


def synthetic_sweep(uri: str, values: dict, *, experiment: str = "exp", recipe_id: str = "r" * 16,
                    planned=None, statuses: dict | None = None, metric: str = "accuracy/calibration",
                    extra_params: dict | None = None, sweep_id: str | None = None, bar_taus=(),
                    higher_is_better: bool = True) -> str:
    """Log a sweep the way recipe_audit does (keys.py contract), without training: a parent run
    with planned seeds and the metric's direction, and one nested rerun per ``values`` item (seed
    -> metric or None for 'never logged the metric'). ``statuses`` maps seed -> final status
    (default FINISHED). ``bar_taus``: the release bars each rerun is tagged at as it ends (the
    callback's ``recipe_audit.fails.<metric>.tau_<τ>``: ``true`` when it fails the bar or did
    not finish with the metric)."""
    import json
    import math

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    planned = sorted(values) if planned is None else list(planned)
    sweep_id = sweep_id or f"sw{recipe_id[:6]}"
    parent = client.create_run(exp_id, tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: sweep_id,
                                             keys.TAG_PLANNED_SEEDS: json.dumps(planned),
                                             keys.TAG_HIGHER_IS_BETTER: str(higher_is_better).lower()}).info.run_id
    for seed, value in values.items():
        run = client.create_run(exp_id, run_name=f"seed{seed}", tags={
            keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: recipe_id, keys.TAG_SEED: str(seed),
            keys.TAG_PARENT: parent, keys.TAG_SWEEP_ID: sweep_id, keys.TAG_MODEL: "m", keys.TAG_TASK: "t"})
        params = [Param("seed", str(seed)), Param("recipe.name", "r")] + [
            Param(k, str(v)) for k, v in (extra_params or {}).items()]
        metrics = [] if value is None else [Metric(metric, float(value), 0, 0)]
        status = (statuses or {}).get(seed, "FINISHED")
        done = status == "FINISHED" and value is not None and math.isfinite(value)
        bars = [RunTag(keys.fails_tag(metric, t), str(not done or (value < t if higher_is_better else value > t))
                       .lower()) for t in (bar_taus if status != "RUNNING" else ())]
        client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=[RunTag("x", "y"), *bars])
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status)
    client.set_terminated(parent, "FINISHED")
    return parent
