"""The arguments of symbert-pretrain: our three dataclasses and the Trainer's, recipes as their defaults, and the
checks that refuse a bad value with one line naming it and what is allowed, before anything is read or written."""

import difflib
import json
import math
import os
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch
from transformers import (
    HfArgumentParser,
    PreTrainedTokenizerBase,
    TrainingArguments,
)

from .. import ATTENTION_TYPES, BERT_ATTENTION_TYPE, SIZE_PRESETS, SymBertConfig, attention_class
from ..cli import UserError, command_parser, group_arguments, missing_local_path
from ..json_files import load_json
from .compat import TRAINER_HAS_OVERWRITE, overwrite_requested
from .data.manifest import with_prepared_source
from .data.options import DataArguments
from .precision import LAUNCHER_PRECISION, LAUNCHER_PRECISION_VARIABLE, PRECISIONS, precision_for

RECIPES_DIR = Path(__file__).parent / "recipes"
DISTILLATION_STAGES = ("attention", "model")  # --distill_stage: training/distillation.py's two losses


@dataclass
class RunArguments:
    """What to run and how: the recipe, a comparison of attention types, the batch over all processes, precision."""

    _argument_group_name = "Run arguments"

    recipe: str | None = field(default=None, metadata={"help": "recipe name (training/recipes/NAME.json) or path"})
    compare: str | None = field(
        default=None,
        metadata={
            "help": "comma-separated attention types: train each (same seed and data order) into OUTPUT_DIR/<type>"
        },
    )
    target_eval_loss: float | None = field(
        default=None, metadata={"help": "comparison target (default: the first compared type's final eval loss)"}
    )
    summarize_only: bool = field(
        default=False,
        metadata={
            "help": "with --compare: train nothing, rebuild comparison.md and comparison.png from the finished runs "
            "in OUTPUT_DIR/<type>"
        },
    )
    global_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "sequences per optimizer step, over all processes: sets gradient_accumulation_steps = global / "
            "(per-device batch × processes)"
        },
    )
    stop_when_flat: int | None = field(
        default=None,
        metadata={
            "help": "end training once this many evaluations in a row have not lowered the best eval loss by 0.5%% "
            "(default: train to --max_steps)"
        },
    )
    precision: str = field(
        default="auto",
        metadata={
            "help": "auto (the launcher's --mixed_precision if it names one, else bf16 or fp16 on GPU, fp32 on CPU), "
            "bf16, fp16 (not on a CPU), fp32"
        },
    )
    if not TRAINER_HAS_OVERWRITE:  # transformers 4.x's TrainingArguments has its own --overwrite_output_dir
        overwrite_output_dir: bool = field(
            default=False,
            metadata={
                "help": "train from scratch into an output folder that already holds a finished run (its "
                "checkpoints are deleted); without it such a folder is an error, and an unfinished run resumes"
            },
        )


