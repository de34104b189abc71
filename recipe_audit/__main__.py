"""``python -m recipe_audit``: the Hydra app of :mod:`recipe_audit.app.main` (one job = one rerun).

    python -m recipe_audit                      # one rerun, seed 0
    python -m recipe_audit -m                   # the default sweep: 59 seeds
    python -m recipe_audit -m 'seed=range(10)' recipe=default,stable
    python -m recipe_audit card ...             # a recipe-audit command (recipe-audit --help)
"""

from recipe_audit.app.main import main, run

__all__ = ["main"]

if __name__ == "__main__":
    run()
