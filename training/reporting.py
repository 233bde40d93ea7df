"""Training metrics: CSV/JSON logs, loss plots and the comparison of attention types.

Everything works on a Trainer `log_history`: a list of dicts such as
`{"loss": 2.1, "grad_norm": 1.3, "learning_rate": 1e-4, "epoch": 0.1, "step": 10}` or
`{"eval_loss": 3.0, "epoch": 0.1, "step": 10}`.
"""

import csv
import json
import os
import re
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from transformers import TrainerCallback

CSV_COLUMNS = ("step", "epoch", "loss", "eval_loss", "learning_rate", "grad_norm")
FIGURE_SIZE = (7.0, 4.5)  # inches
FIGURE_DPI = 120


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


def write_metrics(log_history, output_dir):
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
        columns += [key for key, value in entry.items() if key not in columns and _is_number(value)]

    def write_csv(file):
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(log_history)

    write_atomically(output_dir / "metrics.csv", write_csv)
    write_atomically(output_dir / "metrics.json", lambda file: json.dump(log_history, file, indent=2))


def one_row_per_step_and_metrics(log_history):
    """`log_history` without the entries that a later entry of the same step and the same metrics replaces."""
    seen, kept = set(), []
    for entry in reversed(log_history):
        key = (entry.get("step"), frozenset(name for name in entry if name not in ("step", "epoch")))
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept[::-1]


def plot_losses(log_history, path, title=None):
    """Saves a PNG of the train and eval loss against step; returns `path`."""
    fig, ax = new_figure("loss", title)
    for key, label, marker in (("loss", "train loss", None), ("eval_loss", "eval loss", "o")):
        steps, losses = metric_series(log_history, key)
        if steps:
            ax.plot(steps, losses, label=label, marker=marker)
    if ax.lines:
        ax.legend()
    return save_figure(fig, path)


def plot_comparison(runs, path, target_loss=None, title=None):
    """Saves a PNG of the eval-loss curves of several runs ({name: log_history}) on one figure; returns `path`."""
    fig, ax = new_figure("eval loss", title)
    for name, log_history in runs.items():
        ax.plot(*metric_series(log_history, "eval_loss"), label=name, marker="o")
    if target_loss is not None:
        ax.axhline(target_loss, color="gray", linestyle="--", label=f"target {target_loss:.4g}")
    if ax.lines:
        ax.legend()
    return save_figure(fig, path)


def steps_to_reach(log_history, target_loss):
    """The first step at which `eval_loss <= target_loss`, or None."""
    for entry in log_history:
        if "eval_loss" in entry and entry["eval_loss"] <= target_loss:
            return entry["step"]
    return None


def comparison_table(runs, target_loss):
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


def load_log_history(output_dir):
    """The `log_history` of `output_dir/trainer_state.json`, else of its newest `checkpoint-N` folder."""
    output_dir = Path(output_dir)
    candidates = [output_dir / "trainer_state.json"]
    checkpoints = [p for p in output_dir.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name)]
    checkpoints.sort(key=lambda p: int(p.name.split("-")[1]), reverse=True)
    candidates += [p / "trainer_state.json" for p in checkpoints]
    # A run killed while saving can leave a newest checkpoint without its state: fall back to an older one.
    for state_file in candidates:
        if state_file.is_file():
            return json.loads(state_file.read_text())["log_history"]
    raise FileNotFoundError(f"no trainer_state.json in {output_dir} nor in any of its checkpoint-N folders")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metric_series(log_history, key):
    entries = [e for e in log_history if key in e]
    return [e["step"] for e in entries], [e[key] for e in entries]


def write_atomically(path, write, binary=False):
    """Writes through a temporary file in the same folder, so a killed run never leaves a half-written file."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") if binary else open(temporary, "w", newline="") as file:
            write(file)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def new_figure(ylabel, title):
    # A bare Figure on the Agg canvas: no pyplot global state, no display needed.
    fig = Figure(figsize=FIGURE_SIZE, dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig, ax


def save_figure(fig, path):
    """Writes the PNG atomically (write_atomically)."""
    path = Path(path)
    write_atomically(path, lambda file: fig.savefig(file, format="png"), binary=True)
    return path


def unigram_baseline(token_counts, labels):
    """Cross-entropy (nats per token) and top-1 accuracy of predicting each of `labels` (token ids) from token
    frequencies alone: `token_counts[i]` is how often token i occurs in the training set. Add-one smoothing keeps
    a token unseen in training at a finite loss. Returns {"loss", "accuracy", "masked_tokens"}."""
    counts = torch.as_tensor(token_counts, dtype=torch.float64)
    labels = torch.as_tensor(labels).flatten()
    log_probabilities = ((counts + 1) / (counts.sum() + len(counts))).log()
    return {
        "loss": -log_probabilities[labels].mean().item(),
        "accuracy": (labels == counts.argmax()).double().mean().item(),
        "masked_tokens": labels.numel(),
    }


@torch.no_grad()
def masked_token_scores(model, batches):
    """The model's cross-entropy (nats per masked token) and top-1 accuracy over every masked token of `batches`
    (dicts of model inputs with `labels`, -100 where nothing is masked). Returns {"loss", "accuracy",
    "masked_tokens"}. Works with logits at every position or, with sparse_prediction, at the masked ones only."""
    model.eval()
    loss = correct = count = 0
    for batch in batches:
        labels = batch["labels"]
        logits = model(**batch).logits
        if logits.shape[:-1] == labels.shape:  # dense: one row of logits per position
            logits = logits[labels != -100]
        labels = labels[labels != -100]
        loss += torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        count += labels.numel()
    return {"loss": loss / count, "accuracy": correct / count, "masked_tokens": count}
