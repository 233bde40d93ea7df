"""The reporting half of benchmarks/throughput.py: each row's ratios and targets, the markdown tables and the
OUTPUT.md and OUTPUT.json files (see throughput.py's docstring)."""

import argparse
import statistics

import torch
from report import header, markdown_table, write_report  # benchmarks/report.py
from throughput_timing import (  # benchmarks/throughput_timing.py
    BERT,
    CLOCKS,
    MASK_RATE,
    PRODUCT_OPERATORS,
    Entry,
    flash_attention_available,
    memory_target_types,
    reference_type,
    training_flops_per_token,
)

from symbert import attention_class

SPEED_TOLERANCE = 0.02  # target: ratio to original ≥ FLOP ratio − this
BERT_TARGET = 0.98  # target: original ≥ this × BERT (full head, same mode)


def add_ratios_and_targets(rows: list[dict], device: torch.device) -> None:
    """Each row's ratios (see throughput.py's docstring) and targets, in place; None where the reference was not
    run."""
    reference, memory_targets = reference_type(), memory_target_types()
    by_path = {(row["model"], row["mode"], row["head"]): row for row in rows}

    def ratio(row: dict, key: str, base: dict | None) -> float | None:
        return None if base is None else row[key] / base[key]

    run_mlm = by_path.get((BERT, "eager", "full"))
    for row in rows:
        mode, head = row["mode"], row["head"]
        original = by_path.get((reference, mode, head))
        bert = by_path.get((BERT, mode, "full"))
        if row["model"] == BERT:  # BERT's own path is the full head
            original = by_path.get((reference, mode, "full"))
        # per round: original's time where this model ran (interpolated, see timed_round) over its own; the
        # reported ratio is their median, a paired estimate that the machine's drift between rounds leaves alone
        rounds = None
        if original is not None and row["reference_seconds"]:
            rounds = [o / t for o, t in zip(row["reference_seconds"], row["train_seconds"])]
        row["train_ratio_original_rounds"] = rounds
        row["train_ratio_original"] = None if rounds is None else statistics.median(rounds)
        row["inference_ratio_original"] = ratio(row, "inference_tokens_per_s", original)
        row["memory_ratio_original"] = ratio(row, "memory_bytes", original)
        row["train_ratio_bert"] = ratio(row, "train_tokens_per_s", bert)
        row["inference_ratio_bert"] = ratio(row, "inference_tokens_per_s", bert)
        row["memory_ratio_bert"] = ratio(row, "memory_bytes", bert)
        row["train_ratio_bert_run_mlm"] = ratio(row, "train_tokens_per_s", run_mlm)
        # FLOP ratio original / this model on the same path (BERT: original's full-head FLOPs, its own)
        reference_flops = (original or row)["train_flops_per_token"]
        row["expected_train_ratio"] = reference_flops / row["train_flops_per_token"]

        typed = row["model"] not in (BERT, reference)
        row["speed_target"] = row["expected_train_ratio"] - SPEED_TOLERANCE if typed and original else None
        row["meets_speed_target"] = (
            None if row["speed_target"] is None else row["train_ratio_original"] >= row["speed_target"]
        )
        versus_bert = row["model"] == reference and head == "full" and bert is not None
        row["bert_target"] = BERT_TARGET if versus_bert else None
        row["meets_bert_target"] = row["train_ratio_bert"] >= BERT_TARGET if versus_bert else None
        memory_target = row["model"] in memory_targets and original is not None
        row["memory_target"] = "below original" if memory_target else None
        row["meets_memory_target"] = row["memory_ratio_original"] < 1.0 if memory_target else None
        # the issue's targets (each type's FLOP saving) against BERT with the same mode, full head, at base size
        issue = row["size"] == "base" and row["model"] != BERT and head == "full" and bert is not None
        target = attention_class(row["model"]).train_speed_target if issue else None
        row["train_target"] = target
        row["meets_target"] = (
            None if target is None else row["train_ratio_bert"] >= target and row["memory_ratio_bert"] <= 1.0
        )


def profile_table(
    profiled: list[tuple[Entry, str, float]], size: str, seq_len: int, precision: str, implementation: str
) -> str:
    """The profiled steps' operator tables (see throughput_timing.profile_steps), and each type's ratio to
    `original` if only its matrix products shrank by its FLOP ratio."""
    tables, shares = [], {}
    for entry, table, share in profiled:
        shares[entry.name] = share
        tables.append(
            f"### {entry.name} ({size}, seq {seq_len}, {precision}, {implementation}, {entry.mode}, "
            f"{entry.head} head)\n\n```\n{table}\n```\n\n"
            f"Matrix products ({', '.join(PRODUCT_OPERATORS)}, attention kernels): {share:.1%} of the "
            "step's self time."
        )
    reference = reference_type()
    entries = [entry for entry, _, _ in profiled]
    original = next((entry for entry in entries if entry.name == reference), None)
    if original is not None:
        share = shares[reference]
        intro = (
            f"If a type's matrix products took `original`'s time over its FLOP ratio r and the rest ({1 - share:.1%} "
            f"of `original`'s step here) were the same work, its ratio to `original` would be 1 / (p / r + 1 − p) "
            f"with p = {share:.3f}:"
        )
        original_flops = training_flops_per_token(original.config, seq_len)
        rows = []
        for entry in entries:
            if entry.name in (BERT, reference):
                continue
            flops = original_flops / training_flops_per_token(entry.config, seq_len)
            bound = 1 / (share / flops + 1 - share)
            rows.append([entry.name, f"{flops:.3f}", f"{bound:.3f}", f"{flops - SPEED_TOLERANCE:.3f}"])
        titles = ["type", "FLOP ratio r", "that ratio", "target (r − 0.02)"]
        tables.append(f"{intro}\n\n{markdown_table(titles, rows)}")
    return "\n\n".join(tables)


def ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def target_text(threshold: float | None, met: bool | None, form: str = "≥ {:.2f}") -> str:
    if met is None:
        return ""
    return f"{form.format(threshold) if threshold is not None else ''} {'met' if met else 'missed'}".strip()


def rounds_text(row: dict) -> str:
    ratios = row["train_ratio_original_rounds"]
    return "" if not ratios or row["model"] == reference_type() else f"{min(ratios):.3f}–{max(ratios):.3f}"


def head_text(row: dict) -> str:
    return row["head"] if row["max_predictions_per_seq"] is None else f"sparse (M {row['max_predictions_per_seq']})"


def compile_text(row: dict) -> str:
    seconds = row["compile_seconds"]
    if seconds is None:
        return ""
    inference = "–" if seconds["inference"] is None else f"{seconds['inference']:.0f}"
    return f"{seconds['train']:.0f} / {inference}"


def format_table(rows: list[dict], cuda: bool = False) -> str:
    columns = [
        ("size", "---", lambda r: r["size"]),
        ("seq", "---:", lambda r: str(r["seq_len"])),
        ("precision", "---", lambda r: r["precision"]),
        ("attention", "---", lambda r: r["attn_implementation"]),
        ("mode", "---", lambda r: r["mode"]),
        ("head", "---", head_text),
        ("model", "---", lambda r: r["model"]),
        ("train tok/s", "---:", lambda r: f"{r['train_tokens_per_s']:,.0f}"),
        ("vs original", "---:", lambda r: ratio_text(r["train_ratio_original"])),
        ("per round (min–max)", "---:", rounds_text),
        ("expected (FLOPs)", "---:", lambda r: ratio_text(r["expected_train_ratio"])),
        ("speed target", "---", lambda r: target_text(r["speed_target"], r["meets_speed_target"])),
        ("vs BERT (same mode, full head)", "---:", lambda r: ratio_text(r["train_ratio_bert"])),
        ("original vs BERT target", "---", lambda r: target_text(r["bert_target"], r["meets_bert_target"])),
        ("vs BERT run_mlm (eager, full head)", "---:", lambda r: ratio_text(r["train_ratio_bert_run_mlm"])),
        ("inference tok/s", "---:", lambda r: f"{r['inference_tokens_per_s']:,.0f}"),
        ("inference vs original", "---:", lambda r: ratio_text(r["inference_ratio_original"])),
        ("memory MiB", "---:", lambda r: f"{r['memory_bytes'] / 2**20:,.0f}"),
        ("memory vs original", "---:", lambda r: ratio_text(r["memory_ratio_original"])),
        ("memory target", "---", lambda r: target_text(None, r["meets_memory_target"], "")),
        ("train MFU", "---:", lambda r: f"{r['train_mfu']:.1%}"),
        ("compile s (train / inference)", "---:", compile_text),
    ]
    if cuda:
        columns.insert(
            15,
            ("target vs BERT (class)", "---", lambda r: target_text(r["train_target"], r["meets_target"])),
        )
    return markdown_table(
        [name for name, _, _ in columns],
        [[cell(row) for _, _, cell in columns] for row in rows],
        [align for _, align, _ in columns],
    )


def format_checks(checks: list[dict]) -> str:
    columns = list(dict.fromkeys(key for row in checks for key in row if key != "model"))
    return markdown_table(
        ["model", *columns], [[row["model"], *(f"{row[c]:.2e}" if c in row else "" for c in columns)] for row in checks]
    )


SCOPE_TEXT = {  # --compile_scope, as the report says it
    "layers": "on each encoder layer (regional: the layers of a model share one graph)",
    "whole": "on the whole model",
}


