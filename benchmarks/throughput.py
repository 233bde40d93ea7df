"""Training and inference speed, memory and MFU of every attention type against transformers' BertForMaskedLM.

    python benchmarks/throughput.py --device cpu --sizes small --seq_lens 128 --precisions fp32 bf16
    python benchmarks/throughput.py --device cuda --sizes small base --seq_lens 128 512 --precisions bf16 \
        --attn_implementations sdpa flash_attention_2 --tokens_per_batch 16384

For each setting (size × sequence length × precision × attention implementation) BERT and every SymBERT type are
built with the same sizes and the same attention implementation in this process, warmed up, then timed interleaved
(one round = every model once, in a rotating order, plus one large matrix product): the median over rounds of
- training step: forward + backward + AdamW step on a masked-LM batch, tokens/s;
- inference: forward under `torch.inference_mode`, tokens/s;
- memory: on CUDA the allocator's peak during one training step (plus the model's weights and Adam state, as if it
  were alone on the GPU); on CPU, which has no allocator statistics, weights + gradients + Adam state + the tensors
  autograd saves for the backward pass (the part of the peak that differs between the types), counted exactly;
- MFU: analytic training FLOPs per token × tokens/s over the measured matrix-product rate of the same precision.
`expected` is the FLOP ratio BERT / type: the speed-up the type's saving allows if time followed FLOPs.
On a CPU shared with other processes, `--threads 1 --clock process` times by this process's CPU time instead of the
wall clock, which the other processes barely disturb.

Writes `OUTPUT.md` and `OUTPUT.json` (default benchmarks/results/throughput-DEVICE) with the machine, the command,
the load average and the wall time.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from machine import describe_machine  # benchmarks/machine.py
from transformers import BertConfig, BertForMaskedLM

from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig, SymBertForMaskedLM, attention_class
from symbert.training.reporting import write_atomically

PRECISIONS = ("fp32", "bf16")
IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")
BERT = "bert"


def parse_command_line(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZE_PRESETS))
    parser.add_argument("--seq_lens", nargs="+", type=int, default=[128])
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=PRECISIONS)
    parser.add_argument("--attn_implementations", nargs="+", default=["sdpa"], choices=IMPLEMENTATIONS)
    parser.add_argument("--types", nargs="+", default=list(ATTENTION_TYPES), choices=ATTENTION_TYPES)
    parser.add_argument("--tokens_per_batch", type=int, default=512, help="batch size = tokens_per_batch / seq_len")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (the median is reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model before the rounds")
    parser.add_argument("--steps_per_round", type=int, default=1, help="steps timed together in one round")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument(
        "--clock",
        default="wall",
        choices=list(CLOCKS),
        help="process: this process's CPU time, which other processes on a shared CPU barely disturb (use with --threads 1)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--matmul_size", type=int, default=None, help="MFU reference product size (default: 8192 on CUDA, 2048 on CPU)"
    )
    parser.add_argument(
        "--output", default=None, help="results path without suffix (default: benchmarks/results/throughput-DEVICE)"
    )
    parser.add_argument(
        "--profile", default=None, help="also write a torch.profiler table for BERT and these types (comma-separated)"
    )
    args = parser.parse_args(argv)
    if args.clock == "process" and args.device == "cuda":
        raise ValueError("--clock process measures CPU time; on CUDA use --clock wall.")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads={args.threads} must be at least 1.")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device.")
    args.matmul_size = args.matmul_size or (8192 if args.device == "cuda" else 2048)
    for name in ("tokens_per_batch", "rounds", "steps_per_round", "vocab_size", "matmul_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} must be at least 1.")
    if args.warmup < 0:
        raise ValueError(f"--warmup={args.warmup} must not be negative.")
    for seq_len in args.seq_lens:
        if not 1 <= seq_len <= 512 or args.tokens_per_batch % seq_len:
            raise ValueError(
                f"--seq_lens {seq_len}: must be in [1, 512] and divide --tokens_per_batch {args.tokens_per_batch}."
            )
    if "flash_attention_2" in args.attn_implementations and not flash_attention_available(args.device):
        raise ValueError("--attn_implementations flash_attention_2 needs a CUDA device and the flash-attn package.")
    if args.profile:
        unknown = [kind for kind in args.profile.split(",") if kind not in ATTENTION_TYPES]
        if unknown:
            raise ValueError(f"--profile has {', '.join(unknown)}; allowed: {', '.join(ATTENTION_TYPES)}.")
    args.output = Path(args.output or f"benchmarks/results/throughput-{args.device}")
    return args


def flash_attention_available(device):
    return device == "cuda" and transformers.utils.is_flash_attn_2_available()


def model_config(size, attention_type, vocab_size, implementation):
    return SymBertConfig.from_preset(
        size, attention_type=attention_type, vocab_size=vocab_size, attn_implementation=implementation
    )


def build_models(size, types, vocab_size, implementation, device):
    """BERT (transformers' own) and each SymBERT type, same sizes and attention implementation, with an AdamW each."""
    reference = model_config(size, "original", vocab_size, implementation)
    bert_fields = {key: value for key, value in reference.to_dict().items() if key in BertConfig().to_dict()}
    models = {BERT: BertForMaskedLM(BertConfig(**bert_fields, attn_implementation=implementation))}
    for kind in types:
        models[kind] = SymBertForMaskedLM(model_config(size, kind, vocab_size, implementation))
    optimizers = {}
    for name, model in models.items():
        model.to(device)
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    return models, optimizers


def training_flops_per_token(config, seq_len):
    """Matrix-product FLOPs of one training token: 3 × forward (backward is two products per forward product).
    Elementwise work, softmax and layer norms are left out. The self-attention's own part is its class's."""
    h, f, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    attention = attention_class(config.attention_type).forward_flops_per_token(config, seq_len)
    per_layer = attention + 2 * (h * h + 2 * h * f)  # + attention output + FFN
    head = 2 * (h * h + h * vocab)  # MLM transform + decoder
    return 3 * (config.num_hidden_layers * per_layer + head)


def mlm_batch(batch_size, seq_len, vocab_size, device, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)
    labels = torch.where(torch.rand(input_ids.shape, generator=generator) < 0.15, input_ids, -100)
    return input_ids.to(device), labels.to(device)


def autocast(device, precision):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_step(model, optimizer, input_ids, labels, device, precision):
    model.train()
    with autocast(device, precision):
        loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@torch.inference_mode()
def inference_step(model, input_ids, device, precision):
    model.eval()
    with autocast(device, precision):
        model(input_ids=input_ids)


CLOCKS = {"wall": time.perf_counter, "process": time.process_time}
clock = CLOCKS["wall"]  # set by --clock


def timed(function, steps, device):
    synchronize(device)
    start = clock()
    for _ in range(steps):
        function()
    synchronize(device)
    return (clock() - start) / steps


def matmul_flops_per_second(device, precision, size):
    """The rate of one size×size×size matrix product in this precision (the MFU denominator)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    seconds = timed(lambda: torch.matmul(a, b), 3, device)
    return 2 * size**3 / seconds


def static_bytes(model):
    """Weights and the two Adam moments (tied tensors counted once)."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


def training_memory(model, optimizer, input_ids, labels, device, precision):
    """Bytes one training step of this model needs; see the module docstring for what is counted where."""
    if device.type == "cuda":
        synchronize(device)
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        train_step(model, optimizer, input_ids, labels, device, precision)
        synchronize(device)
        return torch.cuda.max_memory_allocated() - baseline + static_bytes(model)
    # parameters and buffers (e.g. position ids) exist whether or not a step runs: count only new tensors
    persistent = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in persistent:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), autocast(device, precision):
        loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    gradients = sum(p.numel() * p.element_size() for p in model.parameters())
    return static_bytes(model) + gradients + sum(saved.values())


