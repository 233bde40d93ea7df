"""Whether each type's effect keeps its sign from one convergence study to another: two studies that differ in one
factor (the corpus, the head size), each a `convergence.json` written by benchmarks/convergence.py with the same
reference type. Prints, per type and metric, each study's paired difference to the reference (as the study reports
it), whether the two have the same sign, and the change between the studies: (effect in B) − (effect in A), its 95%
interval and the p-value of Welch's t-test over the per-seed differences (the studies' seeds are not paired with each
other: the data differ).

    python benchmarks/convergence_factor.py books=benchmarks/results/convergence-cpu-d64/convergence.json \
        python_docs=benchmarks/results/convergence-cpu-d64-python-docs/convergence.json

A step metric compares the seeds that reach it; "step to reach the target" is each study's own target (the
reference's final loss there), so across studies of different lengths compare its sign, not its size, and add
`--loss_at_step N` to compare the eval loss at a step both studies evaluated (the shorter one's last, say).
"""

import argparse
import json
import math
import statistics
from pathlib import Path

from convergence import METRICS, format_difference, paired_difference  # benchmarks/convergence.py
from scipy import stats

from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically


def parse_study(text: str) -> tuple[str, dict]:
    label, separator, path = text.partition("=")
    if not separator or not label or not path:
        raise UserError(
            f"study {text!r}: give it as LABEL=PATH, e.g. books=benchmarks/results/convergence-cpu/convergence.json"
        )
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"study {label}: {path} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UserError(f"study {label}: {path} is not a readable JSON file ({error})") from None
    rows = record.get("summary") if isinstance(record, dict) else None
    if (
        not isinstance(rows, list)
        or not rows
        or not all(isinstance(row, dict) and "attention_type" in row for row in rows)
    ):
        raise UserError(
            f"study {label}: {path} holds no convergence summary (benchmarks/convergence.py's convergence.json)"
        )
    rows_by_type = {row["attention_type"]: row for row in rows}
    return label, {
        "rows": rows_by_type,
        "path": path,
        "curves": record.get("eval_loss_curves"),
        "seeds": record.get("seeds"),
    }


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
            loss = losses.get(str(step)) if isinstance(losses, dict) else None
            if not isinstance(loss, (int, float)) or isinstance(loss, bool):
                steps = sorted(int(at) for at in losses if at.isdigit()) if isinstance(losses, dict) else []
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
    lines = [
        f"| type | metric | {label_a}: vs `{reference}` | {label_b}: vs `{reference}` | sign | "
        f"change ({label_b} − {label_a}) |",
        "|---|---|---|---|---|---|",
    ]
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
            lines.append(
                f"| `{name}` | {title} | {effect_texts[0]} | {effect_texts[1]} | {sign_verdict(effects)} | "
                f"{format_difference(change, fmt, change['seeds'] if change else 0)} |"
            )
    return "\n".join(lines)


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
    studies = [parse_study(text) for text in args.studies]
    if studies[0][0] == studies[1][0]:
        raise UserError(f"both studies are labelled {studies[0][0]!r}: give each its own label")
    table = comparison_table(studies, args.loss_at_step)
    print(table)
    if args.output:
        write_atomically(Path(args.output), lambda file: file.write(table + "\n"))


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
