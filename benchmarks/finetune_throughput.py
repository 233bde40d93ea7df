"""Fine-tuning speed on GLUE-shaped batches: sentence pairs of mixed length, each batch padded to its longest, as
symbert-glue's collator pads them, through a sequence-classification head, against transformers' BERT.

    python benchmarks/finetune_throughput.py --device cuda --size base --precision bf16 --types original symmetric
    python benchmarks/finetune_throughput.py --size tiny --batch_size 4 --max_length 32 --rounds 1 --steps_per_round 2

Lengths are drawn once (seed 0) uniformly in [--min_length, --max_length] tokens per pair, so every model sees the
same batches; the attention mask marks the padding. Each model (transformers' BertForSequenceClassification and each
SymBERT type, same sizes, 2 labels, fused AdamW) is warmed up, then the models are timed in interleaved rounds of
--steps_per_round training steps (forward, backward, optimizer step); reported: the median over rounds of real
(unpadded) and padded tokens per second, the ratio to BERT and the share of padding. Writes OUTPUT.md and OUTPUT.json.
"""

import argparse
import shlex
import statistics
import time
from pathlib import Path

import torch
from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py
from throughput_timing import BERT, PRECISIONS, autocast, headline_types, synchronize  # benchmarks/throughput_timing.py
from transformers import BertConfig, BertForSequenceClassification

from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig, SymBertForSequenceClassification
from symbert.cli import UserError, command_parser, run_command
from symbert.training.arguments import check_output_dir

VOCAB_SIZE = 30522
FIRST_DRAWN_ID = 5  # ids below are BERT's special tokens


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="base", choices=list(SIZE_PRESETS))
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--attn_implementation", default="sdpa", choices=("eager", "sdpa"))
    parser.add_argument("--types", nargs="+", default=list(headline_types()), choices=ATTENTION_TYPES)
    parser.add_argument("--batch_size", type=int, default=32, help="pairs per batch (symbert-glue's default)")
    parser.add_argument("--min_length", type=int, default=16, help="shortest pair, in tokens")
    parser.add_argument("--max_length", type=int, default=128, help="longest pair (symbert-glue's max_seq_length)")
    parser.add_argument("--batches", type=int, default=16, help="distinct batches, cycled through")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_round", type=int, default=8)
    parser.add_argument("--output", default=None, help="results path without suffix")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda, but torch sees no CUDA device; use --device cpu.")
    for name in ("batch_size", "batches", "rounds", "steps_per_round"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)} must be at least 1.")
    if args.warmup < 0:
        raise UserError(f"--warmup={args.warmup} must not be negative.")
    if not 2 <= args.min_length <= args.max_length <= 512:
        raise UserError(
            f"--min_length {args.min_length} and --max_length {args.max_length}: need 2 <= min <= max <= 512."
        )
    args.output = Path(args.output or f"benchmarks/results/finetune-throughput-{args.device}")
    check_output_dir(args.output.parent, "output")
    return args