def benchmark_setting(args, device, size, seq_len, precision, implementation):
    """Rows (one per model) of one setting, timed interleaved."""
    models, optimizers = build_models(size, args.types, args.vocab_size, implementation, device)
    input_ids, labels = mlm_batch(args.tokens_per_batch // seq_len, seq_len, args.vocab_size, device)
    tokens = input_ids.numel()

    def train(name):
        return lambda: train_step(models[name], optimizers[name], input_ids, labels, device, precision)

    def infer(name):
        return lambda: inference_step(models[name], input_ids, device, precision)

    for name in models:
        timed(train(name), max(1, args.warmup), device)  # the first step also creates the Adam state
        if args.warmup:
            timed(infer(name), args.warmup, device)
    memory = {
        name: training_memory(models[name], optimizers[name], input_ids, labels, device, precision) for name in models
    }
    matmul_flops_per_second(device, precision, args.matmul_size)  # warm-up
    train_times, infer_times, peak_rates = {name: [] for name in models}, {name: [] for name in models}, []
    names = list(models)
    for round_index in range(args.rounds):
        shift = round_index % len(names)  # rotate, so no model always runs right after the same one
        for name in names[shift:] + names[:shift]:
            train_times[name].append(timed(train(name), args.steps_per_round, device))
            infer_times[name].append(timed(infer(name), args.steps_per_round, device))
        peak_rates.append(matmul_flops_per_second(device, precision, args.matmul_size))
    peak = statistics.median(peak_rates)

    bert_flops = training_flops_per_token(model_config(size, "original", args.vocab_size, implementation), seq_len)
    rows = []
    for name, model in models.items():
        flops = bert_flops if name == BERT else training_flops_per_token(model.config, seq_len)
        train_speed = tokens / statistics.median(train_times[name])
        rows.append(
            {
                "size": size,
                "seq_len": seq_len,
                "batch_size": input_ids.shape[0],
                "precision": precision,
                "attn_implementation": implementation,
                "model": name,
                "parameters": model.num_parameters(),
                "train_tokens_per_s": train_speed,
                "inference_tokens_per_s": tokens / statistics.median(infer_times[name]),
                "train_seconds": train_times[name],
                "inference_seconds": infer_times[name],
                "memory_bytes": memory[name],
                "train_flops_per_token": flops,
                "expected_train_ratio": bert_flops / flops,
                "matmul_flops_per_s": peak,
                "train_mfu": flops * train_speed / peak,
            }
        )
    bert = rows[0]
    for row in rows:
        row["train_ratio"] = row["train_tokens_per_s"] / bert["train_tokens_per_s"]
        row["inference_ratio"] = row["inference_tokens_per_s"] / bert["inference_tokens_per_s"]
        row["memory_ratio"] = row["memory_bytes"] / bert["memory_bytes"]
        # the targets (each type's FLOP saving), at base size
        target = attention_class(row["model"]).train_speed_target if size == "base" and row["model"] != BERT else None
        row["train_target"] = target
        row["meets_target"] = None if target is None else row["train_ratio"] >= target and row["memory_ratio"] <= 1.0
    return rows


def check_implementations(args, device, size, seq_len):
    """Relative error ‖out − ref‖ / ‖ref‖ of each type's MLM logits in bf16 with each implementation, against eager
    fp32 of the same weights, on a right-padded batch (and of flash_attention_2 against sdpa)."""
    input_ids, _ = mlm_batch(4, seq_len, args.vocab_size, device, seed=1)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1:, seq_len // 2 :] = 0  # padding, so the masked paths are checked too
    results = []
    for kind in args.types:
        torch.manual_seed(0)
        model = SymBertForMaskedLM(model_config(size, kind, args.vocab_size, "eager")).to(device).eval()
        valid = attention_mask.bool()
        with torch.no_grad():
            reference = model(input_ids, attention_mask=attention_mask).logits[valid].double()
            outputs = {}
            for implementation in dict.fromkeys(["eager", *args.attn_implementations]):  # eager bf16: the bf16 baseline
                model.set_attn_implementation(implementation)
                with autocast(device, "bf16"):
                    outputs[implementation] = model(input_ids, attention_mask=attention_mask).logits[valid].double()
        row = {"model": kind}
        for implementation, logits in outputs.items():
            row[f"{implementation} bf16 vs eager fp32"] = ((logits - reference).norm() / reference.norm()).item()
        if "flash_attention_2" in outputs and "sdpa" in outputs:
            sdpa = outputs["sdpa"]
            row["flash_attention_2 vs sdpa (bf16)"] = (
                (outputs["flash_attention_2"] - sdpa).norm() / sdpa.norm()
            ).item()
        results.append(row)
    return results


def profile_table(args, device, size, seq_len, precision, implementation):
    """torch.profiler's top operators (self time) of one training step, for BERT and each --profile type."""
    kinds = args.profile.split(",")
    models, optimizers = build_models(size, kinds, args.vocab_size, implementation, device)
    input_ids, labels = mlm_batch(args.tokens_per_batch // seq_len, seq_len, args.vocab_size, device)
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    )
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    tables = []
    for name in models:
        timed(lambda: train_step(models[name], optimizers[name], input_ids, labels, device, precision), 2, device)
        with torch.profiler.profile(activities=activities) as profiler:
            timed(lambda: train_step(models[name], optimizers[name], input_ids, labels, device, precision), 1, device)
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=15)
        tables.append(f"### {name} ({size}, seq {seq_len}, {precision}, {implementation})\n\n```\n{table}\n```")
    return "\n\n".join(tables)


