"""The release gate's own policy and its own recomputation of the evidence.

The gate does not take the attached card's word for what was measured. Its policy (the bar τ,
the metric and its direction, the largest ε and δ, the family, the seed key and, optionally, the
experiment) is its own configuration: command-line options or a policy file kept with the code
under review (:func:`load_policy_file`, :func:`make_policy`). Nothing of it is read from the card
or from tags that whoever attaches a card can write.

:func:`recompute` then reads the store's history of the experiment
(:func:`recipe_audit.store.history.read_history`) and recomputes the card over every rerun of
every recipe identity there: every sweep, deleted runs and every attempt of a seed included,
whatever ``--sweep-id``, ``--group-by`` or ``--planned-seeds`` the attached card was made with.
The store's history is evidence:

- a metric value logged after its run ended is a rewrite: the gate refuses and names the run;
- an attempt that logged the metric and fails the bar with the value it had when it ended, or
  that recipe_audit recorded as failing the bar (its ``recipe_audit.fails.<metric>.tau_<τ>`` tag,
  written as it ended and never cleared by a later card) while its own history holds a failing
  value, counts as a failing draw of its seed, whatever its status says now and whatever later
  attempts of the seed show (the tag alone, on a run whose every value passes, is not evidence: a
  card read the other way round writes such tags);
- a deleted run counts as it was;
- an attempt that ended without the metric (killed, crashed before it) stays unfinished and is
  replaced by a later attempt of the seed, as a resumed sweep does;
- a sweep that recorded the other direction when it started refuses the gate.

The card is then built exactly as ``recipe-audit card`` builds it over the whole experiment
(:func:`recipe_audit.release.compute.compute_card` on the history), at the policy's τ, ε, δ and
direction, with the family of every recipe identity in the experiment (or the policy's declared
family).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recipe_audit import keys, stats
from recipe_audit.cards.family import own_reading
from recipe_audit.cards.model import CardError, CardOptions, audit_name
from recipe_audit.store.registry import RegistryError

DEFAULT_MAX_EPS = 0.10
DEFAULT_MAX_DELTA = 0.10
# a policy file may also name the public key the gate trusts (``trusted_key``: a PEM file, a path
# relative to the policy file's folder; :func:`policy_trusted_key`): not a value of GatePolicy
FILE_KEYS_EXTRA = ("trusted_key",)
POLICY_KEYS = ("tau", "audit", "metric", "higher_is_better", "max_eps", "max_delta", "family", "pointwise",
               "experiment", "seed_key")


@dataclass(frozen=True)
class GatePolicy:
    """What the gate requires, and where each value came from (``flag``, the policy file, ``default``)."""

    tau: float
    metric: str
    higher_is_better: bool = True
    max_eps: float = DEFAULT_MAX_EPS
    max_delta: float = DEFAULT_MAX_DELTA
    family: tuple[str, ...] | None = None  # None: every recipe identity in the experiment
    pointwise: bool = False
    experiment: str | None = None  # None: the experiment of the version's source run
    seed_key: str = "tags." + keys.TAG_SEED
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def audit(self) -> str:
        return audit_name(self.metric)

    def to_dict(self) -> dict[str, Any]:
        return {"tau": self.tau, "metric": self.metric, "audit_set": self.audit,
                "higher_is_better": self.higher_is_better, "max_eps": self.max_eps, "max_delta": self.max_delta,
                "family": None if self.family is None else list(self.family), "pointwise": self.pointwise,
                "experiment": self.experiment, "seed_key": self.seed_key, "from": dict(self.sources),
                # the names earlier gates printed
                "max_eps_from": self.sources.get("max_eps", "default"),
                "max_delta_from": self.sources.get("max_delta", "default")}


def load_policy_file(path: str | Path) -> dict[str, Any]:
    """The release policy in a YAML (or JSON) file: a mapping of :data:`POLICY_KEYS`, e.g.

    .. code-block:: yaml

        audit: calibration       # or metric: val_acc
        tau: 0.7
        higher_is_better: true
        max_eps: 0.1
        max_delta: 0.1
        # family: [3f2a..., 9b1c...]   # default: every recipe identity in the experiment
        # experiment: sentiment-release
        # trusted_key: card_signing.pub   # pass only cards signed by this key (next to this file)

    Read bounded (:func:`recipe_audit.files.read_small_text`: a regular file of at most 1 MiB of
    UTF-8; a device, a named pipe or a directory is refused at once). ``RegistryError`` (one
    sentence naming the file) when it cannot be read or names an unknown key; its values are
    checked by :func:`make_policy`."""
    import yaml

    from recipe_audit.files import InputFileError, read_small_text

    try:
        text = read_small_text(path, "the release policy")
    except InputFileError as exc:
        raise RegistryError(str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"The release policy {path} is not valid YAML ({str(exc).splitlines()[0]}).") from None
    except RecursionError:
        raise RegistryError(f"The release policy {path} is nested too deeply to be a policy.") from None
    if not isinstance(data, dict):
        raise RegistryError(f"The release policy {path} must be a mapping of {', '.join(POLICY_KEYS)}.")
    unknown = sorted(str(k) for k in data if k not in POLICY_KEYS + FILE_KEYS_EXTRA)
    if unknown:
        raise RegistryError(f"The release policy {path} has unknown key(s) {', '.join(unknown)[:300]} "
                            f"(known: {', '.join(POLICY_KEYS + FILE_KEYS_EXTRA)}).")
    return data


def policy_trusted_key(file: Mapping[str, Any] | None, path: str | Path | None) -> str | None:
    """The public key a policy ``file`` (read from ``path``) names as trusted (``trusted_key``),
    as a path: relative to the policy file's folder unless absolute; None when it names none.
    ``RegistryError`` (one sentence) when the value is not a path."""
    value = (file or {}).get("trusted_key")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RegistryError(f"The release policy's trusted_key (policy file {path}) must be the path of a public key "
                            f"file, not {value!r}.")
    key = Path(value.strip()).expanduser()
    return str(key if key.is_absolute() or path is None else Path(path).parent / key)


def _option(option: str, value: Any, name: str) -> Any:
    """A policy value through the one validator every door's audit options go through
    (:func:`recipe_audit.stats.options.check_option`), its sentence naming the key and where it came from."""
    from recipe_audit.stats.options import OptionError, check_option

    try:
        return check_option(option, value, name)
    except OptionError as exc:
        raise RegistryError(str(exc)) from None


def _text(value: Any, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise RegistryError(f"{name} must be a name (text), not {shown}.")
    return str(value)


def make_policy(flags: Mapping[str, Any], file: Mapping[str, Any] | None = None,
                file_name: str = "the policy file") -> GatePolicy:
    """The gate's policy from its command-line ``flags`` (None: not given) over the policy
    ``file``'s values, over the defaults. τ and the metric (or audit set) have no default: a
    gate that does not say which bar it holds a release to refuses. Each value, wherever it
    came from, goes through the check the audit options get at every door
    (:func:`recipe_audit.stats.options.check_option`: τ a finite number, in [0, 1] for an
    accuracy; ε in (0, 1); δ in (0, 1/2); a family of 1 to 10^15 recipe identities, a list in a
    file). ``RegistryError`` (one sentence naming the key and where it came from) for a missing
    or bad value."""
    file = dict(file or {})
    got: dict[str, Any] = {}
    src: dict[str, str] = {}
    for k in POLICY_KEYS:
        if flags.get(k) is not None:
            got[k], src[k] = flags[k], "flag"
        elif file.get(k) is not None:
            got[k], src[k] = file[k], file_name

    def where(k):
        return f"--{k.replace('_', '-')}" if src.get(k) == "flag" else src.get(k, "default")

    def name(k):
        return f"The release policy's {k} ({where(k)})"

    if "tau" not in got:
        raise RegistryError("The release bar τ is the gate's to set: give --tau (or tau in --policy); the card's "
                            "own τ is not read.")
    if isinstance(got["tau"], (list, tuple)):  # one bar: a list is not one number
        raise RegistryError(f"{name('tau')} must be one number, not a list.")
    (tau,) = _option("taus", got["tau"], name("tau"))
    if "metric" in got and "audit" in got and src["metric"] == src["audit"]:
        raise RegistryError(f"Give the audit set or the metric ({where('metric')}), not both.")
    if "metric" in got and (src["metric"] == "flag" or "audit" not in got):
        metric, src["metric"] = _text(got["metric"], name("metric")), src["metric"]
    elif "audit" in got:
        metric, src["metric"] = keys.accuracy_key(_text(got["audit"], name("audit"))), src["audit"]
    else:
        raise RegistryError("The metric the release is judged on is the gate's to set: give --audit AUDIT_SET "
                            "(the metric accuracy/AUDIT_SET) or --metric KEY (or audit/metric in --policy).")
    if not metric or metric.endswith("/"):
        raise RegistryError("The release policy's audit set or metric is empty.")
    hib = _option("higher_is_better", got.get("higher_is_better", True), name("higher_is_better"))
    try:
        from recipe_audit.stats.options import check_taus_for

        check_taus_for([tau], [metric], hib)
    except ValueError as exc:
        raise RegistryError(f"{str(exc).rstrip('.')} (the release policy's tau, {where('tau')}).") from None
    family = got.get("family")
    if family is not None:
        if isinstance(family, str) and src["family"] == "flag":  # --family ID,ID,...
            family = [f for f in family.replace(",", " ").split() if f]
        if not isinstance(family, (list, tuple)) or not all(isinstance(f, str) and f.strip() for f in family):
            shown = repr(family) if len(repr(family)) <= 40 else repr(family)[:37] + "..."
            raise RegistryError(f"{name('family')} must be a list of recipe identities, not {shown}.")
        family = tuple(dict.fromkeys(f.strip() for f in family))
        _option("family_size", len(family), f"The number of recipe identities in the release policy's family "
                                            f"({where('family')})")
    pointwise = got.get("pointwise", False)
    if not isinstance(pointwise, bool):
        raise RegistryError(f"{name('pointwise')} must be true or false, not {pointwise!r:.40}.")
    seed_key = _text(got.get("seed_key") or "tags." + keys.TAG_SEED, name("seed_key"))
    if not seed_key.startswith(("tags.", "params.")):
        raise RegistryError(f"The release policy's seed_key must be tags.X or params.X, not {seed_key!r}.")
    return GatePolicy(
        tau=tau, metric=metric, higher_is_better=hib,
        max_eps=_option("eps", got.get("max_eps", DEFAULT_MAX_EPS), name("max_eps")),
        max_delta=_option("delta", got.get("max_delta", DEFAULT_MAX_DELTA), name("max_delta")),
        family=family, pointwise=pointwise,
        experiment=None if got.get("experiment") is None else _text(got["experiment"], name("experiment")),
        seed_key=seed_key, sources={k: src.get(k, "default") for k in POLICY_KEYS if k != "audit"},
    )


# ------------------------------------------------------------------------------------------
# The recomputation
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the gate recomputed: the entry of the gated recipe (a card entry, JSON), what it was
    recomputed over, and the refusals the history gives (rewrites, another direction)."""

    entry: dict[str, Any] | None
    experiment: str
    recipe_id: str | None  # None: runs logged by the user's own code, without a recipe identity
    n_runs: int  # runs of the recipe read (every attempt)
    n_deleted: int
    n_sweeps: int
    family: tuple[str, ...]
    counted_failing: tuple[str, ...] = ()  # sentences: attempts counted failing from the history
    refusal: str | None = None  # a rewrite or another direction: the gate refuses

    @property
    def verdict(self) -> str | None:
        return None if self.entry is None else self.entry["verdict"]

    def over(self) -> str:
        """What was recomputed over, in words."""
        n = self.entry["n_reruns"] if self.entry else 0
        which = f"recipe {self.recipe_id[:12]}" if self.recipe_id else "the runs"
        return (f"recomputed over every rerun of {which} in experiment '{self.experiment}': "
                f"{n} seeds from {self.n_runs} attempt(s) in {self.n_sweeps} sweep(s), {self.n_deleted} deleted; "
                f"family of M = {len(self.family)} recipe identit{'y' if len(self.family) == 1 else 'ies'}")

    def to_dict(self) -> dict[str, Any]:
        e = self.entry or {}
        return {"experiment": self.experiment, "recipe_id": self.recipe_id, "n_reruns": e.get("n_reruns"),
                "n_failures": e.get("n_failures"), "upper_bound": e.get("upper_bound"), "verdict": e.get("verdict"),
                "family_verdict": (e.get("family") or {}).get("verdict"), "n_attempts": self.n_runs,
                "n_deleted": self.n_deleted, "n_sweeps": self.n_sweeps, "family": list(self.family),
                "counted_failing": list(self.counted_failing), "refusal": self.refusal}


