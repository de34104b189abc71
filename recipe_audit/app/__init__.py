"""recipe_audit inside Hydra apps: the callback any Hydra app adds with one line
(``hydra/callbacks=recipe_audit``), its structured config, and the Hydra configs the search-path
plugin (``hydra_plugins.recipe_audit``) adds to every app: ``hydra/callbacks/recipe_audit``,
``hydra/sweeper/*`` and ``hydra/launcher/*`` (``recipe_audit/app/hydra_conf``)."""

from __future__ import annotations

from pathlib import Path

# recipe_audit/ (symbolic links followed: a strict editable install links back to the checkout)
_PACKAGE = Path(__file__).resolve().parent.parent


def config_dir() -> Path:
    """The folder of the built-in app's Hydra configs (``config.yaml`` and the config groups).

    They live in ``conf/`` at the top of the repository and ship inside the installed package as
    ``recipe_audit.conf`` (pyproject.toml maps that package to ``conf/``). Run from a checkout
    (``PYTHONPATH``, an editable install) it is the checkout's ``conf/``, beside the code that
    runs; installed from a wheel, the package's."""
    checkout = _PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "conf" / "config.yaml").is_file():
        return checkout / "conf"
    from importlib import resources

    return Path(str(resources.files("recipe_audit.conf")))
