"""Signed cards (recipe_audit.cards.signing) with real key pairs made here: the bundle is read
back and checked with ``cryptography`` alone (DSSE's pre-authentication encoding, the in-toto
statement's sha256 of each file), and every way a check fails is told apart."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from helpers.keys import key_pair

from recipe_audit.cards import signing
from recipe_audit.cards.signing import SigningError, SigningKey, TrustedKey

FILES = {"card.json": b'{"kind": "recipe_card"}\n', "card.md": b"# Recipe card\n", "card_hist.png": b"\x89PNG..."}
RERUNS = ["a" * 64, "b" * 64]


@pytest.fixture(scope="module")
def keys_(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {"ci": key_pair(folder, "ci"), "other": key_pair(folder, "other"),
            "p384": key_pair(folder, "p384", ec.SECP384R1()), "locked": key_pair(folder, "locked", password="s3cret")}


@pytest.fixture(scope="module")
def bundle(keys_):
    return signing.sign(FILES, RERUNS, SigningKey.load(str(keys_["ci"][0])))


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding, written from its specification."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def test_the_bundle_is_a_dsse_signature_over_an_in_toto_statement_of_the_files_and_reruns(keys_, bundle):
    doc = json.loads(bundle)
    assert doc["mediaType"].startswith("application/vnd.dev.sigstore.bundle")
    env = doc["dsseEnvelope"]
    payload = base64.b64decode(env["payload"])
    public = serialization.load_pem_public_key(keys_["ci"][1].read_bytes())
    public.verify(base64.b64decode(env["signatures"][0]["sig"]), _pae(env["payloadType"], payload),
                  ec.ECDSA(hashes.SHA256()))  # raises when it does not verify
    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    listed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    expected = {n: hashlib.sha256(b).hexdigest() for n, b in FILES.items()}
    expected["reruns.sha256"] = hashlib.sha256(("a" * 64 + "\n" + "b" * 64 + "\n").encode()).hexdigest()
    assert listed == expected
    assert doc["verificationMaterial"]["publicKey"]["hint"] == hashlib.sha256(keys_["ci"][1].read_bytes()).hexdigest()
    assert signing.signed_statement(bundle) == statement


def _check(keys_, bundle, files=FILES, reruns=RERUNS, who="ci"):
    return signing.check(files, reruns, bundle, TrustedKey.load(str(keys_[who][1])))


def test_the_signed_card_verifies_and_each_failure_is_named(keys_, bundle):
    assert _check(keys_, bundle).ok
    assert _check(keys_, bundle, reruns=list(reversed(RERUNS)) + RERUNS[:1]).ok  # the same set of digests
    cases = [
        (dict(bundle=None), signing.UNSIGNED, "is not signed (no card.sig beside it)"),
        (dict(who="other"), signing.OTHER_KEY, "is signed by another key"),
        (dict(reruns=RERUNS[:1]), signing.RERUNS_CHANGED, "over other reruns than the store holds now"),
        (dict(files={**FILES, "card.md": b"# Recipe card (approved)\n"}), signing.FILES_CHANGED, "card.md differ"),
        (dict(files={k: v for k, v in FILES.items() if k != "card_hist.png"}), signing.FILES_CHANGED,
         "card_hist.png differ"),
        (dict(files={**FILES, "extra.png": b"x"}), signing.FILES_CHANGED, "extra.png differ"),
        (dict(bundle=b"not json"), signing.BAD_SIGNATURE, "is not a signature bundle"),
    ]
    for kw, kind, needle in cases:
        got = _check(keys_, **{"bundle": bundle, **kw})
        assert got.kind == kind and needle in got.message, (kw.keys(), got)


def _edited(bundle, edit):
    doc = json.loads(bundle)
    edit(doc)
    return json.dumps(doc).encode()


def test_an_altered_bundle_does_not_verify(keys_, bundle):
    def new_digest(doc):  # the statement edited to list other bytes for card.md, the signature kept
        env = doc["dsseEnvelope"]
        st = json.loads(base64.b64decode(env["payload"]))
        st["predicate"]["resources"][0]["digest"] = "0" * 64
        env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()

    def no_hint(doc):
        doc["verificationMaterial"]["publicKey"]["hint"] = ""

    got = _check(keys_, _edited(bundle, new_digest))
    assert got.kind == signing.BAD_SIGNATURE and "altered after signing" in got.message
    # another key's bundle without its key hint: the signature does not verify with the trusted key
    other = signing.sign(FILES, RERUNS, SigningKey.load(str(keys_["other"][0])))
    got = _check(keys_, _edited(other, no_hint))
    assert got.kind == signing.BAD_SIGNATURE and "or signed by another key" in got.message
    assert _check(keys_, _edited(bundle, no_hint)).ok  # the hint only names the key; the signature decides


def test_other_curves_and_an_encrypted_key(keys_, monkeypatch):
    b = signing.sign(FILES, RERUNS, SigningKey.load(str(keys_["p384"][0])))
    assert _check(keys_, b, who="p384").ok
    monkeypatch.setenv(signing.ENV_KEY, keys_["locked"][0].read_text())  # the PEM itself, as a CI secret
    monkeypatch.setenv(signing.ENV_PASSWORD, "s3cret")
    key = SigningKey.from_environment()
    assert key.name == f"the signing key in ${signing.ENV_KEY}"
    assert "PRIVATE" not in repr(key) and "s3cret" not in repr(key)  # a key logged by mistake shows no secret
    assert _check(keys_, signing.sign(FILES, RERUNS, key), who="locked").ok
    monkeypatch.setenv(signing.ENV_PASSWORD, "wrong")
    with pytest.raises(SigningError, match=r"^The signing key in \$RECIPE_AUDIT_SIGNING_KEY is not a PEM private key "
                                           r"\(or its password is wrong\)\.$"):
        SigningKey.from_environment()
    monkeypatch.setenv(signing.ENV_KEY, " ")
    assert SigningKey.from_environment() is None


def test_keys_that_cannot_sign_or_be_trusted_are_refused_in_one_sentence(keys_, tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa.pem").write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    p192 = key_pair(tmp_path, "p192", ec.SECP192R1())
    cases = [
        (lambda: SigningKey.load(str(tmp_path / "none.pem")), "Cannot read the signing key "),
        (lambda: SigningKey.load(str(keys_["ci"][1])), "is not a PEM private key"),
        (lambda: SigningKey.load(str(tmp_path / "rsa.pem")), "is not an elliptic-curve key"),
        (lambda: SigningKey.load(str(p192[0])), "is on curve secp192r1"),
        (lambda: SigningKey.load(str(keys_["locked"][0])), "cannot be opened"),
        (lambda: TrustedKey.load(str(keys_["ci"][0])), "is not a PEM public key"),
        (lambda: TrustedKey.load(str(tmp_path / "none.pub")), "Cannot read the trusted key "),
        (lambda: TrustedKey.load(str(p192[1])), "is on curve secp192r1"),
    ]
    for load, needle in cases:
        with pytest.raises(SigningError) as err:
            load()
        assert needle in str(err.value) and "\n" not in str(err.value) and str(err.value).endswith("."), err.value
