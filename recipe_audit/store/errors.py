"""The tracking store's own failures (``TrackingError``, ``StoreGone``), and the one sentence a command
prints for a failure of the store.

The door knows which errors are the store's: its own ``TrackingError``, MLflow's and SQLAlchemy's
exceptions, and the SQLite driver's. A library that was never imported cannot have raised, so its
exception class is looked at only when the library is loaded: importing MLflow to answer "was it
MLflow?" would cost seconds, and ``recipe-audit bound`` never loads it.
"""

from __future__ import annotations

import sys

from recipe_audit.store.uris import mask_in_text


class TrackingError(RuntimeError):
    """The tracking store cannot be used (one sentence)."""


class StoreGone(TrackingError):
    """The store a sweep was writing to is no longer the one it opened (deleted, replaced)."""


class FileStoreRefused(TrackingError):
    """A job would make an MLflow file store in its SQLite store's folder (one sentence)."""


def _loaded_class(module: str, name: str) -> type | None:
    """``module.name`` when ``module`` has been imported (None otherwise; nothing is imported)."""
    return getattr(sys.modules.get(module), name, None)


def _is(exc: BaseException, module: str, name: str) -> bool:
    cls = _loaded_class(module, name)
    return cls is not None and isinstance(exc, cls)


def store_error_sentence(exc: BaseException, one_line) -> str | None:
    """The sentence to print for ``exc`` when the tracking store raised it (credentials masked),
    else None. ``one_line`` turns an exception into the command's one line."""
    if isinstance(exc, TrackingError) or _is(exc, "mlflow.exceptions", "MlflowException"):
        return mask_in_text(one_line(exc))
    if _is(exc, "sqlalchemy.exc", "SQLAlchemyError") or _is(exc, "sqlite3", "Error"):
        # a damaged or truncated SQLite file, a database that refuses: the driver's own first line
        cause = getattr(exc, "orig", None) or exc
        return (f"the tracking store could not be read ({mask_in_text(one_line(cause))}); "
                "is it an MLflow store, whole and not being written?")
    return None
