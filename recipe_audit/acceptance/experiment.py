"""The worked acceptance audit, end to end: install a framing gap, train defenses, audit them,
on this CPU, through the Hydra app and the MLflow store.

    python -m recipe_audit -m experiment=acceptance               # 4 cells x 3 seeds, then the cards
    python -m recipe_audit -m experiment=acceptance size=small    # the test-sized version

This module is the orchestration; the training lives in :mod:`recipe_audit.train.acceptance`
(the data in ``data``, the cached base model in ``base``, the install fine-tune with its
defense in ``install``, diagnostic (c)'s gradients in ``weights``), and its config is the typed
:class:`~recipe_audit.config.ExperimentConfig` (with a :class:`~recipe_audit.config.DefenseConfig`
per cell), which ``recipe_audit.app`` makes with ``OmegaConf.to_object``.

* **Job** (:func:`run_cell_job`; one Hydra job = one defense cell x one seed): the seed's base
  (trained by its first job, cached by a hash of its config, shared by the seed's cells; a base
  that cannot be trained or did not learn the task raises
  :class:`~recipe_audit.train.acceptance.base.BaseModelError`: the job's run is recorded FAILED
  and the sweep stops), then the cell's install
  fine-tune.
* **Records**: every held-out / fresh / cross-task item of the cell scored, logged as the MLflow
  table ``eval_records.json`` of the job's run; the adapter (with the base fingerprint) as the
  artifact ``adapter``. The run is opened and closed by the sweep callback
  (``AcceptanceSweepCallback``) as a rerun's is, and written through ``rerun_log.RerunLogger``.
* **Card** (:func:`acceptance_card_for_sweep`, at multirun end in the launching process): one acceptance card
  per defense cell against the baseline of the same seed, the progressive filter and the
  threshold sensitivity across cells, the plots; gate (c) from the logged adapters and each
  cell's cached base (one per seed: ``experiment.base.seed`` follows ``seed``) on its
  calibration items.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from recipe_audit.config import DefenseConfig, ExperimentConfig
from recipe_audit.errors import first_line
from recipe_audit.keys import KIND_ACCEPTANCE_CELL
from recipe_audit.train.acceptance import kernels
from recipe_audit.train.acceptance.base import base_dir_for, base_key, ensure_base, load_base
from recipe_audit.train.acceptance.data import CROSS, PRIMARY
from recipe_audit.train.acceptance.install import SLICE, run_cell

log = logging.getLogger("recipe_audit")

__all__ = [
    "CELL_KIND",
    "AcceptanceCardError",
    "EXPERIMENT_KIND",
    "acceptance_card_for_sweep",
    "acceptance_document",
    "cell_name",
    "cell_run",
    "print_acceptance_summary",
    "run_cell_job",
]

EXPERIMENT_KIND = "acceptance"
CELL_KIND = KIND_ACCEPTANCE_CELL  # tag recipe_audit.kind of one cell x seed run
CARD_RUN_KIND = "acceptance_card"
RECORDS_TABLE = "eval_records.json"
BASELINE = "none"


def cell_name(defense: str, seed: int) -> str:
    return f"{defense}_s{seed}"


def cell_run(exp: ExperimentConfig, defense: DefenseConfig, seed: int) -> tuple[str, dict[str, str]]:
    """The run name and tags of one cell x seed job's run (the sweep callback opens it)."""
    from recipe_audit import keys

    cell = cell_name(str(defense.name), seed)
    return cell, {keys.TAG_KIND: CELL_KIND, keys.TAG_SEED: str(seed), "recipe_audit.cell": cell,
                  "recipe_audit.defense": str(defense.name),
                  keys.TAG_RECIPE_NAME: f"experiment=acceptance defense={defense.name}",
                  "recipe_audit.base_dir": str(base_dir_for(exp)), "recipe_audit.base_key": base_key(exp)}


