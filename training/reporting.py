"""Training metrics: CSV/JSON logs, loss plots and the comparison of attention types.

Everything works on a Trainer `log_history`: a list of dicts such as
`{"loss": 2.1, "grad_norm": 1.3, "learning_rate": 1e-4, "epoch": 0.1, "step": 10}` or
`{"eval_loss": 3.0, "epoch": 0.1, "step": 10}`.
"""

import csv
import json
import math
import re
import time
from pathlib import Path

from transformers import TrainerCallback

from ..cli import UserError
from ..files import write_atomically
from ..json_files import is_integer, is_number, read_json
from .figures import new_figure, save_figure

CSV_COLUMNS = ("step", "epoch", "loss", "eval_loss", "learning_rate", "grad_norm")


class MetricsLogCallback(TrainerCallback):
    """Keeps `metrics.csv` and `metrics.json` in the output folder up to date with `state.log_history`.

    After a resume the Trainer's history is the checkpoint's, so rewriting from it at the start drops the rows that
    the interrupted run logged after its last checkpoint: the resumed run logs those steps again."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            write_metrics(state.log_history, args.output_dir)

    def on_log(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            write_metrics(state.log_history, args.output_dir)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            write_metrics(state.log_history, args.output_dir)


class TrainingSpeedCallback(TrainerCallback):
    """Adds `train_tokens_per_second` to each training-loss log entry: the tokens of the optimizer steps since the last
    log over their wall time, data loading and logging included (the logged loss's device sync is where a GPU's queued
    work is waited for). The step after an evaluation or a save, and the first after a (re)start, are left out, so the
    figure is the training loop's own; the Trainer's `train_samples_per_second` at the end includes those and a
    compiled model's first steps. Goes before MetricsLogCallback, which writes the entry."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.last_step_end: float | None = None
        self.steps = 0
        self.seconds = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.last_step_end = None

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self.last_step_end is not None:
            self.steps += 1
            self.seconds += now - self.last_step_end
        self.last_step_end = now

    def on_evaluate(self, args, state, control, **kwargs):
        self.last_step_end = None  # the next step's interval holds the evaluation

    def on_save(self, args, state, control, **kwargs):
        self.last_step_end = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        entry = state.log_history[-1] if state.log_history else {}
        if "loss" in entry and self.steps:
            entry["train_tokens_per_second"] = round(self.steps * self.tokens_per_step / self.seconds, 1)
            self.steps, self.seconds = 0, 0.0


