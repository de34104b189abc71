"""``recipe-audit`` subcommands that live in their own modules (see ``cli.EXTENSIONS``)."""
