"""What torch.compile costs and gives, compiling each encoder layer (`layers`, regional compilation) against the whole
model (`whole`), per attention type, measured in one run: cold compile seconds and training step time, and their
ratios layers / whole.

    python benchmarks/compile_cost.py --device cpu --threads 1 --clock process --size tiny --types original symmetric
    python benchmarks/compile_cost.py --device cuda --size base --precision bf16 --tokens_per_batch 16384

1. Cold compile: for each type and scope, a fresh process (spawned: no compiled code in memory) with an empty compile
   cache (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and TMPDIR in a new temporary folder) builds the model with the sparse MLM
   head and its fused AdamW, compiles it at the scope (throughput_timing.compiled, as benchmarks/throughput.py does)
   and times its first training step and first inference step, wall clock: what a fresh machine pays before the
   first measured step.
2. Steady state: this process builds every type once (eager, and compiled at each scope, all three on the same
   weights), compiles each compiled form against its case's cache, now warm (`warm compile s`: what a second run on
   the same machine pays), then times --rounds rounds of training steps, each round every form of every type once in
   a rotating order. Ratios per round, their median reported: layers / whole (step time and cold compile seconds)
   and compiled / eager.

Writes OUTPUT.md and OUTPUT.json (default benchmarks/results/compile-cost-DEVICE/compile-cost) with the machine, the
command, the load average and the wall time.
"""

import argparse
import math
import os
import shlex
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
from report import Stopwatch, header, markdown_table, write_report  # benchmarks/report.py
from throughput_timing import (  # benchmarks/throughput_timing.py
    CLOCKS,
    COMPILE_SCOPES,
    PRECISIONS,
    PREDICTION_RATE,
    build_models,
    compiled,
    dynamo_counts,
    inference_step,
    masked_positions,
    mlm_batch,
    rotated,
    sparse_head_model,
    timed,
    train_step,
    use_clock,
    wall_timed,
)

from symbert import ATTENTION_TYPES, SIZE_PRESETS
from symbert.cli import UserError, command_parser, run_command
from symbert.training.arguments import check_output_dir

VOCAB_SIZE = 30522


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="tiny", choices=list(SIZE_PRESETS))
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--tokens_per_batch", type=int, default=2048, help="batch size = tokens_per_batch / seq_len")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--types", nargs="+", default=["original", "symmetric"], choices=ATTENTION_TYPES)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (the median is reported)")
    parser.add_argument("--steps_per_round", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per form after compiling")
    parser.add_argument("--clock", default="wall", choices=list(CLOCKS), help="the steady state's clock")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--output", default=None, help="results path without suffix")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda, but torch sees no CUDA device; use --device cpu.")
    if args.clock != "wall" and args.device == "cuda":
        raise UserError(f"--clock {args.clock} measures CPU time; on CUDA use --clock wall.")
    for name in ("rounds", "steps_per_round", "tokens_per_batch") + (("threads",) if args.threads else ()):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)} must be at least 1.")
    if args.warmup < 0:
        raise UserError(f"--warmup={args.warmup} must not be negative.")
    if not 8 <= args.seq_len <= 512 or args.tokens_per_batch % args.seq_len:
        raise UserError(
            f"--seq_len {args.seq_len}: must be in [8, 512] and divide --tokens_per_batch {args.tokens_per_batch}."
        )
    if args.backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise UserError(
            f"--backend {args.backend!r} is not a torch.compile backend; allowed: aot_eager, eager and "
            f"torch._dynamo.list_backends()'s {', '.join(torch._dynamo.list_backends())}."
        )
    args.types = list(dict.fromkeys(args.types))
    args.output = Path(args.output or f"benchmarks/results/compile-cost-{args.device}/compile-cost")
    check_output_dir(args.output.parent, "output")
    return args


class Case:
    """One type's model with the sparse head, its AdamW and its batch, on this process's device."""

    def __init__(self, args: argparse.Namespace, kind: str) -> None:
        if args.threads:
            torch.set_num_threads(args.threads)
        self.args, self.device = args, torch.device(args.device)
        torch.manual_seed(0)
        models, optimizers = build_models(args.size, [kind], VOCAB_SIZE, "sdpa", self.device)
        predictions = math.ceil(PREDICTION_RATE * args.seq_len)  # throughput.py's default sparse head
        self.model, self.optimizer = sparse_head_model(models[kind], predictions), optimizers[kind]
        self.input_ids, self.labels = mlm_batch(
            args.tokens_per_batch // args.seq_len,
            args.seq_len,
            VOCAB_SIZE,
            self.device,
            predictions_per_seq=masked_positions(args.seq_len, predictions),
        )

    def train(self, model: torch.nn.Module) -> None:
        train_step(model, self.optimizer, self.input_ids, self.labels, self.device, self.args.precision)

    def infer(self, model: torch.nn.Module) -> None:
        inference_step(model, self.input_ids, self.device, self.args.precision)

    def first_steps(self, model: torch.nn.Module) -> dict:
        """Wall seconds of the first training and inference steps (the compilation) and the graphs they made."""
        graphs = dynamo_counts()[0]
        seconds = {"train": wall_timed(lambda: self.train(model), self.device)}
        seconds["inference"] = wall_timed(lambda: self.infer(model), self.device)
        return {**seconds, "total": seconds["train"] + seconds["inference"], "graphs": dynamo_counts()[0] - graphs}


def cold_compile(args: argparse.Namespace, kind: str, scope: str) -> dict:
    """In a fresh process whose compile caches are empty: the first steps of `kind` compiled at `scope`."""
    case = Case(args, kind)
    return case.first_steps(compiled(case.model, scope, args.backend))


