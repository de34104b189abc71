"""``recipe-audit attach / gate / verify``: cards on registered model versions, the release gate
for CI, and checking a card against the tracking store.

    recipe-audit attach --model-name sentiment-clf --run-id RUN --card card.json --set-alias candidate
    recipe-audit attach --model-name sentiment-clf --version 3 --card runs:/CARD_RUN/card.json --audit shift_gadgets
    recipe-audit gate --model-name sentiment-clf --alias candidate --audit calibration --tau 0.7
    recipe-audit verify card.json

Exit status: 0 attached / gate passed / card verifies; 1 the gate refuses or the card does not
verify (the reason on stderr, one sentence); 2 bad input (unknown model, version, alias or run, a
file that is not a card, a card of another recipe, a card that does not verify given to attach, a
bad release policy, no --audit for a version with cards of several audit sets), one sentence,
nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys

from recipe_audit.commands.args import TRACKING_URI_HELP, finite


def _uri_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--tracking-uri", default=None,
                   help=help or f"tracking store and model registry ({TRACKING_URI_HELP})")


def _open(tracking_uri: str | None) -> str:
    """The store's URI, checked: a server that answers, an existing SQLite file (a read must not
    create an empty store where a path was mistyped)."""
    from pathlib import Path

    from recipe_audit.store.tracking import check_reachable, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise ValueError(f"There is no tracking store at {uri}.")
    check_reachable(uri)
    return uri


def register(subparsers) -> dict:
    a = subparsers.add_parser("attach", help="attach a recipe card to a registered model version")
    a.add_argument("--model-name", required=True)
    which = a.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", default=None, help="an existing version of the model")
    which.add_argument("--run-id", default=None,
                       help="register the model this rerun logged (tracking.log_model=true) as a new version")
    a.add_argument("--card", required=True, metavar="PATH_OR_URI",
                   help="card JSON: a file, a directory with card.json, or an artifact URI (runs:/RUN/card.json)")
    a.add_argument("--audit", action="append", default=[], metavar="AUDIT",
                   help="attach only the cells of this audit set (repeatable)")
    a.add_argument("--tau", action="extend", nargs="+", type=finite, default=[], metavar="T",
                   help="attach only the cells at this τ")
    a.add_argument("--recipe-id", default=None, help="the card's recipe to attach (default: the version's own)")
    a.add_argument("--set-alias", default=None, metavar="ALIAS", help="then point this alias at the version")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(a)

    g = subparsers.add_parser("gate", help="release gate: exit 0 only for a release-supported card that verifies")
    g.add_argument("--model-name", required=True)
    which = g.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", default=None)
    which.add_argument("--alias", default=None)
    g.add_argument("--audit", default=None,
                   help="audit set the release is judged on (default: the version's, when its cards are of one)")
    g.add_argument("--tau", type=finite, default=None, help="release bar τ (default: every τ attached)")
    g.add_argument("--max-eps", type=finite, default=None, metavar="EPS",
                   help="release policy: the largest ε a card may have (default: the registered model's tag "
                        "recipe_audit.policy.max_eps, else 0.1)")
    g.add_argument("--max-delta", type=finite, default=None, metavar="DELTA",
                   help="release policy: the largest δ a card may have (default: the registered model's tag "
                        "recipe_audit.policy.max_delta, else 0.1)")
    g.add_argument("--pointwise", action="store_true",
                   help="decide on the pointwise verdict even when the card was computed over several recipe "
                        "identities; right only for a recipe fixed before the sweep (by default the gate reads the "
                        "family-wise verdict, which holds whichever recipe of the family was chosen)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(g)

    v = subparsers.add_parser("verify", help="recompute a card from the tracking store and compare")
    v.add_argument("card", metavar="PATH_OR_URI")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(v, help="the tracking store to recompute the card from (default: the one the card names as its "
                        "source); a runs:/ card is read from this store, else from $MLFLOW_TRACKING_URI, else "
                        "sqlite:///mlruns/mlflow.db")
    return {"attach": cmd_attach, "gate": cmd_gate, "verify": cmd_verify}


def cmd_attach(a: argparse.Namespace) -> int:
    from recipe_audit.release.registry import attach
    from recipe_audit.store.card_files import read_card

    uri = _open(a.tracking_uri)
    card = read_card(a.card, uri)
    res = attach(uri, a.model_name, card.doc, version=a.version, run_id=a.run_id, audits=a.audit, taus=a.tau,
                 recipe_id=a.recipe_id, set_alias=a.set_alias, card=card)
    if a.json:
        print(json.dumps(res.to_dict()))
        return 0
    how = "registered as new version" if res.registered else "version"
    print(f"Attached {len(res.cards)} card(s) to model '{res.model_name}' {how} {res.version}"
          + (f" (alias '{a.set_alias}')" if a.set_alias else "") + ":")
    for c in res.cards:
        u = f"{float(c['upper_bound']):.3f}" if c["upper_bound"] else "—"
        fam = (f"; family-wise {c['family_verdict']} among M = {c['family_size']}"
               if int(c.get("family_size") or 1) > 1 else "")
        print(f"  {c['audit_set']} τ = {float(c['tau']):g}: {c['verdict']} "
              f"({c['n_failures'] or '—'}/{c['n_reruns']}, U = {u}{fam}) -> {c['card_uri']}")
    from recipe_audit.release.sweep import print_store

    print_store(uri)
    return 0


def cmd_gate(a: argparse.Namespace) -> int:
    from recipe_audit.release.registry import gate

    if a.audit is not None and not a.audit.strip():
        raise ValueError("--audit must name an audit set (e.g. calibration).")
    uri = _open(a.tracking_uri)
    res = gate(uri, a.model_name, version=a.version, alias=a.alias, audit=a.audit, tau=a.tau,
               max_eps=a.max_eps, max_delta=a.max_delta, pointwise=a.pointwise)
    if a.json:
        print(json.dumps(res.to_dict()))
    if res.passed:
        if not a.json:
            print(f"recipe-audit gate: PASS: {res.message}")
        return 0
    print(f"recipe-audit gate: FAIL ({res.outcome}): {res.message}", file=sys.stderr)
    return 1


def cmd_verify(a: argparse.Namespace) -> int:
    from recipe_audit.release.verify import verify_card
    from recipe_audit.store.card_files import read_card
    from recipe_audit.store.tracking import resolve_tracking_uri

    card = read_card(a.card, resolve_tracking_uri(a.tracking_uri))
    res = verify_card(card.doc, a.tracking_uri and resolve_tracking_uri(a.tracking_uri), card)  # default: the store the card names (its source)
    if a.json:
        print(json.dumps(res.to_dict()))
    elif res.ok:
        print(res.summary())
    if res.ok:
        return 0
    if not a.json:
        print(f"recipe-audit verify: {res.summary()}", file=sys.stderr)
        for f in res.findings:
            print(f"  {f.kind}: {f.message}", file=sys.stderr)
    return 1