def _fails(v: float, tau: float, hib: bool) -> bool:
    return not math.isfinite(v) or (v < tau if hib else v > tau)


def recompute(tracking_uri: str, experiment: str, recipe_id: str, policy: GatePolicy) -> Evidence:
    """The gate's card entry for ``recipe_id`` at the policy's bar, recomputed from the store's
    history of ``experiment`` (module docstring). ``RegistryError`` when the store cannot give it."""
    from recipe_audit.release.compute import SUMMARY_PARAMS, CardRequest, CardRuns, compute_card
    from recipe_audit.reruns import QueryError
    from recipe_audit.store.history import read_history

    tau, hib, metric = policy.tau, policy.higher_is_better, policy.metric
    try:
        hist = read_history(tracking_uri, experiment, metric, seed_key=policy.seed_key,
                            fails_tag=keys.fails_tag(metric, tau), params=SUMMARY_PARAMS)
    except QueryError as exc:
        raise RegistryError(f"The gate cannot read the reruns of experiment '{experiment}': "
                            f"{str(exc).rstrip('.')}.") from None
    frame = hist.frame
    every = sorted({x for x in frame["recipe_id"].tolist() if isinstance(x, str) and x})
    family = policy.family if policy.family is not None else tuple(every)
    mine = frame[frame["recipe_id"] == recipe_id] if recipe_id else frame[frame["recipe_id"].isna()]
    parents = {p for p in mine["parent_run_id"].tolist() if p}
    base = dict(experiment=experiment, recipe_id=recipe_id, n_runs=len(mine),
                n_deleted=int((mine["lifecycle_stage"] == "deleted").sum()),
                n_sweeps=len({hist.sweep_ids.get(p) or p for p in parents}), family=tuple(family))
    if mine.empty:
        return Evidence(None, refusal=f"the store holds no rerun of recipe {recipe_id} in experiment "
                                      f"'{experiment}'", **base)
    if policy.family is not None and recipe_id not in policy.family:
        return Evidence(None, refusal=f"recipe {recipe_id} is not in the policy's declared family "
                                      f"({', '.join(x[:12] for x in policy.family)})", **base)
    if hist.rewrites:
        w = hist.rewrites[0]
        more = f" (and {len(hist.rewrites) - 1} more)" if len(hist.rewrites) > 1 else ""
        return Evidence(None, refusal=(
            f"the store's history was rewritten: run {w.run_id} (seed {w.seed}) has {metric} = {w.value:g} logged "
            f"{(w.logged_ms - w.end_ms) / 1000:.0f} s after the run ended{more}; a result cannot change after its "
            f"run ended"), **base)
    other = sorted(p for p, d in hist.directions.items() if d != hib)
    if other:
        said = "higher" if not hib else "lower"
        return Evidence(None, refusal=(
            f"sweep run {other[0]} recorded when it started that its metric is {said}-is-better, and the policy "
            f"says {'higher' if hib else 'lower'}-is-better"), **base)

    # the history as evidence: an attempt recorded failing counts failing, whatever came after
    frame = frame.copy()
    if policy.family is not None:
        frame = frame[frame["recipe_id"].isin(policy.family)].copy()
    counted: list[str] = []
    logged_col = f"logged[{metric}]"
    for i, row in frame.iterrows():
        value, logged, status = float(row[metric]), bool(row[logged_col]), row["status"]
        fail_end = logged and _fails(value, tau, hib)
        hist_fail = [v for v in row["history"] if _fails(v, tau, hib)]
        # recorded failing as it ended, and its own history (before it ended) holds the failing value:
        # a later value at a later step does not undo it
        tagged = row["fails_tag"] == "true" and logged and bool(hist_fail)
        if not (fail_end or tagged) or (status == "FINISHED" and fail_end):
            continue
        if not fail_end:
            value = min(hist_fail, key=lambda v: (math.isfinite(v), v if hib else -v)) if hist_fail else \
                float(np.nextafter(tau, -np.inf if hib else np.inf))
        frame.at[i, metric] = value
        frame.at[i, logged_col] = True
        frame.at[i, "status"] = "FINISHED"
        if row["recipe_id"] == recipe_id or (not recipe_id and not isinstance(row["recipe_id"], str)):
            why = (f"logged {metric} = {float(row[metric]):g}, which fails τ = {tau:g}" if fail_end
                   else f"was recorded failing τ = {tau:g} when it ended")
            counted.append(f"seed {row['seed']}: run {row['run_id']} ({status.lower()}"
                           f"{', deleted' if row['lifecycle_stage'] == 'deleted' else ''}) {why}")
    req = CardRequest(experiment=experiment, metric=metric, tracking_uri=tracking_uri, seed_key=policy.seed_key)
    opts = CardOptions.from_config(taus=[tau], eps=policy.max_eps, delta=policy.max_delta, higher_is_better=hib,
                                   family_size=len(family) if policy.family is not None else None)
    try:
        card = compute_card(req, opts, runs=CardRuns(frame))
    except CardError as exc:
        return Evidence(None, refusal=f"the card cannot be recomputed from the store: {str(exc).rstrip('.')}",
                        counted_failing=tuple(counted), **base)
    doc = card.to_json()
    entry = next((e for e in doc["cells"] if (e["recipe_id"] or None) == (recipe_id or None) and not e["group"]),
                 None)
    return Evidence(entry, counted_failing=tuple(counted), **base)


