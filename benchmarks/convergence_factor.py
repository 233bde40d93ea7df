"""Whether each type's effect keeps its sign from one convergence study to another: two studies that differ in one
factor (the corpus, the head size), each a `convergence.json` written by benchmarks/convergence.py with the same
reference type. Prints, per type and metric, each study's paired difference to the reference (as the study reports
it), whether the two have the same sign, and the change between the studies: (effect in B) − (effect in A), its 95%
interval and the p-value of Welch's t-test over the per-seed differences (the studies' seeds are not paired with each
other: the data differ).

    python benchmarks/convergence_factor.py books=benchmarks/results/convergence/cpu-d64-books/convergence.json \
        python_docs=benchmarks/results/convergence/cpu-d64-python-docs/convergence.json

A step metric compares the seeds that reach it; "step to reach the target" is each study's own target (the
reference's final loss there), so across studies of different lengths compare its sign, not its size, and add
`--loss_at_step N` to compare the eval loss at a step both studies evaluated (the shorter one's last, say).
"""

import argparse
import json
import math
import os
import statistics
from pathlib import Path

from convergence import (  # benchmarks/convergence.py
    METRICS,
    finite_number,
    format_difference,
    paired_difference,
    read_json_file,
    whole_number,
)
from report import markdown_table  # benchmarks/report.py
from scipy import stats

from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically

# the largest size of a value read: far past any step, loss or accuracy, and small enough that the differences,
# variances and their squares the tables compute stay finite (1e308 gave OverflowError there)
LARGEST_VALUE = 1e15


def study_number(value, where: str) -> float:
    """`value` as finite_number reads it, and of a size LARGEST_VALUE at most; else a UserError naming `where`."""
    number = finite_number(value, where)
    if abs(number) > LARGEST_VALUE:
        raise UserError(f"{where} is {json.dumps(value)[:40]}, past what a study holds: allowed, -1e15 to 1e15")
    return number


def parse_study(text: str) -> tuple[str, dict]:
    label, separator, path = text.partition("=")
    if not separator or not label or not path:
        raise UserError(
            f"study {text!r}: give it as LABEL=PATH, e.g. books=benchmarks/results/convergence/cpu-d16-books/convergence.json"
        )
    return label, read_study(label, path)


def read_study(label: str, path: str) -> dict:
    """The study in `path` (benchmarks/convergence.py's convergence.json), every value this script reads checked:
    the file as read_json_file reads it (a regular file of strict JSON), each type once, each metric's per-seed
    values finite numbers or null (not booleans), one per seed in every row, the seeds whole numbers given once,
    and the eval-loss curves {"TYPE seed N": {"STEP": finite loss}}; anything else is a UserError naming it."""
    record = read_json_file(path, f"study {label}:")
    rows = record.get("summary") if isinstance(record, dict) else None
    if (
        not isinstance(rows, list)
        or not rows
        or not all(isinstance(row, dict) and isinstance(row.get("attention_type"), str) for row in rows)
    ):
        raise UserError(
            f"study {label}: {path} holds no convergence summary (benchmarks/convergence.py's convergence.json)"
        )
    rows_by_type = {}
    for row in rows:
        name = row["attention_type"]
        if name in rows_by_type:  # which row counts is unknown
            raise UserError(f"study {label}: {path} has {name!r} twice in its summary: each type once")
        rows_by_type[name] = row
    seeds = record.get("seeds")
    if seeds is not None:
        where = f"study {label}: {path}: seeds"
        if not isinstance(seeds, list) or not seeds:
            raise UserError(f"{where} is {json.dumps(seeds)[:40]}, not a list of seeds")
        for index, seed in enumerate(seeds):
            whole_number(seed, f"{where}[{index}]")
        if len(set(seeds)) != len(seeds):
            raise UserError(f"{where} names a seed twice ({seeds}): each seed once")
    num_seeds = len(seeds) if seeds is not None else None
    for name, row in rows_by_type.items():
        for metric in METRICS:
            where = f"study {label}: {path}: {name} {metric}"
            per_seed = row[metric].get("per_seed") if isinstance(row.get(metric), dict) else None
            if not isinstance(per_seed, list):
                raise UserError(f"{where} has no per_seed list (one value or null per seed)")
            for index, value in enumerate(per_seed):
                if value is not None:
                    study_number(value, f"{where} per_seed[{index}]")
            num_seeds = len(per_seed) if num_seeds is None else num_seeds
            if len(per_seed) != num_seeds:  # the values pair by position: one per seed
                raise UserError(f"{where} has {len(per_seed)} per-seed values, not one per seed ({num_seeds})")
    curves = record.get("eval_loss_curves")
    if curves is not None:
        if not isinstance(curves, dict) or not all(isinstance(curve, dict) for curve in curves.values()):
            raise UserError(f"study {label}: {path}: eval_loss_curves is not an object of curves {{step: loss}}")
        for key, curve in curves.items():
            for step, loss in curve.items():
                where = f"study {label}: {path}: eval_loss_curves[{key!r}][{step!r}]"
                if not (step.isdigit() and step.isascii()):
                    raise UserError(f"{where}: {step!r} is not a step (a whole number)")
                study_number(loss, where)
    return {"rows": rows_by_type, "path": path, "curves": curves, "seeds": seeds}