def glue_shaped_batches(args: argparse.Namespace, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """--batches padded batches of pairs: [CLS] a [SEP] b [SEP] with random ids, padded (id 0) to the batch's longest."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.batches):
        lengths = torch.randint(args.min_length, args.max_length + 1, (args.batch_size,), generator=generator)
        longest = int(lengths.max())
        input_ids = torch.zeros(args.batch_size, longest, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        token_type_ids = torch.zeros_like(input_ids)
        for row, length in enumerate(lengths.tolist()):
            input_ids[row, :length] = torch.randint(FIRST_DRAWN_ID, VOCAB_SIZE, (length,), generator=generator)
            input_ids[row, 0], input_ids[row, length - 1] = 2, 3  # [CLS], [SEP]
            attention_mask[row, :length] = 1
            token_type_ids[row, length // 2 : length] = 1  # the second sentence
        labels = torch.randint(0, 2, (args.batch_size,), generator=generator)
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels)
        batches.append({key: value.to(device) for key, value in batch.items()})
    return batches


def build_models(args: argparse.Namespace, device: torch.device) -> dict[str, torch.nn.Module]:
    implementation = args.attn_implementation
    reference = SymBertConfig.from_preset(args.size, vocab_size=VOCAB_SIZE, num_labels=2)
    bert_fields = {key: value for key, value in reference.to_dict().items() if key in BertConfig().to_dict()}
    models = {BERT: BertForSequenceClassification(BertConfig(**bert_fields, attn_implementation=implementation))}
    for kind in dict.fromkeys(args.types):
        config = SymBertConfig.from_preset(
            args.size, attention_type=kind, vocab_size=VOCAB_SIZE, num_labels=2, attn_implementation=implementation
        )
        models[kind] = SymBertForSequenceClassification(config)
    return {name: model.to(device).train() for name, model in models.items()}


def measure(argv: list[str] | None) -> None:
    args = parse_command_line(argv)
    device = torch.device(args.device)
    stopwatch = Stopwatch()
    batches = glue_shaped_batches(args, device)
    models = build_models(args, device)
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True) for name, model in models.items()}
    position = dict.fromkeys(models, 0)

    def step(name: str) -> None:
        batch = batches[position[name] % len(batches)]
        position[name] += 1
        with autocast(device, args.precision):
            loss = models[name](**batch).loss
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    def tokens(name: str, steps: int) -> tuple[int, int]:
        """(real, padded) tokens of the next `steps` batches of `name`."""
        chosen = [batches[(position[name] + i) % len(batches)] for i in range(steps)]
        return sum(int(b["attention_mask"].sum()) for b in chosen), sum(b["input_ids"].numel() for b in chosen)

    for name in models:
        for _ in range(args.warmup):
            step(name)
    rates = {name: {"real": [], "padded": []} for name in models}
    names = list(models)
    command = shlex.join(["python", "benchmarks/finetune_throughput.py", *(argv or [])])
    all_real = sum(int(batch["attention_mask"].sum()) for batch in batches)
    all_padded = sum(batch["input_ids"].numel() for batch in batches)
    for round_index in range(args.rounds):
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            real, padded = tokens(name, args.steps_per_round)
            synchronize(device)
            began = time.perf_counter()
            for _ in range(args.steps_per_round):
                step(name)
            synchronize(device)
            seconds = time.perf_counter() - began
            rates[name]["real"].append(real / seconds)
            rates[name]["padded"].append(padded / seconds)
        # the rows so far after every round: a run stopped at a deadline keeps what it measured
        rows = table_rows(rates, round_index + 1)
        write_results(args, stopwatch.facts(command), rows, 1 - all_real / all_padded)


def table_rows(rates: dict[str, dict[str, list[float]]], rounds: int) -> list[dict]:
    """Each model's median rates over the rounds done, and its ratio to the first model's (BERT)."""
    rows = []
    for name, rate in rates.items():
        real, padded = (statistics.median(rate[kind]) for kind in ("real", "padded"))
        rows.append({"model": name, "real_tokens_per_second": real, "padded_tokens_per_second": padded})
        rows[-1]["rounds"] = rounds
    for row in rows:
        row["vs_bert"] = row["real_tokens_per_second"] / rows[0]["real_tokens_per_second"]
    return rows


def write_results(args: argparse.Namespace, facts: dict, rows: list[dict], padding_share: float) -> None:
    table = markdown_table(
        ["model", "train tokens/s (real)", "train tokens/s (padded)", "vs BERT"],
        [
            [
                r["model"],
                f"{r['real_tokens_per_second']:,.0f}",
                f"{r['padded_tokens_per_second']:,.0f}",
                f"{r['vs_bert']:.3f}",
            ]
            for r in rows
        ],
    )
    report = "\n\n".join(
        [
            f"# Fine-tuning throughput on GLUE-shaped batches ({args.device})",
            header(facts),
            f"Size {args.size}, {args.precision}, {args.attn_implementation}; {args.batches} batches of "
            f"{args.batch_size} pairs of {args.min_length}-{args.max_length} tokens (uniform), each padded to its "
            f"longest ({padding_share:.0%} of the tokens are padding); sequence classification, 2 labels, fused "
            f"AdamW. Median of {rows[0]['rounds']} (of {args.rounds}) interleaved rounds of {args.steps_per_round} "
            f"steps after "
            f"{args.warmup} warm-up steps; `real` counts the unpadded tokens.",
            table,
        ]
    )
    record = {
        **facts,
        "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        "padding_share": padding_share,
        "rows": rows,
    }
    write_report(args.output, report, record)
    print(report)


def main(argv: list[str] | None = None) -> None:
    run_command(measure, argv)


if __name__ == "__main__":
    main()
