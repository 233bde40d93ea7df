"""Training and inference speed, memory and MFU of every attention type against transformers' BertForMaskedLM, eager
and under torch.compile, with the full MLM head and the pre-training recipes' sparse one.

    python benchmarks/throughput.py --device cpu --threads 1 --clock user --sizes small --seq_lens 128 \
        --tokens_per_batch 4096 --modes eager compiled --heads full sparse
    python benchmarks/throughput.py --device cuda --sizes base --seq_lens 128 512 --precisions bf16 \
        --modes eager compiled --heads full sparse --tokens_per_batch 16384

For each setting (size × sequence length × precision × attention implementation) BERT and every SymBERT type are
built with the same sizes and the same attention implementation in this process. Each type runs on every path
(mode × head): mode `eager`, or `compiled` (`torch.compile(model, dynamic=False)`, default inductor backend); head
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

Writes `OUTPUT.md` and `OUTPUT.json` (default benchmarks/results/throughput-DEVICE) with the machine, the command,
the load average and the wall time.
"""

import copy
import json
import math
import os
import shlex
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from machine import describe_machine, keep_freed_memory  # benchmarks/machine.py
from transformers import BertConfig, BertForMaskedLM

from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig, SymBertForMaskedLM, attention_class
from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically
from symbert.training.arguments import check_output_dir

PRECISIONS = ("fp32", "bf16")
IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")
MODES = ("eager", "compiled")
HEADS = ("full", "sparse")
BERT = "bert"
REFERENCE = "original"  # the type every path's ratios are taken to
MASK_RATE = 0.15  # labelled positions per sequence, as BERT's pre-training
PREDICTION_RATE = 0.2  # default max_predictions_per_seq = ceil(0.2 × seq_len)
SPEED_TOLERANCE = 0.02  # target: ratio to original ≥ FLOP ratio − this
BERT_TARGET = 0.98  # target: original ≥ this × BERT (full head, same mode)
MEMORY_TARGET_TYPES = ("shared", "mhe_add", "mhe_mul")  # target: memory below original's
FIRST_DRAWN_ID = 5  # mlm_batch draws ids from here up: 0-4 are BERT's special tokens
MAX_SEQ_LEN = 512  # the presets' max_position_embeddings


def check_device(device):
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda, but torch sees no CUDA device; use --device cpu.")


def check_seq_len(seq_len, tokens_per_batch, name):
    """A sequence length the models take, and whole sequences in a batch of `tokens_per_batch` tokens."""
    if not 1 <= seq_len <= MAX_SEQ_LEN or tokens_per_batch % seq_len:
        raise UserError(
            f"{name} {seq_len}: must be in [1, {MAX_SEQ_LEN}] and divide --tokens_per_batch {tokens_per_batch}."
        )


def check_at_least_one(args, names):
    for name in names:
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)} must be at least 1.")


def parse_command_line(argv):
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
        help="compiled: torch.compile(model, dynamic=False); BERT also runs eager, the run_mlm reference",
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
        "--output", default=None, help="results path without suffix (default: benchmarks/results/throughput-DEVICE)"
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
    args.types = [REFERENCE] + [kind for kind in dict.fromkeys(args.types) if kind != REFERENCE]
    args.modes = [mode for mode in MODES if mode in args.modes]
    args.heads = [head for head in HEADS if head in args.heads]
    args.output = Path(args.output or f"benchmarks/results/throughput-{args.device}")
    check_output_dir(args.output.parent, "output")  # now, not after the measurements
    return args


def flash_attention_available(device):
    return device == "cuda" and transformers.utils.is_flash_attn_2_available()


def max_predictions(args, seq_len):
    """The sparse head's M at this sequence length."""
    return args.max_predictions_per_seq or math.ceil(PREDICTION_RATE * seq_len)


def model_config(size, attention_type, vocab_size, implementation, **overrides):
    return SymBertConfig.from_preset(
        size, attention_type=attention_type, vocab_size=vocab_size, attn_implementation=implementation, **overrides
    )