LOSS_AT_STEP = "loss_at_step"  # the metric --loss_at_step adds to each row


def add_loss_at_step(label: str, study: dict, step: int) -> None:
    """Adds the metric LOSS_AT_STEP to each type's row: its eval loss at `step` per seed, in the study's seed order
    (None for a run the study does not have), from the study's eval-loss curves ("TYPE seed N": {step: loss})."""
    curves, seeds = study["curves"], study["seeds"]
    if not isinstance(curves, dict) or not curves or not isinstance(seeds, list):
        raise UserError(f"study {label}: {study['path']} has no eval-loss curves to read a loss at step {step} from")
    for name, row in study["rows"].items():
        per_seed = []
        for seed in seeds:
            key = f"{name} seed {seed}"
            losses = curves.get(key)
            if losses is None:
                per_seed.append(None)
                continue
            loss = losses.get(str(step))  # read_study checked every loss
            if loss is None:
                steps = sorted(int(at) for at in losses)
                evaluated = f"steps {steps[0]} to {steps[-1]}" if steps else "no step"
                raise UserError(
                    f"study {label}: {key} has no eval loss at step {step} (its curve in {study['path']} covers "
                    f"{evaluated}; give a step every run of both studies was evaluated at)"
                )
            per_seed.append(float(loss))
        row[LOSS_AT_STEP] = {"per_seed": per_seed}


def per_seed_differences(row: dict, reference: dict, metric: str) -> list[float]:
    pairs = zip(row[metric]["per_seed"], reference[metric]["per_seed"])
    return [value - base for value, base in pairs if value is not None and base is not None]


def welch_change(first: list[float], second: list[float]) -> dict | None:
    """mean(second) − mean(first), its 95% Welch interval and two-sided p; None where a side has fewer than 2 values
    or neither side varies."""
    if len(first) < 2 or len(second) < 2:
        return None
    change = statistics.fmean(second) - statistics.fmean(first)
    var_first, var_second = statistics.variance(first) / len(first), statistics.variance(second) / len(second)
    if var_first + var_second == 0:
        return None
    degrees = (var_first + var_second) ** 2 / (var_first**2 / (len(first) - 1) + var_second**2 / (len(second) - 1))
    half = stats.t.ppf(0.975, degrees) * math.sqrt(var_first + var_second)
    p_value = float(stats.ttest_ind(second, first, equal_var=False).pvalue)
    # the keys of convergence.paired_difference, so format_difference prints it
    return {"mean": change, "ci95": (change - half, change + half), "p": p_value, "seeds": len(first) + len(second)}


def sign_verdict(effects: list[dict | None]) -> str:
    """Whether the two effects have the same sign, and whether each is significant on its own (paired p < 0.05)."""
    if any(effect is None for effect in effects):
        return "–"
    means = [effect["mean"] for effect in effects]
    if 0 in means:
        return "no effect in one"
    verdict = "kept" if (means[0] > 0) == (means[1] > 0) else "flipped"
    significant = sum(effect["p"] is not None and effect["p"] < 0.05 for effect in effects)
    return f"{verdict}; p < 0.05 in {('neither', 'one', 'both')[significant]}"


