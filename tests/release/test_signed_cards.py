"""Signed cards where they are made and read: the end of a sweep signs its card folder and every
card run (``card.sig`` beside ``card.json``), ``attach`` signs what it attaches, and ``gate`` and
``verify`` with a trusted key check the signature; real key pairs made here, in process. The
attacks on the gate with and without a trusted key are tests/release/test_gate_bypasses.py's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import run_cli
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.keys import key_pair
from helpers.store import synthetic_sweep
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.cards import signing
from recipe_audit.cards.model import CardOptions
from recipe_audit.release.card_files import read_card
from recipe_audit.release.compute import CardRequest, compute_card
from recipe_audit.release.sweep import cards_for_sweep

METRIC = keys.accuracy_key("calibration")


@pytest.fixture(scope="module")
def key_pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {who: key_pair(folder, who) for who in ("ci", "other")}


def _check(card, trusted):
    return signing.check(card.signed_files(), [e["digest"] for e in card.doc["cells"]], card.signature,
                         signing.TrustedKey.load(str(trusted)), where=signing.signature_name(card.name))


def test_the_end_of_a_sweep_signs_its_card_and_every_card_run(store, tmp_path, key_pairs, capsys):
    synthetic_sweep(store, {s: 0.5 if s < 3 else 0.9 for s in range(12)}, recipe_id="a" * 16, sweep_id="one",
                    bar_taus=(0.7,))
    sweep = SimpleNamespace(experiment_name="exp", tracking_uri=store, sweep_id="one", planned_seeds=range(12))
    key = signing.SigningKey.load(str(key_pairs["ci"][0]))
    made = cards_for_sweep(sweep, METRIC, CardOptions(taus=(0.7, 0.8)), tmp_path / "sweep", signer=key)
    assert f"Signed with key sha256:{key.fingerprint[:16]}" in capsys.readouterr().out
    folder = read_card(str(tmp_path / "sweep" / "card"))
    assert folder.signature is not None and _check(folder, key_pairs["ci"][1]).ok
    assert _check(folder, key_pairs["other"][1]).kind == signing.OTHER_KEY
    from recipe_audit.release.card_runs import CardOutput

    CardOutput(made).write(tmp_path / "again")  # unsigned: no bundle, and none left from before
    assert not (tmp_path / "again" / "card.sig").exists()
    (tmp_path / "again" / "card.sig").write_bytes(folder.signature)
    CardOutput(made).write(tmp_path / "again")
    assert not (tmp_path / "again" / "card.sig").exists()
    client = MlflowClient(tracking_uri=store)
    card_runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id],
                                   f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")
    assert len(card_runs) == 1  # one per recipe, with both bars
    for run in card_runs:
        card = read_card(f"runs:/{run.info.run_id}/card.json", store)
        assert not [f for f in card.files if card.files[f] is None]  # card.sig is not an unlisted file
        assert _check(card, key_pairs["ci"][1]).ok
        # the statement names the cell's reruns digest (one line for both bars)
        resources = {r["name"]: r["digest"] for r in signing.signed_statement(card.signature)["predicate"]["resources"]}
        assert set(resources) == {"card.json", *card.doc["artifacts"], signing.RERUNS_FILE}
        import hashlib

        assert resources[signing.RERUNS_FILE] == hashlib.sha256(
            (card.doc["cells"][0]["digest"] + "\n").encode()).hexdigest()
    # attach without a key: a card run attached whole keeps the sweep's signature (the same bytes);
    # one cut to a bar is another card, unsigned
    from recipe_audit.release import registry

    rerun = client.search_runs([client.get_experiment_by_name("exp").experiment_id],
                               f"tags.`{keys.TAG_RECIPE_ID}` = '{'a' * 16}' and tags.`{keys.TAG_KIND}` = 'rerun'",
                               max_results=1)[0].info.run_id
    reg = MlflowClient(tracking_uri=store, registry_uri=store)
    reg.create_registered_model("clf")
    reg.create_model_version("clf", source=f"runs:/{rerun}/model", run_id=rerun)
    src = read_card(f"runs:/{card_runs[0].info.run_id}/card.json", store)
    for taus, signed in [((), True), ((0.7,), False)]:
        got = registry.attach(store, "clf", src.doc, version="1", card=src, taus=taus)
        attached = read_card(f"runs:/{got.card_run_ids[0]}/card.json", store)
        assert (attached.signature is not None) == signed
        assert _check(attached, key_pairs["ci"][1]).kind == (signing.VERIFIED if signed else signing.UNSIGNED)


def test_attach_gate_and_verify_with_keys(store, tmp_path, key_pairs, capsys, monkeypatch):
    synthetic_sweep(store, {s: 0.9 for s in range(29)}, recipe_id="a" * 16, sweep_id="one", bar_taus=(0.7,))
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    exp = client.get_experiment_by_name("exp").experiment_id
    run_id = client.search_runs([exp], f"tags.`{keys.TAG_KIND}` = 'rerun'", max_results=1)[0].info.run_id
    client.create_registered_model("clf")
    client.create_model_version("clf", source=f"runs:/{run_id}/model", run_id=run_id)
    doc = compute_card(CardRequest(experiment="exp", tracking_uri=store), CardOptions.from_config(taus=[0.7])).to_json()
    (tmp_path / "card.json").write_text(json.dumps(doc))
    uri = ["--tracking-uri", store]
    attach = ["attach", "--model-name", "clf", "--version", "1", "--card", str(tmp_path / "card.json"), *uri]
    gate = ["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7", *uri]

    rc, out, err = run_cli([*attach, "--signing-key", str(key_pairs["ci"][1])], capsys)  # a public key cannot sign
    assert rc == 2 and err == f"recipe-audit: error: The signing key {key_pairs['ci'][1]} is not a PEM private key " \
                               f"(or its password is wrong).\n"
    assert "card_uri" not in json.dumps(client.get_model_version("clf", "1").tags)  # nothing attached

    rc, _, err = run_cli(attach, capsys)  # unsigned, as before
    assert rc == 0, err
    rc, _, err = run_cli([*gate, "--trusted-key", str(key_pairs["ci"][1])], capsys)
    assert rc == 1 and "FAIL (unsigned)" in err and err.count("\n") == 1, err
    assert run_cli(gate, capsys)[0] == 0  # no trusted key: as before

    monkeypatch.setenv(signing.ENV_KEY, key_pairs["ci"][0].read_text())  # the CI secret, the PEM itself
    rc, out, err = run_cli(attach, capsys)
    assert rc == 0 and "Signed with key sha256:" in out and "$RECIPE_AUDIT_SIGNING_KEY" in out, err
    monkeypatch.delenv(signing.ENV_KEY)
    rc, out, err = run_cli([*gate, "--trusted-key", str(key_pairs["ci"][1])], capsys)
    assert rc == 0 and "is signed by the trusted key sha256:" in out, err
    rc, _, err = run_cli([*gate, "--trusted-key", str(key_pairs["other"][1])], capsys)
    assert rc == 1 and "FAIL (signed-by-another-key)" in err, err
    # the key named in the policy file, next to it (a path relative to the file's folder)
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "card_signing.pub").write_bytes(key_pairs["ci"][1].read_bytes())
    (tmp_path / "ci" / "policy.yaml").write_text("audit: calibration\ntau: 0.7\ntrusted_key: card_signing.pub\n")
    by_file = ["gate", "--model-name", "clf", "--version", "1", "--policy", str(tmp_path / "ci" / "policy.yaml"), *uri]
    rc, out, err = run_cli(by_file, capsys)
    assert rc == 0 and "is signed by the trusted key" in out, err
    rc, _, err = run_cli([*by_file, "--trusted-key", str(key_pairs["other"][1])], capsys)  # the option wins
    assert rc == 1 and "FAIL (signed-by-another-key)" in err, err
    (tmp_path / "ci" / "policy.yaml").write_text("audit: calibration\ntau: 0.7\ntrusted_key: [a]\n")
    rc, _, err = run_cli(by_file, capsys)
    assert rc == 2 and "trusted_key (policy file" in err and err.count("\n") == 1, err
    rc, _, err = run_cli([*gate, "--trusted-key", str(tmp_path / "none.pub")], capsys)
    assert rc == 2 and err == f"recipe-audit: error: Cannot read the trusted key {tmp_path / 'none.pub'}: No such " \
                               f"file or directory.\n"

    version = client.get_model_version("clf", "1")
    card_uri = next(v for k, v in version.tags.items() if k.endswith(".card_uri"))
    key = signing.SigningKey.load(str(key_pairs["ci"][0]))
    # named on the version: its description names the bundle beside the card (no tag of its own)
    assert f"signed: `{card_uri.rpartition('/')[0]}/card.sig` (key sha256:{key.fingerprint[:16]})" in version.description
    assert not [k for k in version.tags if "sig" in k]
    verify = ["verify", card_uri, *uri]
    assert run_cli([*verify, "--trusted-key", str(key_pairs["ci"][1])], capsys)[0] == 0
    rc, _, err = run_cli([*verify, "--trusted-key", str(key_pairs["other"][1]), "--json"], capsys)
    got = json.loads(_)
    assert rc == 1 and got["kinds"] == ["signed-by-another-key"], got
    # the folder the card was read from holds no bundle: verify with a key says so
    rc, _, err = run_cli(["verify", str(tmp_path / "card.json"), *uri, "--trusted-key", str(key_pairs["ci"][1])],
                         capsys)
    assert rc == 1 and "unsigned: the card is not signed (no card.sig beside it)" in err, err


def test_a_sweep_refuses_a_signing_key_it_cannot_use_before_any_job(tmp_path, store, key_pairs):
    from helpers.app import SMALL
    from helpers.inprocess import run_module_here

    # the key itself in the config, which Hydra writes into the sweep's folder (a missing or unusable
    # key file is the same sentence as attach's, tests/cards/test_signing.py)
    pem = "'" + key_pairs["ci"][0].read_text().replace("\n", "\\n") + "'"
    proc = run_module_here(["-m", "seed=0,1", f"hydra.callbacks.recipe_audit.signing_key={pem}",
                            f"hydra.sweep.dir={tmp_path}/sweep", *SMALL], cwd=tmp_path)
    assert proc.returncode == 2 and "hydra.callbacks.recipe_audit.signing_key holds a key itself" in proc.stderr
    assert "Traceback" not in proc.stderr and "PRIVATE KEY" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("recipe_audit")
    assert exp is None or not client.search_runs([exp.experiment_id])  # no job ran
    assert not Path(tmp_path / "sweep" / "0").exists()


def test_a_sweep_with_a_signing_key_signs_its_cards(tmp_path, store, key_pairs):
    """The one end-to-end sweep with a key (in this process): the key from the environment, as a
    CI secret holds it; its card folder and its card run verify against the public key."""
    from helpers.app import SMALL
    from helpers.inprocess import run_module_here

    proc = run_module_here(["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path}/sweep", *SMALL], cwd=tmp_path,
                           env_extra={signing.ENV_KEY: key_pairs["ci"][0].read_text()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Signed with key sha256:" in proc.stdout and "BEGIN" not in proc.stdout + proc.stderr
    assert not list((tmp_path / "sweep").rglob("*.pem")) and "PRIVATE" not in "".join(
        p.read_text(errors="replace") for p in (tmp_path / "sweep").rglob("*.yaml"))
    folder = read_card(str(tmp_path / "sweep" / "card"))
    assert _check(folder, key_pairs["ci"][1]).ok
    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id],
                                f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")
    assert _check(read_card(f"runs:/{run.info.run_id}/card.json", store), key_pairs["ci"][1]).ok
