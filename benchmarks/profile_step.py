"""Where one training step's time goes, by kernel (CUDA) or operator (CPU), for each attention type against
`original` in the same run: torch.profiler over a few steps after warm-up, then per type the time a step, its ratio
to original's (original / type: above 1 is faster), the FLOP ratio it would have if time followed matrix-product
FLOPs, the time by category (matrix products, attention kernels, element-wise, reductions, ...) and its difference
to original's, and the largest kernels.

    python benchmarks/profile_step.py --device cuda --size base --seq_len 128 --tokens_per_batch 16384 \
        --precision bf16 --types original gqa shared mhe_mul --output benchmarks/results/profile-cuda/h200-base-128
    python benchmarks/profile_step.py --device cpu --threads 1 --size small --seq_len 128 --tokens_per_batch 2048 \
        --precision fp32 --types original gqa shared mhe_mul --output benchmarks/results/profile-cpu/small-128

The step is benchmarks/throughput.py's: forward under autocast (bf16) or fp32, backward, fused AdamW, on an MLM
batch (round(0.15 × seq_len) labelled positions per sequence), the full MLM head (or --head sparse), eager (or
--mode compiled). CUDA times are the kernels' device time; CPU times the operators' self time, which on a loaded
CPU stretch with the load (read the shares and the categories, not the seconds). One profile, no repeats: it says
where time goes, benchmarks/throughput.py says how fast a type trains.
Writes OUTPUT.md and OUTPUT.json (default benchmarks/results/profile-DEVICE/profile).
"""

import argparse
import re
import shlex
import sys

import torch
from machine import keep_freed_memory  # benchmarks/machine.py
from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py
from throughput_timing import (  # benchmarks/throughput_timing.py
    PRECISIONS,
    masked_positions,
    mlm_batch,
    model_config,
    synchronize,
    train_step,
    training_flops_per_token,
)

from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertForMaskedLM

# the first pattern that matches a kernel's or operator's name (lower case) names its category
CATEGORIES = (
    ("optimizer", r"adam|multi_tensor|_foreach"),
    ("attention kernel", r"flash|fmha|sdpa|attention|_efficient_attention"),
    ("matrix product", r"gemm|nvjet|cutlass|xmma|aten::(mm|addmm|bmm|baddbmm)$"),
    ("softmax / loss", r"softmax|nll_loss|cross_entropy"),
    ("layer norm", r"layer_norm|layernorm"),
    ("reduction", r"reduce|triton_red|triton_per|aten::(sum|mean)$"),
    ("copy / layout", r"copy|cat|index|gather|scatter|aten::(clone|contiguous|stack|repeat)"),
    ("element-wise", r"elementwise|vectorized|triton_poi|aten::"),
)


def category(name: str) -> str:
    lowered = name.lower()
    return next((label for label, pattern in CATEGORIES if re.search(pattern, lowered)), "other")


def step_events(model, optimizer, batch, device, precision, steps, warmup):
    """{name: (count, milliseconds)} per step of the profiled steps: kernels on CUDA, operators' self time on CPU."""
    input_ids, labels = batch
    for _ in range(warmup):  # compiles a compiled model
        train_step(model, optimizer, input_ids, labels, device, precision)
    synchronize(device)
    activities = [
        torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else torch.profiler.ProfilerActivity.CPU
    ]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(steps):
            train_step(model, optimizer, input_ids, labels, device, precision)
        synchronize(device)
    events = {}
    for event in profiler.key_averages():
        if device.type == "cuda":
            microseconds = event.self_device_time_total if event.device_type == torch.autograd.DeviceType.CUDA else 0
        else:
            microseconds = event.self_cpu_time_total if event.key.startswith("aten::") else 0
        if microseconds > 0:
            events[event.key] = (event.count / steps, microseconds / 1000 / steps)
    return events


def summarise(kind, events, flops, reference):
    """A type's record: total and per-category milliseconds a step, its ratios to `reference` (original's record)."""
    total = sum(ms for _, ms in events.values())
    categories = {}
    for name, (_, ms) in events.items():
        categories[category(name)] = categories.get(category(name), 0.0) + ms
    record = {"type": kind, "ms_per_step": total, "flops_per_token": flops, "categories": categories}
    record["top"] = [
        {"name": name, "category": category(name), "count_per_step": count, "ms_per_step": ms}
        for name, (count, ms) in sorted(events.items(), key=lambda item: -item[1][1])
    ]
    reference = reference or record
    record["vs_original"] = reference["ms_per_step"] / total
    record["flop_ratio"] = reference["flops_per_token"] / flops
    return record