def comparison_table(studies: list[tuple[str, dict]], loss_at_step: int | None = None) -> str:
    (label_a, study_a), (label_b, study_b) = studies
    rows_a, rows_b = study_a["rows"], study_b["rows"]
    metrics = dict(METRICS)
    if loss_at_step is not None:
        for label, study in studies:
            add_loss_at_step(label, study, loss_at_step)
        metrics[LOSS_AT_STEP] = (f"eval loss at step {loss_at_step}", METRICS["final_eval_loss"][1])
    reference = next(iter(rows_a))
    if next(iter(rows_b)) != reference:
        raise UserError(
            f"the studies have different reference types: {label_a} {reference!r}, {label_b} {next(iter(rows_b))!r}"
        )
    shared = [name for name in rows_a if name in rows_b and name != reference]
    if not shared:
        raise UserError(f"the studies {label_a} and {label_b} have no attention type in common besides {reference!r}")
    titles = ["type", "metric", f"{label_a}: vs `{reference}`", f"{label_b}: vs `{reference}`", "sign"]
    titles.append(f"change ({label_b} − {label_a})")
    lines = []
    for name in shared:
        for metric, (title, fmt) in metrics.items():
            first = per_seed_differences(rows_a[name], rows_a[reference], metric)
            second = per_seed_differences(rows_b[name], rows_b[reference], metric)
            change = welch_change(first, second)
            effects = [
                paired_difference(rows[name][metric]["per_seed"], rows[reference][metric]["per_seed"])
                for rows in (rows_a, rows_b)
            ]
            effect_texts = [
                format_difference(effect, fmt, len(rows[name][metric]["per_seed"]))
                for effect, rows in zip(effects, (rows_a, rows_b))
            ]
            change_text = format_difference(change, fmt, change["seeds"] if change else 0)
            lines.append([f"`{name}`", title, *effect_texts, sign_verdict(effects), change_text])
    return markdown_table(titles, lines, "---")


def compare(argv: list[str]) -> None:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs=2, metavar="LABEL=PATH", help="two convergence.json files, each with a label")
    parser.add_argument("--output", default=None, help="also write the table to this Markdown file")
    parser.add_argument(
        "--loss_at_step",
        type=positive_int,
        default=None,
        help="add the eval loss at this step, read from both studies' curves (for studies of different lengths)",
    )
    args = parser.parse_args(argv)
    if args.output is not None:
        check_output(args.output, [text.partition("=")[2] for text in args.studies])
    studies = [parse_study(text) for text in args.studies]
    if studies[0][0] == studies[1][0]:
        raise UserError(f"both studies are labelled {studies[0][0]!r}: give each its own label")
    table = comparison_table(studies, args.loss_at_step)
    print(table)
    if args.output is not None:
        try:  # through a temporary file in the same folder, renamed over OUTPUT: never half written
            write_atomically(Path(args.output), lambda file: file.write(table + "\n"))
        except OSError as error:
            raise UserError(f"--output {args.output} cannot be written ({error.strerror or error})") from None


def check_output(text: str, inputs: list[str]) -> None:
    """Refuses an --output that is one of the studies (the same path, a link to it, a hard link: it would be
    replaced by the table), a folder or other non-regular file, or in a folder that does not exist; before
    anything is read."""
    output = Path(text)
    if not text or output.name in ("", ".", ".."):
        raise UserError(f"--output {text!r} is not a file name: give a Markdown file, e.g. factor.md")
    for study in inputs:
        if study and os.path.exists(study) and os.path.exists(output) and os.path.samefile(output, study):
            raise UserError(
                f"--output {output} is the study {study}: writing the table would replace it; give another file"
            )
    if output.exists() and not output.is_file():
        raise UserError(f"--output {output} is not a regular file (a folder or named pipe): give a Markdown file")
    if not output.parent.is_dir():
        raise UserError(f"--output {output}: its folder {output.parent} does not exist (or is not a folder)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step: give a whole number of 1 or more")
    return value


def main(argv: list[str] | None = None) -> None:
    run_command(compare, argv)


if __name__ == "__main__":
    main()
