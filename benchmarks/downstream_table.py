"""One table of downstream scores from symbert-glue output folders: each model's mean (sample std) over its seeds on
each task, its gap to a reference row (the teacher, fine-tuned identically), and the tasks' majority and chance.

    python benchmarks/downstream_table.py --reference teacher \
        --rows "teacher=outputs/glue-minilm-teacher" "pairwise, distilled=outputs/glue-distil-minilm-pairwise" \
        --output benchmarks/results/real-minilm/downstream

A row is LABEL=FOLDER (the folder holds glue_results.json) or LABEL=FILE. Rows scored on other data than the
reference (by data_sha256) or with another protocol (seeds, epochs, learning rate, max length, ...) are marked, never
compared silently. Writes OUTPUT.md and OUTPUT.json.
"""

import json
import math
import shlex
from pathlib import Path

from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py

from symbert.cli import UserError, command_parser, run_command
from symbert.training.glue_results import GlueResults, protocol_differences


def read_row(item: str) -> tuple[str, GlueResults]:
    label, _, path = item.rpartition("=")
    if not label or not path:
        raise UserError(f"--rows {item!r} is not LABEL=FOLDER.")
    file = Path(path) / GlueResults.FILE_NAME if Path(path).is_dir() else Path(path)
    try:  # as written, unchecked: a row is shown beside the others, never published
        return label, GlueResults.from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise UserError(f"--rows {item!r}: {file} is not a readable glue_results.json ({error}).") from None


def differences(results: GlueResults, reference: GlueResults, task: str) -> list[str]:
    """What makes `results`' score on `task` not comparable with the reference's: its data or its protocol."""
    notes = []
    if (results.data_sha256 or {}).get(task) != (reference.data_sha256 or {}).get(task):
        notes.append("other data")
    return notes + [item.replace("'", "") for item in protocol_differences(reference.protocol, results.protocol)]


def table(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", required=True, help="LABEL=FOLDER of symbert-glue outputs")
    parser.add_argument("--reference", required=True, help="the label of the row the gaps are measured to")
    parser.add_argument("--output", required=True, help="results path without suffix")
    args = parser.parse_args(argv)
    stopwatch = Stopwatch()
    rows = dict(read_row(item) for item in args.rows)
    if args.reference not in rows:
        raise UserError(f"--reference {args.reference!r} is none of the rows' labels: {', '.join(rows)}.")
    reference = rows[args.reference]
    tasks = list(dict.fromkeys(task for results in rows.values() for task in results.task_aggregates))
    titles = ["model"] + [
        title for task in tasks for title in (f"{task}: mean (std), seeds", f"gap to {args.reference}")
    ]
    table_rows = []
    record = {"reference": args.reference, "rows": {}, "tasks": {}}
    for label, results in rows.items():
        record["rows"][label] = {}
        for task, aggregate in results.task_aggregates.items():
            ours = reference.task_aggregates.get(task)
            record["rows"][label][task] = {
                **aggregate,
                "scores": list(results.scores[task].values()),
                "gap": aggregate["mean"] - ours["mean"] if ours else math.nan,
                "not_comparable": differences(results, reference, task) if ours else ["no reference"],
            }
    for label in rows:
        cells = []
        for task in tasks:
            entry = record["rows"][label].get(task)
            if entry is None:
                cells += ["not run", ""]
            else:
                gap = "" if label == args.reference else f"{entry['gap']:+.2f}"
                if entry["not_comparable"]:
                    gap += f" ({'; '.join(entry['not_comparable'])})"
                cells += [f"{entry['mean']:.2f} ({entry['std']:.2f}), {len(entry['scores'])}", gap]
        table_rows.append([label, *cells])
    for task in tasks:
        baseline = next(
            (r.task_aggregates[task].get("baseline") for r in rows.values() if task in r.task_aggregates),
            None,
        )
        if baseline:
            record["tasks"][task] = {"majority": baseline["majority"], "chance": baseline["chance"]}
    bases = "; ".join(
        f"{task}: majority {b['majority']:.2f}, chance {b['chance']:.2f}" for task, b in record["tasks"].items()
    )
    facts = stopwatch.facts(shlex.join(["python", "benchmarks/downstream_table.py", *argv]))
    table_text = markdown_table(titles, table_rows)
    report = "\n\n".join([header(facts), table_text, f"Baselines on the same dev sets: {bases}."])
    write_report(args.output, report, {**facts, **record})
    print(report)


if __name__ == "__main__":
    run_command(table)
