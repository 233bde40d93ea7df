"""The measuring half of benchmarks/throughput.py: the models, the batches, the timed training and inference steps,
their memory and FLOPs, and the rounds that pair each model with `original` (see throughput.py's docstring)."""

import argparse
import copy
import math
import os
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import transformers
from transformers import BertConfig, BertForMaskedLM

from symbert import BERT_ATTENTION_TYPE, SymBertConfig, SymBertForMaskedLM, attention_class
from symbert.attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES

PRECISIONS = ("fp32", "bf16")
IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")
MODES = ("eager", "compiled")
# what torch.compile compiles: `layers`, each encoder layer (regional compilation: the layers of a model share one
# graph, so a cold compile traces and optimises one layer, not all of them, and the sparse head's path reuses the full
# head's); `whole`, the whole model as one graph (fusions across the embeddings, the layers and the head)
COMPILE_SCOPES = ("layers", "whole")
HEADS = ("full", "sparse")
BERT = "bert"
MASK_RATE = 0.15  # labelled positions per sequence, as BERT's pre-training
PREDICTION_RATE = 0.2  # default max_predictions_per_seq = ceil(0.2 × seq_len)
# What the attention classes say, for classes that do not say it yet (see reference_type, memory_target_types): BERT's
# own type, the config's default; and no memory target where no class claims a saving
FALLBACK_REFERENCE = BERT_ATTENTION_TYPE
FALLBACK_MEMORY_TARGET_TYPES = ()


def reference_type() -> str:
    """The attention type every path's ratios are taken to: BERT's own self-attention, the registered class that sets
    `is_bert_reference = True` in its own body (gqa and symmetric_init subclass `original`'s class but are not BERT).
    Where no class has the attribute (classes that predate it), the config's default type (BERT_ATTENTION_TYPE)."""
    classes = SYMBERT_SELF_ATTENTION_CLASSES
    if not any(hasattr(cls, "is_bert_reference") for cls in classes.values()):
        return FALLBACK_REFERENCE
    marked = [name for name, cls in classes.items() if vars(cls).get("is_bert_reference", False)]
    if len(marked) != 1:
        raise ValueError(f"Exactly one attention class must set is_bert_reference = True; found {marked}.")
    return marked[0]


def memory_target_types() -> tuple[str, ...]:
    """The types whose training memory should be below `original`'s: the registered classes with
    `saves_attention_memory = True`. Where no class has the attribute (classes that predate it), none."""
    classes = SYMBERT_SELF_ATTENTION_CLASSES
    if not any(hasattr(cls, "saves_attention_memory") for cls in classes.values()):
        return FALLBACK_MEMORY_TARGET_TYPES
    return tuple(name for name, cls in classes.items() if cls.saves_attention_memory)


def headline_types() -> tuple[str, str]:
    """The two types a short benchmark runs first: the reference (BERT's own) and the first type registered after it
    (the registry lists the types in the project's order: its first alternative to BERT's attention)."""
    reference = reference_type()
    return reference, next(name for name in SYMBERT_SELF_ATTENTION_CLASSES if name != reference)


def flash_attention_available(device: str) -> bool:
    return device == "cuda" and transformers.utils.is_flash_attn_2_available()


def max_predictions(args: argparse.Namespace, seq_len: int) -> int:
    """The sparse head's M at this sequence length."""
    return args.max_predictions_per_seq or math.ceil(PREDICTION_RATE * seq_len)


def model_config(size: str, attention_type: str, vocab_size: int, implementation: str, **overrides) -> SymBertConfig:
    return SymBertConfig.from_preset(
        size, attention_type=attention_type, vocab_size=vocab_size, attn_implementation=implementation, **overrides
    )


