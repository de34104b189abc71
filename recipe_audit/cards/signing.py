"""Signed recipe cards, in the OpenSSF model-signing format.

A card is signed with an offline elliptic-curve key (P-256, P-384 or P-521, PEM) through the
``model-signing`` package (the ``signing`` extra): a Sigstore bundle holding a DSSE envelope
whose payload is an in-toto statement listing each signed file with its sha256. The files
signed are the card's own (``card.json`` and every file its manifest lists: the Markdown, the
page, the plots) and one more, made for the signature and kept nowhere else:
``reruns.sha256``, the reruns digests of the card's cells (each the sha256 over the seeds, runs
and values the cell was computed from; :func:`reruns_text`), one per line. A card's files alone
would prove only that the key holder wrote them; with the reruns digest in the statement, the
signature says which results in the store the card was computed from when it was signed.

The bundle is kept beside the card as ``card.sig`` (:func:`signature_name`). :func:`check`
verifies one against a trusted public key, the card's files as they are now, and the reruns
digests the store gives now, and says which of these failed (:data:`UNSIGNED`,
:data:`OTHER_KEY`, :data:`BAD_SIGNATURE`, :data:`FILES_CHANGED`, :data:`RERUNS_CHANGED`). No
MLflow here: the callers read the files and the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

RERUNS_FILE = "reruns.sha256"
SIGNATURE_SUFFIX = ".sig"
ENV_KEY = "RECIPE_AUDIT_SIGNING_KEY"  # the private key: a path to its PEM file, or the PEM text itself
ENV_PASSWORD = "RECIPE_AUDIT_SIGNING_KEY_PASSWORD"  # its password, when the PEM is encrypted
CURVES = ("secp256r1", "secp384r1", "secp521r1")  # the curves model-signing signs with

# what check() found
VERIFIED = "verified"
UNSIGNED = "unsigned"
OTHER_KEY = "signed-by-another-key"
BAD_SIGNATURE = "signature-does-not-verify"
FILES_CHANGED = "card-changed-since-signed"
RERUNS_CHANGED = "reruns-changed-since-signed"

__all__ = ["BAD_SIGNATURE", "CURVES", "ENV_KEY", "ENV_PASSWORD", "FILES_CHANGED", "OTHER_KEY", "RERUNS_CHANGED",
           "RERUNS_FILE", "SIGNATURE_SUFFIX", "UNSIGNED", "VERIFIED", "SignatureCheck", "SigningError",
           "SigningKey", "TrustedKey", "check", "covers", "key_hint", "reruns_text", "sign", "signature_name", "signed_statement"]


class SigningError(ValueError):
    """A key that cannot be used, or the signing library missing: one sentence."""


def signature_name(card_file: str = "card.json") -> str:
    """The bundle's file name beside the card's JSON: ``card.json`` -> ``card.sig``."""
    return Path(card_file).stem + SIGNATURE_SUFFIX


def reruns_text(digests: Iterable[str]) -> bytes:
    """The signed ``reruns.sha256``: the distinct reruns digests of the card's cells, sorted, one
    per line (a cell's digest does not depend on τ: a cell card of three bars has one line).

    >>> reruns_text(["b" * 4, "a" * 4, "b" * 4])
    b'aaaa\\nbbbb\\n'
    """
    return "".join(d + "\n" for d in sorted(set(digests))).encode("ascii")


def _library():
    try:
        from model_signing import hashing, signing, verifying
    except ImportError as exc:
        raise SigningError(f"Signing cards needs the model-signing package (pip install 'recipe_audit[signing]'): "
                           f"{exc}.") from None
    return hashing, signing, verifying


def _hashing_config(hashing):
    # every file by name with its sha256, nothing ignored, no link followed, one thread (a card is small)
    return (hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False)
            .use_file_serialization(hashing_algorithm="sha256", max_workers=1, allow_symlinks=False))


def _fingerprint(public_key) -> str:
    """sha256 (hex) of the public key's PEM, the ``hint`` model-signing writes into a bundle."""
    from cryptography.hazmat.primitives import serialization

    pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def _check_curve(key, what: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        raise SigningError(f"{what} is not an elliptic-curve key; cards are signed with P-256, P-384 or P-521 keys "
                           f"(openssl ecparam -name prime256v1 -genkey -noout -out key.pem).")
    if key.curve.name not in CURVES:
        raise SigningError(f"{what} is on curve {key.curve.name}; cards are signed with P-256, P-384 or P-521.")


@dataclass(frozen=True)
class SigningKey:
    """A private key to sign cards with: its PEM and what it is called in messages (its file, or
    the environment variable that held it); never printed."""

    pem: bytes = field(repr=False)
    password: bytes | None = field(repr=False)
    name: str
    fingerprint: str

    @classmethod
    def load(cls, value: str, password: str | None = None, name: str | None = None) -> SigningKey:
        """The key in ``value``: a path to a PEM file, or the PEM text itself (a CI secret in
        :data:`ENV_KEY`). ``SigningError`` (one sentence) for a missing file, a PEM that is not
        an elliptic-curve private key on a supported curve, or a wrong password."""
        from cryptography.hazmat.primitives import serialization

        text = str(value).strip()
        if text.startswith("-----BEGIN"):
            pem, name = text.encode("ascii", "replace") + b"\n", name or "the signing key"
        else:
            name = name or f"the signing key {text}"
            pem = _read_key_file(Path(text).expanduser(), "the signing key")
        pw = password.encode("utf-8") if password else None
        try:
            key = serialization.load_pem_private_key(pem, pw)
        except TypeError as exc:  # a password given for a plain key, or none for an encrypted one
            raise SigningError(f"{name[0].upper() + name[1:]} cannot be opened: {exc}.") from None
        except ValueError:
            raise SigningError(f"{name[0].upper() + name[1:]} is not a PEM private key (or its password is "
                               f"wrong).") from None
        _check_curve(key, name[0].upper() + name[1:])
        return cls(pem, pw, name, _fingerprint(key.public_key()))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SigningKey | None:
        """The key :data:`ENV_KEY` holds (a path or the PEM), with :data:`ENV_PASSWORD`; None
        when it is unset or empty."""
        env = os.environ if environ is None else environ
        value = env.get(ENV_KEY, "").strip()
        if not value:
            return None
        return cls.load(value, env.get(ENV_PASSWORD) or None,
                        name=f"the signing key in ${ENV_KEY}" if value.startswith("-----BEGIN") else None)


def _read_key_file(path: Path, what: str) -> bytes:
    """A key file's bytes, read bounded (:func:`recipe_audit.files.read_small_file`: a regular file
    of at most 1 MiB; a device, a named pipe or a directory, a link to one included, refused at
    once, before a byte is read): ``SigningError`` (one sentence naming it) otherwise."""
    from recipe_audit.files import InputFileError, read_small_file

    try:
        return read_small_file(path, what)
    except InputFileError as exc:
        raise SigningError(str(exc)) from None


@dataclass(frozen=True)
class TrustedKey:
    """The public key a release trusts (a PEM file kept with the code under review)."""

    pem: bytes
    path: str
    fingerprint: str

    @classmethod
    def load(cls, path: str) -> TrustedKey:
        """``SigningError`` (one sentence) unless ``path`` is a PEM elliptic-curve public key."""
        from cryptography.hazmat.primitives import serialization

        pem = _read_key_file(Path(path).expanduser(), "the trusted key")
        try:
            key = serialization.load_pem_public_key(pem)
        except ValueError:
            raise SigningError(f"The trusted key {path} is not a PEM public key (openssl ec -in key.pem -pubout "
                               f"writes one).") from None
        _check_curve(key, f"The trusted key {path}")
        return cls(pem, str(path), _fingerprint(key))

    @property
    def short(self) -> str:
        return f"sha256:{self.fingerprint[:16]}"


def _write_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    folder = root / "card"  # the statement's subject is named after the folder: always "card"
    folder.mkdir()
    for name, data in files.items():
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise SigningError(f"A card file cannot be signed under the name {name!r}.")
        (folder / name).write_bytes(data)
    return folder


def _signed_files(files: Mapping[str, bytes], reruns: Iterable[str]) -> dict[str, bytes]:
    out = {n: b for n, b in files.items() if not n.endswith(SIGNATURE_SUFFIX) and n != RERUNS_FILE}
    out[RERUNS_FILE] = reruns_text(reruns)
    return out


def sign(files: Mapping[str, bytes], reruns: Iterable[str], key: SigningKey) -> bytes:
    """The Sigstore bundle (JSON bytes) signing ``files`` (name -> bytes: the card's JSON and
    the files its manifest lists) and the reruns digests ``reruns`` with ``key``."""
    hashing, signing, _ = _library()
    with tempfile.TemporaryDirectory(prefix="recipe_audit_sign_") as tmp:  # mode 0700: the key stays ours
        root = Path(tmp)
        folder = _write_tree(root, _signed_files(files, reruns))
        key_file = root / "key.pem"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.pem)
        # the password as bytes: model-signing 1.1.1 hands it to cryptography as it is (a str fails there)
        config = signing.Config().use_elliptic_key_signer(private_key=key_file, password=key.password)
        config.set_hashing_config(_hashing_config(hashing)).sign(folder, root / "card.sig")
        return (root / "card.sig").read_bytes()


def signed_statement(bundle: bytes) -> dict | None:
    """The in-toto statement a bundle carries (not verified: for reading what it says), or None
    when ``bundle`` is not a DSSE bundle."""
    import base64

    try:
        env = json.loads(bundle.decode("utf-8"))["dsseEnvelope"]
        return json.loads(base64.b64decode(env["payload"]))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def covers(bundle: bytes | None, files: Mapping[str, bytes], reruns: Iterable[str]) -> bool:
    """Whether the statement in ``bundle`` lists exactly ``files`` and the reruns digests
    ``reruns`` (not verified: for choosing whether a bundle goes with a card written again, byte
    for byte; :func:`check` decides whether to trust it)."""
    statement = signed_statement(bundle) if bundle else None
    if statement is None:
        return False
    listed = {r.get("name"): r.get("digest") for r in (statement.get("predicate") or {}).get("resources") or []}
    return listed == {n: hashlib.sha256(b).hexdigest() for n, b in _signed_files(files, reruns).items()}


def key_hint(bundle: bytes | None) -> str | None:
    """The key a bundle says it was signed with (sha256 of the public key's PEM; not verified:
    for choosing, never for trusting), or None."""
    try:
        hint = json.loads((bundle or b"").decode("utf-8"))["verificationMaterial"]["publicKey"]["hint"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return hint if isinstance(hint, str) and hint else None


@dataclass(frozen=True)
class SignatureCheck:
    """What :func:`check` found: :data:`VERIFIED` or why not, in words that follow "the card ..."."""

    kind: str
    message: str

    @property
    def ok(self) -> bool:
        return self.kind == VERIFIED


def check(files: Mapping[str, bytes], reruns: Iterable[str], bundle: bytes | None, trusted: TrustedKey,
          where: str = "card.sig") -> SignatureCheck:
    """Whether ``bundle`` (None: no bundle beside the card) is a signature by ``trusted`` over
    the card's ``files`` as they are now and the reruns digests ``reruns`` as the store gives
    them now. Which check failed is the result's kind: no bundle (:data:`UNSIGNED`), another
    key's (:data:`OTHER_KEY`), a signature that does not verify with the trusted key (a bundle
    altered after signing, or another key's without its key hint: :data:`BAD_SIGNATURE`), card
    files other than those signed (:data:`FILES_CHANGED`), or other reruns in the store than
    those the card was signed over (:data:`RERUNS_CHANGED`)."""
    from cryptography.exceptions import InvalidSignature

    hashing, _, verifying = _library()
    key = trusted.short
    if bundle is None:
        return SignatureCheck(UNSIGNED, f"is not signed (no {where} beside it); a release with a trusted key takes "
                                        f"only cards signed by it ({key})")
    statement, hint = signed_statement(bundle), key_hint(bundle)
    if statement is None:
        return SignatureCheck(BAD_SIGNATURE, f"has a {where} that is not a signature bundle")
    if hint and hint != trusted.fingerprint:
        return SignatureCheck(OTHER_KEY, f"is signed by another key (sha256:{str(hint)[:16]}), not by the trusted "
                                         f"key {key}")
    signed = _signed_files(files, reruns)
    with tempfile.TemporaryDirectory(prefix="recipe_audit_verify_") as tmp:
        root = Path(tmp)
        folder = _write_tree(root, signed)
        (root / "card.sig").write_bytes(bundle)
        (root / "trusted.pub").write_bytes(trusted.pem)
        config = verifying.Config().use_elliptic_key_verifier(public_key=root / "trusted.pub")
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its note on bundles without a key hint
                config.set_hashing_config(_hashing_config(hashing)).verify(folder, root / "card.sig")
        except InvalidSignature:
            return SignatureCheck(BAD_SIGNATURE, f"has a signature that does not verify with the trusted key {key}: "
                                                 f"{where} was altered after signing, or signed by another key")
        except ValueError as exc:
            text = str(exc)
            if text.startswith("Key mismatch"):
                return SignatureCheck(OTHER_KEY, f"is signed by another key, not by the trusted key {key}")
            if not text.startswith("Signature mismatch"):
                return SignatureCheck(BAD_SIGNATURE, f"has a {where} that cannot be verified "
                                                     f"({text.splitlines()[0][:200]})")
            return _which_changed(signed, statement, key)
        except Exception as exc:  # noqa: BLE001 - a bundle the library cannot parse: one sentence
            return SignatureCheck(BAD_SIGNATURE, f"has a {where} that is not a signature bundle "
                                                 f"({type(exc).__name__})")
    return SignatureCheck(VERIFIED, f"is signed by the trusted key {key}")


def _which_changed(signed: Mapping[str, bytes], statement: dict, key: str) -> SignatureCheck:
    """The signature verified; the files differ from the statement's: which."""
    listed = {r.get("name"): r.get("digest") for r in (statement.get("predicate") or {}).get("resources") or []}
    now = {n: hashlib.sha256(b).hexdigest() for n, b in signed.items()}
    differ = sorted(n for n in set(listed) | set(now) if listed.get(n) != now.get(n))
    if differ == [RERUNS_FILE]:
        return SignatureCheck(RERUNS_CHANGED, f"is signed by the trusted key {key} over other reruns than the store "
                                              f"holds now: the seeds, runs or values it was computed from changed "
                                              f"since it was signed")
    files = [n for n in differ if n != RERUNS_FILE]
    return SignatureCheck(FILES_CHANGED, f"is not the card signed by the trusted key {key}: "
                                         f"{', '.join(files[:5])} differ(s) from the signed file(s)")