@dataclass
class ModelArguments:
    """The model trained: its size preset, attention type and config changes."""

    _argument_group_name = "Model arguments"

    size: str = field(default="tiny", metadata={"help": f"size preset: {', '.join(SIZE_PRESETS)}"})
    attention_type: str = field(default=BERT_ATTENTION_TYPE, metadata={"help": f"one of {', '.join(ATTENTION_TYPES)}"})
    config_overrides: str | None = field(
        default=None, metadata={"help": 'JSON object of SymBertConfig fields, e.g. \'{"pairwise_init": "identity"}\''}
    )
    pad_vocab_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "round the model's embedding and decoder rows up to a multiple of this (e.g. 64: faster matrix "
            "products on GPU; the config's pad_vocab_size_multiple); the extra rows are never input nor predicted; "
            "at most 65536. Default: the tokenizer's size"
        },
    )
    init_from: str | None = field(
        default=None,
        metadata={
            "help": "start from this SymBERT model folder (e.g. symbert-convert's) instead of a new model: its config "
            "and weights (an MLM head it lacks is new); its tokenizer unless --tokenizer or --blocks_dir names one"
        },
    )
    teacher: str | None = field(
        default=None,
        metadata={
            "help": "distil toward this BERT or SymBERT folder: the loss is the normalised error of every layer's "
            "hidden states against the teacher's, plus the KL divergence of the masked-LM logits at the masked "
            "positions when the teacher has an MLM head; same vocabulary, hidden size, heads and layers"
        },
    )
    distill_stage: str = field(
        default="model",
        metadata={
            "help": "with --teacher: 'attention' trains only each layer's self-attention to reproduce the teacher's "
            "attention output on the teacher's layer inputs (the rest frozen); 'model' (default) trains the whole "
            "model on the teacher's hidden states, its mean-pooled sentence embedding and, where it has one, its "
            "MLM head"
        },
    )
    pooled_loss_weight: float = field(
        default=1.0,
        metadata={"help": "--distill_stage model: weight of (1 - cosine) of the mean-pooled last hidden states"},
    )
    attention_map_loss_weight: float = field(
        default=0.0,
        metadata={
            "help": "--distill_stage attention: weight of the KL divergence of each head's attention distribution "
            "from the teacher's"
        },
    )
    value_relation_loss_weight: float = field(
        default=0.0,
        metadata={
            "help": "with --teacher: weight of MiniLM's value-relation loss (the KL divergence of each head's "
            "softmax(V·Vᵀ/√d) from the teacher's)"
        },
    )
    paper_weight_decay: bool = field(
        default=False,
        metadata={
            "help": "multiply --weight_decay by the factor the attention type's paper trains it with ("
            + "; ".join(
                f"{name}: {attention_class(name).paper_weight_decay_factor:g}"
                for name in ATTENTION_TYPES
                if attention_class(name).paper_weight_decay_factor != 1
            )
            + "; the other types: 1)"
        },
    )


ARGUMENT_DATACLASSES = (RunArguments, ModelArguments, DataArguments, TrainingArguments)  # parse_arguments' order


def recipe_path(recipe: str) -> Path:
    path = Path(recipe)
    if path.suffix == ".json" and path.is_file():
        return path
    path = RECIPES_DIR / f"{recipe}.json"
    if not path.is_file():
        known = sorted(p.stem for p in RECIPES_DIR.glob("*.json"))
        raise UserError(f"Unknown recipe {recipe!r}: not a .json file and not one of {', '.join(known)}.")
    return path


def unknown_name_message(kind: str, name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    return f"unknown {kind} {name!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")


def read_recipe(recipe: str) -> list[str]:
    """The recipe's settings as command-line arguments; keys starting with "_" are comments."""
    path = recipe_path(recipe)
    try:
        settings = load_json(path)
    except ValueError as error:  # not UTF-8, not JSON, a setting given twice
        raise UserError(f"Recipe {path} is not valid JSON: {error}.") from None
    if not isinstance(settings, dict):
        raise UserError(
            f"Recipe {path} must hold a JSON object of argument names and values, not a {type(settings).__name__}."
        )
    known = [f.name for dataclass in ARGUMENT_DATACLASSES for f in fields(dataclass)]
    arguments = []
    for key, value in settings.items():
        if key.startswith("_"):
            continue
        if key not in known:
            raise UserError(f"Recipe {path}: {unknown_name_message('argument', key, known)}.")
        values = value if isinstance(value, list) else [value]
        arguments += [f"--{key}", *(json.dumps(v) if isinstance(v, (dict, bool)) else str(v) for v in values)]
    return arguments


TRAINER_HEADING = (
    "Trainer arguments (transformers.TrainingArguments; see its documentation; mixed precision comes from "
    "--precision above)"
)


def recipe_list() -> str:
    """Each recipe of training/recipes/ with its _comment, for --help."""
    lines = []
    for path in sorted(RECIPES_DIR.glob("*.json")):
        comment = json.loads(path.read_text()).get("_comment", "")
        lines.append(
            textwrap.fill(f"{path.stem}: {comment}", width=110, initial_indent="  ", subsequent_indent="      ")
        )
    return "Recipes (--recipe NAME):\n" + "\n".join(lines)


