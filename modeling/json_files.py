"""JSON input files read strictly: a regular file (never a named pipe, device or folder), valid UTF-8 JSON, no key
given twice in one object; and the readers of their fields (a number in range, a non-empty string, a boolean, an
object). A bad file or value is one line naming it. The release reads every JSON file it publishes or shows
so; glue_results.json is read so by `GlueResults.read` (training/glue/results.py)."""

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from .cli import UserError

# What a card may show of a JSON file's text as written: a name or a path, never Markdown or HTML (no backtick, angle
# bracket, table bar, link bracket or line break)
PLAIN_TEXT = re.compile(r"[\w .,:;/+=@~()'-]+")
PLAIN_TEXT_RULE = "letters, digits, spaces and . , : ; / + = @ ~ ( ) ' -"
NAME = re.compile(r"[A-Za-z0-9][\w.-]*")  # a setting's or key's name: lr_scheduler_type's "linear", "bf16"
LICENCE_RULE = "a licence id of letters, digits, _ . -"  # a licence is a NAME


def regular_file(path: str | Path) -> Path:
    """`path`, refused without opening it unless it is a regular file (or a link to one): a named pipe, a device or
    a folder would hang or fail the read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error.strerror}).") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{path} is not a regular file (a named pipe, device or folder); give a JSON file.")
    return Path(path)


def unique_keys(path: str | Path):
    """A json.loads object_pairs_hook refusing a key given twice in one object (a task, a seed or a field listed
    twice): Python's JSON keeps the last silently, so the card would show one of two values."""

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys):
            twice = next(key for key in keys if keys.count(key) > 1)
            raise UserError(
                f"{path}: the key {twice!r} is given {keys.count(twice)} times in one JSON object; each key (a task, "
                "a seed, a field) is given once."
            )
        return dict(pairs)

    return hook


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(regular_file(path).read_text(encoding="utf-8"), object_pairs_hook=unique_keys(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path} is not valid JSON ({error}).") from None
    except RecursionError:
        raise UserError(f"{path} is nested too deeply to be a JSON file the release reads.") from None


def is_number(value: Any) -> bool:
    """A JSON number: an int or a float, never a bool (True is an int in Python) nor a string."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(path: Path, field: str, value: Any, low: float, high: float = math.inf, integer: bool = False) -> Any:
    """`value`, refused unless it is a finite number (an integer with `integer`) in [low, high]."""
    kind = "an integer" if integer else "a finite number"
    bounds = f"in [{low:g}, {high:g}]" if high != math.inf else f">= {low:g}"
    ok = (is_integer(value) if integer else is_number(value)) and math.isfinite(value) and low <= value <= high
    if not ok:
        raise UserError(f"{path}: {field}={value!r} is not {kind} {bounds}.")
    return value


def text(path: Path, field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{path}: {field}={value!r} is not a non-empty string.")
    return value


def boolean(path: Path, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{path}: {field}={value!r} is not true or false.")
    return value


def mapping(path: Path, field: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{path}: {field} is a JSON {type(value).__name__}, not an object.")
    return value


def plain_text(
    path: Path, field: str, value: Any, pattern: re.Pattern = PLAIN_TEXT, rule: str = PLAIN_TEXT_RULE
) -> str:
    """`value`, refused unless a string of `pattern` (what a card shows as written): one line naming the value and
    what is allowed."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise UserError(f"{path}: {field}={value!r} is not plain text for a card: {rule} only.")
    return value
