"""The inputs of the array statistics (NumPy), checked: counts as arrays, probabilities, metric
arrays, bars, resample counts and random generators. Every failure is one sentence
(:class:`~recipe_audit.stats.errors.StatsInputError`), in the words of :mod:`.checks`, which checks
the scalars (ε, δ, one ``(k, n)``) of every statistic; the names here say they take arrays
(:func:`check_count_arrays`, :func:`check_delta_array`), so no name means two contracts."""

from __future__ import annotations

import numbers

import numpy as np

from recipe_audit.stats.checks import DELTA_RULE, MAX_RERUNS, MAX_RERUNS_TEXT, Typed
from recipe_audit.stats.errors import StatsInputError


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    if isinstance(x, (np.integer,)):
        return str(int(x))
    return repr(x)


def as_count(name: str, value) -> np.ndarray:
    """Return ``value`` as an int64 array, rejecting bools, non-numbers, non-whole numbers and
    counts above ``MAX_RERUNS`` (checked before any conversion could overflow)."""
    if isinstance(value, (bool, np.bool_)):
        raise StatsInputError(f"{name} must be a whole number, got the boolean {value}.")
    if isinstance(value, int) and abs(value) > MAX_RERUNS:  # before NumPy wraps or refuses it
        raise StatsInputError(f"{name} must be at most {MAX_RERUNS_TEXT}, got {_big(value)}.")
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        raise StatsInputError(f"{name} must hold whole numbers, got booleans.")
    if arr.dtype.kind == "O" and arr.size and all(isinstance(x, int) and not isinstance(x, bool)
                                                  for x in arr.flat):
        big = [x for x in arr.flat if abs(x) > MAX_RERUNS]
        if big:
            raise StatsInputError(f"{name} must be at most {MAX_RERUNS_TEXT}, got {_big(big[0])}.")
        arr = arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        if arr.size and arr.max() > MAX_RERUNS:  # compared in the array's own type: no wrap-around
            raise StatsInputError(f"{name} must be at most {MAX_RERUNS_TEXT}, got {int(arr.max())}.")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind != "f":
        raise StatsInputError(f"{name} must be a whole number, got {value!r}.")
    bad = ~np.isfinite(arr) | (arr != np.round(arr))
    if np.any(bad):
        first = arr[bad].flat[0]
        raise StatsInputError(f"{name} must be a whole number, got {_fmt(first)}.")
    if np.any(arr > MAX_RERUNS):
        raise StatsInputError(f"{name} must be at most {MAX_RERUNS_TEXT}, got {_fmt(arr[arr > MAX_RERUNS].flat[0])}.")
    return arr.astype(np.int64)


def _big(x: int) -> str:
    return str(x) if abs(x) < 10**40 else f"a {len(str(abs(x)))}-digit number"


def check_count_arrays(k, n) -> tuple[np.ndarray, np.ndarray]:
    """Validate failures ``k`` and reruns ``n`` (0 <= k <= n, n >= 1) and return int64 arrays."""
    k_arr = as_count("failures k", k)
    n_arr = as_count("reruns n", n)
    try:
        kb, nb = np.broadcast_arrays(k_arr, n_arr)
    except ValueError:
        raise StatsInputError(
            f"failures k (shape {k_arr.shape}) and reruns n (shape {n_arr.shape}) do not broadcast."
        ) from None
    if np.any(nb < 1):
        raise StatsInputError(f"reruns n must be at least 1, got {int(nb[nb < 1].flat[0])}.")
    if np.any(kb < 0):
        raise StatsInputError(f"failures k cannot be negative, got {int(kb[kb < 0].flat[0])}.")
    over = kb > nb
    if np.any(over):
        raise StatsInputError(
            f"failures k ({int(kb[over].flat[0])}) cannot exceed reruns n ({int(nb[over].flat[0])})."
        )
    return k_arr, n_arr


def check_prob_array(name: str, value) -> np.ndarray:
    """Validate a probability strictly inside (0, 1); return a float64 array."""
    if isinstance(value, (bool, np.bool_)):
        raise StatsInputError(f"{name} must be a number strictly between 0 and 1, got {value}.")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise StatsInputError(f"{name} must be a number strictly between 0 and 1, got {value!r}.") from None
    bad = ~((arr > 0.0) & (arr < 1.0))
    if np.any(bad):
        first = arr[bad].flat[0]
        raise StatsInputError(f"{name} must lie strictly between 0 and 1, got {_fmt(first)}.")
    return arr


def check_delta_array(value) -> np.ndarray:
    """Validate the statistical risk delta, strictly inside (0, 0.5); return a float64 array."""
    arr = check_prob_array("delta", value)
    bad = ~(arr < 0.5)
    if np.any(bad):
        raise StatsInputError(f"delta must lie strictly between 0 and 0.5, got {_fmt(arr[bad].flat[0])}: {DELTA_RULE}.")
    return arr


def check_scalar_prob(name: str, value) -> float:
    """Like :func:`check_prob_array` but for a single number (ε and δ: :mod:`.checks`); returns a Python float."""
    arr = check_prob_array(name, value)
    if arr.ndim != 0:
        raise StatsInputError(f"{name} must be a single number, got an array of shape {arr.shape}.")
    return value if isinstance(value, Typed) else float(arr)  # a Typed number keeps the decimal typed


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Validate a Python/numpy integer >= ``minimum`` and return it as ``int``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise StatsInputError(f"{name} must be an integer, got {value!r}.")
    if int(value) < minimum:
        raise StatsInputError(f"{name} must be at least {minimum}, got {int(value)}.")
    return int(value)


def check_tau(tau) -> float:
    """Validate the release bar: one finite number."""
    if isinstance(tau, (bool, np.bool_)):
        raise StatsInputError(f"the release bar tau must be a finite number, got {tau}.")
    try:
        t = float(tau)
    except (TypeError, ValueError):
        raise StatsInputError(f"the release bar tau must be a finite number, got {tau!r}.") from None
    if not np.isfinite(t):
        raise StatsInputError(f"the release bar tau must be a finite number, got {t}.")
    return t


def check_metrics(metrics) -> np.ndarray:
    """Return metrics as a 1-D float64 array (NaN/inf allowed: they mark unusable reruns)."""
    try:
        arr = np.asarray(metrics, dtype=np.float64)
    except (TypeError, ValueError):
        raise StatsInputError(
            "metrics must be a 1-D sequence of numbers (NaN marks an unfinished rerun)."
        ) from None
    if arr.ndim != 1:
        raise StatsInputError(f"metrics must be a 1-D array, got {arr.ndim} dimensions.")
    return arr


def make_rng(rng) -> tuple[np.random.Generator, int | None, str]:
    """Turn ``rng`` (Generator, int seed or None meaning seed 0) into a Generator plus provenance."""
    if isinstance(rng, np.random.Generator):
        return rng, None, f"caller-supplied numpy Generator({type(rng.bit_generator).__name__})"
    if rng is None:
        return np.random.default_rng(0), 0, "numpy default_rng(0) (no rng given: fixed default seed)"
    if isinstance(rng, (bool, np.bool_)) or not isinstance(rng, numbers.Integral) or int(rng) < 0:
        raise StatsInputError(f"rng must be a numpy Generator or a non-negative integer seed, got {rng!r}.")
    return np.random.default_rng(int(rng)), int(rng), f"numpy default_rng({int(rng)})"