def format_table(rows):
    lines = [
        "| size | seq | precision | attention | model | train tok/s | train ratio | expected (FLOPs) | target "
        "| inference tok/s | inference ratio | memory MiB | memory ratio | train MFU |",
        "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        target = (
            ""
            if row["train_target"] is None
            else f"≥ {row['train_target']:.2f} {'met' if row['meets_target'] else 'missed'}"
        )
        lines.append(
            f"| {row['size']} | {row['seq_len']} | {row['precision']} | {row['attn_implementation']} | {row['model']} "
            f"| {row['train_tokens_per_s']:,.0f} | {row['train_ratio']:.3f} | {row['expected_train_ratio']:.3f} | {target} "
            f"| {row['inference_tokens_per_s']:,.0f} | {row['inference_ratio']:.3f} "
            f"| {row['memory_bytes'] / 2**20:,.0f} | {row['memory_ratio']:.3f} | {row['train_mfu']:.1%} |"
        )
    return "\n".join(lines)


def format_checks(checks):
    columns = list(dict.fromkeys(key for row in checks for key in row if key != "model"))
    lines = ["| model | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for row in checks:
        lines.append(f"| {row['model']} | " + " | ".join(f"{row[c]:.2e}" if c in row else "" for c in columns) + " |")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_command_line(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()
    start = time.perf_counter()
    rows = []
    for size in args.sizes:
        for seq_len in args.seq_lens:
            for precision in args.precisions:
                for implementation in args.attn_implementations:
                    setting_rows = benchmark_setting(args, device, size, seq_len, precision, implementation)
                    print(format_table(setting_rows), flush=True)
                    rows += setting_rows
    checks = check_implementations(args, device, args.sizes[0], args.seq_lens[0]) if device.type == "cuda" else None
    profile = None
    if args.profile:
        profile = profile_table(
            args, device, args.sizes[-1], args.seq_lens[0], args.precisions[0], args.attn_implementations[0]
        )
    wall_seconds = time.perf_counter() - start
    load_after = os.getloadavg()

    command = shlex.join(["python", "benchmarks/throughput.py", *argv])
    threads = f"{torch.get_num_threads()} torch threads" if device.type == "cpu" else f"{os.cpu_count()} CPU cores"
    header = [
        f"# Throughput and memory against transformers' BertForMaskedLM ({args.device})",
        f"Command: `{command}`",
        f"Machine: {describe_machine()}; transformers {transformers.__version__}; {threads}; "
        f"flash-attn {'installed' if flash_attention_available(args.device) else 'not installed'}. "
        f"Wall time {wall_seconds / 60:.1f} min. Load average (1, 5, 15 min): "
        f"{tuple(round(x, 2) for x in load_before)} at the start, {tuple(round(x, 2) for x in load_after)} at the end.",
        f"Clock: {'CPU time of this process' if args.clock == 'process' else 'wall time'}. "
        f"Median of {args.rounds} interleaved rounds of {args.steps_per_round} step(s) after {args.warmup} warm-up "
        f"steps; {args.tokens_per_batch} tokens per batch; vocabulary {args.vocab_size}. Ratios are to BERT in the "
        f"same setting; `expected` is BERT's training FLOPs over the type's; MFU is analytic training FLOPs per "
        f"second over the median rate of a {args.matmul_size}³ matrix product in the same "
        f"precision, timed in the same rounds. Memory: "
        + (
            "the allocator's peak in one training step plus the model's weights and Adam state."
            if device.type == "cuda"
            else "weights + gradients + Adam state + tensors saved for the backward pass (no CPU allocator statistics)."
        ),
        format_table(rows),
    ]
    if checks is not None:
        header += [
            "## bf16 attention implementations against eager fp32 (relative L2 error of the logits)",
            format_checks(checks),
        ]
    if profile is not None:
        header += ["## torch.profiler, one training step (self time)", profile]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = "\n\n".join(header) + "\n"
    write_atomically(args.output.with_suffix(".md"), lambda file: file.write(report))
    record = {
        "command": command,
        "machine": describe_machine(),
        "transformers": transformers.__version__,
        "wall_seconds": wall_seconds,
        "load_average_start": load_before,
        "load_average_end": load_after,
        "rows": rows,
        "implementation_checks": checks,
    }
    write_atomically(args.output.with_suffix(".json"), lambda file: json.dump(record, file, indent=2))
    if checks is not None:
        print(format_checks(checks))
    print(f"Wall time {wall_seconds / 60:.1f} min. Results in {args.output}.md and .json")


if __name__ == "__main__":
    main()
