"""One line naming the machine a benchmark ran on, for the results files."""

import os
import platform

import torch


def describe_machine():
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = f"{torch.cuda.get_device_name()}, " if torch.cuda.is_available() else "no GPU, "
    return f"{gpu}{cpu}, {os.cpu_count()} CPU cores; torch {torch.__version__}"
