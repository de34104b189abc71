"""Helpers shared by the tests that drive the ``recipe-audit`` command line in-process.

Test modules import it by name (``from cli_helpers import run_cli``), as they do ``conftest``:
tests/ is on ``sys.path`` because tests/conftest.py sits there.
"""

from __future__ import annotations

from recipe_audit.cli import main


def run_cli(args, capsys):
    """Run the CLI in-process; argparse-level errors exit through SystemExit like the real thing.

    Returns ``(exit code, stdout, stderr)``.
    """
    try:
        rc = main(args)
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err
