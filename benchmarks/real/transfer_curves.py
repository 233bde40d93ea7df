"""Quality against CPU-minutes for the staged transfers of benchmarks/real/transfer_study.sh, from the runs' own
logs and checkpoints: each checkpoint's held-out sentence-embedding cosine to BERT's, at the training minutes its
stage's log gives for its step, and each type's downstream accuracy at the end.

    python benchmarks/real/transfer_curves.py OUTPUTS --types symmetric shared mhe_add \\
        --output benchmarks/results/real-minilm-transfer/curves

OUTPUTS holds transfer-TYPE/ (symbert-transfer) and, as transfer_study.sh names them, the symbert-glue results of each
of --tasks: glue-transfer-TYPE/ and glue-teacher/ (the UCI sentences), spam-transfer-TYPE/ and spam-teacher/
(SpamAssassin). The cosine
is symbert-transfer's own (the 64 held-out lines of the embedded calibration text, mean-pooled last hidden states);
the minutes are training time, summed over the logging intervals of each stage's metrics.json (tokens logged /
tokens per second), evaluations and checkpoints left out. Writes OUTPUT.json, OUTPUT.md and OUTPUT.png.
"""

import argparse
import json
from pathlib import Path

from symbert.conversion_symbert import calibration_sequences
from symbert.files import write_atomically
from symbert.tools.convert import calibration_texts, load_bert, sentence_embeddings
from symbert.training.figures import new_figure, save_figure
from symbert.training.glue.results import GlueResults
from symbert.training.transfer import RECORD_FILE, STAGES, agreement


def minutes_at_steps(stage_folder: Path, tokens_per_step: int) -> dict[int, float]:
    """{step: training minutes to reach it} from the stage's logged tokens/s, one entry per logging interval."""
    minutes, elapsed, last_step = {0: 0.0}, 0.0, 0
    for entry in json.loads((stage_folder / "metrics.json").read_text(encoding="utf-8")):
        rate = entry.get("train_tokens_per_second")
        if rate:
            elapsed += (entry["step"] - last_step) * tokens_per_step / rate / 60
            last_step = entry["step"]
            minutes[last_step] = elapsed
    return minutes


def at_step(minutes: dict[int, float], step: int) -> float:
    """The minutes at `step`, interpolated between the logged steps around it."""
    below = max(s for s in minutes if s <= step)
    above = [s for s in minutes if s > step]
    if not above:
        return minutes[below] if step == below else minutes[below] * step / max(below, 1)
    nearest = min(above)
    share = (step - below) / (nearest - below)
    return minutes[below] + share * (minutes[nearest] - minutes[below])