def build_models(
    size: str, types: list[str], vocab_size: int, implementation: str, device: torch.device
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer]]:
    """BERT (transformers' own) and each SymBERT type, same sizes and attention implementation, each with a fused
    AdamW: the Trainer's default optimizer (adamw_torch_fused) on a CPU as on CUDA with torch >= 2.8."""
    reference = model_config(size, reference_type(), vocab_size, implementation)
    bert_fields = {key: value for key, value in reference.to_dict().items() if key in BertConfig().to_dict()}
    models = {BERT: BertForMaskedLM(BertConfig(**bert_fields, attn_implementation=implementation))}
    for kind in types:
        models[kind] = SymBertForMaskedLM(model_config(size, kind, vocab_size, implementation))
    optimizers = {}
    for name, model in models.items():
        model.to(device)
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return models, optimizers


def sparse_head_model(model: SymBertForMaskedLM, max_predictions_per_seq: int) -> SymBertForMaskedLM:
    """`model` with the sparse MLM head (sparse_prediction=True, max_predictions_per_seq): the same modules, hence the
    same weights (only SymBertForMaskedLM.forward reads the two fields)."""
    config = copy.deepcopy(model.config)
    config.sparse_prediction, config.max_predictions_per_seq = True, max_predictions_per_seq
    config.validate()
    with torch.device("meta"):  # no weights of its own: they are replaced by the model's modules
        sparse = SymBertForMaskedLM(config)
    sparse.bert, sparse.cls = model.bert, model.cls
    return sparse


def training_flops_per_token(config: SymBertConfig, seq_len: int) -> float:
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


def masked_positions(seq_len: int, max_predictions_per_seq: int | None = None) -> int:
    """Labelled positions per sequence: round(0.15 × seq_len) (at least 1), at most max_predictions_per_seq."""
    count = max(1, round(MASK_RATE * seq_len))
    return count if max_predictions_per_seq is None else min(count, max_predictions_per_seq)


def mlm_batch(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    device: torch.device,
    seed: int = 0,
    predictions_per_seq: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
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


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    precision: str,
) -> None:
    model.train()
    with autocast(device, precision):
        loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@torch.inference_mode()
def inference_step(model: torch.nn.Module, input_ids: torch.Tensor, device: torch.device, precision: str) -> None:
    model.eval()
    with autocast(device, precision):
        model(input_ids=input_ids)


CLOCKS = {  # --clock: (what it reads, how the report names it)
    "wall": (time.perf_counter, "wall time"),
    "process": (time.process_time, "CPU time of this process"),
    "user": (lambda: os.times().user, "user-mode CPU time of this process (the kernel's page faults left out)"),
}
clock = CLOCKS["wall"][0]  # set by use_clock (--clock)


def use_clock(name: str) -> None:
    """Time the steps with the clock --clock names."""
    global clock
    clock = CLOCKS[name][0]


def timed(function: Callable[[], object], steps: int, device: torch.device) -> float:
    synchronize(device)
    start = clock()
    for _ in range(steps):
        function()
    synchronize(device)
    return (clock() - start) / steps