def build_models(size, types, vocab_size, implementation, device):
    """BERT (transformers' own) and each SymBERT type, same sizes and attention implementation, each with a fused
    AdamW: the Trainer's default optimizer (adamw_torch_fused) on a CPU as on CUDA with torch >= 2.8."""
    reference = model_config(size, "original", vocab_size, implementation)
    bert_fields = {key: value for key, value in reference.to_dict().items() if key in BertConfig().to_dict()}
    models = {BERT: BertForMaskedLM(BertConfig(**bert_fields, attn_implementation=implementation))}
    for kind in types:
        models[kind] = SymBertForMaskedLM(model_config(size, kind, vocab_size, implementation))
    optimizers = {}
    for name, model in models.items():
        model.to(device)
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return models, optimizers


def sparse_head_model(model, max_predictions_per_seq):
    """`model` with the sparse MLM head (sparse_prediction=True, max_predictions_per_seq): the same modules, hence the
    same weights (only SymBertForMaskedLM.forward reads the two fields)."""
    config = copy.deepcopy(model.config)
    config.sparse_prediction, config.max_predictions_per_seq = True, max_predictions_per_seq
    config.validate()
    with torch.device("meta"):  # no weights of its own: they are replaced by the model's modules
        sparse = SymBertForMaskedLM(config)
    sparse.bert, sparse.cls = model.bert, model.cls
    return sparse


def training_flops_per_token(config, seq_len):
    """Matrix-product FLOPs of one training token: 3 × forward (backward is two products per forward product).
    Elementwise work, softmax and layer norms are left out. The self-attention's own part is its class's. The MLM
    head (transform and decoder) runs on every position, or with `sparse_prediction` and `max_predictions_per_seq`
    = M on min(M, seq_len) positions per sequence (its FLOPs per token scale by that over seq_len)."""
    h, f, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    attention = attention_class(config.attention_type).forward_flops_per_token(config, seq_len)
    per_layer = attention + 2 * (h * h + 2 * h * f)  # + attention output + FFN
    head = 2 * (h * h + h * vocab)  # MLM transform + decoder, per predicted position
    if getattr(config, "sparse_prediction", False):
        predictions = getattr(config, "max_predictions_per_seq", None)
        if predictions is None:
            raise ValueError("sparse_prediction without max_predictions_per_seq: the head's rows vary by batch.")
        head = head * min(predictions, seq_len) / seq_len
    return 3 * (config.num_hidden_layers * per_layer + head)


def masked_positions(seq_len, max_predictions_per_seq=None):
    """Labelled positions per sequence: round(0.15 × seq_len) (at least 1), at most max_predictions_per_seq."""
    count = max(1, round(MASK_RATE * seq_len))
    return count if max_predictions_per_seq is None else min(count, max_predictions_per_seq)


def mlm_batch(batch_size, seq_len, vocab_size, device, seed=0, predictions_per_seq=None):
    """Random ids and MLM labels: each position labelled with probability 0.15, or with `predictions_per_seq`
    exactly that many positions per sequence (so a sparse head with M ≥ that never sees more than batch × M)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)
    if predictions_per_seq is None:
        labelled = torch.rand(input_ids.shape, generator=generator) < MASK_RATE
    else:
        ranks = torch.rand(input_ids.shape, generator=generator).argsort(dim=1).argsort(dim=1)
        labelled = ranks < predictions_per_seq
    labels = torch.where(labelled, input_ids, -100)
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


CLOCKS = {  # --clock: (what it reads, how the report names it)
    "wall": (time.perf_counter, "wall time"),
    "process": (time.process_time, "CPU time of this process"),
    "user": (lambda: os.times().user, "user-mode CPU time of this process (the kernel's page faults left out)"),
}
clock = CLOCKS["wall"][0]  # set by --clock


def timed(function, steps, device):
    synchronize(device)
    start = clock()
    for _ in range(steps):
        function()
    synchronize(device)
    return (clock() - start) / steps


def wall_timed(function, device):
    """Wall seconds of one call (compilation runs partly in worker processes: the process clock would miss it)."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def matmul_flops_per_second(device, precision, size):
    """The rate of one size×size×size matrix product in this precision (the MFU denominator)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    seconds = timed(lambda: torch.matmul(a, b), 3, device)
    return 2 * size**3 / seconds


def static_bytes(model):
    """Weights and the two Adam moments (tied tensors counted once)."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


