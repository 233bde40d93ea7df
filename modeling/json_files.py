"""JSON input files read strictly: a regular file (never a named pipe, device or folder), valid UTF-8 JSON, no key
given twice in one object (and, where asked, no NaN or Infinity); and the readers of their fields (a number in range,
a non-empty string, a boolean, an object). `read_json` makes a bad file one line naming it; `load_json`, the same
reading, raises the parser's error for a reader that words it itself ("its config.json cannot be read (...)"). Every
JSON file the project wrote, or reads from a model or run folder, is read through them: the release's published
files, glue_results.json (`GlueResults.read`, training/glue/results.py), a run's summary, manifest, data positions and
Trainer state (training/reporting.py's `read_log_history`)."""

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


class JsonRefusal(ValueError):
    """JSON that Python's parser reads but a strict reader refuses: a key given twice in one object, or (where
    numbers must be finite) NaN or Infinity."""


class RepeatedKey(JsonRefusal):
    def __init__(self, key: str, count: int):
        super().__init__(f"the key {key!r} appears twice in one object: keep one")
        self.key, self.count = key, count


class NotRegularFile(ValueError):
    """A path that is a folder, a named pipe, a device or a socket: never opened to read (a pipe would wait)."""

    def __init__(self, kind: str):
        super().__init__(f"it is {kind}, not a regular file")
        self.kind = kind


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """A json.loads object_pairs_hook refusing a key given twice in one object (a task, a seed or a field listed
    twice): Python's JSON keeps the last silently, so a reader would see one of two values."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise RepeatedKey(twice, keys.count(twice))
    return dict(pairs)


def refuse_constant(name: str):
    raise JsonRefusal(f"{name} is not a number JSON allows: give a finite number")


def finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses as inf without passing through parse_constant
        raise JsonRefusal(f"{text} is past the largest float: give a finite number")
    return value


def strict_json(text: str, finite: bool = False) -> Any:
    """`text` parsed as JSON, refusing a key given twice in one object (RepeatedKey) and, with `finite`, NaN and
    ±Infinity (also as 1e400; JsonRefusal). Nesting deeper than the parser's recursion raises RecursionError, which
    each reader words as it words the rest."""
    numbers = {"parse_constant": refuse_constant, "parse_float": finite_float} if finite else {}
    return json.loads(text, object_pairs_hook=unique_keys, **numbers)


def load_json(path: str | Path, finite: bool = False) -> Any:
    """The JSON value of the regular file `path`, read strictly (`strict_json`), for a reader that says in its own
    words what is wrong: OSError (missing, unreadable), NotRegularFile (opened without waiting and refused before
    anything is read), UnicodeDecodeError, json.JSONDecodeError or JsonRefusal (ValueErrors all), RecursionError."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = "a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else "a device or socket"
        raise NotRegularFile(kind)
    with os.fdopen(descriptor, "rb") as file:
        return strict_json(file.read().decode("utf-8"), finite)


def read_json(path: str | Path) -> Any:
    """`load_json`'s value, any problem with the file one line naming it (a UserError)."""
    try:
        return load_json(path)
    except NotRegularFile:
        raise UserError(f"{path} is not a regular file (a named pipe, device or folder); give a JSON file.") from None
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error.strerror}).") from None
    except RepeatedKey as error:
        raise UserError(
            f"{path}: the key {error.key!r} is given {error.count} times in one JSON object; each key (a task, a "
            "seed, a field) is given once."
        ) from None
    except ValueError as error:  # not UTF-8, not JSON
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
