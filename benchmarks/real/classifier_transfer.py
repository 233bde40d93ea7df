"""A BERT already fine-tuned for a task, made into an attention type by the one command on the task's own unlabelled
text: does the converted classifier keep its accuracy, with no further fine-tuning?

    python benchmarks/real/classifier_transfer.py OUT --attention_types symmetric shared --minutes 12
    python benchmarks/real/classifier_transfer.py OUT --task spam_assassin --attention_types symmetric

1. OUT/classifier: all-MiniLM-L6-v2 fine-tuned on the task's train split by symbert-glue's protocol (5 epochs,
   lr 1e-5, batch 16, 128 tokens, --seed), saved as a BertForSequenceClassification folder.
2. for each type, `symbert-transfer OUT/classifier OUT/transfer-TYPE --attention_type TYPE --minutes M --train_files
   DATA/task_text/TASK.txt`: the conversion, then the two stages on the train split's texts without their labels
   (the model stage matches the classifier's label distribution through its own pooler and classifier).
3. the accuracy on the task's dev split of the classifier, each conversion and each transfer, as they are:
   OUT/classifier-transfer.json and OUT/classifier-transfer.md.

Each step keeps what a finished earlier run left: the classifier is trained once, symbert-transfer goes on where it
stopped. The data is benchmarks/real/fetch.py's (its --dest as --data).
"""

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer

from symbert.files import write_atomically
from symbert.tools import written_folder
from symbert.training import glue
from symbert.training.glue.data import load_task
from symbert.training.glue.sweep import dev_metrics, fine_tuned, tokenize
from symbert.training.transfer import RECORD_FILE

HERE = Path(__file__).resolve().parent


def protocol_arguments(bert: Path, task: str, data: Path, seed: int, work: Path):
    """symbert-glue's protocol, as its command line sets it, for one task and seed."""
    argv = ["--model", str(bert), "--tasks", task, "--seeds", str(seed), "--data_dir", str(data)]
    glue_args, training_args, _, _ = glue.parse_arguments([*argv, "--output_dir", str(work)])
    return glue_args, replace(training_args, save_strategy="no", report_to=[])


def accuracy(folder: Path, task: str, tokenized, tokenizer, training_args) -> float:
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    trainer = Trainer(model=model, args=training_args, data_collator=DataCollatorWithPadding(tokenizer))
    metrics = dev_metrics(trainer, task, tokenized)
    return 100 * next(value for name, value in metrics.items() if "accuracy" in name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output")
    parser.add_argument("--bert", default=str(Path.home() / ".cache/symbert-real/all-MiniLM-L6-v2"))
    parser.add_argument("--data", default=str(Path.home() / ".cache/symbert-real/data"))
    parser.add_argument("--task", default="uci_sentiment", choices=("uci_sentiment", "spam_assassin"))
    parser.add_argument("--attention_types", nargs="+", default=["symmetric"])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--steps", type=int, default=None, help="the two stages' steps instead of --minutes")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output, data = Path(args.output), Path(args.data)
    output.mkdir(parents=True, exist_ok=True)
    glue_args, training_args = protocol_arguments(Path(args.bert), args.task, data, args.seed, output / "work")
    splits = load_task(args.task, data, max_length=glue_args.max_length)
    tokenizer = AutoTokenizer.from_pretrained(args.bert)
    tokenized = tokenize(args.task, splits, tokenizer, glue_args.max_length)

    classifier = output / "classifier"
    if not (classifier / "model.safetensors").is_file():
        print(f"Fine-tuning {args.bert} on {args.task} (seed {args.seed})")
        trainer = fine_tuned(args.bert, None, args.task, tokenized, tokenizer, args.seed, training_args)
        with written_folder(classifier, ".tmp", "the fine-tuned classifier", "fine-tuning") as staging:
            trainer.save_model(str(staging))

    text = data / "task_text" / f"{args.task}.txt"
    rows = {"teacher (fine-tuned BERT)": accuracy(classifier, args.task, tokenized, tokenizer, training_args)}
    for attention_type in args.attention_types:
        folder = output / f"transfer-{attention_type}"
        command = Path(sys.executable).with_name("symbert-transfer")
        subprocess.run(
            [str(command), str(classifier), str(folder), "--attention_type", attention_type, "--train_files", str(text)]
            + (["--minutes", f"{args.minutes:g}"] if args.steps is None else ["--steps", str(args.steps)]),
            check=True,
        )
        for stage, path in (("converted", folder / "stages" / "convert"), ("one command", folder)):
            rows[f"{attention_type}, {stage}"] = accuracy(path, args.task, tokenized, tokenizer, training_args)
        rows[f"{attention_type}, cosine"] = json.loads((folder / RECORD_FILE).read_text())["held_out_mean_cosine"]

    teacher = rows["teacher (fine-tuned BERT)"]
    budget = f"--minutes {args.minutes:g}" if args.steps is None else f"--steps {args.steps}"
    lines = [
        f"# A fine-tuned classifier made into attention types: {args.task} (dev split, accuracy %)",
        "",
        f"Teacher: {Path(args.bert).name} fine-tuned by symbert-glue's protocol (seed {args.seed}); each type made "
        f"from it by symbert-transfer {budget} on the task's train texts without labels "
        f"({text.name}), scored as it is (no fine-tuning after the transfer).",
        "",
        "| model | accuracy | gap to the teacher |",
        "|---|---:|---:|",
        f"| teacher (fine-tuned BERT) | {teacher:.2f} | |",
    ]
    for name, value in rows.items():
        if isinstance(value, float) and name != "teacher (fine-tuned BERT)":
            lines.append(f"| {name} | {value:.2f} | {value - teacher:+.2f} |")
    record = {"task": args.task, "seed": args.seed, "minutes": args.minutes, "steps": args.steps, "rows": rows}
    write_atomically(output / "classifier-transfer.json", lambda f: f.write(json.dumps(record, indent=2) + "\n"))
    write_atomically(output / "classifier-transfer.md", lambda f: f.write("\n".join(lines) + "\n"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
