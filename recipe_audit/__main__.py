"""``python -m recipe_audit``: the Hydra app of :mod:`recipe_audit.app.main` (one job = one rerun),
or a recipe-audit command when the first word names one.

    python -m recipe_audit                      # one rerun, seed 0
    python -m recipe_audit -m                   # the default sweep: 59 seeds
    python -m recipe_audit -m 'seed=range(10)' recipe=default,stable
    python -m recipe_audit card ...             # a recipe-audit command (recipe-audit --help)

A command word is routed here, before anything of Hydra is imported: the post-hoc commands start
as fast as ``recipe-audit`` itself, and a bare word (never a Hydra override) is not answered with
Hydra's override-parser traceback.
"""

import sys

from recipe_audit.commands import COMMANDS

#: The recipe-audit commands ``python -m recipe_audit`` forwards: the command line's subcommands, as
#: registered (``recipe_audit.commands.COMMANDS``), known without building the parser.
CLI_COMMANDS = tuple(COMMANDS)

__all__ = ["main", "run"]


def main() -> None:
    """The Hydra app (``recipe_audit.app.main.main``), its command line read from ``sys.argv``."""
    from recipe_audit.app.main import main as app_main

    app_main()


def run() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in CLI_COMMANDS:
        from recipe_audit.cli import main as cli_main

        sys.exit(cli_main(sys.argv[1:]))
    from recipe_audit.errors import stdout_gone

    status = None
    try:
        try:
            from recipe_audit.app.main import run as run_app

            run_app()
        except SystemExit as exc:  # Hydra's --help, --cfg, an error's exit
            status = exc.code
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at exit
    except BrokenPipeError:
        # `python -m recipe_audit --help | head -1`: stop quietly, as `recipe-audit` does
        status = stdout_gone()
    sys.exit(status)


if __name__ == "__main__":
    run()
