"""mask_credentials (recipe_audit/store/uris.py): what a URI looks like once printed."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest

from recipe_audit.store.uris import mask_credentials

MASKED = [
    ("http://user:pw@host:5000", "http://user:***@host:5000"),
    ("postgresql+psycopg2://mlflow:secret@127.0.0.1:5433/mlflow",
     "postgresql+psycopg2://mlflow:***@127.0.0.1:5433/mlflow"),
    # '@' and ':' in the password, percent-encoded as a URI wants them
    ("postgresql://mlflow:p%40ss%3Aw0rd@db.example:5432/mlflow", "postgresql://mlflow:***@db.example:5432/mlflow"),
    # a raw '@' in the password: the host follows the last '@'
    ("http://u:p@ss@host/x", "http://u:***@host/x"),
    ("https://u:pw@h/path?q=a@b#frag@x", "https://u:***@h/path?q=a@b#frag@x"),
    ("http://:pw@host", "http://:***@host"),  # no user
    ("http://u:@host", "http://u:***@host"),  # empty password
    ("http://u:pw@[::1]:5000/", "http://u:***@[::1]:5000/"),
    # a user name alone can be a token: masked whole
    ("https://ghp_abcdef123@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("postgresql://mlflow@127.0.0.1:5433/mlflow", "postgresql://***@127.0.0.1:5433/mlflow"),
]

UNCHANGED = [
    "http://127.0.0.1:5000", "https://mlflow.example.com/#/experiments/1", "databricks", "",
    "sqlite:///mlflow.db", "sqlite:////tmp/store@team/mlflow.db", "file:///home/a@b/mlruns",
    "/home/a@b/mlruns", "./mlruns", "mlruns", "C:\\Users\\a@b\\mlruns", "user@host:/srv/mlruns",
    "https://h/path?user=u:p@x",
]


@pytest.mark.parametrize(("uri", "want"), MASKED)
def test_masks_the_password(uri, want):
    got = mask_credentials(uri)
    assert got == want
    parts = urlsplit(uri)
    secret = parts.username if parts.password is None else parts.password  # what must not show
    shown = urlsplit(got).netloc
    assert (secret not in shown and unquote(secret) not in shown) if secret else shown.startswith("u:***@")
    assert mask_credentials(got) == got  # masking twice changes nothing


@pytest.mark.parametrize("uri", UNCHANGED)
def test_no_credentials_no_change(uri):
    assert mask_credentials(uri) == uri


@pytest.mark.parametrize("uri", ["http://u:pw@[::1", "http://u:p\tw@host", "http://u:pw\n@host"])
def test_unreadable_uri_shows_nothing(uri):
    # urlsplit rejects the first and silently drops the tab and newline of the others
    assert mask_credentials(uri) == "***"
