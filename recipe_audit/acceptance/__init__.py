"""Acceptance cards: inputs of the four diagnostics and the audit that runs them.

* :mod:`.records` — evaluation records (files, MLflow tables), validation, paired views;
* :mod:`.mechanism` — diagnostic (c) from weights (torch; imported lazily) or from given α;
* :mod:`.audit` — :func:`~.audit.run_acceptance`: records → gates → card document.

The statistics live in :mod:`recipe_audit.stats.acceptance`; the card document, Markdown and
figures in :mod:`recipe_audit.cards.acceptance`.
"""
