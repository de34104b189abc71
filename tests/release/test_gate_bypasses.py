"""The release gate tried as a team member with the writer role would: each way a recipe with
failing reruns was once got through ``recipe-audit gate`` (and variants), replayed in process on a
SQLite store logged the way recipe_audit logs (``helpers.store.synthetic_sweep``: a sweep parent
that records the metric's direction, reruns tagged pass/fail at the bar as they end, no training).
Each attack ends with a card attached the way ``recipe-audit attach`` attaches it, and the gate,
run with the CI's policy (audit set calibration, τ = 0.7, higher is better, ε = δ = 0.1), must
refuse it. The first row is an honest recipe, which must pass: the harness can pass a card."""

from __future__ import annotations

import json
import time

import pytest
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.cards.model import CardOptions
from recipe_audit.release import gate, registry
from recipe_audit.release.compute import CardRequest, compute_card
from recipe_audit.release.evidence import make_policy
from recipe_audit.store.registry import RegistryError

R, S, T = "a" * 16, "b" * 16, "c" * 16
METRIC = keys.accuracy_key("calibration")
FAILS = keys.fails_tag(METRIC, 0.7)
CI = {"audit": "calibration", "tau": 0.7}  # the CI's policy; the rest at its defaults


def _values(n, bad=(), start=0, good=0.9, low=0.5):
    return {s: (low if s in bad else good) for s in range(start, start + n)}


def _sweep(uri, values, recipe=R, sweep_id="first", **kw):
    synthetic_sweep(uri, values, recipe_id=recipe, sweep_id=sweep_id, bar_taus=(0.7,), **kw)
    return _runs(uri, sweep_id)


def _runs(uri, sweep_id):
    """seed -> run id of one sweep's reruns."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp").experiment_id
    found = client.search_runs([exp], f"tags.`{keys.TAG_SWEEP_ID}` = '{sweep_id}' and "
                                      f"tags.`{keys.TAG_KIND}` = 'rerun'", max_results=1000)
    return {int(r.data.tags[keys.TAG_SEED]): r.info.run_id for r in found}


def _attach(uri, run_id, *, model="clf", signer=None, **card):
    """A card made with the attacker's options (``CardRequest`` fields and ``CardOptions`` fields),
    attached to a new version of ``model`` registered from ``run_id``, as ``recipe-audit attach``
    does (the card must verify against the store with its own options)."""
    req = {k: card.pop(k) for k in ("sweep_id", "group_by", "planned_seeds", "recipe_id") if k in card}
    opts = CardOptions.from_config(taus=[card.pop("tau", 0.7)], **card)
    doc = compute_card(CardRequest(experiment="exp", tracking_uri=uri, **req), opts).to_json()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    if not client.search_registered_models(f"name = '{model}'"):
        client.create_registered_model(model)
    mv = client.create_model_version(model, source=f"runs:/{run_id}/model", run_id=run_id)
    registry.attach(uri, model, doc, version=str(mv.version), signer=signer)
    return doc


def _gate(uri, model="clf", **policy):
    return gate.gate(uri, model, make_policy({**CI, **policy}), version="1")


# ------------------------------------------------------------------------------------------
# the attacks: each builds its store and attaches its card; returns the gate's policy overrides


def honest(uri):
    runs = _sweep(uri, _values(29))
    _attach(uri, runs[0])
    return {}


def second_sweep_of_the_clean_one(uri):
    """A second sweep of the same seeds, then ``card --sweep-id`` of the clean one (the first had 3/25)."""
    _sweep(uri, _values(25, bad={2, 5, 9}), sweep_id="first")
    clean = _sweep(uri, _values(25), sweep_id="second")
    doc = _attach(uri, clean[0], sweep_id="second")
    assert doc["cells"][0]["verdict"] == "release-supported"
    return {}


def second_sweep_of_new_seeds(uri):
    """The variant with new seeds: the clean sweep alone is a strict subset of the reruns."""
    _sweep(uri, _values(25, bad={2, 5, 9}), sweep_id="first")
    clean = _sweep(uri, _values(25, start=25), sweep_id="second")
    assert _attach(uri, clean[25], sweep_id="second")["cells"][0]["verdict"] == "release-supported"
    return {}


def best_sweep_makes_a_family_of_one(uri):
    """One sweep per recipe and ``--sweep-id`` of the best: the card's family is M = 1."""
    best = _sweep(uri, _values(29), recipe=R, sweep_id="r")
    _sweep(uri, _values(29, bad={1, 2, 3, 4, 5}), recipe=S, sweep_id="s")
    _sweep(uri, _values(29, bad=set(range(8))), recipe=T, sweep_id="t")
    doc = _attach(uri, best[0], sweep_id="r")
    assert doc["cells"][0]["verdict"] == "release-supported" and not doc["cells"][0].get("family")
    return {}


