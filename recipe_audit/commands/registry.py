"""``recipe-audit attach / gate / verify``: cards on registered model versions, the release gate
for CI, and checking a card against the tracking store.

    recipe-audit attach --model-name sentiment-clf --run-id RUN --card card.json --set-alias candidate
    recipe-audit attach --model-name sentiment-clf --version 3 --card runs:/CARD_RUN/card.json --audit shift_gadgets
    recipe-audit gate --model-name sentiment-clf --alias candidate --audit calibration --tau 0.7
    recipe-audit gate --model-name sentiment-clf --alias candidate --policy release_policy.yaml
    recipe-audit verify card.json
    RECIPE_AUDIT_SIGNING_KEY=ci_signing_key.pem recipe-audit attach --model-name sentiment-clf --run-id RUN --card ...
    recipe-audit gate --model-name sentiment-clf --alias candidate --policy release_policy.yaml --trusted-key card_signing.pub

Exit status: 0 attached / gate passed / card verifies; 1 the gate refuses or the card does not
verify (the reason on stderr, one sentence); 2 bad input (unknown model, version, alias or run, a
file that is not a card, a card of another recipe, a card that does not verify given to attach, a
bad release policy or policy file, a gate without its τ or its audit set / metric), one sentence,
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
    a = subparsers.add_parser("attach", help="attach a recipe card to a registered model version",
                              description="Attach a recipe card to a registered model version (an existing "
                                          "--version, or the model a rerun logged, registered as a new one): the "
                                          "card must verify against the tracking store and be of the version's "
                                          "recipe; the version then carries its verdict and a link to it, which "
                                          "the release gate reads.")
    a.add_argument("--model-name", required=True, help="the registered model's name")
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
    a.add_argument("--signing-key", default=None, metavar="PEM_FILE",
                   help="sign the attached card with this elliptic-curve private key (OpenSSF model-signing "
                        "format, card.sig beside the card); default: $RECIPE_AUDIT_SIGNING_KEY (a path or the PEM "
                        "itself), else unsigned")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(a)

    g = subparsers.add_parser(
        "gate", help="release gate: exit 0 only when the store's evidence, recomputed under the gate's policy, is "
                     "release-supported and the attached card covers it and verifies",
        description="The release gate for CI: recompute the evidence of a registered model version's recipe "
                    "from the tracking store under the gate's policy (τ, the audit set or metric, ε, δ, the "
                    "family), and pass (exit 0) only when it is release-supported and the card attached to the "
                    "version covers it and verifies; otherwise exit 1 with the reason in one sentence.")
    g.add_argument("--model-name", required=True, help="the registered model's name")
    which = g.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", default=None, help="the version to decide on")
    which.add_argument("--alias", default=None, help="or the alias that points at it (e.g. candidate)")
    g.add_argument("--policy", default=None, metavar="FILE",
                   help="the release policy, a YAML file kept with the code under review (keys: tau, audit or "
                        "metric, higher_is_better, max_eps, max_delta, family, pointwise, experiment, seed_key); "
                        "the options below override it")
    g.add_argument("--audit", default=None, help="audit set the release is judged on (the metric accuracy/AUDIT)")
    g.add_argument("--metric", default=None, help="or the metric key itself (a metric of your own, e.g. val_acc)")
    g.add_argument("--tau", type=finite, default=None, help="release bar τ (required here or in --policy)")
    g.add_argument("--lower-is-better", dest="higher_is_better", action="store_const", const=False, default=None,
                   help="the metric is a loss: a rerun fails when it is above τ (default: higher is better)")
    g.add_argument("--max-eps", type=finite, default=None, metavar="EPS",
                   help="the failure budget ε the gate decides at, 0.1 unless set here or in --policy; a card "
                        "looser than it fails")
    g.add_argument("--max-delta", type=finite, default=None, metavar="DELTA",
                   help="the risk δ the gate decides at, 0.1 unless set here or in --policy; a card looser than it "
                        "fails")
    g.add_argument("--family", default=None, metavar="ID,ID,...",
                   help="the recipe identities the release was chosen from (default: every recipe identity in the "
                        "experiment)")
    g.add_argument("--pointwise", action="store_const", const=True, default=None,
                   help="decide on the pointwise verdict: right only for a recipe fixed before the sweep (by default "
                        "the gate reads the family-wise verdict, which holds whichever recipe of the family was "
                        "chosen)")
    g.add_argument("--experiment", default=None,
                   help="the experiment the reruns must be in (default: that of the version's source run)")
    g.add_argument("--seed-key", default=None, help="where the seed is (default tags.recipe_audit.seed)")
    g.add_argument("--trusted-key", default=None, metavar="PUB_FILE",
                   help="pass only a card signed by this public key (PEM, kept with the code), over its files and "
                        "over the reruns the store holds now; default: --policy's trusted_key (a path relative to "
                        "the policy file), else signatures are not read")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(g)

    v = subparsers.add_parser("verify", help="recompute a card from the tracking store and compare",
                              description="Recompute a card from the reruns in the tracking store it names as "
                                          "its source and compare every number (and, with --trusted-key, check "
                                          "its signature): exit 0 when the card verifies, 1 when it does not "
                                          "(what differs, on stderr).")
    v.add_argument("card", metavar="PATH_OR_URI",
                   help="card JSON: a file, a directory with card.json, or an artifact URI (runs:/RUN/card.json)")
    v.add_argument("--trusted-key", default=None, metavar="PUB_FILE",
                   help="the card must also be signed by this public key (PEM), over its files and the reruns the "
                        "store holds now")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    _uri_option(v, help="the tracking store to recompute the card from (default: the one the card names as its "
                        "source); a runs:/ card is read from this store, else from $MLFLOW_TRACKING_URI, else "
                        "sqlite:///mlruns/mlflow.db")
    return {"attach": cmd_attach, "gate": cmd_gate, "verify": cmd_verify}


def cmd_attach(a: argparse.Namespace) -> int:
    from recipe_audit.release.card_files import read_card
    from recipe_audit.release.registry import attach

    signer = _signer(a.signing_key)
    uri = _open(a.tracking_uri)
    card = read_card(a.card, uri)
    res = attach(uri, a.model_name, card.doc, version=a.version, run_id=a.run_id, audits=a.audit, taus=a.tau,
                 recipe_id=a.recipe_id, set_alias=a.set_alias, card=card, signer=signer)
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

    if signer is not None:
        print(f"Signed with key sha256:{signer.fingerprint[:16]} ({signer.name}): card.sig beside each card.")
    print_store(uri)
    return 0


def _signer(path: str | None):
    """The key ``attach`` signs with: ``--signing-key``'s file, else ``$RECIPE_AUDIT_SIGNING_KEY``."""
    from recipe_audit.cards.signing import SigningKey

    return SigningKey.load(path) if path else SigningKey.from_environment()


