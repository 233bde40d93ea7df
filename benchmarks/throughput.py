"""Training and inference speed, memory and MFU of every attention type against transformers' BertForMaskedLM, eager
and under torch.compile, with the full MLM head and the pre-training recipes' sparse one.

    python benchmarks/throughput.py --device cpu --threads 1 --clock user --sizes small --seq_lens 128 \
        --tokens_per_batch 4096 --modes eager compiled --heads full sparse
    python benchmarks/throughput.py --device cuda --sizes base --seq_lens 128 512 --precisions bf16 \
        --modes eager compiled --heads full sparse --tokens_per_batch 16384

For each setting (size × sequence length × precision × attention implementation) BERT and every SymBERT type are
built with the same sizes and the same attention implementation in this process. Each type runs on every path
(mode × head): mode `eager`, or `compiled` (torch.compile with static shapes, default inductor backend, on each
encoder layer with `--compile_scope layers`, the default: regional compilation, one graph for all of a model's layers
(and its sparse head's path), so a cold compile costs a layer's tracing and code generation, not the whole model's;
on the whole model with `--compile_scope whole`, which can fuse across the layers' edges); head
`full` (the MLM head over every position) or `sparse` (`sparse_prediction=True, max_predictions_per_seq=M`: the head
runs on batch × M positions, the labelled ones first; M defaults to ⌈0.2 × seq_len⌉). transformers' BERT has no
sparse head: it runs the full head, eager and (with `--modes compiled`) compiled, and is the reference of every path.
The eager and compiled forms of a model, and its full and sparse heads, share one set of weights and one AdamW.
Every model is warmed up (in compiled mode at least one step, which compiles it: the first step's wall time is
reported as the compile time), then all are timed in rounds (one round = every path once, in a rotating order, as
a block of its models run back to back with `original` first and last, plus one large matrix product): the median
over rounds of
- training step: forward + backward + fused AdamW step (the Trainer's default) on a masked-LM batch (exactly
  round(0.15 × seq_len) labelled positions per sequence, at most M), tokens/s;
- inference: forward under `torch.inference_mode`, tokens/s (no labels: the full-logits path whatever the head, so
  a sparse-head model's inference is its full-head model's, timed once);
- memory: on CUDA the allocator's peak during one training step (plus the model's weights and Adam state, as if it
  were alone on the GPU); on CPU, which has no allocator statistics, weights + gradients + Adam state + the tensors
  autograd saves for the backward pass (the part of the peak that differs between the types), counted exactly;
- MFU: analytic training FLOPs per token × tokens/s over the measured matrix-product rate of the same precision.
Ratios: `vs original` to `original` on the same path (mode, head): the median over rounds of original's time,
interpolated to the model's place in the block, over the model's (paired, so the machine's drift cancels), with its
range over the rounds (`per round`); `vs BERT` to BERT with the same mode (full head); `vs BERT run_mlm` to BERT eager with the full head, as
transformers' run_mlm.py example trains it. `expected` is the FLOP ratio original / type on the same path: the
speed-up the type's saving allows if time followed FLOPs.
Targets: every type's `vs original` ≥ expected − 0.02; `original` ≥ 0.98 × BERT on the full head in the same mode;
memory of shared, mhe_add and mhe_mul below original's; on CUDA also each class's `train_speed_target` against BERT
(same mode, full head, base size).
On a CPU (`--cpu_memory keep`, the default) glibc keeps freed memory in the process, so a step reuses the pages of the
last one instead of faulting in fresh ones. On a CPU shared with other processes, `--threads 1 --clock process` times
by this process's CPU time instead of the wall clock, which the other processes barely disturb. `--clock user` counts only its user-mode CPU time: with
`--cpu_memory release`, glibc hands every buffer over 32 MB (the logits, their gradient) back to the kernel when it is
freed, so each step faults ~1 GB of fresh zeroed pages, kernel time that is the same work for every model of a size
but varied from 1.0 to 3.4 s for one 7-s step of the same model on one machine, with its memory state.

Writes `OUTPUT.md` and `OUTPUT.json` (default benchmarks/results/throughput-DEVICE/throughput) with the machine, the command,
the load average and the wall time. This file is the command line; the models and their timing are in
throughput_timing.py, the ratios, targets, tables and output files in throughput_report.py.
"""

import argparse
import shlex
from contextlib import nullcontext
from pathlib import Path