def group_by_the_fails_tag_and_plan_the_passing_seeds(uri):
    """``--group-by`` the pass/fail tag with ``--planned-seeds`` the passing seeds: 9/59 becomes 0/50."""
    bad = {3, 9, 14, 20, 27, 33, 41, 50, 57}
    runs = _sweep(uri, _values(59, bad=bad))
    good = tuple(s for s in range(59) if s not in bad)
    doc = _attach(uri, runs[0], group_by=("tags." + FAILS,), planned_seeds=good)
    cell = next(e for e in doc["cells"] if e["group"]["tags." + FAILS] == "false")
    assert (cell["n_failures"], cell["n_reruns"], cell["verdict"]) == (0, 50, "release-supported")
    return {}


def lower_is_better_on_a_collapsed_recipe(uri):
    """Every rerun collapsed to 0.5; the card reads accuracy as lower-is-better at τ = 0.7: 0/25."""
    runs = _sweep(uri, _values(25, good=0.5))
    assert _attach(uri, runs[0], higher_is_better=False)["cells"][0]["verdict"] == "release-supported"
    return {}


def lower_is_better_in_the_policy_too(uri):
    """The same card with a gate told lower-is-better: the sweep recorded higher-is-better when it started."""
    lower_is_better_on_a_collapsed_recipe(uri)
    return {"higher_is_better": False}


def card_at_another_tau(uri):
    """A card attached at τ = 0.3 (every rerun 0.5: 0/25 there); the gate holds τ = 0.7."""
    runs = _sweep(uri, _values(25, good=0.5))
    assert _attach(uri, runs[0], tau=0.3)["cells"][0]["verdict"] == "release-supported"
    return {}


def loose_eps_delta_and_the_models_policy_tags(uri):
    """ε = 0.5, δ = 0.49 on 4 reruns, and the registered model's own policy tags loosened to match."""
    runs = _sweep(uri, _values(4))
    assert _attach(uri, runs[0], eps=0.5, delta=0.49)["cells"][0]["verdict"] == "release-supported"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_registered_model_tag("clf", "recipe_audit.policy.max_eps", "0.5")
    client.set_registered_model_tag("clf", "recipe_audit.policy.max_delta", "0.49")
    return {}


