"""The curtailing sweeper as a Hydra plugin: ``python -m recipe_audit -m hydra/sweeper=curtail``.

The implementation is :class:`recipe_audit.sweeper.CurtailingSweeperBase`; this module only gives
it a name in the ``hydra_plugins`` namespace, where Hydra looks for sweepers.
"""

from __future__ import annotations

from recipe_audit.sweeper import CurtailingSweeperBase


class CurtailingSweeper(CurtailingSweeperBase):
    """Launch seeds in batches; stop a recipe once its verdict at the planned N is settled."""
