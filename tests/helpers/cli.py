"""Helpers shared by the tests that drive the ``recipe-audit`` command line in-process.

Test modules import it as ``from helpers.cli import run_cli``.
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