def failing_attempt_set_to_failed_then_rerun(uri):
    """Seed 3 finished at 0.5; its status is set to FAILED and seed 3 is run again: 0/25 on the card."""
    runs = _sweep(uri, _values(25, bad={3}))
    MlflowClient(tracking_uri=uri).set_terminated(runs[3], "FAILED")
    _sweep(uri, {3: 0.9}, sweep_id="retry", planned=[3])
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def failing_attempt_deleted_then_rerun(uri):
    """``delete_run`` on the failing attempt, then seed 3 again: the card (active runs) says 0/25."""
    runs = _sweep(uri, _values(25, bad={3}))
    MlflowClient(tracking_uri=uri).delete_run(runs[3])
    _sweep(uri, {3: 0.9}, sweep_id="retry", planned=[3])
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def failing_values_logged_over(uri):
    """``log_metric`` 0.95 over the four failing reruns' metric after they ended, then a card: 0/25."""
    runs = _sweep(uri, _values(25, bad={1, 6, 11, 16}))
    client = MlflowClient(tracking_uri=uri)
    later = int(time.time() * 1000) + 2100  # the stamp of a value logged 2.1 s from now: past the
    for s in (1, 6, 11, 16):                # clock tolerance of a run's own values, without the wait
        client.log_metric(runs[s], METRIC, 0.95, timestamp=later)
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def failing_values_logged_over_backdated(uri):
    """The same with values stamped before the runs ended, at a later step (MLflow's latest value)."""
    runs = _sweep(uri, _values(25, bad={1, 6, 11, 16}))
    client = MlflowClient(tracking_uri=uri)
    for s in (1, 6, 11, 16):
        client.log_metric(runs[s], METRIC, 0.95, timestamp=1, step=1)
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def failing_values_logged_over_and_status_failed(uri):
    """Backdated values, the pass/fail tag left, the runs set to FAILED and their seeds run again."""
    runs = _sweep(uri, _values(25, bad={1, 6}))
    client = MlflowClient(tracking_uri=uri)
    for s in (1, 6):
        client.log_metric(runs[s], METRIC, 0.95, timestamp=1, step=1)
        client.set_terminated(runs[s], "FAILED")
    _sweep(uri, {1: 0.9, 6: 0.9}, sweep_id="retry", planned=[1, 6])
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def failing_rerun_retagged_as_a_card_run(uri):
    """The failing rerun's kind tag set to ``card`` and its seed run again: the card (which reads
    reruns only) sees the passing attempt alone, 0/25."""
    runs = _sweep(uri, _values(25, bad={3}))
    MlflowClient(tracking_uri=uri).set_tag(runs[3], keys.TAG_KIND, keys.KIND_CARD)
    _sweep(uri, {3: 0.9}, sweep_id="retry", planned=[3])
    assert _attach(uri, runs[0])["cells"][0]["n_failures"] == 0
    return {}


def _artifact_dir(uri, run_id):
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    art = MlflowClient(tracking_uri=uri).get_run(run_id).info.artifact_uri
    return Path(unquote(urlparse(art).path)) if art.startswith("file:") else Path(art)


def _resealed(name):
    def attack(uri):
        """An honest card, then ``card.md`` (or ``card.html``) edited in the card run, its hash put
        in the manifest, the digest resealed and the version's digest tag retagged."""
        from recipe_audit.cards.digest import seal
        from recipe_audit.cards.files import file_sha256

        honest(uri)
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        tags = client.get_model_version("clf", "1").tags
        card_uri = next(v for k, v in tags.items() if k.endswith(".card_uri"))
        where = _artifact_dir(uri, card_uri.split("/")[1])
        f = where / name
        f.write_text(f.read_text(encoding="utf-8").replace("Recipe card", "Recipe card (approved by QA)"),
                     encoding="utf-8")
        d = json.loads((where / "card.json").read_text())
        seal(d, {**d["artifacts"], name: file_sha256(f)}, content_digest=d["content_digest"])
        (where / "card.json").write_text(json.dumps(d))
        for k in tags:
            if k.endswith(".card_digest"):
                client.set_model_version_tag("clf", "1", k, d["digest"])
        return {}

    attack.__name__ = f"resealed_{name.replace('.', '_')}"
    return attack


ATTACKS = [
    # (attack, the gate's outcome, a phrase of its sentence)
    (second_sweep_of_the_clean_one, "unsupported", "3/25 failed"),
    pytest.param(second_sweep_of_new_seeds, "unsupported", "3/50 failed", marks=pytest.mark.slow),
    (best_sweep_makes_a_family_of_one, "insufficient-evidence", "family of M = 3"),
    (group_by_the_fails_tag_and_plan_the_passing_seeds, "unsupported", "9/59 failed"),
    (lower_is_better_on_a_collapsed_recipe, "not-the-policy", "the card reads accuracy/calibration as lower-is-better"),
    pytest.param(lower_is_better_in_the_policy_too, "store-history", "recorded when it started that its metric is higher", marks=pytest.mark.slow),
    (card_at_another_tau, "no-card", "at τ = 0.7"),
    (loose_eps_delta_and_the_models_policy_tags, "looser-than-policy", "ε = 0.5 > 0.1; δ = 0.49 > 0.1"),
    (failing_attempt_set_to_failed_then_rerun, "unsupported", "seed 3: run"),
    (failing_attempt_deleted_then_rerun, "unsupported", "1 deleted"),
    (failing_values_logged_over, "store-history", "after the run ended"),
    pytest.param(failing_values_logged_over_backdated, "unsupported", "was recorded failing τ = 0.7 when it ended", marks=pytest.mark.slow),
    pytest.param(failing_values_logged_over_and_status_failed, "unsupported", "2/25 failed", marks=pytest.mark.slow),
    pytest.param(failing_rerun_retagged_as_a_card_run, "unsupported", "1/25 failed", marks=pytest.mark.slow),
    (_resealed("card.md"), "card-does-not-verify", "card.md differ(s) from what the card's JSON renders"),
    pytest.param(_resealed("card.html"), "card-does-not-verify", "card.html differ(s) from what the card's JSON renders",
                 marks=pytest.mark.slow),
]


