"""What every `symbert-*` command does with a user error: one line on stderr, exit status 2, no traceback.

A `UserError` is a `ValueError`, so the Python API raises it like any other bad value; only the commands turn it
into a one-line message (with SYMBERT_DEBUG=1 in the environment, the traceback too). Anything else still ends in a
traceback: that is a bug to report.
"""

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .interrupt import DEBUG_VARIABLE
from .loading_symbert import missing_local_path_message

ERRORS_NOTE = f"A bad argument or input is one line on stderr and exit status 2; {DEBUG_VARIABLE}=1 adds the traceback."


class UserError(ValueError):
    """Bad input the user can fix: a value, a file or a folder. The message names it and says what is allowed."""


class Interrupted(Exception):
    """A command stopped by Ctrl-C (SIGINT); the message says what was kept and how to go on."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written (examples keep their lines), and each option's default after its help (not
    "(default: None)" where the help says what no value means)."""

    def _get_help_string(self, action):
        if action.default is None and "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def command_parser(
    description: str | None, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser, **kwargs: Any
) -> argparse.ArgumentParser:
    """The parser of a `symbert-*` command: `--help` starts with `description` (no usage block, which for the
    Trainer's 100+ arguments runs to pages) and shows every default; a bad argument (unknown option, bad choice,
    value of the wrong type) is a one-line UserError, not argparse's usage and error."""
    parser = parser_class(
        description=description, usage=argparse.SUPPRESS, formatter_class=HelpFormatter, epilog=ERRORS_NOTE, **kwargs
    )

    def error(message):
        raise UserError(f"{message} (see --help)")

    parser.error = error
    return parser


def group_arguments(parser: argparse.ArgumentParser, dataclass_type: type, heading: str) -> None:
    """Move `dataclass_type`'s arguments out of the general options into a group of their own, listed after the
    groups made before it: for the Trainer's 100+ arguments, after ours. (HfArgumentParser groups a dataclass that
    has `_argument_group_name`, which transformers' TrainingArguments has not; argparse has no public way to move
    an argument.)"""
    names = {field.name for field in dataclasses.fields(dataclass_type)}
    group = parser.add_argument_group(heading)
    for action in list(parser._optionals._group_actions):
        if action.dest in names:
            parser._optionals._group_actions.remove(action)
            group._group_actions.append(action)


def run_command(run: Callable[[list[str]], Any], argv: list[str] | None = None) -> Any:
    """Call `run(argv)`; a `UserError` becomes `<command>: error: <message>` on stderr and exit status 2, Ctrl-C
    `<command>: interrupted[: what was kept]` and exit status 130; either is raised with its traceback when the
    environment sets SYMBERT_DEBUG (to anything but 0)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except (KeyboardInterrupt, Interrupted) as error:  # Ctrl-C: one line, exit status 130 as a shell reports SIGINT
        if os.environ.get(DEBUG_VARIABLE, "0") not in ("", "0"):
            raise
        command = Path(sys.argv[0]).name or "symbert"
        detail = f": {' '.join(str(error).split())}" if isinstance(error, Interrupted) else ""
        print(f"{command}: interrupted{detail}", file=sys.stderr)
        raise SystemExit(130) from None
    except UserError as error:
        if os.environ.get(DEBUG_VARIABLE, "0") not in ("", "0"):
            raise
        command = Path(sys.argv[0]).name or "symbert"
        message = " ".join(str(error).split())  # one line, whatever the message's layout
        print(f"{command}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def missing_local_path(path: str | Path) -> UserError | None:
    """A UserError for a path that looks local (absolute, ./, ../, ~ or an existing parent) but does not exist;
    None when `path` may be a Hub repository id. Callers use it before asking the Hub, so that a typo in a folder
    name is reported as a missing folder, not as an invalid repository id. (The models' `from_pretrained` makes the
    same check, as a ValueError.)"""
    message = missing_local_path_message(path)
    return UserError(message) if message else None