def gate_verdict(entry: Mapping[str, Any], pointwise: bool) -> tuple[str, int]:
    """The verdict the gate reads (family-wise unless ``pointwise``) and the family size M."""
    fam = entry.get("family") or {}
    m = int(fam.get("size") or 1)
    if pointwise or m <= 1:  # the entry's own reading (under "pointwise" where a stated family leads it)
        return own_reading(entry)["verdict"], m
    return fam.get("verdict") or entry["verdict"], m


# ------------------------------------------------------------------------------------------
# The attached card against the policy and the recomputation
# ------------------------------------------------------------------------------------------


def card_policy_mismatch(doc: Mapping[str, Any], entry: Mapping[str, Any] | None, policy: GatePolicy) -> str | None:
    """Why a card's cell was not made for the gate's policy (another τ, metric, direction, seed
    key, a looser ε or δ), or None."""
    if entry is None:
        have = sorted({(e["metric"], float(e["tau"])) for e in doc["cells"]})
        return (f"the card holds no cell of {policy.metric} at τ = {policy.tau:g} (it holds "
                + ", ".join(f"{m} at τ = {t:g}" for m, t in have[:6]) + ")")
    opts = doc["options"]
    if bool(opts.get("higher_is_better", True)) != policy.higher_is_better:
        return (f"the card reads {policy.metric} as {'higher' if opts.get('higher_is_better', True) else 'lower'}-"
                f"is-better, the policy as {'higher' if policy.higher_is_better else 'lower'}-is-better")
    loose = [f"{sym} = {float(entry[name]):g} > {limit:g}" for name, sym, limit in
             (("eps", "ε", policy.max_eps), ("delta", "δ", policy.max_delta)) if float(entry[name]) > limit]
    if loose:
        return (f"the card is looser than the release policy ({'; '.join(loose)}; the policy allows "
                f"ε <= {policy.max_eps:g} and δ <= {policy.max_delta:g})")
    seed_key = (doc.get("source") or {}).get("seed_key") or "tags." + keys.TAG_SEED
    if seed_key != policy.seed_key:
        return f"the card reads seeds from {seed_key}, the policy from {policy.seed_key}"
    return None