def wall_timed(function: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of one call (compilation runs partly in worker processes: the process clock would miss it)."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def matmul_flops_per_second(device: torch.device, precision: str, size: int) -> float:
    """The rate of one size×size×size matrix product in this precision (the MFU denominator)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    seconds = timed(lambda: torch.matmul(a, b), 3, device)
    return 2 * size**3 / seconds


def static_bytes(model: torch.nn.Module) -> int:
    """Weights and the two Adam moments (tied tensors counted once)."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


def training_memory(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    precision: str,
    weights: torch.nn.Module | None = None,
) -> int:
    """Bytes one training step of this model needs; see throughput.py's docstring for what is counted where.
    `weights`: the module that owns the parameters when `model` is a wrapper (a torch.compile module or a sparse-head
    view)."""
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

    def pack(tensor: torch.Tensor) -> torch.Tensor:
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
    max_predictions_per_seq: int | None = None
    times_inference: bool = True  # False: a sparse-head view, whose inference is its full-head model's
    train_seconds: list[float] = field(default_factory=list)
    reference_seconds: list[float] = field(default_factory=list)  # per round: `original`'s step time where this ran
    inference_seconds: list[float] = field(default_factory=list)
    compile_seconds: dict[str, float | None] | None = None
    graphs: int | None = None
    graph_breaks: int | None = None


def with_module(model: torch.nn.Module, path: str, replacement: torch.nn.Module) -> torch.nn.Module:
    """A view of `model` whose submodule at the dotted `path` is `replacement`: shallow copies down that path, every
    other module (and every weight) shared with `model`, which is left as it was."""
    name, _, rest = path.partition(".")
    view = copy.copy(model)
    view._modules = dict(model._modules)  # copy.copy shares the dict: a change would reach `model`
    view._modules[name] = with_module(model._modules[name], rest, replacement) if rest else replacement
    return view


def compiled(model: torch.nn.Module, scope: str, backend: str) -> torch.nn.Module:
    """`model` under torch.compile (static shapes) at this scope (see COMPILE_SCOPES): the eager model stays usable
    as it was, with the same weights."""
    if scope == "whole":
        return torch.compile(model, backend=backend, dynamic=False)
    layers = torch.nn.ModuleList(
        torch.compile(layer, backend=backend, dynamic=False) for layer in model.bert.encoder.layer
    )
    return with_module(model, "bert.encoder.layer", layers)


def dynamo_counts() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def build_entries(
    args: argparse.Namespace,
    device: torch.device,
    size: str,
    seq_len: int,
    implementation: str,
    types: list[str],
    modes: list[str],
    heads: list[str],
) -> list[Entry]:
    """Every model on every path of one setting, in table order: per mode, per head, BERT then the types. BERT runs
    the full head, eager and in each requested mode; a model's paths share its weights and its AdamW."""
    models, optimizers = build_models(size, types, args.vocab_size, implementation, device)
    predictions = max_predictions(args, seq_len)
    bert_config = model_config(size, reference_type(), args.vocab_size, implementation)
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
                entry.model = compiled(entry.model, args.compile_scope, args.compile_backend)
    return entries


def warm_up(
    entries: list[Entry],
    args: argparse.Namespace,
    device: torch.device,
    precision: str,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
) -> None:
    """Untimed steps: at least one training step (it creates the Adam state) and, compiled, one inference step;
    a compiled model's first steps compile it (their wall time is recorded as its compile time)."""
    for entry in entries:
        compiled = entry.mode == "compiled"

        def train() -> None:
            train_step(entry.model, entry.optimizer, input_ids, labels, device, precision)

        def infer() -> None:
            inference_step(entry.model, input_ids, device, precision)

        graphs, breaks = dynamo_counts()
        first_train = wall_timed(train, device)
        first_inference = wall_timed(infer, device) if entry.times_inference and (compiled or args.warmup) else None
        if compiled:
            entry.compile_seconds = {"train": first_train, "inference": first_inference}
            after = dynamo_counts()
            entry.graphs, entry.graph_breaks = after[0] - graphs, after[1] - breaks
            inference = "" if first_inference is None else f", first inference step {first_inference:.1f} s"
            # in the log as it is measured: a run stopped while compiling the next model keeps it
            print(
                f"compiled {entry.name}, {entry.head} head: first training step {first_train:.1f} s{inference}",
                flush=True,
            )
        if args.warmup > 1:
            timed(train, args.warmup - 1, device)
            if entry.times_inference:
                timed(infer, args.warmup - 1, device)


def rotated(items: list, shift: int) -> list:
    shift %= max(1, len(items))
    return items[shift:] + items[:shift]


def timed_round(
    path_entries: list[Entry],
    round_index: int,
    train: Callable[[Entry], object],
    infer: Callable[[Entry], object],
    steps: int,
    device: torch.device,
) -> None:
    """One round of one path (mode, head): `original` first and last, the path's other models between them in an
    order that rotates from round to round. A model's ratio to `original` in this round is taken to `original`'s time
    interpolated linearly to its place between the two, which cancels a drift of the machine's speed (another
    tenant, clock changes) over the block; the models of a path run back to back."""
    reference_name = reference_type()
    reference = next((entry for entry in path_entries if entry.name == reference_name), None)
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


def benchmark_setting(
    args: argparse.Namespace,
    device: torch.device,
    size: str,
    seq_len: int,
    precision: str,
    implementation: str,
    keep: Callable[[list[dict]], None] = lambda rows: None,
) -> list[dict]:
    """Rows (one per model and path) of one setting, timed in rounds of path blocks (see timed_round); their ratios
    and targets are added by throughput_report.add_ratios_and_targets. `keep` is given the rows of the rounds so far
    after each round."""
    entries = build_entries(args, device, size, seq_len, implementation, args.types, args.modes, args.heads)
    predictions = max_predictions(args, seq_len)
    batch_size = args.tokens_per_batch // seq_len
    input_ids, labels = mlm_batch(
        batch_size, seq_len, args.vocab_size, device, predictions_per_seq=masked_positions(seq_len, predictions)
    )
    warm_up(entries, args, device, precision, input_ids, labels)
    memory = [
        training_memory(entry.model, entry.optimizer, input_ids, labels, device, precision, entry.weights)
        for entry in entries
    ]
    graphs_before = dynamo_counts()[0]
    setting = (size, precision, implementation)
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
        if round_index < args.rounds - 1:
            keep(setting_rows(args, setting, entries, memory, input_ids, peak_rates, graphs_before))
    rows = setting_rows(args, setting, entries, memory, input_ids, peak_rates, graphs_before)
    if rows[0]["graphs_compiled_while_timed"]:
        recompiled = rows[0]["graphs_compiled_while_timed"]
        print(f"Warning: {recompiled} graph(s) compiled during the timed rounds (timings include compilation).")
    return rows


def setting_rows(
    args: argparse.Namespace,
    setting: tuple[str, str, str],
    entries: list[Entry],
    memory: list[int],
    input_ids: torch.Tensor,
    peak_rates: list[float],
    graphs_before: int,
) -> list[dict]:
    """The rows of a setting (size, precision, implementation) from the rounds timed so far (their medians)."""
    (size, precision, implementation), (batch_size, seq_len) = setting, input_ids.shape
    tokens, predictions = input_ids.numel(), max_predictions(args, seq_len)
    peak = statistics.median(peak_rates)
    recompiled = dynamo_counts()[0] - graphs_before
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
                "rounds_timed": len(entry.train_seconds),
                "train_seconds": list(entry.train_seconds),
                "reference_seconds": list(entry.reference_seconds) or None,
                "inference_seconds": list(inference.inference_seconds),
                "memory_bytes": memory_bytes,
                "train_flops_per_token": flops,
                "matmul_flops_per_s": peak,
                "train_mfu": flops * train_speed / peak,
                "compile_backend": args.compile_backend if entry.mode == "compiled" else None,
                "compile_scope": args.compile_scope if entry.mode == "compiled" else None,
                "compile_seconds": entry.compile_seconds,
                "graphs": entry.graphs,
                "graph_breaks": entry.graph_breaks,
                "graphs_compiled_while_timed": recompiled,
            }
        )
    return rows


def check_implementations(
    args: argparse.Namespace, device: torch.device, size: str, seq_len: int
) -> list[dict[str, str | float]]:
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


def profile_steps(
    args: argparse.Namespace, device: torch.device, size: str, seq_len: int, precision: str, implementation: str
) -> list[tuple[Entry, str, float]]:
    """torch.profiler's top operators (self time) of one training step, and the share of matrix products in it, for
    BERT and each --profile type, on the first requested mode and head (BERT: full head)."""
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
    profiled = []
    for entry in entries:

        def step() -> None:
            train_step(entry.model, entry.optimizer, input_ids, labels, device, precision)

        timed(step, 2, device)  # compiles a compiled model
        with torch.profiler.profile(activities=activities) as profiler:
            timed(step, 1, device)
        events = profiler.key_averages()
        profiled.append((entry, events.table(sort_by=sort_by, row_limit=15), product_share(events, device)))
    return profiled


PRODUCT_OPERATORS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def product_share(events: list, device: torch.device) -> float:
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
