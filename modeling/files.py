"""Writing files so that a killed or failed write never leaves a half-written one, and telling a full disk from other
errors, for every command: the tools, training and the release."""

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_write_path(path: str | Path) -> Iterator[Path]:
    """A temporary path in `path`'s folder to write to, for writers that take a path (torch.onnx.export): it replaces
    `path` when the block ends, and is removed if the block raises."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: str | Path, write: Callable[[IO], object], binary: bool = False) -> None:
    """Writes through a temporary file in the same folder, so a killed run never leaves a half-written file."""
    with atomic_write_path(path) as temporary:
        with open(temporary, "wb") if binary else open(temporary, "w", newline="") as file:
            write(file)


def write_failure(error: BaseException) -> OSError | None:
    """`error` as the OSError of a write that failed, or None if it is not one. The writers of a checkpoint and of
    the final model report a full disk or a file-size limit (EFBIG, under `ulimit -f`) each in its own way:
    safetensors as a SafetensorError and tokenizers as a plain Exception, both ending "(os error N)", torch.save as
    a RuntimeError of its archive writer (inline_container.cc / PytorchStreamWriter), which names no errno."""
    if isinstance(error, OSError):
        return error
    message = " ".join(str(error).split())
    if match := re.search(r"\(os error (\d+)\)", message):
        number = int(match.group(1))
        return OSError(number, os.strerror(number))
    if isinstance(error, RuntimeError) and ("inline_container" in message or "PytorchStreamWriter" in message):
        return OSError(None, f"the write failed ({message[:200]})")
    return None
