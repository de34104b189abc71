"""URIs fit to print: the credentials in them masked."""

from __future__ import annotations

import re
from urllib.parse import urlsplit


def mask_credentials(uri: str) -> str:
    """``uri`` with the password of its user info replaced by ``***``; everything else is kept as
    written. User info with no password is masked whole: a user name alone can be a token
    (``https://TOKEN@host``). URIs without user info (paths, ``sqlite:///...``) come back unchanged.
    A password must be percent-encoded as URIs require: a raw ``/`` in it ends the host part.

    >>> mask_credentials("http://user:pw@host:5000")
    'http://user:***@host:5000'
    >>> mask_credentials("postgresql+psycopg2://mlflow:secret@127.0.0.1:5433/mlflow")
    'postgresql+psycopg2://mlflow:***@127.0.0.1:5433/mlflow'
    >>> mask_credentials("https://ghp_token@github.com/org/repo.git")
    'https://***@github.com/org/repo.git'
    >>> mask_credentials("sqlite:////tmp/store/mlflow.db")
    'sqlite:////tmp/store/mlflow.db'
    """
    try:
        netloc = urlsplit(uri).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket: unreadable, so none of it is shown
        return "***"
    userinfo, at, host = netloc.rpartition("@")  # the host follows the last '@'
    if not at:
        return uri
    user, colon, _ = userinfo.partition(":")
    if f"//{netloc}" not in uri:  # urlsplit dropped characters (tabs, newlines): don't guess
        return "***"
    return uri.replace(f"//{netloc}", f"//{user + ':***' if colon else '***'}@{host}", 1)


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@]+)@")


def mask_in_text(text: str) -> str:
    """Every URI's credentials in a sentence masked as :func:`mask_credentials` masks one URI.

    >>> mask_in_text("The MLflow tracking server at http://u:pw@127.0.0.1:5000 is not reachable.")
    'The MLflow tracking server at http://u:***@127.0.0.1:5000 is not reachable.'
    >>> mask_in_text("no uri here")
    'no uri here'
    """
    def one(m: re.Match) -> str:
        user, sep, _ = m.group("userinfo").partition(":")
        return f"{m.group('scheme')}{user + ':***' if sep else '***'}@"

    return _USERINFO.sub(one, text)


def without_credentials(uri: str) -> str:
    """``uri`` with its user info removed (for a request that sends credentials another way).

    >>> without_credentials("http://u:pw@127.0.0.1:5000/api")
    'http://127.0.0.1:5000/api'
    """
    return _USERINFO.sub(lambda m: m.group("scheme"), uri)
