"""Fine-tune and score a model on GLUE by the paper's protocol, over seeds and along pre-training checkpoints.

    symbert-glue --model outputs/cpu-demo --tasks rte,mrpc --seeds 1,2 --output_dir glue/demo
    symbert-glue --model outputs/cpu-demo --data_dir glue_data --output_dir glue/demo      # offline: local GLUE data
    symbert-glue --pretraining_dirs runs/original runs/pairwise --steps 10000,30000,65000 --output_dir glue/sweep

Defaults are the paper's protocol (PAPER_PROTOCOL), as shown below: 5 epochs, lr 1e-5, linear schedule, warm-up
ratio 0.1, batch 16, max length 128, weight decay 0, seeds 1-5, the GLUE-score tasks (all but wnli); the final model
is scored on the dev sets. Any Trainer argument (listed last) can be overridden (e.g. `--max_steps 10`, `--bf16 true`).

Output folder: `runs/<task>/seed-<n>.json` (one per finished pair, written atomically; a rerun skips them while
the model's weights, the protocol and the task data's contents (sha256, whatever path names them) are the same),
`glue_results.json` (schema: docs/glue-results.md) and `glue_results.md`, rebuilt from the run files after
every pair. The sweep writes one such folder per checkpoint (`<model>/step-<N>/`) and `glue_vs_step.csv`,
`glue_vs_step.md`, `glue_vs_step.png`.
"""

import textwrap
from dataclasses import replace
from pathlib import Path

import torch
from transformers import HfArgumentParser, TrainingArguments

from ...cli import UserError, command_parser, group_arguments, run_command
from ..compat import trainer_argument_names
from .arguments import GlueArguments
from .data import TASKS
from .results import PAPER_PROTOCOL, PAPER_TASKS
from .sweep import precision, run_suite, run_sweep


def protocol_defaults() -> dict:
    """PAPER_PROTOCOL in this transformers' names (compat.trainer_argument_names)."""
    return trainer_argument_names(PAPER_PROTOCOL)


def task_list() -> str:
    """The tasks --tasks knows, for --help."""
    names = ", ".join(
        f"{name}\0({task.tsv_folder or task.hub_dataset or '--data_dir only: benchmarks/real/fetch.py'})"
        for name, task in TASKS.items()
    )  # \0: a task is never split
    text = f"Tasks (--tasks; default: the paper's {len(PAPER_TASKS)}): {names}."
    return textwrap.fill(text, width=110).replace("\0", " ")


def argument_parser() -> HfArgumentParser:
    """Our arguments, then the Trainer's under their own heading, with the paper's protocol as their defaults."""
    parser = command_parser(
        f"{__doc__}\n{task_list()}", parser_class=HfArgumentParser, dataclass_types=(GlueArguments, TrainingArguments)
    )
    group_arguments(
        parser,
        TrainingArguments,
        "Trainer arguments (transformers.TrainingArguments; defaults: the paper's protocol where it sets them)",
    )
    # the protocol's values parsed as the command line would parse them, then made the defaults (so --help shows them)
    protocol = protocol_defaults()
    parsed, _ = parser.parse_known_args([item for key, value in protocol.items() for item in (f"--{key}", str(value))])
    parser.set_defaults(**{key: getattr(parsed, key) for key in protocol})
    return parser


def parse_arguments(argv: list[str]) -> tuple[GlueArguments, TrainingArguments, list[str], list[int]]:
    """The paper's protocol as defaults; the command line wins."""
    try:
        glue_args, training_args = argument_parser().parse_args_into_dataclasses(list(argv))
    except ValueError as error:  # TrainingArguments refusing a combination of settings, arguments left unparsed
        if isinstance(error, UserError):
            raise
        raise UserError(f"bad arguments: {' '.join(str(error).split())}") from None
    tasks, seeds = check_arguments(glue_args, training_args)
    if not has_accelerator():  # pinned memory speeds up copies to an accelerator; without one torch warns per run
        training_args = replace(training_args, dataloader_pin_memory=False)
    return glue_args, training_args, tasks, seeds


def has_accelerator() -> bool:
    """Whether torch sees an accelerator (CUDA, MPS, XPU, ...): where pinned memory means something."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6 and later
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def check_arguments(glue_args: GlueArguments, training_args: TrainingArguments) -> tuple[list[str], list[int]]:
    tasks = [task.strip() for task in glue_args.tasks.split(",") if task.strip()]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown or not tasks:
        raise UserError(f"Unknown GLUE task(s) {', '.join(unknown) or '(none given)'}; allowed: {', '.join(TASKS)}.")
    try:
        seeds = [int(seed) for seed in glue_args.seeds.split(",")]
    except ValueError:
        raise UserError(f"--seeds {glue_args.seeds!r} must be comma-separated integers, e.g. 1,2,3,4,5.") from None
    if (glue_args.model is None) == (glue_args.pretraining_dirs is None):
        raise UserError("Pass exactly one of --model (one model) and --pretraining_dirs (the checkpoint sweep).")
    if glue_args.steps is not None and glue_args.pretraining_dirs is None:
        raise UserError("--steps selects checkpoints of --pretraining_dirs; it needs --pretraining_dirs.")
    if glue_args.max_length <= 0:
        raise UserError(f"max_length={glue_args.max_length} must be positive.")
    if training_args.output_dir is None:
        raise UserError("--output_dir is required.")
    precision(training_args)
    return list(dict.fromkeys(tasks)), list(dict.fromkeys(seeds))


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


def run(argv: list[str]) -> None:
    glue_args, training_args, tasks, seeds = parse_arguments(argv)
    if glue_args.pretraining_dirs:
        run_sweep(glue_args, training_args, tasks, seeds)
        return
    output_dir = Path(training_args.output_dir)
    results = run_suite(glue_args.model, glue_args, training_args, tasks, seeds, output_dir)
    print(f"\n{results.markdown()}\nResults in {output_dir}: glue_results.json, glue_results.md, runs/")


if __name__ == "__main__":
    main()
