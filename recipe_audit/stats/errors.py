"""Errors raised by :mod:`recipe_audit.stats`."""

from __future__ import annotations

__all__ = ["StatsInputError"]


class StatsInputError(ValueError):
    """Invalid input to a statistic; the message is one sentence naming the bad value."""
