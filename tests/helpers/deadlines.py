"""A benchmark stopped as gpu_check.py stops a part at its deadline, once it has written its first results."""

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def stopped_once_written(command: list[str], written: Path, stop: Callable[[subprocess.Popen], None]) -> None:
    """Runs `command` in a process group of its own until `written` exists (two minutes at most), then stops it with
    `stop` (gpu_check.stop: the group, SIGTERM then SIGKILL), as a deadline stops a part midway."""
    process = subprocess.Popen(command, start_new_session=True)
    try:
        for _ in range(1200):
            if written.exists():
                break
            time.sleep(0.1)
    finally:
        stop(process)