import torch
from machine import keep_freed_memory  # benchmarks/machine.py
from report import Stopwatch  # benchmarks/report.py
from throughput_report import add_ratios_and_targets, format_checks, format_table, profile_table, write_results
from throughput_timing import (  # benchmarks/throughput_timing.py
    CLOCKS,
    COMPILE_SCOPES,
    HEADS,
    IMPLEMENTATIONS,
    MODES,
    PRECISIONS,
    benchmark_setting,
    check_implementations,
    flash_attention_available,
    profile_steps,
    reference_type,
    use_clock,
)

from symbert import ATTENTION_TYPES, SIZE_PRESETS
from symbert.cli import UserError, command_parser, run_command
from symbert.training.arguments import check_output_dir

FIRST_DRAWN_ID = 5  # mlm_batch draws ids from here up: 0-4 are BERT's special tokens
MAX_SEQ_LEN = 512  # the presets' max_position_embeddings


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda, but torch sees no CUDA device; use --device cpu.")


def check_seq_len(seq_len: int, tokens_per_batch: int, name: str) -> None:
    """A sequence length the models take, and whole sequences in a batch of `tokens_per_batch` tokens."""
    if not 1 <= seq_len <= MAX_SEQ_LEN or tokens_per_batch % seq_len:
        raise UserError(
            f"{name} {seq_len}: must be in [1, {MAX_SEQ_LEN}] and divide --tokens_per_batch {tokens_per_batch}."
        )


def check_at_least_one(args: argparse.Namespace, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)} must be at least 1.")


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZE_PRESETS))
    parser.add_argument("--seq_lens", nargs="+", type=int, default=[128])
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=PRECISIONS)
    parser.add_argument("--attn_implementations", nargs="+", default=["sdpa"], choices=IMPLEMENTATIONS)
    parser.add_argument(
        "--types", nargs="+", default=list(ATTENTION_TYPES), choices=ATTENTION_TYPES, help="`original` is always run"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["eager"],
        choices=MODES,
        help="compiled: torch.compile(..., dynamic=False) (--compile_scope); BERT also runs eager, the run_mlm reference",
    )
    parser.add_argument(
        "--heads",
        nargs="+",
        default=["full"],
        choices=HEADS,
        help="full: MLM head at every position; sparse: at batch × max_predictions_per_seq positions (SymBERT only)",
    )
    parser.add_argument(
        "--max_predictions_per_seq", type=int, default=None, help="sparse head's M (default: ceil(0.2 × seq_len))"
    )
    parser.add_argument(
        "--compile_backend", default="inductor", help="torch.compile backend (the tests use the cheap aot_eager)"
    )
    parser.add_argument(
        "--compile_scope",
        default="layers",
        choices=COMPILE_SCOPES,
        help="layers: compile each encoder layer (one graph for all of a model's layers: the least compile time); "
        "whole: the whole model as one graph",
    )
    parser.add_argument("--tokens_per_batch", type=int, default=512, help="batch size = tokens_per_batch / seq_len")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (the median is reported)")
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps per model before the rounds (at least 1 when compiled)"
    )
    parser.add_argument("--steps_per_round", type=int, default=1, help="steps timed together in one round")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument(
        "--clock",
        default="wall",
        choices=list(CLOCKS),
        help="process: this process's CPU time, which other processes on a shared CPU barely disturb (use with "
        "--threads 1); user: its user-mode CPU time only, without the kernel's page faults, whose time varies run to run",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--cpu_memory",
        default="keep",
        choices=("keep", "release"),
        help="keep: freed memory stays in the process for the next step (glibc mallopt; no effect elsewhere); "
        "release: glibc's default, large buffers are unmapped when freed and fault in fresh pages the next step",
    )
    parser.add_argument(
        "--matmul_size", type=int, default=None, help="MFU reference product size (default: 8192 on CUDA, 2048 on CPU)"
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results path without suffix (default: benchmarks/results/throughput-DEVICE/throughput)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        help="also write a torch.profiler table for BERT and these types (comma-separated), on the first mode and head",
    )
    args = parser.parse_args(argv)
    if args.clock != "wall" and args.device == "cuda":
        raise UserError(f"--clock {args.clock} measures CPU time; on CUDA use --clock wall.")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads={args.threads} must be at least 1.")
    check_device(args.device)
    if args.matmul_size is None:
        args.matmul_size = 8192 if args.device == "cuda" else 2048
    check_at_least_one(args, ("tokens_per_batch", "rounds", "steps_per_round", "matmul_size"))
    if args.vocab_size <= FIRST_DRAWN_ID:
        raise UserError(
            f"--vocab_size={args.vocab_size} must be above {FIRST_DRAWN_ID}: the batches draw their ids from "
            f"{FIRST_DRAWN_ID} up (0-{FIRST_DRAWN_ID - 1} are the special tokens)."
        )
    if args.warmup < 0:
        raise UserError(f"--warmup={args.warmup} must not be negative.")
    for seq_len in args.seq_lens:
        check_seq_len(seq_len, args.tokens_per_batch, "--seq_lens")
        if args.max_predictions_per_seq is not None and not 1 <= args.max_predictions_per_seq <= seq_len:
            raise UserError(
                f"--max_predictions_per_seq={args.max_predictions_per_seq} must be in [1, seq_len] "
                f"(--seq_lens {seq_len})."
            )
    if "flash_attention_2" in args.attn_implementations and not flash_attention_available(args.device):
        raise UserError("--attn_implementations flash_attention_2 needs a CUDA device and the flash-attn package.")
    if "compiled" in args.modes and args.compile_backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise UserError(
            f"--compile_backend {args.compile_backend!r} is not a torch.compile backend; allowed: aot_eager, eager "
            f"and torch._dynamo.list_backends()'s {', '.join(torch._dynamo.list_backends())}."
        )
    if args.profile:
        unknown = [kind for kind in args.profile.split(",") if kind not in ATTENTION_TYPES]
        if unknown:
            raise UserError(
                f"--profile has {', '.join(map(repr, unknown))}; allowed: {', '.join(ATTENTION_TYPES)}, "
                "separated by commas."
            )
    # every path's ratios are to `original`: run it first
    reference = reference_type()
    args.types = [reference] + [kind for kind in dict.fromkeys(args.types) if kind != reference]
    args.modes = [mode for mode in MODES if mode in args.modes]
    args.heads = [head for head in HEADS if head in args.heads]
    args.output = Path(args.output or f"benchmarks/results/throughput-{args.device}/throughput")
    check_output_dir(args.output.parent, "output")  # now, not after the measurements
    return args


