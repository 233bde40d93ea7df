"""One line naming the machine a benchmark ran on, for the results files; how a CPU benchmark keeps its memory."""

import ctypes
import ctypes.util
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path


def describe_machine():
    import torch  # here, so that keep_freed_memory can be used before torch is imported

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = f"{torch.cuda.get_device_name()} (driver {gpu_driver()}), " if torch.cuda.is_available() else "no GPU, "
    return f"{gpu}{cpu}, {os.cpu_count()} CPU cores; torch {torch.__version__}"


def gpu_driver() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it, or "unknown" where nvidia-smi cannot say."""
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, timeout=20)
        return result.stdout.split()[0] if result.returncode == 0 and result.stdout.split() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def keep_freed_memory():
    """Make glibc keep freed memory in this process: no mmap for large buffers (M_MMAP_MAX 0) and no trimming of the
    heap's top (M_TRIM_THRESHOLD 2 GiB). By default every buffer over 32 MB (logits, their gradient, the FFN's
    activations) is unmapped when freed and mapped afresh at the next step, and on a virtual machine whose host takes
    freed pages back the first touch of each page costs time even in user mode; kept, each step reuses the last one's
    pages. Returns False where the C library has no mallopt (not glibc): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def run_line(wall_seconds, load_before, load_after):
    """The results files' line on where and when a run ran: machine, versions, threads, date, wall time, load."""
    import torch
    import transformers

    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return (
        f"Machine: {describe_machine()}; transformers {transformers.__version__}; {torch.get_num_threads()} torch "
        f"threads. Date {date}. Wall time {wall_seconds / 60:.1f} min. Load average (1, 5, 15 min): "
        f"{tuple(round(x, 2) for x in load_before)} at the start, {tuple(round(x, 2) for x in load_after)} at the end."
    )


def write_report(output, report, record):
    """OUTPUT.md (the report) and OUTPUT.json (the record, with the machine), each written atomically."""
    from symbert.files import write_atomically

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(output.with_suffix(".md"), lambda file: file.write(report + "\n"))
    record = {**record, "machine": describe_machine()}
    write_atomically(output.with_suffix(".json"), lambda file: json.dump(record, file, indent=2))
