"""A Ctrl-C while a `symbert-*` command is still importing (torch, transformers, datasets: seconds before the command's
own `run_command` handles it) ends as it does later: `symbert-<command>: interrupted` on stderr and exit status 130,
not a traceback through the imports. Imported first by the package, and importing only the standard library, so that
it is in place before anything slow is imported; other programs importing symbert, and other exceptions, are left as
Python reports them (and SYMBERT_DEBUG=1 keeps the traceback)."""

import os
import sys

DEBUG_VARIABLE = "SYMBERT_DEBUG"


def command_name() -> str | None:
    """The running `symbert-*` command's name, or None when the program is something else."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("symbert-") else None


def quiet_interrupt(kind, value, traceback, report=sys.excepthook):
    if issubclass(kind, KeyboardInterrupt) and command_name() and os.environ.get(DEBUG_VARIABLE, "0") in ("", "0"):
        print(f"{command_name()}: interrupted", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(130)  # as run_command exits later: the status a shell gives Ctrl-C (nothing is open to clean up yet)
    report(kind, value, traceback)


if command_name() and sys.excepthook is sys.__excepthook__:
    sys.excepthook = quiet_interrupt