def argument_parser(usage: str = "") -> HfArgumentParser:
    """Our arguments first, each dataclass under its heading, then the Trainer's under theirs."""
    parser = command_parser(
        f"{usage}\n{recipe_list()}",
        parser_class=HfArgumentParser,
        dataclass_types=ARGUMENT_DATACLASSES,
    )
    group_arguments(parser, TrainingArguments, TRAINER_HEADING)
    return parser


def recipe_named(argv: list[str]) -> str | None:
    """The value of the last --recipe in `argv` (the last one wins, as argparse has it), or None."""
    recipe = None
    for index, arg in enumerate(argv):
        if arg == "--recipe":
            if index + 1 >= len(argv):
                raise UserError("--recipe needs a name or a path to a JSON recipe file.")
            recipe = argv[index + 1]
        elif arg.startswith("--recipe="):
            recipe = arg.removeprefix("--recipe=")
    return recipe


def parse_arguments(
    argv: list[str], usage: str = ""
) -> tuple[RunArguments, ModelArguments, DataArguments, TrainingArguments]:
    """(run, model, data, Trainer) arguments. A recipe's values become the parser's defaults (so --help shows
    them), and the command line wins."""
    parser = argument_parser(usage)
    recipe = recipe_named(argv)
    recipe_args = []
    if recipe is not None:
        recipe_args = read_recipe(recipe)
        try:
            settings, _ = parser.parse_known_args(recipe_args)
        except UserError as error:
            raise UserError(f"Recipe {recipe_path(recipe)}: {error}") from None
        names = {arg[2:] for arg in recipe_args if arg.startswith("--")}
        parser.set_defaults(**{name: getattr(settings, name) for name in names})
    try:
        run_args, model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)
    except ValueError as error:  # TrainingArguments' own checks (e.g. warmup_steps < 0), arguments left unparsed
        if isinstance(error, UserError):
            raise
        raise UserError(" ".join(str(error).split())) from error
    named = argument_names([*recipe_args, *argv])
    model_args = settle_attention_type(run_args, model_args, named)
    if model_args.init_from is not None:
        if missing := missing_local_path(model_args.init_from):
            raise missing
        if data_args.tokenizer is None and data_args.blocks_dir is None:
            data_args = replace(data_args, tokenizer=model_args.init_from)
        check_init_from_type(run_args, model_args, named)
    if data_args.blocks_dir is not None:  # the data a run trains on and records is the folder's
        data_args = with_prepared_source(data_args, given=argument_names(argv))
    return run_args, model_args, data_args, check_arguments(run_args, model_args, data_args, training_args, named)


def check_init_from_type(run_args: RunArguments, model_args: ModelArguments, named: set[str]) -> None:
    """--init_from trains the folder's model, of its own attention type: a --compare, or another type named by
    --attention_type or --config_overrides, would be trained as the folder's type and labelled otherwise."""
    if run_args.compare:
        raise UserError(
            f"--compare {run_args.compare!r} trains each type from scratch, --init_from {model_args.init_from!r} the "
            "folder's model of its own type: give one of them."
        )
    if "attention_type" not in named and "attention_type" not in config_overrides(model_args):
        return
    try:
        folder_type = json.loads((Path(model_args.init_from) / "config.json").read_text(encoding="utf-8"))
        folder_type = folder_type.get("attention_type") if isinstance(folder_type, dict) else None
    except (OSError, ValueError):
        return  # initial_config says what is wrong with the folder
    if isinstance(folder_type, str) and folder_type != model_args.attention_type:
        raise UserError(
            f"attention_type {model_args.attention_type!r} is not --init_from {model_args.init_from!r}'s "
            f"({folder_type!r}): the run trains the folder's model; leave attention_type out, or convert a BERT to "
            f"{model_args.attention_type!r} first (symbert-convert)."
        )


def settle_attention_type(run_args: RunArguments, model_args: ModelArguments, named: set[str]) -> ModelArguments:
    """An attention_type in --config_overrides becomes the run's when neither --attention_type nor --compare names
    one; where both name one, model_config checks that they agree (for each compared type)."""
    overridden = config_overrides(model_args).get("attention_type")
    if overridden is None or run_args.compare or "attention_type" in named:
        return model_args
    return replace(model_args, attention_type=overridden)


