"""Elliptic-curve key pairs for the signed-card tests, written as the PEM files a CI keeps: the
private key (PKCS#8, optionally password-protected) and its public key (SubjectPublicKeyInfo)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def key_pair(folder: Path, name: str, curve=None, password: str | None = None) -> tuple[Path, Path]:
    """Write ``folder/name.pem`` and ``folder/name.pub`` for a new key (P-256 unless ``curve``)."""
    key = ec.generate_private_key(curve or ec.SECP256R1())
    enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    (folder / f"{name}.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8, enc))
    (folder / f"{name}.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return folder / f"{name}.pem", folder / f"{name}.pub"
