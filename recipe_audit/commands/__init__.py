"""``recipe-audit``'s subcommands, each in a module of this package, registered once: in :data:`COMMANDS`.

A command module has ``register(subparsers)``, which adds its parsers (``subparsers.add_parser``)
and returns ``{command word: handler}``; a handler takes the parsed ``argparse.Namespace`` and
returns the exit status, and signals bad input by raising ``ValueError`` (or a subclass) with one
sentence. Building the parsers imports nothing heavy: a handler imports what it computes with.
"""

#: Every command word and the module of this package that registers it, in the order
#: ``recipe-audit --help`` lists them. ``recipe_audit.cli`` builds the parser from it and
#: ``python -m recipe_audit`` routes these words to the command line without loading Hydra.
COMMANDS = {
    "bound": "bound",
    "card": "card",
    "acceptance": "acceptance",
    "attach": "registry",
    "gate": "registry",
    "verify": "registry",
}