def test_an_honest_recipe_passes(store):
    honest(store)
    res = _gate(store)
    assert res.passed and res.outcome == "pass", res.message
    assert "29 seeds from 29 attempt(s) in 1 sweep(s), 0 deleted" in res.message


def _name(a):
    return (a.values if hasattr(a, "values") else a)[0].__name__


@pytest.mark.parametrize("attack, outcome, needle", ATTACKS, ids=[_name(a) for a in ATTACKS])
def test_the_gate_refuses(store, attack, outcome, needle):
    policy = attack(store)
    res = _gate(store, **policy)
    assert not res.passed and res.outcome == outcome and needle in res.message, (res.outcome, res.message)
    assert "\n" not in res.message


@pytest.mark.slow
def test_the_rewrite_is_named(store):
    failing_values_logged_over(store)
    res = _gate(store)
    runs = _runs(store, "first")
    assert any(runs[s] in res.message for s in (1, 6, 11, 16)) and "and 3 more" in res.message


# ------------------------------------------------------------------------------------------
# signed cards: the CI signs the card it attaches with its key (a CI secret) and the gate trusts
# that key's public half (kept with the code). Whoever can write the store can still rewrite a
# result so that no check on the store alone sees it (the end-time rewrite below); what they
# cannot do without the key is give the rewritten store a card the gate takes. Each row: the
# attack, the gate's outcome with the trusted key, and without it (PASS: a hole signing closes)


@pytest.fixture(scope="module")
def key_pair(tmp_path_factory):
    """The CI's key pair and an attacker's: PEM files (private, public), made here."""
    from helpers.keys import key_pair as write_key_pair

    folder = tmp_path_factory.mktemp("keys")
    return {who: write_key_pair(folder, who) for who in ("ci", "attacker")}


def _signer(key_pair, who="ci"):
    from recipe_audit.cards.signing import SigningKey

    return SigningKey.load(str(key_pair[who][0]))


def _trusted(key_pair):
    from recipe_audit.cards.signing import TrustedKey

    return TrustedKey.load(str(key_pair["ci"][1]))


def _attach_to_version(uri, version="1", signer=None):
    """``recipe-audit attach --version``: a card over every rerun of the experiment, made now."""
    doc = compute_card(CardRequest(experiment="exp", tracking_uri=uri), CardOptions.from_config(taus=[0.7])).to_json()
    registry.attach(uri, "clf", doc, version=version, signer=signer)
    return doc


def _end_time_rewrite(uri, run_id):
    """0.95 logged over a failing rerun that already ended, its pass/fail tag set to pass, and its
    end moved past the new value: the store no longer shows a value logged after its run ended."""
    client = MlflowClient(tracking_uri=uri)
    end = client.get_run(run_id).info.end_time
    client.log_metric(run_id, METRIC, 0.95, timestamp=end + 1000, step=1)
    client.set_tag(run_id, FAILS, "false")
    client.set_terminated(run_id, "FINISHED", end_time=end + 60_000)


def _card_run_dir(uri, version="1"):
    tags = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version("clf", version).tags
    card_uri = next(v for k, v in tags.items() if k.endswith(".card_uri"))
    return _artifact_dir(uri, card_uri.split("/")[1])


