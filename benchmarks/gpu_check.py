"""Every GPU figure of docs/speed.md and docs/scale.md from one command, within a wall-clock budget.

    python benchmarks/gpu_check.py --plan                                             # the calls, before any
    python benchmarks/gpu_check.py --output benchmarks/results/gpu-check              # one GPU, at most 9 minutes
    python benchmarks/gpu_check.py --dry_run --budget 240 --output /tmp/gpu-check     # the CPU rehearsal of the tests

Needs nothing from outside the machine: random weights, the embedded corpus and its tokenizer. The parts are planned
from their recorded costs (--costs: OUTPUT/part-costs.json, which each measured run writes, else the recorded
benchmarks/results/gpu-check-costs.json): in order of importance, those whose expected seconds fit the budget run in
this call, the rest in a second call that `--plan` prints. Each part runs in its own process with a deadline, its
share of the budget in proportion to its expected seconds (time a part leaves unused passes to the next; a part that
reaches its deadline is stopped, recorded as such, and the next one starts):

1. `throughput-eager`: benchmarks/throughput.py, every registered type against transformers' BertForMaskedLM at the
   `base` shape, bf16, sequences of 128 and 512, sdpa (and flash_attention_2 where flash-attn is installed), full
   and sparse MLM heads: training and inference tokens/s, MFU, memory;
2. `throughput-compiled`: the same under torch.compile (each encoder layer compiled: one graph for all of a
   model's layers) at 128 tokens with the recipes' sparse head, for `original` and `symmetric`; the other types come
   last (`throughput-compiled-others`), in what the budget leaves (the second call `--plan` prints). Each process
   holds its own `original` and BERT, eager and compiled, the references of its ratios;
3. `recipe`: `paper-small` for real, from blocks prepared on this machine: symbert-prepare-data on the embedded corpus
   at the recipe's 512 tokens, then symbert-pretrain with the recipe's model, batch, sparse head, torch.compile (each
   encoder layer, through accelerate's regional compilation), bf16 and dataloader workers for --recipe_steps steps;
   tokens/s (the training loop's, after its first logged interval, which holds the compilation) and MFU (analytic
   FLOPs over a bf16 matrix product's rate on this GPU);
4. `finetune`: benchmarks/finetune_throughput.py, GLUE-shaped padded batches, `original` and `symmetric` against BERT;
5. `data-pipeline`: benchmarks/data_pipeline.py at blocks of 512 with dataloader workers, on this machine's CPUs.

Writes OUTPUT/summary.md and summary.json (the machine, the command, each part's status, command and wall time, a
warm bf16 matrix product's rate, the recipe's figures) and each part's own results and log in OUTPUT. `--parts` runs
some parts only (sharing the whole budget), `--types` limits the throughput parts' attention types. `--dry_run` runs
every part on the CPU with tiny shapes, so that the command cannot rot between the sessions that have a GPU; there
each part may run to the budget's end, since the recorded seconds are a GPU's.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py
from throughput_timing import (  # benchmarks/throughput_timing.py
    flash_attention_available,
    headline_types,
    matmul_flops_per_second,
    reference_type,
    training_flops_per_token,
)

from symbert import ATTENTION_TYPES, SymBertConfig
from symbert.cli import Interrupted, UserError, command_parser, run_command
from symbert.files import write_atomically
from symbert.training.arguments import RECIPES_DIR, check_output_dir

BENCHMARKS = Path(__file__).resolve().parent
# the compiled part's first process: BERT's own attention and the first type registered after it (paper 1's headline
# type); the rest run last, in what the budget leaves.
FIRST_COMPILED_TYPES = headline_types()
PART_NAMES = (
    "throughput-eager",
    "throughput-compiled",
    "recipe",
    "finetune",
    "data-pipeline",
    "throughput-compiled-others",
)
SUMMARY_MARGIN_SECONDS = 15  # kept back from the last part: the summary's matrix product and files
MINIMUM_PART_SECONDS = 20  # a part given less is skipped, not started
RECORDED_COSTS = BENCHMARKS / "results" / "gpu-check-costs.json"
COSTS_FILE = "part-costs.json"  # in OUTPUT: the measured run's per-part seconds, what the next run plans from
STOPPED_FACTOR = 1.5  # a part stopped at its deadline is expected to need this much more next time
REGIONAL_COMPILATION = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"  # accelerate's TorchDynamoPlugin reads it
# recipe fields that name data from the Hub: the run uses the embedded corpus and its tokenizer instead
HUB_DATA_FIELDS = ("dataset_name", "dataset_config", "streaming", "tokenizer")


@dataclass
class Part:
    name: str
    share: float  # of the budget; a part's deadline is the budget's cumulative share up to it
    commands: list[list[str]]  # run one after the other, within the part's deadline
    environment: dict[str, str] = field(default_factory=dict)  # set for its commands
    expected: float = 0.0  # seconds, from the recorded costs
    basis: str = ""  # where `expected` comes from
    call: int = 1  # 2: does not fit this call's budget after the parts before it
    status: str = "not run"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output",
        default="benchmarks/results/gpu-check",
        help="folder of the results; a dry run needs one that holds no measured figures",
    )
    parser.add_argument("--budget", type=float, default=540.0, help="wall-clock seconds for everything (default 9 min)")
    parser.add_argument(
        "--recipe_steps", type=int, default=None, help="optimizer steps of the paper-small run (100; dry run 10)"
    )
    parser.add_argument(
        "--parts", nargs="+", default=None, choices=PART_NAMES, help="run only these parts (default: all)"
    )
    parser.add_argument(
        "--types", nargs="+", default=None, choices=ATTENTION_TYPES, help="attention types of the throughput parts"
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="on the CPU, tiny shapes: checks the command, measures nothing"
    )
    parser.add_argument("--plan", action="store_true", help="print the calls and their expected seconds, run nothing")
    parser.add_argument(
        "--costs",
        default=None,
        help=f"the parts' recorded seconds (default OUTPUT/{COSTS_FILE}, else {RECORDED_COSTS.name})",
    )
    args = parser.parse_args(argv)
    if not args.budget >= 60:
        raise UserError(f"--budget={args.budget}: must be at least 60 seconds.")
    if args.recipe_steps is None:
        args.recipe_steps = 10 if args.dry_run else 100
    if args.recipe_steps < 2:
        raise UserError(f"--recipe_steps={args.recipe_steps}: must be at least 2 (the first interval is warm-up).")
    if not (args.dry_run or args.plan) and not torch.cuda.is_available():
        raise UserError("torch sees no CUDA device; this command measures a GPU (--dry_run rehearses it on the CPU).")
    check_output_dir(args.output, "output")  # before Path(''), which is the current folder
    args.output = Path(args.output)
    args.costs = Path(args.costs) if args.costs else costs_path(args.output)
    args.recorded = read_costs(args.costs)
    if args.dry_run and (measured := measured_summary(args.output)):
        raise UserError(
            f"--output {str(args.output)!r} holds a GPU check's measured figures ({measured}); a dry run would "
            "replace them with CPU figures: give the dry run another --output (e.g. /tmp/gpu-check)."
        )
    return args


def costs_path(output: Path) -> Path:
    return output / COSTS_FILE if (output / COSTS_FILE).is_file() else RECORDED_COSTS


def read_costs(path: Path) -> dict[str, dict]:
    """{part: {"seconds": ..., "basis": ...}} of a costs file; a bad one is one line naming it."""
    try:
        parts = json.loads(path.read_text(encoding="utf-8"))["parts"]
        if all(isinstance(cost["seconds"], (int, float)) and cost["seconds"] > 0 for cost in parts.values()):
            return parts
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    raise UserError(f"--costs {str(path)!r}: not a costs file (a JSON object whose `parts` give each part's seconds).")


def measured_summary(output: Path) -> Path | None:
    """The summary.json of a measured (not dry) run in `output`, if there is one: what a dry run must not replace.
    One that cannot be read counts as measured: nothing tells it is not."""
    summary = output / "summary.json"
    if not summary.exists():
        return None
    try:
        return None if json.loads(summary.read_text(encoding="utf-8")).get("dry_run") is True else summary
    except (OSError, ValueError, AttributeError):
        return summary


def script(name: str, *arguments: str) -> list[str]:
    return [sys.executable, str(BENCHMARKS / name), *arguments]


def module(name: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", name, *arguments]


def recipe_file(args: argparse.Namespace, workdir: Path) -> Path:
    """paper-small on the embedded corpus: the recipe's model, batch, compile, precision and workers; a short run."""
    recipe = json.loads((RECIPES_DIR / "paper-small.json").read_text())
    for name in HUB_DATA_FIELDS:
        recipe.pop(name, None)
    recipe["_comment"] = "paper-small on the embedded corpus and its tokenizer, a short run (benchmarks/gpu_check.py)"
    logging_steps = max(1, args.recipe_steps // 10)
    recipe.update(
        max_steps=args.recipe_steps,
        warmup_steps=max(1, args.recipe_steps // 10),
        eval_blocks=256,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=logging_steps,
        report_to="none",
    )
    if args.dry_run:  # the same path at a CPU's size: tiny model, short blocks, the cheap compile backend
        recipe.update(
            size="tiny",
            max_seq_length=32,
            eval_blocks=8,
            global_batch_size=8,
            per_device_train_batch_size=4,
            per_device_eval_batch_size=8,
            dataloader_num_workers=2,
            torch_compile_backend="aot_eager",
            precision="fp32",
            use_cpu=True,
        )
        recipe["config_overrides"] = dict(recipe["config_overrides"], max_predictions_per_seq=8)
    path = workdir / "paper-small-embedded.json"
    path.write_text(json.dumps(recipe, indent=2))
    return path


def plan(args: argparse.Namespace, workdir: Path) -> list[Part]:
    out = args.output
    if args.dry_run:
        shape = ["--device", "cpu", "--sizes", "tiny", "--tokens_per_batch", "64"]
        eager_lengths = ["--seq_lens", "16", "32"]
        timing = ["--rounds", "1", "--warmup", "1", "--steps_per_round", "1", "--matmul_size", "256"]
        compiled = ["--seq_lens", "16", "--compile_backend", "aot_eager"]
        finetune = ["--device", "cpu", "--size", "tiny", "--batch_size", "4", "--max_length", "32", "--batches", "2"]
        finetune += ["--rounds", "1", "--steps_per_round", "1", "--warmup", "1"]
        data = ["--quick", "--block_length", "64", "--workers", "0", "2", "--num_proc", "1", "2"]
    else:
        shape = ["--device", "cuda", "--sizes", "base", "--tokens_per_batch", "16384"]
        eager_lengths = ["--seq_lens", "128", "512"]
        timing = ["--rounds", "5", "--warmup", "3", "--steps_per_round", "3"]
        compiled = ["--seq_lens", "128"]
        finetune = ["--device", "cuda", "--size", "base", "--precision", "bf16"]
        data = ["--block_length", "512", "--corpus_mb", "20", "--large_mb", "128", "--workers", "0", "4"]
        data += ["--formats", "txt", "prepared", "--batches", "20", "--rounds", "2", "--memory_batches", "20"]
        data += ["--num_proc", "8", "--resume_passes", "0", "1", "--resume_repeats", "1"]
    implementations = ["sdpa"] + (["flash_attention_2"] if flash_attention_available("cuda") else [])
    common = [*shape, "--precisions", "bf16", *timing]
    eager = script(
        "throughput.py", *common, *eager_lengths, "--attn_implementations", *implementations, "--modes", "eager",
        "--heads", "full", "sparse", "--output", str(out / "throughput-eager"),
    )  # fmt: skip
    chosen = args.types or ATTENTION_TYPES
    others = [kind for kind in chosen if kind not in FIRST_COMPILED_TYPES]
    first = [kind for kind in chosen if kind in FIRST_COMPILED_TYPES] or [reference_type()]
    eager += ["--types", *chosen]

    def compiled_types(types: list[str], suffix: str) -> list[str]:
        return script(
            "throughput.py", *common, *compiled, "--attn_implementations", "sdpa", "--modes", "compiled",
            "--heads", "sparse", "--types", *types, "--output", str(out / f"throughput-compiled-{suffix}"),
        )  # fmt: skip

    recipe = recipe_file(args, workdir)
    blocks, run = workdir / "blocks", workdir / "run"
    prepare = module("symbert.training.prepare_data", "--recipe", str(recipe), "--output_dir", str(blocks))
    prepare += ["--num_proc", str(min(8, os.cpu_count() or 1))]
    pretrain = module("symbert.training.pretrain", "--recipe", str(recipe), "--blocks_dir", str(blocks))
    pretrain += ["--output_dir", str(run)]
    finetune_command = script("finetune_throughput.py", *finetune, "--output", str(out / "finetune-throughput"))
    data_command = script("data_pipeline.py", *data, "--output", str(out / "data-pipeline"))
    parts = [
        Part("throughput-eager", 0.22, [eager]),
        Part("throughput-compiled", 0.34, [compiled_types(first, "first")]),
        # the Trainer compiles through accelerate, which this switches to one graph per encoder layer (as the
        # throughput parts compile): a cold compile traces one layer, not the whole model
        Part("recipe", 0.14, [prepare, pretrain], environment={REGIONAL_COMPILATION: "true"}),
        Part("finetune", 0.05, [finetune_command]),
        # the data path runs on the CPUs: hidden from CUDA, its forked workers never inherit a CUDA context
        Part("data-pipeline", 0.14, [data_command], environment={"CUDA_VISIBLE_DEVICES": ""}),
        Part("throughput-compiled-others", 0.11, [compiled_types(others, "others")] if others else []),
    ]
    parts = [part for part in parts if part.name in (args.parts or PART_NAMES) and part.commands]
    assign_calls(parts, args)
    return parts


def assign_calls(parts: list[Part], args: argparse.Namespace) -> None:
    """Each part's expected seconds from the recorded costs; in order of importance, the parts that fit the budget
    after the ones before them are this call's, the others a second call's (all of them with --parts or --dry_run:
    the chosen parts run here). This call's parts share the budget in proportion to their expected seconds."""
    room = args.budget - SUMMARY_MARGIN_SECONDS
    used = 0.0
    for part in parts:
        cost = args.recorded.get(part.name, {"seconds": room, "basis": "no recorded cost: the whole budget"})
        part.expected, part.basis = float(cost["seconds"]), cost.get("basis", "")
        fits = used + part.expected <= room or not used  # the first part always runs (a lone part over the budget)
        part.call = 1 if fits or args.parts or args.dry_run else 2
        used += part.expected if part.call == 1 else 0
    this_call = [part for part in parts if part.call == 1]
    total = sum(part.expected for part in this_call)
    for part in parts:
        part.share = part.expected / total if part.call == 1 else 0.0


def plan_text(args: argparse.Namespace, parts: list[Part], argv: list[str]) -> str:
    """The calls: each one's command and parts, with the expected seconds and their basis, and each part's deadline."""
    costs = args.costs.resolve()
    shown_costs = costs.relative_to(Path.cwd()) if costs.is_relative_to(Path.cwd()) else costs
    lines = [
        f"Planned from {shown_costs} (a {args.budget:.0f}-s budget, {SUMMARY_MARGIN_SECONDS} s kept for the summary)."
    ]
    for call in (1, 2):
        chosen = [part for part in parts if part.call == call]
        if not chosen:
            continue
        room = args.budget - SUMMARY_MARGIN_SECONDS
        if call == 1:
            command = ["python", "benchmarks/gpu_check.py", *(a for a in argv if a != "--plan")]
        else:
            names = [part.name for part in chosen]
            budget = max(60, min(args.budget, sum(p.expected for p in chosen) + SUMMARY_MARGIN_SECONDS + 30))
            command = ["python", "benchmarks/gpu_check.py", "--parts", *names, "--budget", f"{budget:.0f}"]
            command += ["--output", f"{args.output}-2"]
            room = budget - SUMMARY_MARGIN_SECONDS
        expected = sum(part.expected for part in chosen)
        lines.append(f"Call {call}: {shlex.join(command)}\n  expected {expected:.0f} s of the {room:.0f} s for parts")
        cumulative = 0.0
        for part in chosen:
            cumulative += part.share
            deadline = f", deadline at {room if args.dry_run else cumulative * room:.0f} s" if call == 1 else ""
            lines.append(f"  {part.name}: {part.expected:.0f} s expected{deadline} ({part.basis})")
        if call == 2 and expected > room:
            lines.append(f"  (expected {expected:.0f} s, over the {room:.0f} s a call has: its last parts may stop)")
    return "\n".join(lines)


def recorded_costs(parts: list[Part], recorded: dict[str, dict], gpu: str) -> dict:
    """The costs the next run plans from: a part that finished, its seconds; one stopped at its deadline,
    STOPPED_FACTOR × its deadline (or its earlier cost, if more); the others, as they were."""
    costs = dict(recorded)
    for part in parts:
        if part.status == "done":
            costs[part.name] = {
                "seconds": round(part.seconds, 1),
                "basis": f"measured: done in {part.seconds:.0f} s on {gpu}",
            }
        elif part.status.startswith("stopped"):
            seconds = max(STOPPED_FACTOR * part.seconds, recorded.get(part.name, {}).get("seconds", 0))
            basis = f"estimate: stopped at its {part.seconds:.0f}-s deadline on {gpu}; {STOPPED_FACTOR} × that, or more"
            costs[part.name] = {"seconds": round(seconds, 1), "basis": basis}
    return {
        "_comment": "written by benchmarks/gpu_check.py after a measured run: what the next run plans from",
        "parts": costs,
    }


def run_part(part: Part, deadline: float, log: Path) -> None:
    """Runs the part's commands in order, each in a new process group, killed (with its workers) at the deadline."""
    start = time.monotonic()
    if deadline - start < MINIMUM_PART_SECONDS:
        part.status = f"skipped: {max(0.0, deadline - start):.0f} s left of the budget"
        return
    with log.open("a") as file:
        for command in part.commands:
            file.write(f"+ {shlex.join(command)}\n")
            file.flush()
            environment = {**os.environ, **part.environment}
            process = subprocess.Popen(
                command, stdout=file, stderr=subprocess.STDOUT, start_new_session=True, env=environment
            )
            try:
                returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop(process)
                part.status = f"stopped at its deadline ({deadline - start:.0f} s)"
                break
            except (KeyboardInterrupt, Interrupted) as error:  # Ctrl-C or SIGTERM: the part's processes go too
                stop(process)
                raise Interrupted(f"{part.name} was running; its processes were stopped, no summary written") from error
            if returncode != 0:
                part.status = f"failed: exit status {returncode} (see {log.name})"
                break
        else:
            part.status = "done"
    part.seconds = time.monotonic() - start


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (the command and its dataloader or compile workers), SIGKILL 10 s later."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def matmul_rate(device: torch.device, precision: str) -> float:
    """A large matrix product's FLOP/s in this precision, the MFU denominator: the best of five after one warm-up
    (the first call pays for the library's start and the clocks' ramp)."""
    size = 8192 if device.type == "cuda" else 256
    matmul_flops_per_second(device, precision, size)
    return max(matmul_flops_per_second(device, precision, size) for _ in range(5))


def recipe_figures(run: Path, device: torch.device, precision: str) -> dict:
    """The paper-small run's training-loop tokens/s after its first logged interval, and its MFU."""
    metrics = json.loads((run / "metrics.json").read_text())
    rates = [entry["train_tokens_per_second"] for entry in metrics if "train_tokens_per_second" in entry]
    if len(rates) < 2:
        raise ValueError(f"{run / 'metrics.json'}: {len(rates)} logged training rate(s); need 2 (one is warm-up)")
    config = SymBertConfig.from_pretrained(run)
    summary = json.loads((run / "training_summary.json").read_text())
    seq_len = summary["max_seq_length"]
    tokens_per_second = statistics.median(rates[1:])
    peak = matmul_rate(device, precision)
    flops_per_token = training_flops_per_token(config, seq_len)
    return {
        "attention_type": config.attention_type,
        "seq_len": seq_len,
        "global_batch_size": summary["global_batch_size"],
        "steps": summary["steps"],
        "logged_rates": rates,
        "tokens_per_second": tokens_per_second,
        "training_flops_per_token": flops_per_token,
        "matmul_flops_per_second": peak,
        "mfu": flops_per_token * tokens_per_second / peak,
        "precision": precision,
        "final_eval_loss": summary["final_eval_loss"],
    }


def shown(command: list[str], args: argparse.Namespace, workdir: Path) -> str:
    """The command as a reader would type it: `python`, paths relative to the repository, OUTPUT and WORK."""
    text = shlex.join(command).replace(sys.executable, "python").replace(f"{BENCHMARKS}/", "benchmarks/")
    return text.replace(str(args.output), "OUTPUT").replace(str(workdir), "WORK")


def write_summary(args, facts, parts, recipe, matmul, workdir) -> None:
    rows = [[part.name, part.status, f"{part.seconds:.0f}", "; ".join(shown(c, args, workdir) for c in part.commands)]
            for part in parts]  # fmt: skip
    lines = [
        f"# GPU check{' (CPU dry run: no figure here is a measurement)' if args.dry_run else ''}",
        header(facts, [f"a {args.budget / 60:.1f}-min budget"]),
        f"An 8192³ bf16 matrix product on this GPU: {matmul / 1e12:,.0f} TFLOP/s (best of five, warm)."
        if matmul
        else "",
        markdown_table(["part", "status", "seconds", "command"], rows, ["---", "---", "---:", "---"]),
    ]
    if recipe is not None:
        rates = ", ".join(f"{rate:,.0f}" for rate in recipe["logged_rates"])
        lines.append(
            f"## paper-small, for real\n\n`{recipe['attention_type']}`, blocks of {recipe['seq_len']} prepared from "
            f"the embedded corpus, {recipe['global_batch_size']} blocks a step, {recipe['steps']} steps, "
            f"{recipe['precision']}, compiled, sparse head: **{recipe['tokens_per_second']:,.0f} tokens/s** (median "
            f"of the logged intervals after the first, which holds the compilation; all: {rates}), "
            f"**MFU {recipe['mfu']:.1%}** ({recipe['training_flops_per_token'] / 1e6:,.1f} MFLOPs a token over a "
            f"matrix product's {recipe['matmul_flops_per_second'] / 1e12:.3g} TFLOP/s); final eval loss "
            f"{recipe['final_eval_loss']:.4f}."
        )
    for part in parts:
        lines += [f"- {part.name}: {note}" for note in part.notes]
    report = "\n\n".join(line for line in lines if line)
    record = {
        **facts,
        "dry_run": args.dry_run,
        "budget_seconds": args.budget,
        "parts": [
            {
                "name": p.name,
                "status": p.status,
                "seconds": p.seconds,
                "notes": p.notes,
                "commands": [shown(c, args, workdir) for c in p.commands],
            }
            for p in parts
        ],
        "recipe": recipe,
        "matmul_bf16_flops_per_second": matmul,
    }
    write_report(args.output / "summary", report, record)
    print(report)


def terminated(signum, frame) -> None:
    """SIGTERM as a Ctrl-C: the running part is stopped with its processes (which run in sessions of their own, where
    neither signal reaches them), then the command ends in one line."""
    raise Interrupted("stopped by SIGTERM")


def check(argv: list[str] | None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_command_line(argv)
    if args.plan:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
            print(plan_text(args, plan(args, Path(workdir)), argv))
        return
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        run_check(args, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_check(args: argparse.Namespace, argv: list[str]) -> None:
    stopwatch, start = Stopwatch(), time.monotonic()
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
        workdir = Path(workdir)
        planned = plan(args, workdir)
        print(plan_text(args, planned, argv), flush=True)
        parts = [part for part in planned if part.call == 1]
        room = args.budget - SUMMARY_MARGIN_SECONDS
        budget_end = start + room
        cumulative = 0.0
        for index, part in enumerate(parts):
            cumulative += part.share
            last = index == len(parts) - 1
            # a dry run's parts take this CPU's time, not the GPU's seconds the shares are sized from: each may run
            # to the budget's end (the deadlines themselves are tested on their own)
            deadline = budget_end if last or args.dry_run else min(budget_end, start + cumulative * room)
            print(f"[{time.monotonic() - start:5.0f} s] {part.name} (deadline {deadline - start:.0f} s)", flush=True)
            run_part(part, deadline, args.output / f"{part.name}.log")
            print(f"[{time.monotonic() - start:5.0f} s] {part.name}: {part.status}", flush=True)
        recipe, run = None, workdir / "run"
        matmul = None if args.dry_run else matmul_rate(torch.device("cuda"), "bf16")
        if (run / "training_summary.json").is_file():
            device = torch.device("cpu" if args.dry_run else "cuda")
            try:
                recipe = recipe_figures(run, device, "fp32" if args.dry_run else "bf16")
                write_atomically(args.output / "recipe-metrics.json", lambda f: json.dump(recipe, f, indent=2))
            except (ValueError, KeyError, OSError) as error:
                next(p for p in parts if p.name == "recipe").notes.append(f"no figures: {error}")
        facts = stopwatch.facts(shlex.join(["python", "benchmarks/gpu_check.py", *argv]))
        write_summary(args, facts, parts, recipe, matmul, workdir)
        if not args.dry_run:  # what the next run into this OUTPUT plans from
            costs = recorded_costs(parts, args.recorded, torch.cuda.get_device_name())
            write_atomically(args.output / COSTS_FILE, lambda f: json.dump(costs, f, indent=2))


def main(argv: list[str] | None = None) -> None:
    run_command(check, argv)


if __name__ == "__main__":
    main()
