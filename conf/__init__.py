"""The built-in app's Hydra configs, installed as the package ``recipe_audit.conf`` (pyproject.toml
maps it to this folder); ``recipe_audit.app.config_dir`` finds them from a checkout or a wheel."""
