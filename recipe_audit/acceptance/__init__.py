"""Acceptance cards: inputs of the four diagnostics and the audit that runs them; no training
library is imported here (the training lives in :mod:`recipe_audit.train.acceptance`).

* :mod:`.records` — evaluation records (files, MLflow tables), validation, paired views;
* :mod:`.mechanism_spec` — the mechanism config of diagnostic (c), typed and checked in one place;
* :mod:`.mechanism` — diagnostic (c)'s signatures, from weights or from given α;
* :mod:`.audit` — :func:`~.audit.run_acceptance`: records → gates → card document;
* :mod:`.experiment` — the worked ``experiment=acceptance``: a cell's job, the cards at the sweep's end.

The statistics live in :mod:`recipe_audit.stats.acceptance`; the card document, Markdown and
figures in :mod:`recipe_audit.cards.acceptance`.
"""
