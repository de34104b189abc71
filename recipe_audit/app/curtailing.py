"""The curtailing sweeper: launch seeds in batches, stop once the verdict at N is settled.

    python -m recipe_audit -m hydra/sweeper=curtail                       # 59 planned seeds
    python -m recipe_audit -m hydra/sweeper=curtail 'seed=range(100)' hydra.sweeper.batch_size=8

The sweep's jobs are the cartesian product of the sweep overrides, as with Hydra's basic sweeper.
Jobs that differ only in ``seed`` are the reruns of one *group* (one recipe); the planned N of a
group is its number of seeds. Every round launches the next ``batch_size`` seeds of every group
still running, through the configured launcher (so a parallel launcher runs a batch in
parallel), reads each job's return value and updates the group: a job that returned None (the
rerun failed), no number, or a non-finite number for ``audit.primary`` failed at every bar;
otherwise it failed at ``τ`` when its metric is below ``τ`` (above, with
``audit.higher_is_better: false``). A group stops when, at every ``τ`` of ``audit.taus``, the
release decision at N (``stop_on: decision``, default) or the verdict at N (``stop_on: verdict``)
no longer depends on its remaining seeds (:mod:`recipe_audit.stats.curtail`), at ``audit.eps``
and ``audit.delta``.

**Open-ended sweeps** (``stop_on: anytime``): no N is planned. Seeds run in batches of
``batch_size``, in the order of the seed sweep, up to ``max_reruns`` (required), and a group stops
the moment the confidence sequence of :mod:`recipe_audit.stats.anytime` reads ``U_n <= eps``
(release-supported) or ``L_n > eps`` (strong-unsupported) at every bar: bounds valid at every
number of reruns at once, so looking after every batch keeps the card's promise. The seed sweep
must name at least ``max_reruns`` seeds (``'seed=range(200)' hydra.sweeper.max_reruns=200``); the
record carries every look, and the card of such a sweep is an anytime card.

The record of what happened (planned N, seeds launched, failures, where and why each group
stopped) is written to ``recipe_audit_curtailment.json`` in the sweep directory and, when the
recipe_audit callback opened a sweep parent run, to that run's tags, where the card reads it
(``cards/curtail.py``): seeds the sweep never launched are then not unfinished reruns, and the
card states the verdict at the planned N.

Hydra only instantiates sweepers from the ``hydra_plugins`` namespace; the plugin class is
``hydra_plugins.recipe_audit.plugins.CurtailingSweeper`` (a thin subclass of
:class:`CurtailingSweeperBase`), selected by ``recipe_audit/app/hydra_conf/hydra/sweeper/curtail.yaml``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from omegaconf import OmegaConf

from recipe_audit import keys
from recipe_audit.app import distributed
from recipe_audit.app.outcomes import OutcomeChannel
from recipe_audit.app.sweepers import RecipeSweeperBase, check_curtail_options, seed_key
from recipe_audit.stats.options import option_fields
from recipe_audit.store.curtailment import RECORD_FILE  # also written beside the sweep

log = logging.getLogger("recipe_audit")

RECORD_VERSION = 1


@dataclass
class _Group:
    """The reruns of one recipe: jobs that differ only in their seed."""

    overrides: tuple[str, ...]  # the job's overrides without the seed
    jobs: list[list[str]]  # full overrides per planned seed, in launch order
    seeds: list[Any]
    launched: int = 0
    failures: list[int] = field(default_factory=list)  # per tau
    recipe_id: str | None = None
    state: list[Any] = field(default_factory=list)  # CurtailState per tau
    done: bool = False
    looks: list[dict[str, Any]] = field(default_factory=list)  # open-ended sweeps: every look taken

    @property
    def n_planned(self) -> int:
        return len(self.jobs)


class CurtailingSweeperBase(RecipeSweeperBase):
    """Hydra sweeper that stops a seed sweep once the card's verdict at the planned N is settled.

    Parameters (``hydra.sweeper.*``): ``batch_size`` seeds per group and round (default 4),
    ``stop_on`` ``"decision"`` or ``"verdict"`` (see :mod:`recipe_audit.stats.curtail`), or
    ``"anytime"`` (an open-ended sweep, see the module docstring) with ``max_reruns``, its
    required maximum; ``params`` the sweep (like the basic sweeper's, e.g. ``{seed: range(59)}``).
    """

    def __init__(self, batch_size: int = 4, stop_on: str = "decision", params: dict[str, str] | None = None,
                 max_reruns: int | None = None):
        super().__init__(params)
        check_curtail_options(batch_size, stop_on, max_reruns)
        self.batch_size = batch_size
        self.stop_on = stop_on
        self.max_reruns = max_reruns
        self.groups: list[_Group] = []
        self.record: dict[str, Any] | None = None

    # -- the audit settings the card will use ------------------------------------------------

    def _audit(self) -> dict[str, Any]:
        """The card's settings: the recipe_audit callback's options (its first metric), or, with no
        callback configured, the built-in app's ``audit`` section; every audit option (as
        :class:`~recipe_audit.stats.options.AuditOptions` declares it) checked by the one validator,
        a bad one refused with its sentence, naming the key the user set."""
        from recipe_audit.app.sweep_plan import option_name
        from recipe_audit.cards.model import CardError, CardOptions

        cb = OmegaConf.select(self.config, "hydra.callbacks.recipe_audit")
        if cb is not None:
            opts = OmegaConf.to_container(cb, resolve=True)
            metric = opts.get("metric")
            metric = metric if isinstance(metric, str) else (list(metric or []) or [None])[0]
            if not metric:
                raise HydraException("The curtailing sweeper needs hydra.callbacks.recipe_audit.metric.")
            metric = str(metric)

            def name(option: str) -> str:
                return option_name(self.config, option)
        else:
            opts = OmegaConf.to_container(self.config.audit, resolve=True) if "audit" in self.config else {}
            metric = keys.accuracy_key(str(opts.get("primary", keys.DEFAULT_AUDIT)))

            def name(option: str) -> str:
                return f"audit.{option}"
        given = {f.name: opts[f.name] for f in option_fields() if f.name in opts}
        try:
            checked = CardOptions.from_config(given, metrics=[metric], name=name)
        except CardError as exc:
            raise HydraException(str(exc)) from None
        audit_set = metric.split("/", 1)[1] if metric.startswith("accuracy/") else metric
        return {"audit_set": audit_set, "metric": metric, "taus": list(checked.taus), "eps": checked.eps,
                "delta": checked.delta, "higher_is_better": checked.higher_is_better}

    # -- jobs ---------------------------------------------------------------------------------

    def _jobs(self, arguments: list[str]) -> list[list[str]]:
        return self._batches(arguments, None)[0]

    @staticmethod
    def group_jobs(jobs: Sequence[Sequence[str]]) -> list[_Group]:
        """Jobs that differ only in ``seed`` form one group, seeds in sweep order."""
        groups: dict[tuple[str, ...], _Group] = {}
        for job in jobs:
            seeds = [o for o in job if seed_key(o) == "seed"]
            if not seeds:
                raise HydraException("The curtailing sweeper needs a seed sweep, e.g. 'seed=range(59)'.")
            rest = tuple(o for o in job if seed_key(o) != "seed")
            g = groups.setdefault(rest, _Group(overrides=rest, jobs=[], seeds=[]))
            g.jobs.append(list(job))
            value = seeds[-1].split("=", 1)[1]
            g.seeds.append(int(value) if value.lstrip("-").isdigit() else value)
        return list(groups.values())

    @staticmethod
    def failed(ret: JobReturn, metric: str, taus: Sequence[float], higher_is_better: bool,
               outcome: dict[str, Any] | None = None) -> list[bool]:
        """Per τ: did this rerun fail? What the recipe_audit callback recorded for the job decides
        (``outcome``, from the :class:`recipe_audit.app.outcomes.OutcomeChannel`: its status and
        the metric its run holds); without the callback, the job's return value (``{audit set:
        metric}`` as the built-in trainer returns, or a number). A rerun that did not finish, or
        has no finite metric, fails at every bar. A job that raised with no callback to record it
        re-raises here, as with Hydra's basic sweeper."""
        if outcome is not None:
            value = outcome["metrics"].get(metric) if outcome.get("status") == "FINISHED" else None
        else:
            value = ret.return_value
            if isinstance(value, dict):
                key = metric.split("/", 1)[1] if metric.startswith("accuracy/") else metric
                value = value.get(key, value.get(metric))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return [True] * len(taus)
        return [(value < t) if higher_is_better else (value > t) for t in taus]

    @staticmethod
    def _recipe_id(ret: JobReturn, outcome: dict[str, Any] | None) -> str | None:
        if outcome is not None and outcome.get("recipe_id"):
            return outcome["recipe_id"]
        try:
            from recipe_audit.identity import recipe_identity

            return recipe_identity(OmegaConf.to_container(ret.cfg, resolve=True))
        except Exception:  # not a recipe_audit job config: a card matches it only in a one-recipe sweep
            return None

    # -- the sweep ----------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> Any:
        from recipe_audit.cards.curtail import curtail_reason  # NumPy: not on Hydra's plugin scan
        from recipe_audit.stats import curtail_state, sample_floor

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        audit = self._audit()
        taus = audit["taus"]
        self.groups = self.group_jobs(self._jobs(arguments))
        for g in self.groups:
            g.failures = [0] * len(taus)
        if self.stop_on == "anytime":
            self._open_ended(audit)
        sweep_dir = self._save_sweep_config()
        log.info("curtailing sweep: %d group(s), %s planned seeds, batches of %d, stop on the %s at N",
                 len(self.groups), "/".join(str(g.n_planned) for g in self.groups), self.batch_size,
                 self.stop_on)
        floor = sample_floor(audit["eps"], audit["delta"])
        if self.stop_on != "anytime" and any(g.n_planned < floor for g in self.groups):
            log.warning("a plan of fewer than %d seeds (the sample floor at ε = %g, δ = %g) can never be "
                        "release-supported: with stop_on=decision the first batch settles it",
                        floor, audit["eps"], audit["delta"])
        returns: list[Sequence[JobReturn]] = []
        job_idx = 0
        # each job's outcome, by job index, from the recipe_audit callback (under a multi-process
        # accelerate launch, only the main process's callback records one); an earlier launch's
        # channel, left by a sweep that stopped, is emptied as it opens
        channel = OutcomeChannel(sweep_dir) if distributed.is_main_process() else None
        if channel is not None:
            channel.open()
        while True:
            active = [g for g in self.groups if not g.done]
            if not active:
                break
            batch, owners = [], []
            for g in active:
                take = g.jobs[g.launched:g.launched + self.batch_size]
                batch += take
                owners += [g] * len(take)
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=job_idx)
            outcomes = [channel.take(job_idx + i) if channel is not None else None for i in range(len(batch))]
            job_idx += len(batch)
            returns.append(results)
            for ret, g, outcome in zip(results, owners, outcomes, strict=True):
                for i, f in enumerate(self.failed(ret, audit["metric"], taus, audit["higher_is_better"], outcome)):
                    g.failures[i] += int(f)
                g.launched += 1
                if g.recipe_id is None:
                    g.recipe_id = self._recipe_id(ret, outcome)
            for g in active:
                if self.stop_on == "anytime":
                    self._look(g, audit)
                    continue
                g.state = [curtail_state(k, g.launched, g.n_planned, audit["eps"], audit["delta"], self.stop_on)
                           for k in g.failures]
                g.done = g.launched >= g.n_planned or all(s.stop for s in g.state)
                if g.done and g.launched < g.n_planned:
                    log.info("curtailed %s after %d of %d reruns: %s", " ".join(g.overrides) or "the sweep",
                             g.launched, g.n_planned, curtail_reason(g.state[0]))
        if channel is not None:
            channel.close()
        self.record = self._record(audit)
        self._publish(sweep_dir)
        return returns

    # -- open-ended sweeps ----------------------------------------------------------------------

    def _open_ended(self, audit: dict[str, Any]) -> None:
        """Check an open-ended sweep's seeds against its maximum and keep the first ``max_reruns``."""
        from recipe_audit.stats.anytime import anytime_sample_floor

        for g in self.groups:
            if g.n_planned < self.max_reruns:
                raise HydraException(
                    f"An open-ended sweep runs up to hydra.sweeper.max_reruns={self.max_reruns} seeds, but the seed "
                    f"sweep names only {g.n_planned}; sweep at least as many, e.g. 'seed=range({self.max_reruns})'.")
            del g.jobs[self.max_reruns:], g.seeds[self.max_reruns:]
        floor = anytime_sample_floor(audit["eps"], audit["delta"])
        if self.max_reruns < floor:
            log.warning("an open-ended sweep of at most %d seeds can never be release-supported: the anytime floor "
                        "at ε = %g, δ = %g is %d seeds", self.max_reruns, audit["eps"], audit["delta"], floor)

    def _look(self, g: _Group, audit: dict[str, Any]) -> None:
        """One look of an open-ended sweep at a group: the anytime verdict at every bar; the group stops
        when each is settled (release-supported or strong-unsupported) or at the maximum."""
        from recipe_audit.stats.anytime import anytime_bound

        cards = [anytime_bound(k, g.launched, audit["eps"], audit["delta"]) for k in g.failures]
        verdicts = [c.verdict for c in cards]
        g.looks.append({"n": g.launched, "k": list(g.failures), "upper": [c.upper for c in cards],
                        "lower": [c.lower for c in cards], "verdicts": verdicts})
        settled = all(v in ("release-supported", "strong-unsupported") for v in verdicts)
        g.done = settled or g.launched >= g.n_planned
        if g.done:
            why = (f"settled after {g.launched} reruns: {', '.join(dict.fromkeys(verdicts))}" if settled else
                   f"reached the maximum of {g.n_planned} reruns unsettled ({', '.join(dict.fromkeys(verdicts))})")
            g.state = [why]
            log.info("open-ended sweep %s %s", " ".join(g.overrides) or "", why)

    def _record_anytime(self, audit: dict[str, Any]) -> dict[str, Any]:
        groups = []
        for g in self.groups:
            last = g.looks[-1] if g.looks else {"verdicts": [], "k": list(g.failures)}
            settled = bool(last["verdicts"]) and all(v in ("release-supported", "strong-unsupported")
                                                     for v in last["verdicts"])
            groups.append({
                "overrides": list(g.overrides), "recipe_id": g.recipe_id, "max_reruns": g.n_planned,
                "n_launched": g.launched, "launched_seeds": g.seeds[:g.launched], "failures": list(g.failures),
                "looks": g.looks, "verdicts": last["verdicts"],
                "stop_reason": ("settled" if settled else "maximum" if g.launched >= g.n_planned else None),
                "reason": g.state[0] if g.state else "",
            })
        return {"version": RECORD_VERSION, "sweeper": "curtail", "stop_on": "anytime", "batch_size": self.batch_size,
                "max_reruns": self.max_reruns, **audit,
                "n_launched": sum(g.launched for g in self.groups),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "groups": groups}

    def _record(self, audit: dict[str, Any]) -> dict[str, Any]:
        if self.stop_on == "anytime":
            return self._record_anytime(audit)
        from recipe_audit.cards.curtail import curtail_reason

        groups = []
        for g in self.groups:
            groups.append({
                "overrides": list(g.overrides), "recipe_id": g.recipe_id, "n_planned": g.n_planned,
                "n_launched": g.launched, "launched_seeds": g.seeds[:g.launched],
                "stopped_early": g.launched < g.n_planned, "failures": list(g.failures),
                "verdicts_at_n": [s.verdict for s in g.state],
                "possible_verdicts": [list(s.possible_verdicts) for s in g.state],
                "reason": curtail_reason(g.state[0]) if len(g.state) == 1 else " ".join(
                    f"At τ = {t:g}: {curtail_reason(s)}" for t, s in zip(audit["taus"], g.state, strict=True)),
            })
        return {"version": RECORD_VERSION, "sweeper": "curtail", "stop_on": self.stop_on,
                "batch_size": self.batch_size, **audit,
                "n_planned": sum(g.n_planned for g in self.groups),
                "n_launched": sum(g.launched for g in self.groups),
                "stopped_early": any(g.launched < g.n_planned for g in self.groups),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "groups": groups}

    def _publish(self, sweep_dir: Path) -> None:
        """Write the record beside the sweep and onto the sweep parent run (if there is one); by
        the main process only, under a multi-process ``accelerate launch``."""
        from recipe_audit.app import distributed

        if not distributed.is_main_process():
            return
        text = json.dumps(self.record, separators=(",", ":"))
        (sweep_dir / RECORD_FILE).write_text(json.dumps(self.record, indent=2))
        from recipe_audit.store import curtailment, sweeps

        info = sweeps.current_sweep(sweep_dir)
        if info is None:
            return
        if self.stop_on == "anytime":
            summary = (f"open-ended sweep: {self.record['n_launched']} reruns launched (at most "
                       f"{self.record['max_reruns']} a recipe, looks every {self.batch_size})")
        else:
            summary = (f"{self.record['n_launched']} of {self.record['n_planned']} planned reruns launched "
                       f"({'stopped early' if self.record['stopped_early'] else 'ran to N'})")
        curtailment.publish(info.tracking_uri, info.parent_run_id, text, summary)
