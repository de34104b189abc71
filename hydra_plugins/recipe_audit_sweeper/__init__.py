"""recipe_audit's Hydra plugins (Hydra instantiates sweepers only from the ``hydra_plugins`` namespace)."""
