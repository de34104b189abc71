"""recipe_audit's search-path plugin: adds recipe_audit's Hydra configs, and only those, to every
Hydra app (``hydra/callbacks/recipe_audit``, ``hydra/sweeper/{seeds,curtail}``,
``hydra/launcher/{seeds,local_parallel,cluster_local,slurm,ray_local}``) and registers the
callback's structured config, so ``hydra/callbacks=recipe_audit`` works in an app that knows
nothing about recipe_audit. Hydra imports this module when it scans the ``hydra_plugins``
namespace at start-up; it imports nothing heavy."""