def argument_names(argv: list[str]) -> set[str]:
    """The names of the options in `argv` (a command line or a recipe's arguments): {"optim"} for ["--optim", "sgd"]
    or ["--optim=sgd"]."""
    return {arg[2:].partition("=")[0] for arg in argv if arg.startswith("--")}


def min_block_length(mlm_probability: float) -> int:
    """The shortest block with at least one masked token on average: (length - 2) × p ≥ 1, the 2 for a text's
    [CLS] and [SEP]. Shorter blocks leave eval batches with nothing masked, and a NaN eval loss."""
    return 2 + math.ceil(1 / mlm_probability - 1e-9)


def finite_above_zero(value: float) -> bool:
    return math.isfinite(value) and value > 0


def finite_at_least_zero(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def at_least_one(value: int) -> bool:
    return value > 0


MAX_SEED = 2**32 - 1  # set_seed seeds numpy, whose seeds are 32-bit
# --pad_vocab_to_multiple_of pads the vocabulary for the GPU's matrix tiles (64 or 128); a larger multiple only adds
# embedding rows that no token uses (1e9 would ask for 512 GB of embeddings)
MAX_PAD_VOCAB_MULTIPLE = 65536

# Numbers TrainingArguments accepts but that make no training, or NaN losses: (argument, rule, what is allowed). An
# argument that is None (an optional one not given) is not checked.
NUMBER_RULES = (
    ("mlm_probability", lambda value: 0 < value < 1, "strictly between 0 and 1"),
    ("learning_rate", finite_above_zero, "a finite number above 0"),
    ("weight_decay", finite_at_least_zero, "a finite number ≥ 0"),
    ("warmup_steps", finite_at_least_zero, "a finite number ≥ 0"),
    ("adam_beta1", lambda value: 0 <= value < 1, "in [0, 1)"),
    ("adam_beta2", lambda value: 0 <= value < 1, "in [0, 1)"),
    ("adam_epsilon", finite_at_least_zero, "a finite number ≥ 0"),
    ("max_grad_norm", finite_at_least_zero, "a finite number ≥ 0 (0: no clipping)"),
    (
        "max_steps",
        lambda value: value > 0 or value == -1,
        "a positive number of steps, or -1 to train num_train_epochs",
    ),
    ("per_device_train_batch_size", at_least_one, "at least 1"),
    ("per_device_eval_batch_size", at_least_one, "at least 1"),
    ("gradient_accumulation_steps", at_least_one, "at least 1"),
    ("seed", lambda value: 0 <= value <= MAX_SEED, f"an integer ≥ 0 and at most {MAX_SEED} (2**32 - 1, numpy's range)"),
    (
        "data_seed",
        lambda value: 0 <= value <= MAX_SEED,
        f"an integer ≥ 0 and at most {MAX_SEED} (2**32 - 1, numpy's range), or unset",
    ),
    ("global_batch_size", at_least_one, "at least 1"),
    ("num_proc", at_least_one, "at least 1 (or unset: one process)"),
    ("dataloader_num_workers", lambda value: value >= 0, "an integer ≥ 0 (0: the training process reads the data)"),
)
# Checked only where they are used: epochs without max_steps, a step interval with its strategy set to "steps"
EPOCHS_RULE = ("num_train_epochs", finite_above_zero, "a finite number above 0 (or set max_steps)")
INTERVALS = (("eval_strategy", "eval_steps"), ("save_strategy", "save_steps"), ("logging_strategy", "logging_steps"))


def check_numbers(run_args: RunArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Each number of NUMBER_RULES (and those that apply of the others) must follow its rule; the first that does not
    is named with its value and what is allowed."""
    rules = list(NUMBER_RULES)
    if training_args.max_steps == -1:
        rules.append(EPOCHS_RULE)
    for strategy, steps in INTERVALS:
        if getattr(training_args, strategy) == "steps":
            rules.append((steps, finite_above_zero, f"above 0 with {strategy}=steps"))
    for name, rule, allowed in rules:
        holder = next(args for args in (data_args, run_args, training_args) if hasattr(args, name))
        value = getattr(holder, name)
        if value is not None and not rule(value):
            raise UserError(f"{name}={value} is not allowed; it must be {allowed}.")
    shortest = min_block_length(data_args.mlm_probability)
    if data_args.max_seq_length < shortest:
        raise UserError(
            f"max_seq_length={data_args.max_seq_length} is too short to mask: with mlm_probability="
            f"{data_args.mlm_probability} a block needs (max_seq_length - 2) × mlm_probability ≥ 1 masked token on "
            f"average (2 for [CLS] and [SEP]), so max_seq_length ≥ {shortest}."
        )
    if data_args.streaming and data_args.blocks_dir is None and training_args.max_steps <= 0:
        raise UserError("streaming=True needs --max_steps: a stream has no length to count num_train_epochs in.")


def check_arguments(
    run_args: RunArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    named: set[str] | frozenset[str] = frozenset(),
) -> TrainingArguments:
    """Validate, then derive accumulation from the global batch, and mixed precision and the optimizer from the
    hardware. `named`: the arguments the command line or the recipe gave (the others have their defaults)."""
    for kind in [model_args.attention_type, *(run_args.compare or "").split(",")]:
        if kind and kind not in ATTENTION_TYPES:
            raise UserError(f"attention type {kind!r} is not supported; allowed: {', '.join(ATTENTION_TYPES)}.")
    if run_args.compare is not None:
        kinds = run_args.compare.split(",")
        if "" in kinds:
            raise UserError(
                f"compare={run_args.compare!r} has an empty entry; give attention types separated by commas, e.g. "
                f"{','.join(list(ATTENTION_TYPES)[:2])}."
            )
        if twice := sorted({kind for kind in kinds if kinds.count(kind) > 1}):
            raise UserError(
                f"compare={run_args.compare!r} names {', '.join(map(repr, twice))} more than once; name each type "
                "once (each trains into OUTPUT_DIR/<type>)."
            )
    if run_args.summarize_only and run_args.compare is None:
        raise UserError(
            "summarize_only=True rebuilds a comparison's summary; give the types compared with --compare (e.g. "
            f"--compare {','.join(list(ATTENTION_TYPES)[:2])})."
        )
    if run_args.summarize_only and overwrite_requested(run_args, training_args):
        raise UserError(
            "summarize_only=True trains nothing but overwrite_output_dir=True trains every type again; give one of them."
        )
    if run_args.stop_when_flat is not None and run_args.stop_when_flat < 1:
        raise UserError(f"stop_when_flat={run_args.stop_when_flat} must be at least 1 (evaluations), or unset.")
    if model_args.distill_stage not in DISTILLATION_STAGES:
        raise UserError(
            f"distill_stage {model_args.distill_stage!r} is not a stage; allowed: {', '.join(DISTILLATION_STAGES)}."
        )
    if model_args.distill_stage != "model" and model_args.teacher is None:
        raise UserError(f"distill_stage {model_args.distill_stage!r} needs --teacher (a stage distils toward it).")
    for name in ("pooled_loss_weight", "attention_map_loss_weight", "value_relation_loss_weight"):
        value = getattr(model_args, name)
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"{name}={value} must be a finite number of at least 0.")
    if model_args.attention_map_loss_weight and model_args.distill_stage != "attention":
        raise UserError(
            f"attention_map_loss_weight={model_args.attention_map_loss_weight} applies to --distill_stage attention "
            f"only (this run's is {model_args.distill_stage!r}); leave it at 0."
        )
    if model_args.teacher is None and (model_args.attention_map_loss_weight or model_args.value_relation_loss_weight):
        raise UserError("attention_map_loss_weight and value_relation_loss_weight need --teacher (they distil).")
    if model_args.size not in SIZE_PRESETS:
        raise UserError(f"size {model_args.size!r} is not a preset; allowed: {', '.join(SIZE_PRESETS)}.")
    if run_args.precision not in PRECISIONS:
        raise UserError(f"precision {run_args.precision!r} is not supported; allowed: {', '.join(PRECISIONS)}.")
    for name in ("max_seq_length", "eval_blocks", "tokenizer_vocab_size"):
        if getattr(data_args, name) <= 0:
            raise UserError(f"{name}={getattr(data_args, name)} must be positive.")
    if run_args.target_eval_loss is not None and not math.isfinite(run_args.target_eval_loss):
        raise UserError(f"target_eval_loss={run_args.target_eval_loss} is not allowed; it must be a finite number.")
    multiple = model_args.pad_vocab_to_multiple_of
    if multiple is not None and (type(multiple) is not int or not 0 < multiple <= MAX_PAD_VOCAB_MULTIPLE):
        # (bool is an int subclass: refused)
        raise UserError(
            f"pad_vocab_to_multiple_of={multiple!r} is not allowed; it must be a positive integer of at most "
            f"{MAX_PAD_VOCAB_MULTIPLE} (e.g. 64), or unset for a vocab_size of exactly the tokenizer's size."
        )
    check_numbers(run_args, data_args, training_args)
    check_output_dir(training_args.output_dir)
    for kind in run_args.compare.split(",") if run_args.compare else ():  # each type trains into OUTPUT_DIR/<type>
        check_output_dir(Path(training_args.output_dir) / kind)
    # validates the size and overrides, for each type trained, before any data is read
    kinds = run_args.compare.split(",") if run_args.compare else [model_args.attention_type]
    config = [model_config(replace(model_args, attention_type=kind)) for kind in kinds][0]
    if data_args.max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"max_seq_length={data_args.max_seq_length} is above the model's max_position_embeddings="
            f"{config.max_position_embeddings}; use at most {config.max_position_embeddings} or raise "
            "max_position_embeddings in --config_overrides."
        )

    updates = {}
    if run_args.global_batch_size is not None:
        per_step = training_args.per_device_train_batch_size * training_args.world_size
        if run_args.global_batch_size % per_step:
            raise UserError(
                f"global_batch_size={run_args.global_batch_size} is not a multiple of per-device batch "
                f"{training_args.per_device_train_batch_size} × {training_args.world_size} processes."
            )
        updates["gradient_accumulation_steps"] = run_args.global_batch_size // per_step
    device = training_args.device.type  # "cuda" on a GPU unless --use_cpu
    # bf16 autocast: on GPUs that have it, and on the CPU with --use_cpu (TrainingArguments' rule; accelerate's too)
    bf16_supported = {"cuda": torch.cuda.is_bf16_supported, "cpu": lambda: training_args.use_cpu}.get(
        device, lambda: True
    )()
    precision = precision_for(run_args.precision, device, bf16_supported, LAUNCHER_PRECISION)
    for flag in ("bf16", "fp16"):  # the Trainer's own flags: --precision replaces them
        if flag in named and getattr(training_args, flag) != (precision == flag):
            raise UserError(
                f"{flag}={getattr(training_args, flag)} disagrees with precision={run_args.precision!r}, which trains "
                f"in {precision} here; mixed precision is set by --precision alone: leave out --{flag} and pass "
                f"--precision {flag if getattr(training_args, flag) else 'fp32'}."
            )
    updates["bf16"], updates["fp16"] = precision == "bf16", precision == "fp16"
    # what accelerate applies where bf16 and fp16 are off: the precision chosen, not a value that an earlier
    # TrainingArguments of this process left there (transformers 4.x writes its bf16/fp16 into the variable)
    os.environ[LAUNCHER_PRECISION_VARIABLE] = "no" if precision == "fp32" else precision
    updates["optim"] = optimizer_for(device, training_args.optim, "optim" in named)
    if "ddp_find_unused_parameters" not in named:
        # Every parameter of every attention type gets a gradient in each step (tests/training/test_distributed_engines.py);
        # the Trainer's default (search, without gradient checkpointing) would traverse the graph after each forward.
        updates["ddp_find_unused_parameters"] = False
    return replace(training_args, **updates)


def check_output_dir(output_dir: str | Path, name: str = "output_dir") -> None:
    """The output folder, or the nearest of its parents that exists, must be a folder: not a file, nor a link to
    nothing (a folder that is not there, on a drive not mounted...). `name`: the argument that gave it."""
    if not str(output_dir).strip():
        raise UserError(
            f"{name}={str(output_dir)!r}: the path is empty; give the folder to write into, e.g. --{name} runs/demo."
        )
    path = Path(output_dir)
    for folder in [path, *path.parents]:
        if folder.is_symlink() and not folder.exists():
            raise UserError(
                f"{name}={str(output_dir)!r}: {folder} is a symbolic link to {os.readlink(folder)}, which does not "
                f"exist; create that folder, remove the link, or choose another --{name}."
            )
        if folder.exists():
            if not folder.is_dir():
                raise UserError(
                    f"{name}={str(output_dir)!r}: {folder} is a file, not a folder; choose another --{name}."
                )
            return


FUSED_ADAMW = "adamw_torch_fused"


def optimizer_for(device_type: str, optim: str, optim_named: bool) -> str:
    """The optimizer: fused AdamW on CUDA (one kernel for all parameters) unless --optim or the recipe names one;
    elsewhere `optim` as it is, so CPU runs keep their results. The Trainer's own default is fused AdamW only with
    torch ≥ 2.8 (so in transformers 4.54 as in 5.x), plain AdamW before."""
    if device_type == "cuda" and not optim_named:
        return FUSED_ADAMW
    return optim


def config_overrides(model_args: ModelArguments) -> dict:
    """--config_overrides as a dict of config fields ({} when not given)."""
    try:
        overrides = json.loads(model_args.config_overrides) if model_args.config_overrides else {}
    except json.JSONDecodeError as error:
        raise UserError(f"config_overrides={model_args.config_overrides!r} is not a JSON object: {error}") from None
    if not isinstance(overrides, dict):
        raise UserError(f"config_overrides={model_args.config_overrides!r} must be a JSON object of config fields.")
    return overrides


def model_config(model_args: ModelArguments, tokenizer: PreTrainedTokenizerBase | None = None) -> SymBertConfig:
    """The preset, the attention type and the overrides; vocabulary (the tokenizer's size; with
    pad_vocab_to_multiple_of, the embedding rows rounded up past it, never predicted) and padding id from the
    tokenizer when given."""
    overrides = config_overrides(model_args)
    if overrides.get("attention_type", model_args.attention_type) != model_args.attention_type:
        raise UserError(
            f"config_overrides sets attention_type={overrides['attention_type']!r} but the run trains "
            f"attention_type={model_args.attention_type!r} (--attention_type, or a type of --compare); name the type "
            "once (leave attention_type out of --config_overrides), or the same in both."
        )
    known = list(SymBertConfig().to_dict())
    for key in overrides:
        if key not in known:
            raise UserError(f"config_overrides: {unknown_name_message('SymBertConfig field', key, known)}.")
    settings = {"attention_type": model_args.attention_type, **overrides}
    if tokenizer is not None:
        vocab_size = settings.setdefault("vocab_size", len(tokenizer))
        if vocab_size != len(tokenizer):
            raise UserError(
                f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {vocab_size}; they must be "
                "equal (--pad_vocab_to_multiple_of N pads the model's embedding rows, never vocab_size): drop "
                "vocab_size from --config_overrides or pass a matching --tokenizer."
            )
        settings.setdefault("pad_token_id", tokenizer.pad_token_id)
    if model_args.pad_vocab_to_multiple_of is not None:  # rows past vocab_size that the model never predicts
        settings.setdefault("pad_vocab_size_multiple", model_args.pad_vocab_to_multiple_of)
    try:
        return SymBertConfig.from_preset(model_args.size, **settings)
    except ValueError as error:  # the config's own checks name the field and what is allowed
        raise UserError(f"config_overrides: {error}") from None
