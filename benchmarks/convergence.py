"""Convergence of the attention types: pre-train each type with several seeds on one recipe and report the step at
which each first reaches a target eval loss, as mean ± std over seeds, with a plot of the curves and their spread.

    python benchmarks/convergence.py --types original,symmetric,pairwise,shared --seeds 1,2 \
        --summary_dir benchmarks/results/convergence-cpu -- --recipe cpu-demo --output_dir outputs/convergence

Everything after `--` goes to `symbert-pretrain` (a recipe and its overrides). For one seed every type gets the same
initialisation seed, held-out split, data order and masks; each run is `symbert.training.pretrain.pretrain`, writing
its own folder `OUTPUT_DIR/seed-S/TYPE`. The seed also draws the held-out blocks, so eval losses are comparable
within a seed, not across seeds: by default each run's target is the first type's final eval loss on the same seed
(`--target_eval_loss` sets one target for all). `--parallel N` trains N runs at once in separate processes (one GPU
holds many small models); the tokenizer and data caches are filled once before they start. `--summarize_only`
rebuilds the summary from the runs already in OUTPUT_DIR.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import torch
from machine import describe_machine  # benchmarks/machine.py

from symbert import ATTENTION_TYPES
from symbert.training import data as data_module
from symbert.training.pretrain import parse_arguments, pretrain
from symbert.training.reporting import (
    comparison_table,
    load_log_history,
    metric_series,
    new_figure,
    save_figure,
    steps_to_reach,
    write_atomically,
)


def parse_list(text, kind, allowed=None):
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"--{kind} is empty; give a comma-separated list.")
    if allowed is not None:
        bad = [item for item in items if item not in allowed]
        if bad:
            raise ValueError(f"--{kind} has {', '.join(bad)}; allowed: {', '.join(allowed)}.")
    if len(set(items)) != len(items):
        raise ValueError(f"--{kind} repeats an entry: {text}")
    return items


def parse_command_line(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", default="original,symmetric,pairwise,shared,mhe_add,mhe_mul")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--target_eval_loss", type=float, default=None)
    parser.add_argument("--parallel", type=int, default=1, help="runs trained at once, each in its own process")
    parser.add_argument("--summarize_only", action="store_true", help="read the runs in OUTPUT_DIR, train nothing")
    parser.add_argument("--summary_dir", default=None, help="where convergence.md/.json/.png go (default: OUTPUT_DIR)")
    if "--" not in argv:
        raise ValueError("Put the pre-training arguments after `--`, e.g. `-- --recipe cpu-demo --output_dir DIR`.")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.types = parse_list(args.types, "types", ATTENTION_TYPES)
    try:
        args.seeds = [int(seed) for seed in parse_list(args.seeds, "seeds")]
    except ValueError as error:
        raise ValueError(f"--seeds must be comma-separated integers, not {args.seeds!r}.") from error
    if args.parallel < 1:
        raise ValueError(f"--parallel={args.parallel} must be at least 1.")
    run_args, model_args, data_args, training_args = parse_arguments(argv[split + 1 :])
    if run_args.compare:
        raise ValueError("--compare is the single-seed comparison of symbert-pretrain; use --types here instead.")
    return args, run_args, model_args, data_args, training_args


def train_one(run_args, model_args, data_args, training_args):
    torch.set_num_threads(max(1, torch.get_num_threads()))  # a fresh worker process keeps torch's default
    return pretrain(run_args, model_args, data_args, training_args)


def run_dir(training_args, kind, seed):
    return Path(training_args.output_dir) / f"seed-{seed}" / kind


def run_all(args, run_args, model_args, data_args, training_args):
    """{(type, seed): log_history} for every type and seed."""
    jobs = {
        (kind, seed): (
            run_args,
            replace(model_args, attention_type=kind),
            data_args,
            replace(training_args, seed=seed, output_dir=str(run_dir(training_args, kind, seed))),
        )
        for seed in args.seeds
        for kind in args.types
    }
    if args.summarize_only:
        return {key: load_log_history(run_dir(training_args, *key)) for key in jobs}
    if args.parallel == 1:
        return {key: train_one(*job) for key, job in jobs.items()}
    # Fill the tokenizer and tokenized-data caches once, so the workers only read them.
    tokenizer = data_module.load_tokenizer(data_args)
    for seed in args.seeds:
        data_module.load_blocks(data_args, tokenizer, seed=seed)
    with ProcessPoolExecutor(args.parallel, mp_context=get_context("spawn")) as pool:
        futures = {key: pool.submit(train_one, *job) for key, job in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def final_eval_loss(log_history):
    return metric_series(log_history, "eval_loss")[1][-1]


def mean_std(values):
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(histories, types, seeds, targets):
    """Per type: steps to reach each seed's target and final eval loss over seeds, as mean ± std."""
    rows = []
    for kind in types:
        steps = [steps_to_reach(histories[kind, seed], targets[seed]) for seed in seeds]
        reached = [step for step in steps if step is not None]
        finals = [final_eval_loss(histories[kind, seed]) for seed in seeds]
        rows.append(
            {
                "attention_type": kind,
                "steps_to_target": steps,
                "steps_to_target_mean_std": mean_std(reached),
                "seeds_reaching_target": len(reached),
                "final_eval_loss": finals,
                "final_eval_loss_mean_std": mean_std(finals),
            }
        )
    return rows