def in_fresh_process(cache: Path, function, *arguments):
    """`function(*arguments)` in a spawned process whose compile caches are in the (empty) folder `cache`: inductor's,
    Triton's, and the temporary folder (where inductor keeps its precompiled C++ headers, whatever its cache)."""
    cache.mkdir(parents=True)
    folders = dict(TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"), TMPDIR=str(cache))
    saved = {name: os.environ.get(name) for name in folders}
    os.environ.update(folders)
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            return pool.submit(function, *arguments).result()
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


def measure(argv: list[str] | None) -> None:
    args = parse_command_line(argv)
    use_clock(args.clock)
    stopwatch = Stopwatch()
    command = shlex.join(["python", "benchmarks/compile_cost.py", *(argv or [])])
    with tempfile.TemporaryDirectory(prefix="compile-cost-") as root:
        caches = {(kind, scope): Path(root) / f"{kind}-{scope}" for kind in args.types for scope in COMPILE_SCOPES}
        cold = {}
        for (kind, scope), cache in caches.items():
            cold[kind, scope] = in_fresh_process(cache, cold_compile, args, kind, scope)
            print(f"cold compile {kind} {scope}: {cold[kind, scope]['total']:.1f} s", flush=True)
        # every type and form in this process, for rounds paired in time
        dynamo_settings = dict(recompile_limit=8 * (len(args.types) + 1), fail_on_recompile_limit_hit=True)
        with torch._dynamo.config.patch(**dynamo_settings):
            rows = steady_state(args, caches, cold)
    write_results(args, stopwatch.facts(command), rows)


def steady_state(args: argparse.Namespace, caches: dict, cold: dict) -> list[dict]:
    cases = {kind: Case(args, kind) for kind in args.types}
    forms = {}  # (kind, form): the model called
    warm = {}
    for kind, case in cases.items():
        forms[kind, "eager"] = case.model
        for scope in COMPILE_SCOPES:
            forms[kind, scope] = compiled(case.model, scope, args.backend)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(caches[kind, scope])  # read at each compilation
            warm[kind, scope] = case.first_steps(forms[kind, scope])
    for (kind, _), model in forms.items():
        if args.warmup:
            timed(lambda: cases[kind].train(model), args.warmup, cases[kind].device)
    graphs = dynamo_counts()[0]
    seconds = {key: [] for key in forms}
    for round_index in range(args.rounds):
        for kind, form in rotated(list(forms), round_index):
            case = cases[kind]
            seconds[kind, form].append(timed(lambda: case.train(forms[kind, form]), args.steps_per_round, case.device))
    if dynamo_counts()[0] != graphs:
        raise RuntimeError(f"{dynamo_counts()[0] - graphs} graph(s) compiled during the timed rounds.")
    rows = []
    for kind in args.types:
        whole = seconds[kind, "whole"]
        for form in ("eager", *COMPILE_SCOPES):
            own = seconds[kind, form]
            compile_cold = cold.get((kind, form))
            rows.append(
                {
                    "model": kind,
                    "form": form,
                    "step_seconds": statistics.median(own),
                    "step_seconds_rounds": own,
                    "step_vs_whole": statistics.median(o / w for o, w in zip(own, whole)),
                    "step_vs_eager": statistics.median(o / e for o, e in zip(own, seconds[kind, "eager"])),
                    "cold_compile": compile_cold,
                    "warm_compile": warm.get((kind, form)),
                    "cold_compile_vs_whole": compile_cold["total"] / cold[kind, "whole"]["total"]
                    if compile_cold
                    else None,
                }
            )
    return rows


def write_results(args: argparse.Namespace, facts: dict, rows: list[dict]) -> None:
    def seconds(measured: dict | None) -> str:
        return "" if measured is None else f"{measured['train']:.1f} + {measured['inference']:.1f}"

    table = markdown_table(
        ["type", "form", "cold compile s (train + inference)", "cold vs whole", "warm compile s", "graphs",
         "step ms", "step vs whole", "step vs eager"],
        [
            [row["model"], row["form"], seconds(row["cold_compile"]),
             "" if row["cold_compile_vs_whole"] is None else f"{row['cold_compile_vs_whole']:.2f}",
             seconds(row["warm_compile"]), "" if row["cold_compile"] is None else str(row["cold_compile"]["graphs"]),
             f"{row['step_seconds'] * 1e3:,.1f}", f"{row['step_vs_whole']:.3f}", f"{row['step_vs_eager']:.3f}"]
            for row in rows
        ],
    )  # fmt: skip
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    report = "\n\n".join(
        [
            f"# torch.compile per encoder layer against the whole model ({device})",
            header(facts),
            f"Size {args.size}, {args.seq_len} tokens, {args.tokens_per_batch // args.seq_len} sequences a batch, "
            f"{args.precision}, sdpa, sparse MLM head, fused AdamW, backend {args.backend}, static shapes. `cold "
            "compile`: the first training and inference steps' wall seconds in a fresh process with empty compile "
            "caches; `warm compile`: the same in this process with that case's cache; `graphs`: the graphs the cold "
            f"compile made. `step`: a training step, {CLOCKS[args.clock][1]}, median of {args.rounds} rounds of "
            f"{args.steps_per_round} steps (all forms of all types in each round, in a rotating order); `vs whole` "
            "and `vs eager`: the median over the rounds of the ratio to the same type's whole-model form or eager "
            "form in the same round.",
            table,
        ]
    )
    record = {**facts, "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    write_report(args.output, report, {**record, "device_name": device, "rows": rows})
    print(report)


def main(argv: list[str] | None = None) -> None:
    run_command(measure, argv)


if __name__ == "__main__":
    main()