def _signed_then_rewritten(uri, key_pair):
    """The CI's signed card of a recipe with one failing rerun in 25 (unsupported), then seed 3's
    result rewritten at the end time: a card recomputed now says 0/25."""
    runs = _sweep(uri, _values(25, bad={3}))
    _attach(uri, runs[0], signer=_signer(key_pair))
    _end_time_rewrite(uri, runs[3])
    return runs


def signed_honest(uri, key_pair):
    """38 reruns, one of which logged a failing value and then crashed (1/38: release-supported):
    the card lists it unfinished, the gate's recomputation counts the value it logged; the
    signature is checked against the reruns as the card resolves them, so both agree."""
    runs = _sweep(uri, _values(38, bad={3}), statuses={3: "FAILED"})
    _attach(uri, runs[0], signer=_signer(key_pair))


def end_time_rewrite(uri, key_pair):
    """The rewrite, then a card made and attached anew (not signed: the writer has no key)."""
    _signed_then_rewritten(uri, key_pair)
    assert _attach_to_version(uri)["cells"][0]["n_failures"] == 0


def end_time_rewrite_under_the_signed_card(uri, key_pair):
    """The rewrite, the CI's signed card left in place: its signed reruns are not the store's now."""
    _signed_then_rewritten(uri, key_pair)


def end_time_rewrite_resigned_with_another_key(uri, key_pair):
    """The rewrite, then a card signed with the writer's own key."""
    _signed_then_rewritten(uri, key_pair)
    _attach_to_version(uri, signer=_signer(key_pair, "attacker"))


def forged_card_beside_the_signed_bundle(uri, key_pair):
    """The rewrite, a new card, and the CI's bundle of the old card copied beside it."""
    _signed_then_rewritten(uri, key_pair)
    bundle = (_card_run_dir(uri) / "card.sig").read_bytes()
    _attach_to_version(uri)
    (_card_run_dir(uri) / "card.sig").write_bytes(bundle)


def tampered_bundle(uri, key_pair):
    """The rewrite, a new card, and the CI's bundle beside it with its statement edited to list the
    new card's files and reruns (the CI's signature and key hint kept)."""
    import base64
    import hashlib

    from recipe_audit.cards.signing import RERUNS_FILE, reruns_text

    _signed_then_rewritten(uri, key_pair)
    bundle = json.loads((_card_run_dir(uri) / "card.sig").read_text())
    doc = _attach_to_version(uri)
    where = _card_run_dir(uri)
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    for r in statement["predicate"]["resources"]:
        data = (reruns_text([doc["cells"][0]["digest"]]) if r["name"] == RERUNS_FILE
                else (where / r["name"]).read_bytes())
        r["digest"] = hashlib.sha256(data).hexdigest()
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (where / "card.sig").write_text(json.dumps(bundle))


PASS = "pass"
SIGNED_ATTACKS = [
    # (attack, the gate's outcome with the trusted key, a phrase of its sentence, the outcome without it)
    (end_time_rewrite, "unsigned", "is not signed (no card.sig beside it)", PASS),
    (end_time_rewrite_under_the_signed_card, "reruns-changed-since-signed",
     "over other reruns than the store holds now", "card-does-not-cover"),
    (end_time_rewrite_resigned_with_another_key, "signed-by-another-key", "is signed by another key", PASS),
    pytest.param(forged_card_beside_the_signed_bundle, "card-changed-since-signed", "card.json", PASS,
                 marks=pytest.mark.slow),
    pytest.param(tampered_bundle, "signature-does-not-verify", "card.sig was altered after signing", PASS,
                 marks=pytest.mark.slow),
]


def test_a_signed_honest_card_passes_with_the_trusted_key(store, key_pair):
    signed_honest(store, key_pair)
    res = gate.gate(store, "clf", make_policy(CI), version="1", trusted=_trusted(key_pair))
    assert res.passed and "1/38 failed" in res.message, res.message
    assert f"is signed by the trusted key sha256:{_trusted(key_pair).fingerprint[:16]}" in res.message
    assert _gate(store).passed  # without a trusted key, as before


