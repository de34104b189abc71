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


#: Where MLflow's client reads the credentials of a tracking server (HTTP basic auth).
ENV_USERNAME, ENV_PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def credentials_to_env(uri: str, environ=None) -> str:
    """An ``http(s)://user:password@host`` URI's credentials moved to where MLflow's client reads
    them, ``$MLFLOW_TRACKING_USERNAME`` and ``$MLFLOW_TRACKING_PASSWORD`` (percent-decoded), and
    the URI returned without them: what is printed, recorded, tagged and handed to the jobs as
    ``$MLFLOW_TRACKING_URI`` then holds no password (MLflow's own "View run ... at:" lines
    included: they print the URI the client was made with). Jobs inherit the two variables.
    Other URIs (no password, other schemes) come back unchanged.

    >>> env = {}
    >>> credentials_to_env("http://admin:p%40ss@127.0.0.1:5000", env), env[ENV_USERNAME], env[ENV_PASSWORD]
    ('http://127.0.0.1:5000', 'admin', 'p@ss')
    >>> credentials_to_env("sqlite:////tmp/mlflow.db", env)
    'sqlite:////tmp/mlflow.db'
    """
    import os
    from urllib.parse import unquote

    if not uri.lower().startswith(("http://", "https://")):
        return uri
    m = _USERINFO.match(uri)
    if m is None or ":" not in m.group("userinfo"):
        return uri
    user, _, password = m.group("userinfo").partition(":")
    env = os.environ if environ is None else environ
    env[ENV_USERNAME], env[ENV_PASSWORD] = unquote(user), unquote(password)
    return without_credentials(uri)


def secret_in_uri(uri: str | None, named: str, shown_where: str) -> str | None:
    """The sentence that refuses a tracking URI holding a secret where it would be seen, else
    None: a password in any URI (``http://user:pw@host``, ``postgresql://user:pw@host/db``), or any
    user info in a server's URI (``https://TOKEN@host``). ``named``: how the user gave the URI
    (``tracking.uri``, ``--tracking-uri``); ``shown_where``: who would see it there. The sentence
    names where the secret goes instead: a server's user and password in
    ``$MLFLOW_TRACKING_USERNAME`` / ``$MLFLOW_TRACKING_PASSWORD``, a database's password where its
    client reads it.

    >>> print(secret_in_uri("http://admin:pw@127.0.0.1:5000", "--tracking-uri", "every local user sees it in the process list"))
    --tracking-uri holds a password (http://admin:***@127.0.0.1:5000), and every local user sees it in the process list: give --tracking-uri=http://127.0.0.1:5000 and the user and password in the environment, MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.
    >>> secret_in_uri("http://127.0.0.1:5000", "x", "y") is None, secret_in_uri("postgresql://mlflow@db/m", "x", "y") is None
    (True, True)
    """
    if not uri:
        return None
    m = _USERINFO.match(uri.strip())
    if m is None:
        return None
    server = m.group("scheme").lower() in ("http://", "https://")
    if not server and ":" not in m.group("userinfo"):
        return None  # a database user without a password (its password in ~/.pgpass): no secret
    what = "a password" if ":" in m.group("userinfo") else "a user name or token"
    bare = without_credentials(uri.strip())
    if server:
        where = (f"the user and password in the environment, {ENV_USERNAME} and {ENV_PASSWORD}")
    else:
        where = (f"the user and password where the database's client reads them (PostgreSQL: ~/.pgpass or "
                 f"PGPASSWORD; the user may stay in the URI), as {ENV_USERNAME} and {ENV_PASSWORD} hold a "
                 "tracking server's")
    return (f"{named} holds {what} ({mask_credentials(uri.strip())}), and {shown_where}: give {named}={bare} and "
            f"{where}.")


def absolute_uri(uri: str, cwd: str | None = None) -> str:
    """``uri`` with a relative local path made absolute (against ``cwd``, default the working
    directory), so that it names the same store from anywhere: ``sqlite:///mlruns/mlflow.db`` ->
    ``sqlite:////<cwd>/mlruns/mlflow.db``, a bare path -> its absolute path. Servers, databases
    and absolute paths come back unchanged.

    >>> absolute_uri("sqlite:///mlruns/mlflow.db", cwd="/repo")
    'sqlite:////repo/mlruns/mlflow.db'
    >>> absolute_uri("sqlite:////tmp/s/mlflow.db", cwd="/repo")
    'sqlite:////tmp/s/mlflow.db'
    >>> absolute_uri("http://127.0.0.1:5000", cwd="/repo")
    'http://127.0.0.1:5000'
    """
    import os

    base = cwd or os.getcwd()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rest = uri[len("sqlite:///"):]
        if rest and not rest.startswith(":memory:"):
            return "sqlite:///" + os.path.normpath(os.path.join(base, rest))
        return uri
    if "://" not in uri and not uri.startswith("file:") and not os.path.isabs(uri):
        return os.path.normpath(os.path.join(base, uri))
    return uri


def store_lines(uri: str) -> list[str]:
    """What the end of a command that wrote to a tracking store prints: the store's absolute URI
    and the line that points ``mlflow ui``, a plain ``MlflowClient()`` and the docs' snippets at
    it. A password in the URI is masked, and the export line says so.

    >>> for line in store_lines("sqlite:////repo/mlruns/mlflow.db"): print(line)
    Tracking store: sqlite:////repo/mlruns/mlflow.db
      export MLFLOW_TRACKING_URI=sqlite:////repo/mlruns/mlflow.db
    >>> store_lines("http://u:pw@host:5000")[1]
    "  export MLFLOW_TRACKING_URI='http://u:***@host:5000'   # with the password in place of ***"
    """
    import shlex

    shown = mask_credentials(absolute_uri(uri))
    export = f"  export MLFLOW_TRACKING_URI={shlex.quote(shown)}"
    if shown != absolute_uri(uri):
        export += "   # with the password in place of ***"
    return [f"Tracking store: {shown}", export]


def ui_command(uri: str) -> str:
    """The ``mlflow ui`` command for a local store: the whole URI, without MLflow's job runner
    (seven more processes that slow its start and outlive it), one worker.

    >>> ui_command("sqlite:////repo/mlruns/mlflow.db")
    'MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1 --backend-store-uri sqlite:////repo/mlruns/mlflow.db'
    """
    import shlex

    return ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1 --backend-store-uri "
            + shlex.quote(mask_credentials(absolute_uri(uri))))
