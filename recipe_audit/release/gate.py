"""The release gate (``recipe-audit gate``): whether a registered model version may be released,
from the recipe cards :mod:`recipe_audit.release.registry` attached to it, under the gate's own
policy (:mod:`recipe_audit.release.evidence`), recomputed over every rerun in the store."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from recipe_audit import keys, stats
from recipe_audit.cards import signing
from recipe_audit.cards.family import own_reading
from recipe_audit.store.registry import ModelRegistry

# gate outcomes (besides the verdicts that refuse a release, stats.REFUSED_SHIFT, stats.UNSUPPORTED and
# stats.INSUFFICIENT, whose words are the verdicts')
PASS = "pass"
NO_CARD = "no-card"
STALE = "card-does-not-verify"
LOOSER_THAN_POLICY = "looser-than-policy"
POLICY_MISMATCH = "not-the-policy"  # a card made for another τ, metric, direction, seed key or experiment
HISTORY = "store-history"  # the store's history refuses: a rewritten result, another direction, no rerun
PARTIAL = "card-does-not-cover"  # the card covers fewer reruns (or another family) than the store holds
# with a trusted key, the signature's outcomes (recipe_audit.cards.signing): unsigned, signed-by-another-key,
# signature-does-not-verify, card-changed-since-signed, reruns-changed-since-signed


@dataclass(frozen=True)
class GateResult:
    passed: bool
    outcome: str  # PASS, NO_CARD, a refusing verdict (stats.REFUSED_SHIFT ...), LOOSER_THAN_POLICY, STALE, ...
    message: str  # one sentence
    model_name: str
    version: str
    audit_set: str
    tau: float | None
    cards: tuple[dict[str, Any], ...] = field(default=())
    verification: tuple[dict[str, Any], ...] = field(default=())
    policy: Any = None  # the gate's policy (release.evidence.GatePolicy)
    evidence: dict[str, Any] | None = None  # what the gate recomputed, and over what

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "outcome": self.outcome, "message": self.message,
                "model_name": self.model_name, "version": self.version, "audit_set": self.audit_set,
                "tau": self.tau, "cards": list(self.cards), "verification": list(self.verification),
                "policy": None if self.policy is None else self.policy.to_dict(), "evidence": self.evidence}


def _card_uris(tags: dict[str, str], stem: str) -> list[str]:
    """The card URIs a version's tags name (``<stem>.card_uri`` = ``runs:/<id>/card.json``, or a
    ``.card_run`` tag holding the card run's id): those of ``stem`` first. Only where the card is
    is read from the tags; what the card says is read from the card itself."""
    found = []
    for k, v in sorted(tags.items()):
        if not (k.startswith(keys.CARD_TAG_PREFIX) and v):
            continue
        if k.endswith(".card_uri"):
            found.append((not k.startswith(stem + "."), v))
        elif k.endswith(".card_run"):
            found.append((not k.startswith(stem + "."), v if v.startswith("runs:/") else f"runs:/{v}/card.json"))
    return list(dict.fromkeys(v for _, v in sorted(found, key=lambda t: t[0])))


def gate(tracking_uri: str, model_name: str, policy, *, version: str | None = None,
         alias: str | None = None, trusted=None) -> GateResult:
    """Whether version ``version`` (or the one ``alias`` names) of ``model_name`` may be released
    under ``policy`` (:class:`recipe_audit.release.evidence.GatePolicy`: τ, the metric and its
    direction, the largest ε and δ, the family; the gate's own, never read from the card or the
    version's tags). Passes only when

    - a card attached to the version holds the version's recipe on the policy's metric at its τ,
      made the policy's way (direction, seed key, ε and δ no looser);
    - the gate's own recomputation over every rerun of the recipe in the store (every sweep,
      every attempt, deleted runs; :func:`recipe_audit.release.evidence.recompute`) is
      release-supported, family-wise over every recipe identity of the experiment unless the
      policy says pointwise;
    - the attached card covers exactly those reruns, with the same failures and a family no smaller;
    - and the card verifies: its digest over its JSON and files, its Markdown and HTML rendered
      again from its JSON, its cells recomputed from the store;
    - with a ``trusted`` key (:class:`recipe_audit.cards.signing.TrustedKey`), the card is signed
      by it (its ``card.sig``), over the card's files as they are and over the reruns the store
      gives now (:func:`recipe_audit.cards.signing.check`; the outcome says which failed).
      Without one, a signature is not read.

    Bad input (an unknown model, version or alias) raises ``RegistryError``."""
    from recipe_audit.cards.model import CardError, audit_name
    from recipe_audit.cards.verify import cell_key
    from recipe_audit.release import evidence as ev
    from recipe_audit.release.card_files import read_card
    from recipe_audit.release.verify import recompute as recompute_card_cells
    from recipe_audit.release.verify import signature_check, verify_card

    reg = ModelRegistry(tracking_uri)
    mv = reg.version(model_name, version=version, alias=alias)
    what = f"model '{model_name}' version {mv.version}" + (f" (alias '{alias}')" if alias else "")
    tau, metric, audit = policy.tau, policy.metric, policy.audit
    at = f"audit set '{audit}' at τ = {tau:g}"

    def result(passed, outcome, message, cards=(), ver=(), evid=None):
        return GateResult(passed, outcome, message, model_name, str(mv.version), audit, tau, tuple(cards),
                          tuple(ver), policy, None if evid is None else evid.to_dict())

    # the version's recipe and experiment: its source run's, else the card's
    run = reg.run_or_none(mv.run_id) if mv.run_id else None
    run_recipe = run.data.tags.get(keys.TAG_RECIPE_ID) if run is not None else None
    run_exp = None
    if run is not None:
        e = reg.experiment_by_id_or_none(run.info.experiment_id)
        run_exp = e.name if e is not None else None
    uris = _card_uris(dict(mv.tags or {}), keys.card_tag_stem(audit, tau))
    if run is not None:  # the card runs attached to this version, whatever the version's tags say
        uris = list(dict.fromkeys(uris + reg.attached_card_uris(run.info.experiment_id,
                                                                f"{model_name}/{mv.version}")))
    if not uris:
        return result(False, NO_CARD, f"{what} carries no recipe card; attach one with recipe-audit attach.")
    found = None
    others: list[str] = []
    audits_seen: set[str] = set()
    for uri in uris:
        try:
            card = read_card(uri, tracking_uri)
        except CardError as exc:
            return result(False, STALE, f"The card of {what} at {uri} cannot be read: {str(exc).rstrip('.')}.")
        cells = [e for e in card.doc["cells"] if e["metric"] == metric
                 and math.isclose(float(e["tau"]), tau, rel_tol=0, abs_tol=1e-12)]
        mine = [e for e in cells if run_recipe is None or e["recipe_id"] == run_recipe]
        mine.sort(key=lambda e: bool(e["group"]))  # a cell without group values first
        if mine:
            found = (uri, card, mine[0])
            break
        others += [f"{e['metric']} at τ = {float(e['tau']):g}" for e in card.doc["cells"]]
        audits_seen |= {e["metric"] for e in card.doc["cells"]}
    if found is None and audits_seen and metric not in audits_seen:
        have = ", ".join(sorted({audit_name(m) for m in audits_seen}))
        return result(False, stats.REFUSED_SHIFT,
                      f"{what} has recipe cards for audit set(s) {have}, none for '{audit}': refused-shift (a card "
                      f"is valid only for the audit set it was computed on).")
    if found is None:
        have = ", ".join(dict.fromkeys(others)) or "none"
        return result(False, NO_CARD, f"{what} has no card of its recipe on {metric} at τ = {tau:g} (the release "
                                      f"bar of the policy); its cards hold: {have[:300]}.")
    card_uri, card, entry = found
    doc = card.doc
    recipe_id = run_recipe or entry["recipe_id"]
    experiment = run_exp or doc["source"].get("experiment")
    summary = [{"card_uri": card_uri, "recipe_id": recipe_id, "verdict": entry["verdict"],
                "n_reruns": entry["n_reruns"], "n_failures": entry["n_failures"], "tau": entry["tau"],
                "eps": entry["eps"], "delta": entry["delta"], "audit_set": entry["audit_set"] or entry["metric"]}]
    if trusted is not None:  # signed by the trusted key, over these very files
        sig = signing.check(card.signed_files(), [e["digest"] for e in doc["cells"]], card.signature, trusted)
        if not sig.ok:
            return result(False, sig.kind, f"The card of {what} at {card_uri} {sig.message}.", summary)
    if policy.experiment is not None and experiment != policy.experiment:
        return result(False, POLICY_MISMATCH, f"The reruns of {what} are in experiment '{experiment}', not in "
                                              f"'{policy.experiment}', the experiment the release policy names.",
                      summary)
    if doc["source"].get("experiment") != experiment:
        return result(False, POLICY_MISMATCH, f"The card of {what} was computed in experiment "
                                              f"'{doc['source'].get('experiment')}', not in '{experiment}', where "
                                              f"the version's source run is.", summary)
    mismatch = ev.card_policy_mismatch(doc, entry, policy)
    if mismatch:
        outcome = LOOSER_THAN_POLICY if mismatch.startswith("the card is looser") else POLICY_MISMATCH
        return result(False, outcome, f"The card of {what} on {at} was not made for the release policy: "
                                      f"{mismatch}.", summary)
    evid = ev.recompute(tracking_uri, experiment, recipe_id, policy)
    if evid.refusal or evid.entry is None:
        return result(False, HISTORY, f"The gate refuses {what} on {at}: {evid.refusal or 'nothing to recompute'}.",
                      summary, evid=evid)
    e = evid.entry
    fresh = None  # the card's cells recomputed its own way (the gate's recomputation counts the history)
    if trusted is not None:  # and over the reruns they resolve to in the store now
        try:
            fresh = recompute_card_cells(doc, tracking_uri)
        except CardError:
            fresh = None  # the card does not verify: said below
        sig = signature_check(doc, card, fresh, trusted) if fresh is not None else None
        if sig is not None and not sig.ok:
            return result(False, sig.kind, f"The card of {what} at {card_uri} {sig.message} ({evid.over()}).",
                          summary, evid=evid)
    verdict, m = ev.gate_verdict(evid.entry, policy.pointwise)
    counts = f"{e['n_failures']}/{e['n_reruns']} failed"
    if verdict != stats.SUPPORTED:
        fam = f" family-wise among M = {m}" if m > 1 and not policy.pointwise else ""
        failed = e.get("failed_seeds") or []
        seeds = (f"; failing seeds: {', '.join(map(str, failed[:8]))}{' ...' if len(failed) > 8 else ''}"
                 if failed else "")
        counted = f"; counted failing from the history: {evid.counted_failing[0]}" if evid.counted_failing else ""
        return result(False, ev.refusal_outcome(verdict),
                      f"{what} is {verdict}{fam} on {at} ({counts}{seeds}; {evid.over()}){counted}.", summary, evid=evid)
    card_m = int((entry.get("family") or {}).get("size") or 1)
    cover = ev.coverage_mismatch(entry, e, card_m, m, policy.pointwise)
    if cover:
        return result(False, PARTIAL, f"The card of {what} on {at} does not cover what the store holds: {cover} "
                                      f"({evid.over()}).", summary, evid=evid)
    ver = verify_card(doc, tracking_uri, card, fresh=fresh)
    checks = [{"card_uri": card_uri, "cell": list(map(str, cell_key(entry))), **ver.to_dict()}]
    if not ver.ok:
        first = ver.findings[0]
        more = f" (and {len(ver.findings) - 1} more difference(s))" if len(ver.findings) > 1 else ""
        return result(False, STALE, f"The card of {what} on {at} does not verify: {first.kind}: "
                                    f"{first.message}{more}.", summary, checks, evid)
    fam = e.get("family") or {}
    if m > 1 and not policy.pointwise:
        u = (f"U at δ/M = {float(fam['upper_bound']):.3f}" if fam.get("upper_bound_level") is None else
             f"U at Holm's level {float(fam['upper_bound_level']):.3g} = {float(fam['upper_bound']):.3f}")
        how = f"release-supported family-wise (chosen from M = {m} recipe identities)"
    else:
        u, how = f"U = {float(own_reading(e)['upper_bound']):.3f}", stats.SUPPORTED
    signed = f", and is signed by the trusted key {trusted.short}" if trusted is not None else ""
    return result(True, PASS, f"{what} is {how} on {at} ({counts}, {u} <= ε = {policy.max_eps:g} at δ = "
                              f"{policy.max_delta:g}; {evid.over()}), and its card covers exactly those reruns and "
                              f"verifies{signed}.", summary, checks, evid)
