"""The input of ``recipe-audit card``, checked before anything is computed.

Every check ends in one sentence (a ``ValueError``; the command line prints it and exits 2):
first what the options alone decide (ranges, output paths, the tracking URI), then, with one read
of the store, what only the store knows (is there such a metric, audit set, group key?).

What a release bar τ may be: recipe_audit's own metrics (``accuracy/<audit set>``) are accuracies,
so a τ outside [0, 1] is refused (every rerun would pass it, or fail it, whatever it scored). For
any metric, a τ below or above every value the finished reruns logged is allowed (it is a fair
question: the answer then rests on N and the unfinished reruns alone) but noted on stderr.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from recipe_audit import keys
from recipe_audit.stats.options import is_accuracy_metric
from recipe_audit.store import artifacts

#: Schemes MLflow keeps runs under (SQL schemes may name a driver: ``postgresql+psycopg2``).
TRACKING_SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", "http", "https",
                    "databricks", "databricks-uc", "uc")
MAX_PLANNED_SEEDS = 10**6
ACCURACY_PREFIX = keys.accuracy_key("")


def planned_seeds(text: str | None) -> tuple[int, ...] | None:
    """``range(59)``, ``range(10, 20)``, ``range(0, 100, 2)`` or ``0,1,2`` as a tuple of seeds."""
    if text is None:
        return None
    t = text.strip()
    shape = "--planned-seeds must be 'range(N)', 'range(A, B[, STEP])' or a comma list of integers"
    try:
        if t.startswith("range(") and t.endswith(")"):
            args = [int(x) for x in t[6:-1].split(",")]
            if not 1 <= len(args) <= 3:
                raise ValueError
            if len(args) == 3 and args[2] == 0:
                raise ValueError(f"--planned-seeds {t!r} has a step of 0.")
            seeds = range(*args)
            if len(seeds) > MAX_PLANNED_SEEDS:
                raise ValueError(f"--planned-seeds {t!r} names {len(seeds)} seeds, more than the "
                                 f"{MAX_PLANNED_SEEDS} a card reads.")
        else:
            seeds = [int(x) for x in t.split(",") if x.strip()]
            if len(seeds) > MAX_PLANNED_SEEDS:
                raise ValueError(f"--planned-seeds names more than the {MAX_PLANNED_SEEDS} seeds a card reads.")
    except ValueError as exc:
        if exc.args and str(exc.args[0]).startswith("--planned-seeds"):
            raise
        raise ValueError(f"{shape}, not {_shown(text)}.") from None
    if len(seeds) == 0:
        raise ValueError(f"--planned-seeds {_shown(text)} names no seed.")
    return tuple(seeds)


def _shown(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


def audit_names(audits: Sequence[str]) -> None:
    for a in audits:
        if not a.strip() or "," in a:
            raise ValueError(f"--audit names an audit set: non-empty, without a comma, not {_shown(a)}.")


# ---------------------------------------------------------------------------------------------
# Output paths and the tracking store
# ---------------------------------------------------------------------------------------------


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _can_create_in(directory: Path) -> str | None:
    """Why no file can be created in ``directory`` (None when one can): tried, with a file that is
    removed at once (permissions alone do not tell: root, read-only mounts, /proc)."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".recipe-audit-probe-")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(name)
    return None


def _writable_dir(path: Path, what: str) -> None:
    """``path`` is, or can be made, a directory we can write in."""
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{what} {path} is a file, not a directory.")
        why = _can_create_in(path)
        if why:
            raise ValueError(f"{what} {path} is not writable ({why}).")
        return
    base = _nearest_existing(path)
    if not base.is_dir():
        raise ValueError(f"{what} {path} cannot be created: {base} is a file, not a directory.")
    why = _can_create_in(base)
    if why:
        raise ValueError(f"{what} {path} cannot be created in {base} ({why}).")


def output_paths(json_path: Path | None, out_dir: Path | None) -> None:
    """Where the card goes: refused before the card is computed, rather than after."""
    if json_path is not None:
        if str(json_path).strip() == "":
            raise ValueError("--json needs a file name.")
        if json_path.is_dir():
            raise ValueError(f"--json {json_path} is a directory; give a file name such as {json_path / 'card.json'}.")
        _writable_dir(json_path.parent, f"The directory of --json {json_path}:")
        if json_path.exists() and not os.access(json_path, os.W_OK):
            raise ValueError(f"--json {json_path} is not writable.")
    if out_dir is not None:
        if str(out_dir).strip() == "":
            raise ValueError("--out needs a directory name.")
        _writable_dir(out_dir, "--out")