def report_text(args, facts, records, top):
    labels = sorted(
        {label for record in records for label in record["categories"]},
        key=lambda label: -max(record["categories"].get(label, 0.0) for record in records),
    )
    unit = "kernel time" if args.device == "cuda" else "operator self time (CPU)"
    rows = [
        [
            record["type"],
            f"{record['ms_per_step']:.2f}",
            f"{record['vs_original']:.3f}",
            f"{record['flop_ratio']:.3f}",
            *(f"{record['categories'].get(label, 0.0):.2f}" for label in labels),
        ]
        for record in records
    ]
    original = records[0]["categories"]
    deltas = [
        [
            record["type"],
            *(f"{record['categories'].get(label, 0.0) - original.get(label, 0.0):+.2f}" for label in labels),
        ]
        for record in records[1:]
    ]
    parts = [
        f"# One training step by {unit}: {args.size}, {args.seq_len} tokens, {args.precision}, {args.head} head, "
        f"{args.mode}",
        header(facts),
        f"ms a step ({unit}); `vs original` = original's time / the type's (above 1: faster); `FLOP ratio` = "
        "original's matrix-product FLOPs / the type's, the speed-up if time followed FLOPs.",
        markdown_table(["type", "ms a step", "vs original", "FLOP ratio", *labels], rows),
        "Difference to original by category (ms a step; negative: saved):",
        markdown_table(["type", *labels], deltas) if deltas else "",
    ]
    for record in records:
        table = [
            [
                f"`{event['name'][:110]}`",
                event["category"],
                f"{event['count_per_step']:g}",
                f"{event['ms_per_step']:.3f}",
            ]
            for event in record["top"][:top]
        ]
        parts += [
            f"## {record['type']}: the {top} largest",
            markdown_table(["name", "category", "× a step", "ms"], table),
        ]
    return "\n\n".join(part for part in parts if part)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="small", choices=list(SIZE_PRESETS))
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--tokens_per_batch", type=int, default=2048, help="batch size = tokens_per_batch / seq_len")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--types", nargs="+", default=["gqa", "shared", "mhe_mul"], choices=list(ATTENTION_TYPES))
    parser.add_argument("--head", default="full", choices=("full", "sparse"))
    parser.add_argument("--mode", default="eager", choices=("eager", "compiled"))
    parser.add_argument("--attn_implementation", default="sdpa", choices=("eager", "sdpa", "flash_attention_2"))
    parser.add_argument("--pad_vocab_size_multiple", type=int, default=None, help="the config field (e.g. 64)")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (times are per step)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="largest kernels or operators listed per type")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--output", default=None, help="results path without suffix")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cpu":
        keep_freed_memory()
    stopwatch, device = Stopwatch(), torch.device(args.device)
    types = ["original", *(kind for kind in args.types if kind != "original")]
    predictions = masked_positions(args.seq_len)
    head = {"sparse_prediction": True, "max_predictions_per_seq": predictions} if args.head == "sparse" else {}
    batch = mlm_batch(
        args.tokens_per_batch // args.seq_len, args.seq_len, args.vocab_size, device, predictions_per_seq=predictions
    )
    records = []
    for kind in types:
        config = model_config(
            args.size,
            kind,
            args.vocab_size,
            args.attn_implementation,
            pad_vocab_size_multiple=args.pad_vocab_size_multiple,
            **head,
        )
        torch.manual_seed(0)
        model = SymBertForMaskedLM(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        step_model = torch.compile(model, dynamic=False) if args.mode == "compiled" else model
        events = step_events(step_model, optimizer, batch, device, args.precision, args.steps, args.warmup)
        records.append(
            summarise(kind, events, training_flops_per_token(config, args.seq_len), records[0] if records else None)
        )
        print(
            f"{kind}: {records[-1]['ms_per_step']:.2f} ms a step, {records[-1]['vs_original']:.3f} vs original "
            f"(FLOP ratio {records[-1]['flop_ratio']:.3f})",
            flush=True,
        )
        del model, optimizer, step_model
    facts = stopwatch.facts(
        shlex.join(["python", "benchmarks/profile_step.py", *(sys.argv[1:] if argv is None else argv)])
    )
    output = args.output or f"benchmarks/results/profile-{args.device}/profile"
    write_report(
        output, report_text(args, facts, records, args.top), {"facts": facts, "args": vars(args), "types": records}
    )
    print(f"wrote {output}.md and {output}.json")


if __name__ == "__main__":
    main()
