"""One table of downstream scores from symbert-glue output folders: each model's mean (sample std) over its seeds on
each task, its gap to a reference row (the teacher, fine-tuned identically), and the tasks' majority and chance.

    python benchmarks/downstream_table.py --reference teacher \
        --rows "teacher=outputs/glue-minilm-teacher" "pairwise, distilled=outputs/glue-distil-minilm-pairwise" \
        --output benchmarks/results/real-minilm/downstream

A row is LABEL=FOLDER (the folder holds glue_results.json) or LABEL=FILE, each label given once; every file is
checked as the release checks it (finite scores in their range, means and stds those of the per-seed scores, ...)
and a bad one is refused in one line. Rows scored on other data than the reference (by each task's data_sha256:
mnli-m and mnli-mm by mnli's) or with another protocol (seeds, epochs, learning rate, max length, ...) are marked,
never compared silently. Writes OUTPUT.md and OUTPUT.json, never over an input (its glue_results.json or .md).
"""

import math
import os
import shlex
from pathlib import Path

from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py

from symbert.cli import UserError, command_parser, run_command
from symbert.training.glue.results import GlueResults, protocol_differences


def row_file(item: str) -> tuple[str, Path]:
    """(label, its glue_results.json) of a LABEL=FOLDER or LABEL=FILE."""
    label, _, path = item.rpartition("=")
    if not label or not path:
        raise UserError(f"--rows {item!r} is not LABEL=FOLDER.")
    return label, Path(path) / GlueResults.FILE_NAME if Path(path).is_dir() else Path(path)


def read_rows(items: list[str]) -> dict[str, tuple[Path, GlueResults]]:
    """{label: (file, results)} of --rows, each file checked as the release checks it (a NaN mean, or one that is
    not its scores' mean, is refused in one line); a label given twice is refused (the table would drop a row)."""
    rows = {}
    for item in items:
        label, file = row_file(item)
        if label in rows:
            raise UserError(
                f"--rows {item!r}: the label {label!r} is given twice ({rows[label][0]} and {file}); give each "
                "row a label of its own."
            )
        try:
            rows[label] = file, GlueResults.read_scores(file)
        except UserError as error:
            raise UserError(f"--rows {item!r}: {error}") from None
    return rows


def check_output(output: str, inputs: list[Path]) -> None:
    """Refuse an --output whose OUTPUT.md or OUTPUT.json is an input's glue_results.json or the glue_results.md
    beside it (the same path, a link or a hard link to it): the table would replace the results it reads."""
    if not output or Path(output).name in ("", ".", ".."):
        raise UserError(f"--output {output!r} is not a path without suffix: give e.g. results/downstream.")
    written = [Path(output).with_suffix(suffix) for suffix in (".md", ".json")]
    for file in inputs:
        for kept in (file, file.with_suffix(".md")):
            for path in written:
                if os.path.realpath(path) == os.path.realpath(kept) or (
                    path.exists() and kept.exists() and os.path.samefile(path, kept)
                ):
                    raise UserError(
                        f"--output {output!r} would write {path}, which is the input {kept}: give a path outside "
                        "the rows' files."
                    )


def differences(results: GlueResults, reference: GlueResults, task: str) -> list[str]:
    """What makes `results`' score `task` not comparable with the reference's: its data (its task's data_sha256:
    mnli-m's is mnli's) or its protocol."""
    notes = []
    if results.score_data_sha256(task) != reference.score_data_sha256(task):
        notes.append("other data")
    return notes + [item.replace("'", "") for item in protocol_differences(reference.protocol, results.protocol)]


def table(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", required=True, help="LABEL=FOLDER of symbert-glue outputs")
    parser.add_argument("--reference", required=True, help="the label of the row the gaps are measured to")
    parser.add_argument("--output", required=True, help="results path without suffix")
    args = parser.parse_args(argv)
    stopwatch = Stopwatch()
    read = read_rows(args.rows)
    check_output(args.output, [file for file, _ in read.values()])
    rows = {label: results for label, (_, results) in read.items()}
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