def curve(folder: Path, bert_embeddings, sequences) -> list[dict]:
    """[{stage, step, minutes, cosine}] from the conversion through every checkpoint of both stages."""
    record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
    points = [{"stage": "convert", "step": 0, "minutes": 0.0, "cosine": record["held_out_mean_cosine"]["convert"]}]
    offset = 0.0
    for stage in STAGES:
        stage_folder = folder / "stages" / stage
        if not stage_folder.is_dir():
            continue
        summary = json.loads((stage_folder / "training_summary.json").read_text(encoding="utf-8"))
        minutes = minutes_at_steps(stage_folder, summary["global_batch_size"] * summary["max_seq_length"])
        checkpoints = sorted(stage_folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
        for checkpoint in checkpoints:
            step = int(checkpoint.name.split("-")[1])
            points.append(
                {
                    "stage": stage,
                    "step": step,
                    "minutes": offset + at_step(minutes, step),
                    "cosine": agreement(checkpoint, bert_embeddings, sequences),
                }
            )
        offset += at_step(minutes, summary["steps"])
    return points


def budget(plan: dict) -> str:
    """The budget a run was given: minutes (`--minutes`, a step timed to plan them) or steps (`--steps`)."""
    return f"{plan['minutes']:g} min" if plan.get("seconds_per_step") else f"{plan['total_steps']} steps"


def results_prefix(task: str) -> str:
    """The folder prefix transfer_study.sh gives a task's symbert-glue results."""
    return "spam" if task == "spam_assassin" else "glue"


def mean_accuracy(folder: Path, task: str) -> tuple[float, float] | None:
    results = GlueResults.read(folder / "glue_results.json") if (folder / "glue_results.json").is_file() else None
    if results is None or task not in results.task_aggregates:
        return None
    aggregate = results.task_aggregates[task]
    return aggregate["mean"], aggregate["std"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outputs")
    parser.add_argument("--types", nargs="+", required=True)
    parser.add_argument("--bert", default=str(Path.home() / ".cache/symbert-real/all-MiniLM-L6-v2"))
    parser.add_argument("--tasks", nargs="+", default=["uci_sentiment"], help="each a column of scores and gaps")
    parser.add_argument("--output", required=True, help="path prefix of the .json, .md and .png written")
    args = parser.parse_args(argv)
    outputs = Path(args.outputs)
    config, bert, tokenizer = load_bert(args.bert)
    _, held_out = calibration_texts(None, 64)
    sequences = calibration_sequences(tokenizer, held_out, min(128, config.max_position_embeddings))
    bert_embeddings = sentence_embeddings(bert, sequences)  # once: every checkpoint is compared with it
    teacher = {task: mean_accuracy(outputs / f"{results_prefix(task)}-teacher", task) for task in args.tasks}
    curves, lines = {}, []
    for attention_type in args.types:
        folder = outputs / f"transfer-{attention_type}"
        curves[attention_type] = {
            "points": curve(folder, bert_embeddings, sequences),
            "accuracy": {
                task: mean_accuracy(outputs / f"{results_prefix(task)}-transfer-{attention_type}", task)
                for task in args.tasks
            },
            "plan": json.loads((folder / RECORD_FILE).read_text())["plan"],
        }
    teachers = ", ".join(
        f"{task} {found[0]:.2f}" if found else f"{task} not measured" for task, found in teacher.items()
    )
    lines = [
        f"# Quality against CPU-minutes: the staged transfers (beside the teacher's {teachers})",
        "",
        "| type | budget | training minutes logged | cosine: converted | after attention | final | best "
        + "".join(f"| {task} (std) | gap " for task in args.tasks)
        + "|",
        "|---|---:|---:|---:|---:|---:|---:" + "|---:|---:" * len(args.tasks) + "|",
    ]
    for attention_type, found in curves.items():
        points = found["points"]
        attention = [p["cosine"] for p in points if p["stage"] == "attention"]
        scores = ""
        for task, accuracy in found["accuracy"].items():
            score = f"{accuracy[0]:.2f} ({accuracy[1]:.2f})" if accuracy else "not measured"
            gap = f"{accuracy[0] - teacher[task][0]:+.2f}" if accuracy and teacher[task] else ""
            scores += f"| {score} | {gap} "
        lines.append(
            f"| `{attention_type}` | {budget(found['plan'])} | {points[-1]['minutes']:.1f} | {points[0]['cosine']:.3f} "
            f"| {attention[-1] if attention else float('nan'):.3f} | {points[-1]['cosine']:.3f} "
            f"| {max(p['cosine'] for p in points):.3f} {scores}|"
        )
    figure, axes = new_figure("held-out sentence-embedding cosine to BERT's", "The staged transfer from BERT")
    axes.set_xlabel("training minutes (this machine's CPU, as logged)")
    for attention_type, found in curves.items():
        axes.plot([p["minutes"] for p in found["points"]], [p["cosine"] for p in found["points"]], marker=".",
                  label=attention_type)  # fmt: skip
    axes.legend()
    output = Path(args.output)
    save_figure(figure, output.with_suffix(".png"))
    record = {"tasks": args.tasks, "teacher": teacher, "types": curves}
    write_atomically(output.with_suffix(".json"), lambda f: f.write(json.dumps(record, indent=2) + "\n"))
    write_atomically(output.with_suffix(".md"), lambda f: f.write("\n".join(lines) + "\n"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
