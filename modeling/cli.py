"""What every `symbert-*` command does with a user error: one line on stderr, exit status 2, no traceback.

A `UserError` is a `ValueError`, so the Python API raises it like any other bad value; only the commands turn it
into a one-line message. Anything else still ends in a traceback: that is a bug to report.
"""

import sys
from pathlib import Path

from .modeling_symbert import missing_local_path_message


class UserError(ValueError):
    """Bad input the user can fix: a value, a file or a folder. The message names it and says what is allowed."""


def run_command(run, argv=None):
    """Call `run(argv)`; a `UserError` becomes `<command>: error: <message>` on stderr and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except UserError as error:
        command = Path(sys.argv[0]).name or "symbert"
        message = " ".join(str(error).split())  # one line, whatever the message's layout
        print(f"{command}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def missing_local_path(path):
    """A UserError for a path that looks local (absolute, ./, ../, ~ or an existing parent) but does not exist;
    None when `path` may be a Hub repository id. Callers use it before asking the Hub, so that a typo in a folder
    name is reported as a missing folder, not as an invalid repository id. (The models' `from_pretrained` makes the
    same check, as a ValueError.)"""
    message = missing_local_path_message(path)
    return UserError(message) if message else None