def run_cell_job(exp: ExperimentConfig, defense: DefenseConfig, seed: int, logger=None, *, progress: bool = False) -> dict[str, float]:
    """One job of ``experiment=acceptance``: one defense cell x one seed. ``logger`` (a
    ``rerun_log.RerunLogger`` attached to the run the sweep callback opened for the job, which
    closes it FINISHED, or FAILED with the error this raises) receives the params, the training
    loss per step, the metrics, the ``eval_records.json`` table and the ``adapter`` artifact.
    Raises :class:`~recipe_audit.train.acceptance.base.BaseModelError` when the cell's base model cannot be trained. Returns the
    cell's metrics (as logged)."""
    cell = cell_name(str(defense.name), seed)
    if logger is not None:
        from recipe_audit.store.rerun_runs import flatten

        logger.log_params(flatten({"experiment": asdict(exp), "defense": asdict(defense), "seed": seed}))
    base_dir = ensure_base(exp, exp.cache_dir, progress=progress)
    with tempfile.TemporaryDirectory(prefix="recipe-audit-cell-") as tmp:
        res = run_cell(exp, defense, seed, base_dir, Path(tmp), cell,
                       on_step=logger.log_step if logger is not None else None)
        metrics = {k.replace("/", "."): v for k, v in res.metrics.items() if math.isfinite(v)}
        if logger is not None:
            logger.flush()
            logger.log_artifacts(res.adapter_dir, "adapter")
            logger.log_table(res.records, RECORDS_TABLE)
            logger.log_metrics(metrics)
    m = res.metrics
    log.info("cell %s: mcq heldout r_D %.3f r_E %.3f gap %.3f | syco gap %.3f (%.1fs)%s", cell,
             m["r_D/mcq/heldout"], m["r_E/mcq/heldout"], m["gap/mcq/heldout"], m["gap/syco/heldout"],
             res.train_seconds, f" run {logger.run_id}" if logger is not None else "")
    return metrics


def acceptance_document(runs: list, exp: ExperimentConfig, tracking_uri: str) -> tuple[Any, dict[str, Any]]:
    """The combined acceptance card (every defense cell) and one card per defense cell
    (:class:`~recipe_audit.cards.acceptance.AcceptanceCard`). Each defense cell is paired with the
    baseline of its seed, which must have been installed on the same base model (tag
    ``recipe_audit.base_dir``); gate (c) measures each cell on its own base, with that base's
    calibration items."""
    from recipe_audit.acceptance.audit import AcceptanceRequest, run_acceptance
    from recipe_audit.acceptance.mechanism import load_calibration, mechanism_from_models
    from recipe_audit.acceptance.records import read_records

    by_cell = {r.data.tags["recipe_audit.cell"]: r for r in runs}
    seeds = sorted({int(r.data.tags["recipe_audit.seed"]) for r in runs})
    pairs = []
    for s in seeds:
        b = cell_name(BASELINE, s)
        if b not in by_cell:
            continue
        for name in sorted({r.data.tags["recipe_audit.defense"] for r in runs} - {BASELINE}):
            if cell_name(name, s) in by_cell:
                pairs.append((cell_name(name, s), b))
    if not pairs:
        raise ValueError("no defense cell has a finished baseline cell of the same seed")
    for d, b in pairs:
        if cell_base_dir(by_cell[d]) != cell_base_dir(by_cell[b]):
            raise ValueError(f"cell {d} and its baseline {b} were installed on different base models")
    used = sorted({c for p in pairs for c in p})
    records = read_records([f"runs:/{by_cell[c].info.run_id}/{RECORDS_TABLE}" for c in used], tracking_uri=tracking_uri)
    # each defense's claimed class, declared in its config (conf/defense) and logged as a param
    claimed = {d: by_cell[d].data.params.get("defense.claimed_class") for d, _ in pairs}
    kernels.use(exp.kernels)  # gate (c)'s gradients with the kernels the cells trained with
    mech = {}
    for base_dir in sorted({cell_base_dir(by_cell[d]) for d, _ in pairs}):  # one base model per seed, or one for all
        base, tok = load_base(base_dir)
        cells = [d for d, _ in pairs if cell_base_dir(by_cell[d]) == base_dir]
        mech.update(mechanism_from_models(base, tok, load_calibration(base_dir / "calibration.jsonl"), SLICE,
                                          {d: {"adapter": f"runs:/{by_cell[d].info.run_id}/adapter"} for d in cells},
                                          claimed_class={d: claimed[d] for d in cells}, tracking_uri=tracking_uri,
                                          max_length=int(exp.model.max_length) + 2))
    common = {"task": PRIMARY, "cross_task": CROSS, "resamples": int(exp.resamples), "seed": 0}
    req = AcceptanceRequest(defense=tuple(d for d, _ in pairs), baseline=tuple(b for _, b in pairs), **common)
    card = run_acceptance(req, records=records, mechanisms=mech)
    per_cell = {}
    for d, b in pairs:
        one = AcceptanceRequest(defense=(d,), baseline=(b,), **common)
        per_cell[d] = run_acceptance(one, records=records, mechanisms={d: mech[d]})
    return card, per_cell


