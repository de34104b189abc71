"""recipe_audit inside Hydra apps: the callback any Hydra app adds with one line
(``hydra/callbacks=recipe_audit``), its structured config, and the Hydra configs the search-path
plugin (``hydra_plugins.recipe_audit``) adds to every app: ``hydra/callbacks/recipe_audit``,
``hydra/sweeper/*`` and ``hydra/launcher/*`` (``recipe_audit/app/hydra_conf``)."""