def write_metrics(log_history: list[dict], output_dir: str | Path) -> None:
    """Rewrites `metrics.csv` and `metrics.json` in `output_dir` from the whole history.

    Rewriting rather than appending keeps the files right after a resume, since the Trainer restores log_history;
    and the files hold one row per step and set of metrics whatever the history holds (a step logged twice: the later
    row).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    log_history = one_row_per_step_and_metrics(log_history)
    columns = list(CSV_COLUMNS)
    for entry in log_history:
        columns += [key for key, value in entry.items() if key not in columns and is_number(value)]

    def write_csv(file):
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(log_history)

    write_atomically(output_dir / "metrics.csv", write_csv)
    write_atomically(output_dir / "metrics.json", lambda file: json.dump(log_history, file, indent=2))


def one_row_per_step_and_metrics(log_history: list[dict]) -> list[dict]:
    """`log_history` without the entries that a later entry of the same step and the same metrics replaces."""
    seen, kept = set(), []
    for entry in reversed(log_history):
        key = (entry.get("step"), frozenset(name for name in entry if name not in ("step", "epoch")))
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept[::-1]


def plot_losses(log_history: list[dict], path: str | Path, title: str | None = None) -> Path:
    """Saves a PNG of the train and eval loss against step; returns `path`."""
    fig, ax = new_figure("loss", title)
    for key, label, marker in (("loss", "train loss", None), ("eval_loss", "eval loss", "o")):
        steps, losses = metric_series(log_history, key)
        if steps:
            ax.plot(steps, losses, label=label, marker=marker)
    if ax.lines:
        ax.legend()
    return save_figure(fig, path)


def plot_comparison(
    runs: dict[str, list[dict]], path: str | Path, target_loss: float | None = None, title: str | None = None
) -> Path:
    """Saves a PNG of the eval-loss curves of several runs ({name: log_history}) on one figure; returns `path`."""
    fig, ax = new_figure("eval loss", title)
    for name, log_history in runs.items():
        ax.plot(*metric_series(log_history, "eval_loss"), label=name, marker="o")
    if target_loss is not None:
        ax.axhline(target_loss, color="gray", linestyle="--", label=f"target {target_loss:.4g}")
    if ax.lines:
        ax.legend()
    return save_figure(fig, path)


def steps_to_reach(log_history: list[dict], target_loss: float) -> int | None:
    """The first step at which `eval_loss <= target_loss`, or None."""
    for entry in log_history:
        if "eval_loss" in entry and entry["eval_loss"] <= target_loss:
            return entry["step"]
    return None


def comparison_table(runs: dict[str, list[dict]], target_loss: float) -> str:
    """A Markdown table of the final and best eval loss of each run and the step at which it reaches `target_loss`."""
    rows = [
        f"| run | final eval loss | best eval loss | step to reach {target_loss:.4g} |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, log_history in runs.items():
        _, losses = metric_series(log_history, "eval_loss")
        final, best = (f"{losses[-1]:.4f}", f"{min(losses):.4f}") if losses else ("-", "-")
        step = steps_to_reach(log_history, target_loss)
        rows.append(f"| {name} | {final} | {best} | {'not reached' if step is None else step} |")
    return "\n".join(rows)


def comparison_report(
    runs: dict[str, list[dict]], target_loss: float, target_given: bool, seed: int, data_seed: int | None = None
) -> str:
    """comparison.md of `symbert-pretrain --compare`: the seed and each run's training steps, the target eval loss
    and where it came from (`target_given`: --target_eval_loss, else the first run's final eval loss), the
    comparison_table, and what one seed per type can say about noise: nothing, since the seed-to-seed spread is
    not measured (benchmarks/convergence.py measures it)."""
    first = next(iter(runs))
    steps = ", ".join(
        f"`{name}` {max((e['step'] for e in history if 'step' in e), default=0)}" for name, history in runs.items()
    )
    seeds = f"seed {seed}" if data_seed is None else f"seed {seed} (data order from data seed {data_seed})"
    source = "given by --target_eval_loss" if target_given else f"the first run's (`{first}`) final eval loss"
    return "\n\n".join(
        [
            "# Comparison of attention types",
            f"One run per type, each with {seeds}: the same seed for every type. Training steps: {steps}.",
            f"Target eval loss: {target_loss:.4f}, {source}.",
            comparison_table(runs, target_loss),
            "Noise: one seed per type, so the seed-to-seed spread is not measured here and no difference in this "
            "table can be told apart from seed noise. To measure it, `python benchmarks/convergence.py --types "
            f"{','.join(runs)} --seeds 1,2,3,4,5 -- ARGS` (SymBERT's repository; ARGS: this run's symbert-pretrain "
            "arguments without --compare) trains each type with several seeds and gives each difference to "
            f"`{first}` with its 95% confidence interval and the p-value of a paired t-test over the seeds.",
        ]
    )


def load_log_history(output_dir: str | Path) -> list[dict]:
    """The `log_history` of `output_dir/trainer_state.json`, else of its newest `checkpoint-N` folder
    (`read_log_history`)."""
    output_dir = Path(output_dir)
    candidates = [output_dir / "trainer_state.json"]
    checkpoints = [p for p in output_dir.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name)]
    checkpoints.sort(key=lambda p: int(p.name.split("-")[1]), reverse=True)
    candidates += [p / "trainer_state.json" for p in checkpoints]
    # A run killed while saving can leave a newest checkpoint without its state: fall back to an older one.
    for state_file in candidates:
        if state_file.is_file():
            return read_log_history(state_file, finite_losses=False)  # a diverged run's NaN losses, as logged
    raise FileNotFoundError(f"no trainer_state.json in {output_dir} nor in any of its checkpoint-N folders")


class LogHistoryError(UserError):
    """A trainer_state.json whose log is not the Trainer's: `index`, `field`, `value` and `expected` name the entry's
    bad field (`field` None: the entry is not an object; `index` None: there is no list of entries), for a reader
    that words it its own way."""

    def __init__(self, message: str, index: int | None = None, field: str | None = None, value=None, expected=""):
        super().__init__(message)
        self.index, self.field, self.value, self.expected = index, field, value, expected


# What each number a report, a plot or a card reads from a log entry must be
LOGGED_NUMBERS = {
    "step": "an integer >= 0",
    "eval_loss": "a finite number >= 0",
    "train_runtime": "a finite number >= 0",
}


def checked_log_history(path: Path, state, finite_losses: bool = True) -> list[dict]:
    """The Trainer's log of `state` (the trainer_state.json at `path`, parsed), refused (LogHistoryError, one line
    naming the file and the entry) unless an object whose log_history is a list of objects, each step a whole number
    and each eval loss and runtime a finite number, none below 0. Without `finite_losses` a NaN or infinite eval
    loss passes: a run that diverged logged it so, and its log is still read (reported, reused)."""
    if not isinstance(state, dict) or "log_history" not in state:
        raise LogHistoryError(f'{path} is not a trainer state: a JSON object with a "log_history".')
    history = state["log_history"]
    if not isinstance(history, list):
        raise LogHistoryError(f"{path}: log_history is not a list of objects.")
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise LogHistoryError(f"{path}: log_history is not a list of objects.", i, None, entry, "an object")
        for field, expected in LOGGED_NUMBERS.items():
            value = entry.get(field, 0)
            if field == "eval_loss" and not finite_losses and is_number(value) and not math.isfinite(value):
                continue
            kind_ok = is_integer(value) if field == "step" else is_number(value) and abs(value) < math.inf
            if not (kind_ok and value >= 0):
                message = f"{path}: log_history[{i}].{field}={value!r} is not {expected}."
                raise LogHistoryError(message, i, field, value, expected)
    return history


def read_log_history(path: str | Path, read=read_json, finite_losses: bool = True) -> list[dict]:
    """The checked log (`checked_log_history`) of the trainer_state.json at `path` (a run's or a checkpoint's), read
    strictly: by `read`, symbert.json_files' `read_json` (one line naming the file) unless a reader words a bad file
    itself (`load_json`, which raises the parser's error)."""
    return checked_log_history(Path(path), read(path), finite_losses)


def metric_series(log_history: list[dict], key: str) -> tuple[list[int], list[float]]:
    entries = [e for e in log_history if key in e]
    return [e["step"] for e in entries], [e[key] for e in entries]