def training_memory(model, optimizer, input_ids, labels, device, precision, weights=None):
    """Bytes one training step of this model needs; see the module docstring for what is counted where. `weights`:
    the module that owns the parameters when `model` is a wrapper (a torch.compile module or a sparse-head view)."""
    weights = model if weights is None else weights
    if device.type == "cuda":
        synchronize(device)
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        train_step(model, optimizer, input_ids, labels, device, precision)
        synchronize(device)
        return torch.cuda.max_memory_allocated() - baseline + static_bytes(weights)
    # parameters and buffers (e.g. position ids) exist whether or not a step runs: count only new tensors
    persistent = {t.untyped_storage().data_ptr() for t in (*weights.parameters(), *weights.buffers())}
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
    gradients = sum(p.numel() * p.element_size() for p in weights.parameters())
    return static_bytes(weights) + gradients + sum(saved.values())


@dataclass
class Entry:
    """One model on one path (mode, head): what is called, the module owning the weights, its optimizer."""

    name: str  # BERT or an attention type
    mode: str
    head: str
    model: torch.nn.Module  # called: the model, its sparse-head view, or either's torch.compile wrapper
    weights: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: object  # the SymBERT config whose FLOPs it has (BERT: original's, full head)
    max_predictions_per_seq: int = None
    times_inference: bool = True  # False: a sparse-head view, whose inference is its full-head model's
    train_seconds: list = field(default_factory=list)
    reference_seconds: list = field(default_factory=list)  # per round: `original`'s step time where this one ran
    inference_seconds: list = field(default_factory=list)
    compile_seconds: dict = None
    graphs: int = None
    graph_breaks: int = None


def dynamo_counts():
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def build_entries(args, device, size, seq_len, implementation, types, modes, heads):
    """Every model on every path of one setting, in table order: per mode, per head, BERT then the types. BERT runs
    the full head, eager and in each requested mode; a model's paths share its weights and its AdamW."""
    models, optimizers = build_models(size, types, args.vocab_size, implementation, device)
    predictions = max_predictions(args, seq_len)
    bert_config = model_config(size, "original", args.vocab_size, implementation)
    entries = []
    for mode in MODES:
        if mode not in modes and mode != "eager":  # BERT eager is the run_mlm reference of every run
            continue
        for head in HEADS:
            if head == "full":
                entries.append(Entry(BERT, mode, head, models[BERT], models[BERT], optimizers[BERT], bert_config))
            if mode not in modes or head not in heads:
                continue
            for kind in types:
                model = models[kind]
                if head == "sparse":
                    model = sparse_head_model(model, predictions)
                entries.append(
                    Entry(
                        kind,
                        mode,
                        head,
                        model,
                        models[kind],
                        optimizers[kind],
                        model.config,
                        max_predictions_per_seq=predictions if head == "sparse" else None,
                        times_inference=head == "full" or "full" not in heads,
                    )
                )
    if "compiled" in modes:
        torch._dynamo.reset()  # the previous setting's graphs
        for entry in entries:
            if entry.mode == "compiled":
                entry.model = torch.compile(entry.model, backend=args.compile_backend, dynamic=False)
    return entries


