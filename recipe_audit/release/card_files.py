"""Reading a recipe card back from where it is kept: a local file or folder, or an artifact URI
(``runs:/<run id>/card.json``, ``mlflow-artifacts:/...``, ``file://...``), with the digest of each
file its manifest lists, so a check can tell an edited plot from an untouched one."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_audit.cards.files import file_sha256, validate
from recipe_audit.cards.model import CardError
from recipe_audit.cards.signing import signature_name
from recipe_audit.cards.verify import CardFiles
from recipe_audit.errors import first_line
from recipe_audit.store import artifacts

__all__ = ["load_card", "read_card"]


def _is_uri(text: str) -> bool:
    return "://" in text or text.startswith(("runs:/", "models:/", "mlflow-artifacts:/"))


def load_card(path_or_uri: str, tracking_uri: str | None = None) -> dict[str, Any]:
    """Read and validate a recipe card from a local file (or a directory holding ``card.json``)
    or an artifact URI (``runs:/<run id>/card.json``, ``mlflow-artifacts:/...``, ``file://...``).
    Raises ``CardError`` (one sentence) when there is no such file or it is not a recipe card."""
    return read_card(path_or_uri, tracking_uri).doc


def _manifest(raw: bytes) -> list[str]:
    """The file names a card's ``artifacts`` manifest lists (none when it is not such a card)."""
    try:
        listed = json.loads(raw.decode("utf-8")).get("artifacts") or {}
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, RecursionError, TypeError):
        return []
    return [n for n in listed if isinstance(n, str) and n and "/" not in n and "\\" not in n and n not in (".", "..")]


def read_card(path_or_uri: str, tracking_uri: str | None = None) -> CardFiles:
    """:func:`load_card`, with the sha256 of each file the card's manifest lists, read from beside
    the card (its Markdown and plots); for a card at the top of a run's artifacts (a card run),
    also the names of files there that the manifest does not list. The card's signature bundle
    (``card.sig`` beside ``card.json``: :mod:`recipe_audit.cards.signing`) is read when it is
    there; it is not a file of the card (its digest does not cover it)."""

    text = str(path_or_uri)
    path = Path(text)
    own_place = False
    files: dict[str, str | None] = {}
    contents: dict[str, bytes] = {}
    signature = None
    name = "card.json"
    if not _is_uri(text) or text.startswith("file://"):
        if text.startswith("file://"):
            from urllib.parse import unquote, urlparse

            path = Path(unquote(urlparse(text).path))
        if path.is_dir() and (path / "card.json").is_file():
            path = path / "card.json"
        if not path.is_file():
            raise CardError(f"There is no card file at {text}.")
        raw = path.read_bytes()
        name = path.name
        for listed in _manifest(raw):
            if (path.parent / listed).is_file():
                files[listed] = file_sha256(path.parent / listed)
                contents[listed] = (path.parent / listed).read_bytes()
        sig = path.parent / signature_name(name)
        signature = sig.read_bytes() if sig.is_file() else None
    else:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                got = artifacts.download(text, tmp, tracking_uri)
                base = text.rstrip("/") if got.is_dir() else text.rstrip("/").rpartition("/")[0]
                card_path = got / "card.json" if got.is_dir() else got
                raw = card_path.read_bytes()
        except (artifacts.ArtifactError, OSError) as exc:
            first = first_line(exc, 300)
            raise CardError(f"Cannot read a card at {text}: {first}") from None
        name = card_path.name
        files, listed = _remote_files(base, name, _manifest(raw), tracking_uri, contents)
        signature = _remote_signature(base, name, tracking_uri, listed)
        own_place = text.startswith("runs:/") and base.count("/") == 1  # runs:/<run id>: a card run's top
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CardError(f"{text} is not a recipe card (not a JSON document).") from None
    except RecursionError:
        raise CardError(f"{text} is not a recipe card (its JSON is nested too deeply to read).") from None
    if not isinstance(doc, dict) or doc.get("kind") != "recipe_card":
        raise CardError(f"{text} is not a recipe card (its 'kind' is not 'recipe_card').")
    try:
        validate(doc)
    except RecursionError:
        raise CardError(f"{text} is not a recipe card (its JSON is nested too deeply to check).") from None
    return CardFiles(doc, files, own_place, contents, name=name, raw=raw, signature=signature)


def _remote_signature(base: str, card_name: str, tracking_uri: str | None,
                      listed: list[str] | None) -> bytes | None:
    """The signature bundle beside a card under the artifact URI ``base`` (None: there is none;
    ``listed``: the files there, None when the store could not list them)."""
    sig = signature_name(card_name)
    if listed is not None and sig not in listed:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return artifacts.download(f"{base}/{sig}", tmp, tracking_uri).read_bytes()
        except (artifacts.ArtifactError, OSError):
            return None


def _remote_files(base: str, card_name: str, names: Sequence[str], tracking_uri: str | None,
                  contents: dict[str, bytes]) -> tuple[dict[str, str | None], list[str] | None]:
    """sha256 of each of ``names`` under the artifact URI ``base`` (absent when it cannot be read),
    and None for every other file there but the card's signature bundle (best effort: a store that
    cannot list shows none); the bytes of each file read go into ``contents``. And the files
    listed there (None: the store could not list them)."""
    listed = artifacts.list_files(base, tracking_uri)
    out: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if listed is not None and name not in listed:
                continue
            try:
                local = artifacts.download(f"{base}/{name}", tmp, tracking_uri)
            except artifacts.ArtifactError:
                continue
            out[name] = file_sha256(local)
            contents[name] = local.read_bytes()
    for name in sorted(listed or ()):
        if name not in (card_name, signature_name(card_name)) and name not in out and not name.startswith("."):
            out[name] = None
    return out, listed
