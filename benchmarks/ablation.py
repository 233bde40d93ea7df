"""Where `original` differs in speed from transformers' BERT: one training step, timed interleaved, of BERT, of
`original` as shipped, of `original` without its input-id range check, and of `original` with transformers'
`ForMaskedLMLoss` (which first copies the logits to fp32). Off the CPU the range check is a device-side assert (a few
small kernels, no host sync); on the CPU it reads the ids' minimum and maximum back.

    python benchmarks/ablation.py --device cuda --size small --tokens_per_batch 16384 --output benchmarks/results/throughput-cuda/ablation-h200
"""

import argparse
import statistics
from pathlib import Path
from unittest import mock

import torch
from report import Stopwatch, header, markdown_table  # benchmarks/report.py
from throughput import check_at_least_one, check_device, check_seq_len  # benchmarks/throughput.py
from throughput_timing import (  # benchmarks/throughput_timing.py
    BERT,
    PRECISIONS,
    autocast,
    build_models,
    mlm_batch,
    reference_type,
    timed,
)
from transformers.loss.loss_utils import ForMaskedLMLoss

import symbert.modeling_symbert as modeling
from symbert import SIZE_PRESETS
from symbert.cli import command_parser, run_command
from symbert.files import write_atomically
from symbert.training.arguments import check_output_dir


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="small", choices=list(SIZE_PRESETS))
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--precision", default="bf16", choices=PRECISIONS)
    parser.add_argument("--tokens_per_batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--output", default=None, help="results path without suffix; default: print only")
    args = parser.parse_args(argv)
    check_device(args.device)
    check_at_least_one(args, ("tokens_per_batch", "rounds"))
    check_seq_len(args.seq_len, args.tokens_per_batch, "--seq_len")
    if args.output is not None:
        check_output_dir(Path(args.output).parent, "output")  # now, not after the measurements
    return args


def main(argv: list[str] | None = None) -> None:
    run_command(measure, argv)


def measure(argv: list[str] | None) -> None:
    args = parse_command_line(argv)
    device, vocab_size, reference = torch.device(args.device), 30522, reference_type()
    stopwatch = Stopwatch()
    models, optimizers = build_models(args.size, [reference], vocab_size, "sdpa", device)
    input_ids, labels = mlm_batch(args.tokens_per_batch // args.seq_len, args.seq_len, vocab_size, device)

    def shipped(model: torch.nn.Module) -> torch.Tensor:
        return model(input_ids=input_ids, labels=labels).loss

    def fp32_copy_loss(model: torch.nn.Module) -> torch.Tensor:
        return ForMaskedLMLoss(model(input_ids=input_ids).logits, labels, vocab_size)

    range_check = "read back on the CPU" if device.type == "cpu" else "device-side assert"
    variants = {
        BERT: (BERT, shipped, True),
        reference: (reference, shipped, True),
        f"{reference} without the id range check ({range_check})": (reference, shipped, False),
        f"{reference} with ForMaskedLMLoss (fp32 logits copy)": (reference, fp32_copy_loss, True),
    }

    def step(name: str) -> None:
        key, loss_of, check = variants[name]
        model, optimizer = models[key], optimizers[key]
        model.train()
        with mock.patch.object(
            modeling, "_check_index_range", modeling._check_index_range if check else lambda *a: None
        ):
            with autocast(device, args.precision):
                loss = loss_of(model)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for name in variants:
        timed(lambda: step(name), 3, device)
    times, names = {name: [] for name in variants}, list(variants)
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(lambda: step(name), 3, device))
    bert = statistics.median(times[BERT])
    rows = []
    for name in variants:
        median = statistics.median(times[name])
        rows.append([name, f"{input_ids.numel() / median:,.0f}", f"{bert / median:.3f}"])
    command = " ".join(["python", "benchmarks/ablation.py", *argv])
    report = (
        f"# Ablation: `{reference}` against BERT ({args.size}, seq {args.seq_len}, {args.precision}, sdpa, "
        f"{args.tokens_per_batch} tokens per batch)\n\n{header(stopwatch.facts(command))}\n\n"
        f"Median of {args.rounds} interleaved rounds of 3 training steps.\n\n"
        + markdown_table(["variant", "train tok/s", "ratio to BERT"], rows)
        + "\n"
    )
    print(report)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(args.output).with_suffix(".md"), lambda file: file.write(report))


if __name__ == "__main__":
    main()