def warm_up(entries, args, device, precision, input_ids, labels):
    """Untimed steps: at least one training step (it creates the Adam state) and, compiled, one inference step;
    a compiled model's first steps compile it (their wall time is recorded as its compile time)."""
    for entry in entries:
        compiled = entry.mode == "compiled"

        def train():
            train_step(entry.model, entry.optimizer, input_ids, labels, device, precision)

        def infer():
            inference_step(entry.model, input_ids, device, precision)

        graphs, breaks = dynamo_counts()
        first_train = wall_timed(train, device)
        first_inference = wall_timed(infer, device) if entry.times_inference and (compiled or args.warmup) else None
        if compiled:
            entry.compile_seconds = {"train": first_train, "inference": first_inference}
            after = dynamo_counts()
            entry.graphs, entry.graph_breaks = after[0] - graphs, after[1] - breaks
        if args.warmup > 1:
            timed(train, args.warmup - 1, device)
            if entry.times_inference:
                timed(infer, args.warmup - 1, device)


def rotated(items, shift):
    shift %= max(1, len(items))
    return items[shift:] + items[:shift]


def timed_round(path_entries, round_index, train, infer, steps, device):
    """One round of one path (mode, head): `original` first and last, the path's other models between them in an
    order that rotates from round to round. A model's ratio to `original` in this round is taken to `original`'s time
    interpolated linearly to its place between the two, which cancels a drift of the machine's speed (another
    tenant, clock changes) over the block; the models of a path run back to back."""
    reference = next((entry for entry in path_entries if entry.name == REFERENCE), None)
    others = rotated([entry for entry in path_entries if entry is not reference], round_index)
    if reference is not None:
        first = timed(lambda: train(reference), steps, device)
    for entry in others:
        entry.train_seconds.append(timed(lambda: train(entry), steps, device))
        if entry.times_inference:
            entry.inference_seconds.append(timed(lambda: infer(entry), steps, device))
    if reference is None:
        return
    if reference.times_inference:
        reference.inference_seconds.append(timed(lambda: infer(reference), steps, device))
    last = timed(lambda: train(reference), steps, device)
    reference.train_seconds.append((first + last) / 2)
    reference.reference_seconds.append((first + last) / 2)
    for place, entry in enumerate(others, start=1):
        entry.reference_seconds.append(first + (last - first) * place / (len(others) + 1))


def benchmark_setting(args, device, size, seq_len, precision, implementation):
    """Rows (one per model and path) of one setting, timed in rounds of path blocks (see timed_round)."""
    entries = build_entries(args, device, size, seq_len, implementation, args.types, args.modes, args.heads)
    predictions = max_predictions(args, seq_len)
    batch_size = args.tokens_per_batch // seq_len
    input_ids, labels = mlm_batch(
        batch_size, seq_len, args.vocab_size, device, predictions_per_seq=masked_positions(seq_len, predictions)
    )
    tokens = input_ids.numel()
    warm_up(entries, args, device, precision, input_ids, labels)
    memory = [
        training_memory(entry.model, entry.optimizer, input_ids, labels, device, precision, entry.weights)
        for entry in entries
    ]
    graphs_before = dynamo_counts()[0]
    matmul_flops_per_second(device, precision, args.matmul_size)  # warm-up
    peak_rates = []
    paths = list(dict.fromkeys((entry.mode, entry.head) for entry in entries))
    for round_index in range(args.rounds):
        for path in rotated(paths, round_index):
            timed_round(
                [entry for entry in entries if (entry.mode, entry.head) == path],
                round_index,
                lambda entry: train_step(entry.model, entry.optimizer, input_ids, labels, device, precision),
                lambda entry: inference_step(entry.model, input_ids, device, precision),
                args.steps_per_round,
                device,
            )
        peak_rates.append(matmul_flops_per_second(device, precision, args.matmul_size))
    peak = statistics.median(peak_rates)
    recompiled = dynamo_counts()[0] - graphs_before
    if recompiled:
        print(f"Warning: {recompiled} graph(s) compiled during the timed rounds (timings include compilation).")

    rows = []
    for entry, memory_bytes in zip(entries, memory):
        inference = entry
        if not entry.times_inference:  # a sparse-head view: its inference is its full-head model's
            inference = next(e for e in entries if (e.name, e.mode, e.head) == (entry.name, entry.mode, "full"))
        flops = training_flops_per_token(entry.config, seq_len)
        train_speed = tokens / statistics.median(entry.train_seconds)
        rows.append(
            {
                "size": size,
                "seq_len": seq_len,
                "batch_size": batch_size,
                "precision": precision,
                "attn_implementation": implementation,
                "mode": entry.mode,
                "head": entry.head,
                "max_predictions_per_seq": entry.max_predictions_per_seq,
                "labelled_per_seq": masked_positions(seq_len, predictions),
                "model": entry.name,
                "parameters": entry.weights.num_parameters(),
                "train_tokens_per_s": train_speed,
                "inference_tokens_per_s": tokens / statistics.median(inference.inference_seconds),
                "inference_timed_on": inference.head,
                "train_seconds": entry.train_seconds,
                "reference_seconds": entry.reference_seconds or None,
                "inference_seconds": inference.inference_seconds,
                "memory_bytes": memory_bytes,
                "train_flops_per_token": flops,
                "matmul_flops_per_s": peak,
                "train_mfu": flops * train_speed / peak,
                "compile_backend": args.compile_backend if entry.mode == "compiled" else None,
                "compile_seconds": entry.compile_seconds,
                "graphs": entry.graphs,
                "graph_breaks": entry.graph_breaks,
                "graphs_compiled_while_timed": recompiled,
            }
        )
    add_ratios_and_targets(rows, device)
    return rows