def describe_run(args: argparse.Namespace, device: torch.device) -> str:
    """The paragraph under the title: how the numbers were taken."""
    compiled = "compiled" in args.modes
    warmup = max(1, args.warmup)
    modes = (
        f"eager and compiled (`torch.compile(..., backend={args.compile_backend!r}, dynamic=False)` "
        f"{SCOPE_TEXT[args.compile_scope]}; a compiled "
        "model's first training and inference steps, which compile it, are warm-up steps, and their wall time is "
        "its `compile s`: the first compiled model's includes the compiler's one-time start-up, and a rerun with a "
        "warm on-disk compile cache takes less)"
        if compiled
        else "eager"
    )
    heads = " and ".join(
        "full (MLM head at every position)"
        if head == "full"
        else "sparse (`sparse_prediction=True, max_predictions_per_seq=M`: the head on batch × M positions; M is "
        + (str(args.max_predictions_per_seq) if args.max_predictions_per_seq else "⌈0.2 × seq_len⌉")
        + "); BERT has no sparse head and is the full-head reference of the sparse rows"
        for head in args.heads
    )
    memory = (
        "the allocator's peak in one training step plus the model's weights and Adam state."
        if device.type == "cuda"
        else "weights + gradients + Adam state + tensors saved for the backward pass (no CPU allocator statistics)."
    )
    return (
        f"Clock: {CLOCKS[args.clock][1]}. "
        + (
            "CPU memory: freed buffers stay in the process (glibc mallopt), so a step reuses the last one's pages. "
            if args.memory_kept
            else ""
        )
        + f"{args.rounds} rounds of {args.steps_per_round} step(s) after {warmup} warm-up training "
        f"step(s) per model (and {warmup if compiled else args.warmup} inference); {args.tokens_per_batch} tokens per "
        f"batch, {round(MASK_RATE * 100)}% of each sequence's positions labelled (at most M); vocabulary "
        f"{args.vocab_size}. Modes: {modes}. Heads: {heads}. A model's paths share its weights and fused AdamW; a sparse "
        "head's inference (no labels: full logits) is its full-head model's. A round runs each path (mode, head) as "
        "one block, in a rotating order: `original` first and last, the path's other models between them, also "
        "rotating. tok/s: median over rounds (`original`: of the mean of its two steps). `vs original`: median over "
        "rounds of `original`'s step time, interpolated linearly to the model's place in the block, over the model's "
        "(a paired ratio: a drift of the machine's speed over the block cancels), with its range over the rounds "
        "(`per round`: how far the noise moves it); `expected`: `original`'s training FLOPs over the type's on that "
        "path (sparse: the head transform and decoder on batch × M rows); `speed target`: vs original ≥ expected − "
        f"{SPEED_TOLERANCE}; `vs BERT`: over transformers' BertForMaskedLM with the same mode and the full head; "
        f"`original vs BERT target`: ≥ {BERT_TARGET} on the full head; `vs BERT run_mlm`: over BERT eager with the "
        "full head, as transformers' run_mlm.py example trains it; `memory target`: "
        f"{', '.join(memory_target_types())} below original's on the same path"
        + (
            "; `target vs BERT (class)`: the class's train_speed_target against BERT with the same mode (full head, "
            "base) and memory ≤ BERT's"
            if device.type == "cuda"
            else ""
        )
        + f". MFU is analytic training FLOPs per second over the median rate of a {args.matmul_size}³ matrix product "
        f"in the same precision, timed in the same rounds. Memory: {memory}"
    )


def write_results(
    args: argparse.Namespace, facts: dict, rows: list[dict], checks: list[dict] | None, profile: str | None
) -> None:
    """OUTPUT.md (the header, how the numbers were taken, the tables) and OUTPUT.json (the same facts and every row);
    `facts`: report.facts of the run so far."""
    cuda = args.device == "cuda"
    settings = {(r["size"], r["seq_len"], r["precision"], r["attn_implementation"]): r for r in rows}
    recompiled = sum(row["graphs_compiled_while_timed"] for row in settings.values())
    flash = f"flash-attn {'installed' if flash_attention_available(args.device) else 'not installed'}"
    parts = [
        f"# Throughput and memory against transformers' BertForMaskedLM ({args.device})",
        header(facts, [flash]),
        describe_run(args, torch.device(args.device)),
        format_table(rows, cuda),
    ]
    if recompiled:
        parts.insert(-1, f"**Warning**: {recompiled} graph(s) were compiled during the timed rounds.")
    if checks is not None:
        parts += [
            "## bf16 attention implementations against eager fp32 (relative L2 error of the logits)",
            format_checks(checks),
        ]
    if profile is not None:
        parts += ["## torch.profiler, one training step (self time)", profile]
    record = {
        **facts,
        "threads": torch.get_num_threads() if not cuda else None,
        "clock": args.clock,
        "cpu_memory": "kept" if args.memory_kept else "released",
        "modes": args.modes,
        "heads": args.heads,
        "compile_backend": args.compile_backend if "compiled" in args.modes else None,
        "compile_scope": args.compile_scope if "compiled" in args.modes else None,
        "warmup_steps": max(1, args.warmup),
        "rounds": args.rounds,
        "steps_per_round": args.steps_per_round,
        "tokens_per_batch": args.tokens_per_batch,
        "rows": rows,
        "implementation_checks": checks,
    }
    write_report(args.output, "\n\n".join(parts), record)
