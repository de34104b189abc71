"""The default sweeper of ``python -m recipe_audit -m`` as a Hydra plugin (``hydra/sweeper=seeds``,
selected in ``conf/config.yaml``; ``hydra/sweeper=basic`` gives Hydra's own).

Hydra's basic sweeper with the same parameters (``max_batch_size``, ``params``), jobs, order and
batches; before each batch it composes one job per recipe rather than every seed's job. The
implementation is :class:`recipe_audit.sweeper.SeedSweeperBase`; this module only gives it a name
in the ``hydra_plugins`` namespace, where Hydra looks for sweepers.
"""

from __future__ import annotations

from recipe_audit.sweeper import SeedSweeperBase


class SeedSweeper(SeedSweeperBase):
    """Hydra's basic sweeper, composing one configuration per recipe (not per seed) up front."""