@pytest.mark.parametrize("attack, outcome, needle, without", SIGNED_ATTACKS, ids=[_name(a) for a in SIGNED_ATTACKS])
def test_the_gate_with_a_trusted_key_refuses(store, key_pair, attack, outcome, needle, without):
    attack(store, key_pair)
    res = gate.gate(store, "clf", make_policy(CI), version="1", trusted=_trusted(key_pair))
    assert not res.passed and res.outcome == outcome and needle in res.message, (res.outcome, res.message)
    assert "\n" not in res.message
    plain = _gate(store)
    assert plain.outcome == without, plain.message  # what the gate does without the key


def test_the_bar_and_the_metric_are_the_gates(store):
    """A gate that does not name τ or the metric refuses to guess it from the card."""
    card_at_another_tau(store)
    for missing, needle in [("tau", "τ is the gate's to set"), ("audit", "The metric the release is judged on")]:
        policy = {k: v for k, v in CI.items() if k != missing}
        with pytest.raises(RegistryError, match=needle):
            make_policy(policy)


@pytest.mark.slow
def test_a_sweep_run_as_lower_is_better_is_held_to_the_policys_direction(store):
    """A loss read as a loss from the start: the gate with the CI's higher-is-better policy refuses
    the card; a CI whose policy says lower-is-better passes it (the direction agrees everywhere)."""
    runs = _sweep(store, _values(29, good=0.2), higher_is_better=False)
    _attach(store, runs[0], higher_is_better=False)
    res = _gate(store)
    assert res.outcome == "not-the-policy" and "lower-is-better" in res.message
    assert _gate(store, higher_is_better=False).passed


# ------------------------------------------------------------------------------------------
# the policy file: kept with the code under review, so whoever can change the code can change it;
# each bad one is refused at once (exit 2, one sentence naming the file or the key), before the
# gate reads the store


def _policy_case(tmp_path, name, body):
    import os

    p = tmp_path / "policy.yaml"
    if name == "dev_zero":
        os.symlink("/dev/zero", p)
    elif name == "dev_urandom":
        os.symlink("/dev/urandom", p)
    elif name == "fifo":
        os.mkfifo(p)
    elif name == "directory":
        p.mkdir()
    elif name == "too_large":
        p.write_bytes(b"audit: calibration\ntau: 0.7\n" + b"#" * (1 << 20) + b"\n")
    elif name == "utf16":
        p.write_bytes("audit: calibration\ntau: 0.7\n".encode("utf-16"))
    else:
        p.write_text(body, encoding="utf-8")
    return p


POLICY_FILES = [
    # (case, the file's text, phrases of the sentence)
    ("dev_zero", None, ("policy.yaml (a link to /dev/zero) is a character device, not a regular file",)),
    ("dev_urandom", None, ("(a link to /dev/urandom) is a character device",)),
    ("fifo", None, ("policy.yaml is a named pipe (FIFO), not a regular file",)),
    ("directory", None, ("policy.yaml is a directory, not a regular file",)),
    ("too_large", None, ("policy.yaml is larger than 1,048,576 bytes",)),
    ("utf16", None, ("policy.yaml is not UTF-8 text (it looks like UTF-16)",)),
    ("negative_tau", "audit: calibration\ntau: -0.5\n", ("tau = -0.5 lies outside [0, 1]", "tau, policy file")),
    ("tau_not_a_number", "audit: calibration\ntau: high\n", ("tau (policy file", "not 'high'")),
    ("family_not_a_list", "audit: calibration\ntau: 0.7\nfamily: notalist\n",
     ("family (policy file", "must be a list of recipe identities, not 'notalist'")),
    ("family_empty", "audit: calibration\ntau: 0.7\nfamily: []\n", ("family (policy file", "between 1 and")),
    ("eps_too_large", "audit: calibration\ntau: 0.7\nmax_eps: 1.5\n", ("max_eps (policy file", "not 1.5")),
    ("delta_too_large", "audit: calibration\ntau: 0.7\nmax_delta: 0.5\n", ("max_delta (policy file", "not 0.5")),
    ("eps_a_list", "audit: calibration\ntau: 0.7\nmax_eps: [0.1]\n", ("max_eps (policy file",)),
    ("audit_a_list", "audit: [calibration]\ntau: 0.7\n", ("audit (policy file", "must be a name")),
    ("pointwise_a_word", "audit: calibration\ntau: 0.7\npointwise: maybe\n", ("pointwise (policy file",)),
    ("not_yaml", "audit: calibration\ntau: [0.7\n", ("policy.yaml is not valid YAML",)),
    ("not_a_mapping", "- tau\n- 0.7\n", ("policy.yaml must be a mapping",)),
]


