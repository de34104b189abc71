"""MkDocs hook: the command-line reference is the parser's own help, so it cannot go stale.

A page line that reads exactly ``<!-- recipe-audit --help -->`` is replaced by the help of
``recipe-audit`` and of each of its subcommands, as ``recipe-audit SUBCOMMAND --help`` prints it.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- recipe-audit --help -->"


def _cli_help() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width: one width for the site
    from recipe_audit.cli import build_parser

    parser = build_parser()
    parts = ["```text", parser.format_help().rstrip(), "```"]
    for action in parser._actions:  # argparse keeps its subparsers here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += ["", f"## recipe-audit {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _cli_help())