def markdown_table(rows, num_seeds):
    lines = [
        "| attention type | step to reach the target (mean ± std) | seeds reaching it | final eval loss (mean ± std) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        step_mean, step_std = row["steps_to_target_mean_std"]
        steps = "not reached" if step_mean is None else f"{step_mean:.0f} ± {step_std:.0f}"
        loss_mean, loss_std = row["final_eval_loss_mean_std"]
        lines.append(
            f"| {row['attention_type']} | {steps} | {row['seeds_reaching_target']}/{num_seeds} "
            f"| {loss_mean:.4f} ± {loss_std:.4f} |"
        )
    return "\n".join(lines)


def plot_curves(histories, types, seeds, targets, path):
    """Mean eval loss against step per type, shaded between the lowest and highest seed."""
    fig, ax = new_figure("eval loss", f"eval loss over {len(seeds)} seeds (line: mean, band: min-max)")
    for kind in types:
        curves = [metric_series(histories[kind, seed], "eval_loss") for seed in seeds]
        steps = curves[0][0]
        if any(curve_steps != steps for curve_steps, _ in curves):
            raise ValueError(f"{kind}: the seeds were evaluated at different steps; cannot average their curves.")
        per_step = list(zip(*(losses for _, losses in curves)))
        (line,) = ax.plot(steps, [statistics.fmean(values) for values in per_step], label=kind)
        ax.fill_between(
            steps, [min(v) for v in per_step], [max(v) for v in per_step], color=line.get_color(), alpha=0.2
        )
    target = statistics.fmean(targets.values())
    ax.axhline(target, color="gray", linestyle="--", label=f"target {target:.4f} (mean over seeds)")
    # The first evaluation (step 0) is far above the rest: start the y axis at the later part of the curves.
    ax.set_ylim(top=max(final_eval_loss(h) for h in histories.values()) + 1.0)
    ax.legend()
    return save_figure(fig, path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args, run_args, model_args, data_args, training_args = parse_command_line(argv)
    summary_dir = Path(args.summary_dir or training_args.output_dir)
    summary_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    start = time.perf_counter()
    histories = run_all(args, run_args, model_args, data_args, training_args)
    wall_seconds = time.perf_counter() - start

    reference = args.types[0]
    if args.target_eval_loss is not None:
        targets = dict.fromkeys(args.seeds, args.target_eval_loss)
        target_source = "--target_eval_loss"
    else:
        targets = {seed: final_eval_loss(histories[reference, seed]) for seed in args.seeds}
        target_source = f"{reference}'s final eval loss on the same seed (held-out blocks differ between seeds)"
    rows = summarize(histories, args.types, args.seeds, targets)
    table = markdown_table(rows, len(args.seeds))
    command = shlex.join(["python", "benchmarks/convergence.py", *argv])
    train_minutes = sum(e["train_runtime"] for h in histories.values() for e in h if "train_runtime" in e) / 60
    report = "\n\n".join(
        [
            "# Convergence",
            f"Command: `{command}`",
            f"Machine: {describe_machine()}. Wall time {wall_seconds / 60:.1f} min"
            f"{' (summary only)' if args.summarize_only else ''}; the {len(histories)} runs' training loops took "
            f"{train_minutes:.1f} min together (`train_runtime`, {args.parallel} at a time); load average (1, 5, 15 "
            f"min) {tuple(round(x, 2) for x in load_before)} at the start, {tuple(round(x, 2) for x in os.getloadavg())} at the end.",
            f"Seeds {args.seeds}, size `{model_args.size}`, {training_args.max_steps} steps, eval every "
            f"{training_args.eval_steps} steps. Target: {target_source}: "
            + ", ".join(f"seed {seed}: {target:.4f}" for seed, target in targets.items())
            + ".",
            table,
            "Every run:",
            *(
                comparison_table({f"{kind} seed {seed}": histories[kind, seed] for kind in args.types}, targets[seed])
                for seed in args.seeds
            ),
            "![eval loss](convergence.png)",
        ]
    )
    write_atomically(summary_dir / "convergence.md", lambda file: file.write(report + "\n"))
    record = {
        "command": command,
        "machine": describe_machine(),
        "wall_seconds": wall_seconds,
        "load_average_start": load_before,
        "load_average_end": os.getloadavg(),
        "train_minutes": train_minutes,
        "target_eval_loss": targets,
        "target_source": target_source,
        "seeds": args.seeds,
        "summary": rows,
        "eval_loss_curves": {
            f"{kind} seed {seed}": dict(zip(*metric_series(h, "eval_loss"))) for (kind, seed), h in histories.items()
        },
    }
    write_atomically(summary_dir / "convergence.json", lambda file: json.dump(record, file, indent=2))
    plot_curves(histories, args.types, args.seeds, targets, summary_dir / "convergence.png")
    print(f"\n{table}\n\nWall time {wall_seconds / 60:.1f} min. Results in {summary_dir}/convergence.md, .json, .png")


if __name__ == "__main__":
    main()
