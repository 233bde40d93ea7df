"""A benchmark stopped as gpu_check.py stops a part at its deadline, once it has written its first results."""

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def stopped_once_written(command: list[str], written: Path, stop: Callable[[subprocess.Popen], None]) -> None:
    """Runs `command` in a process group of its own until `written` exists (ten minutes at most: a loaded machine's
    fresh interpreter can take minutes to its first row), then stops it with `stop` (gpu_check.stop: the group,
    SIGTERM then SIGKILL), as a deadline stops a part midway. A command that ends first is not waited for."""
    process = subprocess.Popen(command, start_new_session=True)
    try:
        for _ in range(6000):
            if written.exists() or process.poll() is not None:
                break
            time.sleep(0.1)
    finally:
        stop(process)