def tracking_uri(uri: str, will_log: bool) -> None:
    """A URI MLflow can read; an existing SQLite file (a read must not create an empty store); a
    server that answers; and, when the card is to be logged, a store that can be written."""
    from recipe_audit.store.uris import mask_in_text

    try:
        scheme = urlsplit(uri).scheme.lower()
    except ValueError:
        raise ValueError(f"{mask_in_text(uri)} is not a tracking URI.") from None
    if len(scheme) == 1:  # a Windows drive letter: a path
        scheme = ""
    if scheme.split("+", 1)[0] not in TRACKING_SCHEMES:
        raise ValueError(f"The tracking URI {mask_in_text(uri)} has the scheme '{scheme}', which MLflow cannot "
                         f"read; use sqlite:///PATH, a directory, http(s)://HOST or a database URI.")
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///"):
            raise ValueError(f"A SQLite tracking URI is sqlite:///PATH, not {mask_in_text(uri)}.")
        db = Path(uri[len("sqlite:///"):].split("?", 1)[0])
        if not db.is_file():
            raise ValueError(f"There is no tracking store at {uri} ({db} "
                             f"{'is a directory' if db.is_dir() else 'does not exist'}).")
        if will_log:
            _sqlite_writable(db, uri)
    elif scheme in ("http", "https"):
        from recipe_audit.store.tracking import check_reachable

        check_reachable(uri)


def _sqlite_writable(db: Path, uri: str) -> None:
    import sqlite3

    advice = "; compute the card without --log-run to read it without writing"
    if not os.access(db, os.W_OK) or not os.access(db.parent, os.W_OK | os.X_OK):
        raise ValueError(f"The tracking store {uri} is read-only{advice}.")
    try:
        con = sqlite3.connect(f"file:{db}?mode=rw", uri=True, isolation_level=None, timeout=2)
    except sqlite3.Error:
        return  # the read says what is wrong with it
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("CREATE TABLE recipe_audit_write_probe (x)")
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc) or "read-only" in str(exc):
            raise ValueError(f"The tracking store {uri} is read-only{advice}.") from None
    finally:
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        con.close()


# ---------------------------------------------------------------------------------------------
# What only the store knows
# ---------------------------------------------------------------------------------------------


def _listing(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def store(uri: str, experiment: str, metrics: Sequence[str], *, seed_key: str, group_by: Sequence[str],
          taus: Sequence[float], higher_is_better: bool, audits_named: bool, frame=None) -> list[str]:
    """One read of the reruns: refuse a metric or audit set no rerun has (a typo is not a
    ``refused-shift`` verdict) and a group key no rerun has; return notes for τ outside the
    values the finished reruns logged. ``frame``: the runs, when the caller has read them already
    (``read_runs`` of ``metrics`` with ``seed_key``, ``group_by``, the audit-sets tag among the
    extra keys and ``require_metrics=False``, as the card's own read does); else read here."""
    from recipe_audit.reruns import only_crashed
    from recipe_audit.store.read import read_runs

    scored_on = "tags." + keys.TAG_AUDIT_SETS
    names = [m[len("metrics."):] if m.startswith("metrics.") else m for m in metrics]
    if frame is None:
        frame = read_runs(uri, experiment, names, seed_key=seed_key, group_by=list(group_by),
                          extra_keys=[scored_on], require_metrics=False)
    scored = sorted({a for t in frame[scored_on].tolist() if isinstance(t, str) for a in t.split(",") if a})
    for m in names:
        if frame[f"logged[{m}]"].any():
            continue
        audit = m[len(ACCURACY_PREFIX):] if is_accuracy_metric(m) else None
        if audit is not None and audit in scored:
            continue  # configured but never logged: unfinished or refused per recipe, not a typo
        if audit is not None and audits_named and scored:
            raise ValueError(f"No rerun in experiment '{experiment}' was scored on audit set '{audit}'; "
                             f"the audit sets there are {_listing(scored)}.")
        if only_crashed(frame, keys.NO_METRIC_ERROR_LEAD):
            continue  # every rerun crashed: a card of failures, not a misnamed metric
        read_runs(uri, experiment, [m], seed_key=seed_key)  # raises, naming the metrics there
        raise ValueError(f"No run in experiment '{experiment}' has the metric '{m}'.")
    for g in group_by:
        values = frame[g].tolist()
        if any(v is not None and not (isinstance(v, float) and math.isnan(v)) for v in values):
            continue
        kind = g.split(".", 1)[0]
        have = artifacts.keys_of_runs(uri, frame["run_id"].tolist(), kind) if kind in ("params", "tags", "metrics") else []
        there = (f"; the {kind} there are " + _listing([f"{kind}.{k}" for k in have])) if have else ""
        raise ValueError(f"No rerun in experiment '{experiment}' has the key '{g}' to group by{there}.")
    notes = []
    for m in names:
        vals = [v for v in frame[m].tolist() if isinstance(v, float) and math.isfinite(v)]
        if not vals:
            continue
        lo, hi = min(vals), max(vals)
        for t in taus:
            if lo <= t <= hi:
                continue
            none_fail = (t < lo) == higher_is_better
            notes.append(f"tau = {t:g} lies {'below' if t < lo else 'above'} every value of '{m}' the finished "
                         f"reruns logged ({lo:g} to {hi:g}), so {'no' if none_fail else 'every'} finished rerun "
                         f"fails at it.")
    return notes
