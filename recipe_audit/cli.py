"""``recipe-audit``: post-hoc commands over a tracking store (no retraining).

    recipe-audit bound --failures 6 --reruns 59 --json
    recipe-audit card --experiment-name recipe_audit --tau 0.7 0.8 --json card.json

The command-line contract (option names, JSON keys, verdict strings, exit codes) is stable:
0 on success, 2 on bad input with one sentence on stderr, never a traceback. Each command lives
in a module of :mod:`recipe_audit.commands`, registered in ``commands.COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from recipe_audit.commands import COMMANDS
from recipe_audit.errors import stdout_gone
from recipe_audit.store.uris import secret_in_uri


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's usage block is noise here)
        self.exit(2, f"recipe-audit: error: {message}\n")


#: Each command word's handler, filled by :func:`build_parser` from the command modules.
HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, each registered by its module (``commands.COMMANDS``).
    Building it imports nothing heavy: the modules that compute are imported by the handlers, so
    ``--help`` and ``bound`` answer at once."""
    p = _Parser(prog="recipe-audit", description="Recipe cards from MLflow reruns.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in dict.fromkeys(COMMANDS.values()):
        handlers = importlib.import_module(f"recipe_audit.commands.{module}").register(sub)
        words = [w for w, m in COMMANDS.items() if m == module]
        if sorted(handlers) != sorted(words):
            raise AssertionError(f"recipe_audit.commands.{module} registers {sorted(handlers)}, "
                                 f"commands.COMMANDS names {sorted(words)} for it")
        HANDLERS.update(handlers)
    return p


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)  # --help prints here, then exits
        except SystemExit:
            sys.stdout.flush()  # the help or usage: a reader that went away is seen here
            raise
        refused = secret_in_uri(getattr(args, "tracking_uri", None), "--tracking-uri",
                                "every local user can read it in the process list while the command runs")
        if refused:
            raise ValueError(refused)
        status = HANDLERS[args.command](args)
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at exit
        return status
    except BrokenPipeError:
        # the reader of stdout left early (`recipe-audit bound ... | head -2`): stop quietly, with
        # the shell's status for a broken pipe
        return stdout_gone()
    except ValueError as exc:  # CardError, QueryError, StatsInputError and every input check
        print(f"recipe-audit: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except RecursionError:  # a document nested deeper than anything recipe_audit writes
        print("recipe-audit: error: the input is nested too deeply to be read (no file recipe_audit writes "
              "is nested like that).", file=sys.stderr)
        return 2
    except Exception as exc:
        # the tracking store's own errors in one sentence (the store door tells them apart)
        from recipe_audit.store.errors import store_error_sentence

        sentence = store_error_sentence(exc, _one_line)
        if sentence is None:
            raise
        print(f"recipe-audit: error: {sentence}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