def add_ratios_and_targets(rows, device):
    """Each row's ratios (see the module docstring) and targets, in place; None where the reference was not run."""
    by_path = {(row["model"], row["mode"], row["head"]): row for row in rows}

    def ratio(row, key, reference):
        return None if reference is None else row[key] / reference[key]

    run_mlm = by_path.get((BERT, "eager", "full"))
    for row in rows:
        mode, head = row["mode"], row["head"]
        original = by_path.get((REFERENCE, mode, head))
        bert = by_path.get((BERT, mode, "full"))
        if row["model"] == BERT:  # BERT's own path is the full head
            original = by_path.get((REFERENCE, mode, "full"))
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

        typed = row["model"] not in (BERT, REFERENCE)
        row["speed_target"] = row["expected_train_ratio"] - SPEED_TOLERANCE if typed and original else None
        row["meets_speed_target"] = (
            None if row["speed_target"] is None else row["train_ratio_original"] >= row["speed_target"]
        )
        versus_bert = row["model"] == REFERENCE and head == "full" and bert is not None
        row["bert_target"] = BERT_TARGET if versus_bert else None
        row["meets_bert_target"] = row["train_ratio_bert"] >= BERT_TARGET if versus_bert else None
        memory_target = row["model"] in MEMORY_TARGET_TYPES and original is not None
        row["memory_target"] = "below original" if memory_target else None
        row["meets_memory_target"] = row["memory_ratio_original"] < 1.0 if memory_target else None
        # the issue's targets (each type's FLOP saving) against BERT with the same mode, full head, at base size
        issue = row["size"] == "base" and row["model"] != BERT and head == "full" and bert is not None
        target = attention_class(row["model"]).train_speed_target if issue else None
        row["train_target"] = target
        row["meets_target"] = (
            None if target is None else row["train_ratio_bert"] >= target and row["memory_ratio_bert"] <= 1.0
        )


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
    """torch.profiler's top operators (self time) of one training step, for BERT and each --profile type, on the first
    requested mode and head (BERT: full head)."""
    kinds = args.profile.split(",")
    mode, head = args.modes[0], args.heads[0]
    entries = [
        entry
        for entry in build_entries(args, device, size, seq_len, implementation, kinds, [mode], [head])
        if entry.mode == mode
    ]
    input_ids, labels = mlm_batch(
        args.tokens_per_batch // seq_len,
        seq_len,
        args.vocab_size,
        device,
        predictions_per_seq=masked_positions(seq_len, max_predictions(args, seq_len)),
    )
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    )
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    tables, shares = [], {}
    for entry in entries:

        def step():
            train_step(entry.model, entry.optimizer, input_ids, labels, device, precision)

        timed(step, 2, device)  # compiles a compiled model
        with torch.profiler.profile(activities=activities) as profiler:
            timed(step, 1, device)
        events = profiler.key_averages()
        table = events.table(sort_by=sort_by, row_limit=15)
        shares[entry.name] = product_share(events, device)
        tables.append(
            f"### {entry.name} ({size}, seq {seq_len}, {precision}, {implementation}, {entry.mode}, "
            f"{entry.head} head)\n\n```\n{table}\n```\n\n"
            f"Matrix products ({', '.join(PRODUCT_OPERATORS)}, attention kernels): {shares[entry.name]:.1%} of the "
            "step's self time."
        )
    original = next((entry for entry in entries if entry.name == REFERENCE), None)
    if original is not None:
        share = shares[REFERENCE]
        lines = [
            f"If a type's matrix products took `original`'s time over its FLOP ratio r and the rest ({1 - share:.1%} "
            f"of `original`'s step here) were the same work, its ratio to `original` would be 1 / (p / r + 1 − p) "
            f"with p = {share:.3f}:",
            "",
            "| type | FLOP ratio r | that ratio | target (r − 0.02) |",
            "| --- | ---: | ---: | ---: |",
        ]
        original_flops = training_flops_per_token(original.config, seq_len)
        for entry in entries:
            if entry.name in (BERT, REFERENCE):
                continue
            flops = original_flops / training_flops_per_token(entry.config, seq_len)
            bound = 1 / (share / flops + 1 - share)
            lines.append(f"| {entry.name} | {flops:.3f} | {bound:.3f} | {flops - SPEED_TOLERANCE:.3f} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


PRODUCT_OPERATORS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def product_share(events, device):
    """Share of a profiled step's self time (the device's on CUDA) in matrix products and fused attention kernels."""
    attribute = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = products = 0.0
    for event in events:
        seconds = getattr(event, attribute)
        total += seconds
        if event.key in PRODUCT_OPERATORS or event.key.startswith(
            ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")
        ):
            products += seconds
    return products / total if total else 0.0


def ratio_text(value):
    return "" if value is None else f"{value:.3f}"


def target_text(threshold, met, form="≥ {:.2f}"):
    if met is None:
        return ""
    return f"{form.format(threshold) if threshold is not None else ''} {'met' if met else 'missed'}".strip()


def rounds_text(row):
    ratios = row["train_ratio_original_rounds"]
    return "" if not ratios or row["model"] == REFERENCE else f"{min(ratios):.3f}–{max(ratios):.3f}"


def head_text(row):
    return row["head"] if row["max_predictions_per_seq"] is None else f"sparse (M {row['max_predictions_per_seq']})"


def compile_text(row):
    seconds = row["compile_seconds"]
    if seconds is None:
        return ""
    inference = "–" if seconds["inference"] is None else f"{seconds['inference']:.0f}"
    return f"{seconds['train']:.0f} / {inference}"


def format_table(rows, cuda=False):
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
    lines = [
        "| " + " | ".join(name for name, _, _ in columns) + " |",
        "| " + " | ".join(align for _, align, _ in columns) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell(row) for _, _, cell in columns) + " |")
    return "\n".join(lines)


