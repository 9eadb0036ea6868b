"""How a command ends other than with its own exit code, each as one line (evo/cli.py prints it): the
commands raise these, the CLI maps them to exit codes."""


class BadInput(Exception):
    """Raised for anything the user gave us that we cannot use; printed as one line, exit 2."""


class Failed(Exception):
    """A search that cannot go on (its database failed, another driver took its run over): one line, exit 1."""


class Interrupted(Exception):
    """A search stopped by Ctrl-C or SIGTERM, its message saying what to do next; exit 130."""
