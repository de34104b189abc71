"""recipe_audit's sweepers and launchers under the names Hydra looks them up by.

Hydra instantiates a sweeper or launcher only if its class is defined under ``hydra_plugins``;
each class here is the :mod:`recipe_audit.app` class it names, and nothing more. The ones built
on optional Hydra plugins exist when those are installed (the ``parallel`` and ``cluster`` extras).
"""

from __future__ import annotations

from recipe_audit.app import parallel, tolerant_submitit
from recipe_audit.app.curtailing import CurtailingSweeperBase
from recipe_audit.app.launchers import SeedLauncherBase
from recipe_audit.app.sweepers import SeedSweeperBase


class SeedSweeper(SeedSweeperBase):
    """``hydra/sweeper=seeds``: Hydra's basic sweeper, composing one configuration per recipe."""


class CurtailingSweeper(CurtailingSweeperBase):
    """``hydra/sweeper=curtail``: seeds in batches; a recipe stops once its verdict is settled."""


class SeedLauncher(SeedLauncherBase):
    """``hydra/launcher=seeds``: Hydra's basic launcher, deriving each seed's job configuration."""


if parallel.SeedJoblibLauncherBase is not None:

    class SeedJoblibLauncher(parallel.SeedJoblibLauncherBase):
        """``hydra/launcher=local_parallel``: Hydra's joblib launcher, tolerant of a killed worker."""


if tolerant_submitit.TolerantLocalLauncherBase is not None:

    class TolerantLocalLauncher(tolerant_submitit.TolerantLocalLauncherBase):
        """``hydra/launcher=cluster_local``: submitit's local launcher; a dead job is a failed rerun."""

    class TolerantSlurmLauncher(tolerant_submitit.TolerantSlurmLauncherBase):
        """``hydra/launcher=slurm``: submitit's SLURM launcher; a dead job is a failed rerun."""