def format_checks(checks):
    columns = list(dict.fromkeys(key for row in checks for key in row if key != "model"))
    lines = ["| model | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for row in checks:
        lines.append(f"| {row['model']} | " + " | ".join(f"{row[c]:.2e}" if c in row else "" for c in columns) + " |")
    return "\n".join(lines)


def describe_run(args, device):
    """The paragraph under the title: how the numbers were taken."""
    compiled = "compiled" in args.modes
    warmup = max(1, args.warmup)
    modes = (
        f"eager and compiled (`torch.compile(model, backend={args.compile_backend!r}, dynamic=False)`; a compiled "
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
        f"{', '.join(MEMORY_TARGET_TYPES)} below original's on the same path"
        + (
            "; `target vs BERT (class)`: the class's train_speed_target against BERT with the same mode (full head, "
            "base) and memory ≤ BERT's"
            if device.type == "cuda"
            else ""
        )
        + f". MFU is analytic training FLOPs per second over the median rate of a {args.matmul_size}³ matrix product "
        f"in the same precision, timed in the same rounds. Memory: {memory}"
    )


def main(argv=None):
    run_command(measure, argv)


def measure(argv):
    args = parse_command_line(argv)
    global clock
    clock = CLOCKS[args.clock][0]
    if args.threads:
        torch.set_num_threads(args.threads)
    args.memory_kept = args.device == "cpu" and args.cpu_memory == "keep" and keep_freed_memory()
    # every compiled model adds graphs (training, inference) to the same code objects, the models' forward: raise the
    # limit above their number, and fail rather than fall back to eager when it is hit
    dynamo_settings = dict(recompile_limit=max(8, 8 * (len(args.types) + 1)), fail_on_recompile_limit_hit=True)
    with torch._dynamo.config.patch(**dynamo_settings) if "compiled" in args.modes else nullcontext():
        run(args, argv)


def run(args, argv):
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    load_before = os.getloadavg()
    start = time.perf_counter()
    rows = []
    for size in args.sizes:
        for seq_len in args.seq_lens:
            for precision in args.precisions:
                for implementation in args.attn_implementations:
                    setting_rows = benchmark_setting(args, device, size, seq_len, precision, implementation)
                    print(format_table(setting_rows, cuda), flush=True)
                    rows += setting_rows
    checks = check_implementations(args, device, args.sizes[0], args.seq_lens[0]) if cuda else None
    profile = None
    if args.profile:
        profile = profile_table(
            args, device, args.sizes[-1], args.seq_lens[0], args.precisions[0], args.attn_implementations[0]
        )
    wall_seconds = time.perf_counter() - start
    load_after = os.getloadavg()

    command = shlex.join(["python", "benchmarks/throughput.py", *argv])
    threads = f"{torch.get_num_threads()} torch threads" if not cuda else f"{os.cpu_count()} CPU cores"
    settings = {(r["size"], r["seq_len"], r["precision"], r["attn_implementation"]): r for r in rows}
    recompiled = sum(row["graphs_compiled_while_timed"] for row in settings.values())
    header = [
        f"# Throughput and memory against transformers' BertForMaskedLM ({args.device})",
        f"Command: `{command}`",
        f"Machine: {describe_machine()}; transformers {transformers.__version__}; {threads}; "
        f"flash-attn {'installed' if flash_attention_available(args.device) else 'not installed'}. "
        f"Wall time {wall_seconds / 60:.1f} min. Load average (1, 5, 15 min): "
        f"{tuple(round(x, 2) for x in load_before)} at the start, {tuple(round(x, 2) for x in load_after)} at the end.",
        describe_run(args, device),
        format_table(rows, cuda),
    ]
    if recompiled:
        header.insert(-1, f"**Warning**: {recompiled} graph(s) were compiled during the timed rounds.")
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
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads() if not cuda else None,
        "clock": args.clock,
        "cpu_memory": "kept" if args.memory_kept else "released",
        "modes": args.modes,
        "heads": args.heads,
        "compile_backend": args.compile_backend if "compiled" in args.modes else None,
        "warmup_steps": max(1, args.warmup),
        "rounds": args.rounds,
        "steps_per_round": args.steps_per_round,
        "tokens_per_batch": args.tokens_per_batch,
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
