"""What every benchmark's results file shares: the header under its title (the command, then the code's commit, the
machine, the library versions, the threads, the date, the wall time and the load average), its Markdown tables, and
OUTPUT.md with OUTPUT.json. The JSON record holds the same facts under the same keys (`facts`)."""

import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from machine import describe_machine  # benchmarks/machine.py

REPOSITORY = Path(__file__).resolve().parents[1]
# the code a benchmark measures: a working tree that differs from its commit here is marked `+changes`
MEASURED_CODE = ("modeling", "configuration", "training", "benchmarks/*.py")
LIBRARIES = ("transformers", "datasets")  # named in the header where the record has them (torch: in the machine)


def git_commit() -> str | None:
    """The repository's commit, with `+changes` where MEASURED_CODE differs from it; None outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", *MEASURED_CODE], cwd=REPOSITORY, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+changes" if changed else "")


class Stopwatch:
    """Started when a benchmark starts: its date, clock and load average, for `facts` at any later point."""

    def __init__(self) -> None:
        self.date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.start = time.perf_counter()
        self.load_before = os.getloadavg()

    def facts(self, command: str, **more: object) -> dict:
        """The header's facts as of now (see facts)."""
        return facts(command, time.perf_counter() - self.start, self.load_before, os.getloadavg(), self.date, **more)


def facts(
    command: str,
    wall_seconds: float,
    load_before: Sequence[float],
    load_after: Sequence[float],
    date: str,
    **more: object,
) -> dict:
    """A run's facts, the results header's and the JSON record's: command, commit, machine, versions, threads, date,
    wall time, load average (1, 5, 15 min) at the start and at the end; `more` adds a script's own (e.g. datasets'
    version) before the date."""
    import torch
    import transformers

    return {
        "command": command,
        "commit": git_commit(),
        "machine": describe_machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        **more,
        "torch_threads": torch.get_num_threads(),
        "date": date,
        "wall_seconds": wall_seconds,
        "load_average_start": list(load_before),
        "load_average_end": list(load_after),
    }


def load_text(before: Sequence[float], after: Sequence[float]) -> str:
    """The load averages (1, 5, 15 min) at the start and at the end, to two decimals."""
    return f"{tuple(round(x, 2) for x in before)} at the start, {tuple(round(x, 2) for x in after)} at the end"


def header(run: dict, details: Sequence[str] = ()) -> str:
    """The paragraphs under a results file's title: `Command: ...`, then where, when and on what it ran (`details`:
    the script's own facts, e.g. a library it found, after the threads)."""
    versions = [f"{name} {run[name]}" for name in LIBRARIES if name in run]
    machine = "; ".join(
        [
            run["machine"],
            *versions,
            f"Python {run['python']}",
            f"{run['torch_threads']} torch thread(s)",
            *details,
        ]
    )
    return (
        f"Command: `{run['command']}`\n\nCode: commit {run['commit']}. Machine: {machine}. Date {run['date']}. "
        f"Wall time {run['wall_seconds'] / 60:.1f} min. Load average (1, 5, 15 min): "
        f"{load_text(run['load_average_start'], run['load_average_end'])}."
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str | Sequence[str] = "") -> str:
    """A Markdown table. `align`: one rule per column ("---" left, "---:" right), or one for every column; by
    default the first column left and the others (numbers) right."""
    if isinstance(align, str):
        align = [align] * len(header) if align else ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join("| " + " | ".join(row) + " |" for row in [header, align, *rows])


def write_report(output: str | Path, report: str, record: dict) -> None:
    """OUTPUT.md (the report) and OUTPUT.json (the record), each written atomically; the record gets the machine
    where it has none."""
    from symbert.files import write_atomically

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(output.with_suffix(".md"), lambda file: file.write(report.rstrip("\n") + "\n"))
    record = {**record, "machine": record.get("machine") or describe_machine()}
    write_atomically(output.with_suffix(".json"), lambda file: json.dump(record, file, indent=2))


def domain_texts(items: Sequence[str], count: int = 200) -> dict[str, list[str]]:
    """{NAME: the first `count` non-empty lines of FILE} of each NAME=FILE (--domains: texts of other domains than a
    calibration's or a distillation's)."""
    from symbert.cli import UserError

    domains = {}
    for item in items:
        name, _, file = item.partition("=")
        if not name or not Path(file).is_file():
            raise UserError(f"--domains {item!r}: give NAME=FILE, FILE a text file of one text a line.")
        try:
            lines = [line for line in Path(file).read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"--domains {item!r}: cannot read it as UTF-8 text ({error}).") from None
        domains[name] = lines[:count]
    return domains
