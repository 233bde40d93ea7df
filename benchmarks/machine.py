"""One line naming the machine a benchmark ran on, for the results files (benchmarks/report.py's header); how a CPU
benchmark keeps its memory."""

import contextlib
import ctypes
import ctypes.util
import os
import platform
import subprocess


def describe_machine():
    import torch  # here, so that keep_freed_memory can be used before torch is imported

    gpu = f"{torch.cuda.get_device_name()} (driver {gpu_driver()}), " if torch.cuda.is_available() else "no GPU, "
    return f"{gpu}{cpu_model()}, {os.cpu_count()} CPU cores; torch {torch.__version__}"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or the architecture where it has none."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


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