def coverage_mismatch(card_entry: Mapping[str, Any], gate_entry: Mapping[str, Any],
                      n_card_family: int, n_gate_family: int, pointwise: bool) -> str | None:
    """How the attached card's cell differs from the gate's recomputation over every rerun: a
    card over a strict subset of the reruns, another choice of run for a seed, another count of
    failures, or a smaller family. None when they agree."""
    def runs(e):
        return {(str(r["seed"]), r["run_id"]) for r in e["reruns"]}

    mine, full = runs(card_entry), runs(gate_entry)
    n_c, n_g = card_entry["n_reruns"], gate_entry["n_reruns"]
    if mine < full or (n_c < n_g):
        missing = sorted(full - mine)
        shown = ", ".join(f"seed {s}" for s, _ in missing[:5]) + (" ..." if len(missing) > 5 else "")
        return (f"the card covers {n_c} of the {n_g} seeds the store holds for this recipe (missing: {shown}); "
                f"make the card over every rerun of the experiment (no --sweep-id, --group-by or --planned-seeds)")
    if mine != full:
        diff = sorted(full - mine)
        s, r = diff[0] if diff else sorted(mine - full)[0]
        return (f"the card counts other runs than the store's history gives (seed {s}: the gate counts run "
                f"{r}); recompute the card")
    if card_entry.get("n_failures") != gate_entry.get("n_failures"):
        return (f"the card counts {card_entry.get('n_failures')} failure(s), the store's history "
                f"{gate_entry.get('n_failures')}")
    if not pointwise and n_card_family < n_gate_family:
        return (f"the card was made for a family of M = {n_card_family} recipe identit"
                f"{'y' if n_card_family == 1 else 'ies'}, the experiment holds M = {n_gate_family}")
    return None


def refusal_outcome(verdict: str) -> str:
    """The gate's outcome for a card ``verdict`` that refuses the release: the verdict's own word
    (``refused-shift``, ``insufficient-evidence``), ``unsupported`` for any other."""
    return verdict if verdict in (stats.REFUSED_SHIFT, stats.INSUFFICIENT) else stats.UNSUPPORTED


__all__ = ["DEFAULT_MAX_DELTA", "DEFAULT_MAX_EPS", "Evidence", "GatePolicy", "card_policy_mismatch",
           "coverage_mismatch", "gate_verdict", "load_policy_file", "make_policy", "policy_trusted_key", "recompute",
           "refusal_outcome"]