def cell_base_dir(run) -> Path:
    """The cached base model a cell's run was installed on (its ``recipe_audit.base_dir`` tag)."""
    return Path(run.data.tags["recipe_audit.base_dir"])


class AcceptanceCardError(Exception):
    """The sweep's cells finished but no acceptance card could be made from them (one sentence)."""


def acceptance_card_for_sweep(sweep, exp: ExperimentConfig, sweep_dir: Path | None = None) -> dict | None:
    """At multirun end: the acceptance cards of the sweep's finished cells (``exp``: the
    experiment's config), written under ``sweep_dir/acceptance_card`` and logged as artifacts of
    a card run (nested under the sweep). None when no cell finished (the sweep's failed cells
    say why); :class:`AcceptanceCardError` when cells finished but make no card."""
    from recipe_audit import keys
    from recipe_audit.cards.acceptance import write_card
    from recipe_audit.store import rerun_runs, sweeps

    runs = rerun_runs.sweep_runs(sweep, CELL_KIND, status="FINISHED")
    if not runs:
        print(f"recipe_audit: no acceptance card for sweep {sweep.sweep_id}: none of its cells finished",
              file=sys.stderr)
        return None
    t0 = time.perf_counter()
    try:
        card, per_cell = acceptance_document(runs, exp, sweep.tracking_uri)
    except Exception as exc:
        raise AcceptanceCardError(f"no acceptance card for sweep {sweep.sweep_id}: {type(exc).__name__}: "
                                  f"{first_line(exc, 500)}") from exc
    out = Path(sweep_dir or tempfile.mkdtemp(prefix="recipe-audit-acc-")) / "acceptance_card"
    write_card(card, out_dir=out)
    for base_dir in sorted({cell_base_dir(r) for r in runs}):  # per base: its summary, its calibration items
        (out / "bases" / base_dir.name).mkdir(parents=True, exist_ok=True)
        for name in ("base.json", "calibration.jsonl"):
            shutil.copyfile(base_dir / name, out / "bases" / base_dir.name / name)
    for cell, one in per_cell.items():
        write_card(one, json_path=out / "cells" / f"{cell}.json", markdown_path=out / "cells" / f"{cell}.md")
    tags = {keys.TAG_KIND: CARD_RUN_KIND}
    for c in card.cells:
        tags[f"recipe_audit.acceptance.{c.defense}"] = c.verdict
    run_id = sweeps.log_sweep_files_run(sweep, f"acceptance-card-{sweep.sweep_id}", tags, out,
                                          {"card_seconds": time.perf_counter() - t0})
    print_acceptance_summary(card)
    print(f"Acceptance card in {out}; card run {run_id}")
    return card.to_json()


def print_acceptance_summary(card, stream=None) -> None:
    """One line per cell of an :class:`~recipe_audit.cards.acceptance.AcceptanceCard`: verdict and statuses."""
    stream = stream or sys.stdout
    print("\nAcceptance cards (primary task mcq, cross task syco):", file=stream)
    print(f"{'cell':<20} {'verdict':<18} {'a':<10} {'b':<10} {'c':<10} {'d':<10}", file=stream)
    for c in card.cells:
        st = c.statuses
        print(f"{c.label:<20} {c.verdict:<18} {st['a']:<10} {st['b']:<10} {st['c']:<10} {st['d']:<10}",
              file=stream)