def _trusted(path: str | None):
    from recipe_audit.cards.signing import TrustedKey

    return TrustedKey.load(path) if path else None


def gate_policy(a: argparse.Namespace, file=None):
    """The gate's policy: its options over its policy file (``file``: read already; else read
    here; ``RegistryError`` for a bad one)."""
    from recipe_audit.release.evidence import load_policy_file, make_policy

    file = file if file is not None else load_policy_file(a.policy) if a.policy else None
    flags = {"tau": a.tau, "audit": a.audit, "metric": a.metric, "higher_is_better": a.higher_is_better,
             "max_eps": a.max_eps, "max_delta": a.max_delta, "family": a.family, "pointwise": a.pointwise,
             "experiment": a.experiment, "seed_key": a.seed_key}
    return make_policy(flags, file, file_name=f"policy file {a.policy}")


def cmd_gate(a: argparse.Namespace) -> int:
    from recipe_audit.release.gate import gate

    if a.audit is not None and not a.audit.strip():
        raise ValueError("--audit must name an audit set (e.g. calibration).")
    from recipe_audit.release.evidence import load_policy_file, policy_trusted_key

    file = load_policy_file(a.policy) if a.policy else None
    policy = gate_policy(a, file)
    trusted = _trusted(a.trusted_key or policy_trusted_key(file, a.policy))  # the option wins over the file
    uri = _open(a.tracking_uri)
    res = gate(uri, a.model_name, policy, version=a.version, alias=a.alias, trusted=trusted)
    if a.json:
        print(json.dumps(res.to_dict()))
    if res.passed:
        if not a.json:
            print(f"recipe-audit gate: PASS: {res.message}")
        return 0
    print(f"recipe-audit gate: FAIL ({res.outcome}): {res.message}", file=sys.stderr)
    return 1


def cmd_verify(a: argparse.Namespace) -> int:
    from recipe_audit.release.card_files import read_card
    from recipe_audit.release.verify import verify_card
    from recipe_audit.store.tracking import resolve_tracking_uri

    trusted = _trusted(a.trusted_key)
    card = read_card(a.card, resolve_tracking_uri(a.tracking_uri))
    res = verify_card(card.doc, a.tracking_uri and resolve_tracking_uri(a.tracking_uri), card,  # default: the store the card names (its source)
                      trusted=trusted)
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

