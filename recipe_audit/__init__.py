"""recipe_audit: how often does the next rerun of a fine-tuning recipe fail the release bar?

The Python API (``docs/python_api.md``), imported on first use so that ``import recipe_audit``
and the ``recipe-audit`` command stay fast:

>>> import recipe_audit
>>> recipe_audit.verdict(6, 59)
'unsupported'

* :func:`bound`, :func:`verdict`: the exact bounds and verdict for ``k`` failures in ``N`` reruns;
* :func:`card`: the recipe card of an MLflow experiment's reruns;
* :func:`card_from_runs`: the card of a DataFrame of runs;
* :func:`attach`, :func:`gate`: cards on registered model versions, the release gate;
* :class:`Card`: what ``card`` and ``card_from_runs`` return.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the command line starts here)

__all__ = ["Card", "attach", "bound", "card", "card_from_runs", "gate", "verdict"]

if TYPE_CHECKING:
    from recipe_audit.api import Card, attach, bound, card, card_from_runs, gate, verdict


def __getattr__(name: str):
    """Import :mod:`recipe_audit.api` on first use of one of its names (PEP 562)."""
    if name in __all__:
        from recipe_audit import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
