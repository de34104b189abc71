"""The search-path plugin (see the package docstring)."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from recipe_audit.app.schema import register

HYDRA_CONF = "pkg://recipe_audit.app.hydra_conf"

register()  # the callback's schema, before Hydra composes the app's config


class RecipeAuditSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # appended: the app's own configs and Hydra's come first; recipe_audit adds options to
        # Hydra's groups (hydra/callbacks, hydra/sweeper, hydra/launcher) and nothing else
        search_path.append(provider="recipe_audit", path=HYDRA_CONF)