def main(argv: list[str] | None = None) -> None:
    run_command(measure, argv)


def measure(argv: list[str] | None) -> None:
    args = parse_command_line(argv)
    use_clock(args.clock)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.memory_kept = args.device == "cpu" and args.cpu_memory == "keep" and keep_freed_memory()
    # every compiled model adds graphs (training, inference) to the same code objects, the models' forward: raise the
    # limit above their number, and fail rather than fall back to eager when it is hit
    dynamo_settings = dict(recompile_limit=max(8, 8 * (len(args.types) + 1)), fail_on_recompile_limit_hit=True)
    with torch._dynamo.config.patch(**dynamo_settings) if "compiled" in args.modes else nullcontext():
        run(args, argv)


def run(args: argparse.Namespace, argv: list[str] | None) -> None:
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    stopwatch = Stopwatch()
    rows = []
    command = shlex.join(["python", "benchmarks/throughput.py", *argv])
    for size in args.sizes:
        for seq_len in args.seq_lens:
            for precision in args.precisions:
                for implementation in args.attn_implementations:

                    def keep(setting_rows: list[dict]) -> None:
                        """The rows so far written out: a run stopped later (a deadline) keeps them."""
                        add_ratios_and_targets(setting_rows, device)
                        write_results(args, stopwatch.facts(command), rows + setting_rows, None, None)

                    # after each round, the setting's rows over the rounds so far; then all of them
                    setting_rows = benchmark_setting(args, device, size, seq_len, precision, implementation, keep)
                    keep(setting_rows)
                    print(format_table(setting_rows, cuda), flush=True)
                    rows += setting_rows
    checks = check_implementations(args, device, args.sizes[0], args.seq_lens[0]) if cuda else None
    profile = None
    if args.profile:
        setting = (args.sizes[-1], args.seq_lens[0], args.precisions[0], args.attn_implementations[0])
        profile = profile_table(profile_steps(args, device, *setting), *setting)
    facts = stopwatch.facts(command)
    write_results(args, facts, rows, checks, profile)
    if checks is not None:
        print(format_checks(checks))
    print(f"Wall time {facts['wall_seconds'] / 60:.1f} min. Results in {args.output}.md and .json")


if __name__ == "__main__":
    main()
