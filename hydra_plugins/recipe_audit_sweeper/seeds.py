"""The default sweeper and launcher of ``python -m recipe_audit -m`` as Hydra plugins
(``hydra/sweeper=seeds``, ``hydra/launcher=seeds``, selected in ``recipe_audit/conf/config.yaml``;
``hydra/sweeper=basic``, ``hydra/launcher=basic`` give Hydra's own).

The sweeper is Hydra's basic sweeper with the same parameters (``max_batch_size``, ``params``),
jobs, order and batches; before each batch it composes one job per recipe rather than every
seed's job (:class:`recipe_audit.sweeper.SeedSweeperBase`). The launcher is Hydra's basic launcher
(jobs one after another in this process), composing one job per recipe with Hydra and deriving
the other seeds' configurations from it (:class:`recipe_audit.launcher.SeedLauncherBase`). This
module only gives them names in the ``hydra_plugins`` namespace, where Hydra looks for plugins.
"""

from __future__ import annotations

from recipe_audit.launcher import SeedLauncherBase
from recipe_audit.sweeper import SeedSweeperBase


class SeedSweeper(SeedSweeperBase):
    """Hydra's basic sweeper, composing one configuration per recipe (not per seed) up front."""


class SeedLauncher(SeedLauncherBase):
    """Hydra's basic launcher, deriving each seed's job configuration from its recipe's first."""
