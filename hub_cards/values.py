"""The values a release renders into cards that no typed record checks as it is read: every number of a
trainer_state.json's log has its type and its range. (A glue_results.json is checked as it is read:
training/glue/results.py's `GlueResults`; a training_summary.json likewise: training/summary.py.) A bad value is one
line naming the file, the field and what is allowed."""

from pathlib import Path
from typing import Any

from ..cli import UserError
from ..json_files import number


def check_log_history(path: Path, log_history: Any) -> list:
    """The Trainer's log of a trainer_state.json, refused unless a list of objects whose steps, eval losses and
    runtimes (what cards show) are numbers in range."""
    if not isinstance(log_history, list) or not all(isinstance(entry, dict) for entry in log_history):
        raise UserError(f"{path}: log_history is not a list of objects.")
    for i, entry in enumerate(log_history):
        if "step" in entry:
            number(path, f"log_history[{i}].step", entry["step"], 0, integer=True)
        for key in ("eval_loss", "train_runtime"):
            if key in entry:
                number(path, f"log_history[{i}].{key}", entry[key], 0.0)
    return log_history