@pytest.mark.parametrize("case, body, needles", POLICY_FILES, ids=[c[0] for c in POLICY_FILES])
def test_a_bad_policy_file_is_refused_at_once(tmp_path, capsys, case, body, needles):
    import threading

    from helpers.cli import run_cli

    path = _policy_case(tmp_path, case, body)
    got = []
    args = ["gate", "--model-name", "clf", "--version", "1", "--policy", str(path), "--tracking-uri",
            f"sqlite:///{tmp_path / 'none.db'}"]
    worker = threading.Thread(target=lambda: got.append(run_cli(args, capsys)), daemon=True)
    worker.start()
    worker.join(timeout=30)  # a FIFO or a device must not block the gate: refused before a byte is read
    assert got, f"the gate is still reading {case}"
    rc, out, err = got[0]
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("recipe-audit: error: "), err
    assert all(n in err for n in needles), err
    assert not (tmp_path / "none.db").exists()  # nothing read or created in the store


def test_the_options_go_through_the_same_check(capsys):
    """The command line's options and the policy file's keys are checked by one validator."""
    from helpers.cli import run_cli

    gate_args = ["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration"]
    for extra, needle in [(["--tau", "-0.5"], "(the release policy's tau, --tau)"),
                          (["--tau", "0.7", "--max-eps", "1.5"], "max_eps (--max-eps) must lie strictly between 0 and 1"),
                          (["--tau", "0.7", "--max-delta", "0.6"], "max_delta (--max-delta) must lie strictly between 0 "
                                                                   "and 0.5")]:
        rc, _, err = run_cli([*gate_args, *extra], capsys)
        assert rc == 2 and needle in err and err.count("\n") == 1, err
    with pytest.raises(RegistryError, match="tau = 1.5 lies outside"):
        make_policy({**CI, "tau": 1.5})
    assert make_policy({"metric": "val_loss", "tau": -0.5, "higher_is_better": False}).tau == -0.5  # a loss may



@pytest.mark.parametrize("target, needle", [
    ("/dev/zero", "(a link to /dev/zero) is a character device, not a regular file"),
    ("fifo", "trusted.pub is a named pipe (FIFO), not a regular file"),
    ("directory", "trusted.pub is a directory, not a regular file"),
])
@pytest.mark.parametrize("how", ["option", "policy"])
def test_a_trusted_key_that_is_no_file_is_refused_at_once(tmp_path, capsys, target, needle, how):
    """The trusted key, named by --trusted-key or the policy's trusted_key, is read as the policy
    file is: a link to /dev/zero, a named pipe or a directory is one sentence, exit 2, at once."""
    import os
    import threading

    from helpers.cli import run_cli

    key = tmp_path / "trusted.pub"
    if target == "fifo":
        os.mkfifo(key)
    elif target == "directory":
        key.mkdir()
    else:
        os.symlink(target, key)
    (tmp_path / "policy.yaml").write_text("audit: calibration\ntau: 0.7\n" + ("trusted_key: trusted.pub\n"
                                                                            if how == "policy" else ""))
    args = ["gate", "--model-name", "clf", "--version", "1", "--policy", str(tmp_path / "policy.yaml"),
            "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", *(["--trusted-key", str(key)] if how == "option"
                                                                      else [])]
    got = []
    worker = threading.Thread(target=lambda: got.append(run_cli(args, capsys)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert got, f"the gate is still reading the trusted key ({target})"
    rc, out, err = got[0]
    assert rc == 2 and out == "" and err.count("\n") == 1 and "The trusted key " in err and needle in err, err
    assert not (tmp_path / "none.db").exists()
