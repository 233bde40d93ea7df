"""Pre-train SymBERT with masked-language modelling (MLM) on the Hugging Face Trainer, from a recipe or from the
defaults below: the embedded corpus of English prose, a tiny model, a WordPiece tokenizer trained on the corpus.

    symbert-pretrain --recipe cpu-demo --output_dir outputs/demo
    symbert-pretrain --recipe paper-small --output_dir runs/small --attention_type pairwise
    symbert-pretrain --recipe cpu-demo --output_dir outputs/compare --compare original,symmetric,pairwise
    torchrun --nproc_per_node 2 -m symbert.training.pretrain --recipe paper-base --output_dir runs/base

A recipe (a JSON file in training/recipes/, or any path) sets any argument below, ours and the Trainer's: its values
replace the defaults shown, and the command line overrides both. `--recipe NAME --help` shows the defaults with that
recipe's values in place. With no argument at all it trains the defaults shown into trainer_output/ (hours on a
CPU; --recipe cpu-demo takes minutes). An interrupted run resumes from its newest checkpoint when run again.
"""

import difflib
import json
import math
import os
import re
import shutil
import textwrap
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import islice
from pathlib import Path

import safetensors.torch
import torch
from filelock import FileLock, Timeout
from transformers import (
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainerState,
    TrainingArguments,
    set_seed,
)
from transformers.trainer import (
    OPTIMIZER_NAME,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    safe_globals,  # defined there in 4.x, re-exported there in 5.x
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_NAME

try:  # transformers 5: a function; 4.x: the Trainer's _rotate_checkpoints method
    from transformers.trainer_utils import rotate_checkpoints
except ImportError:
    rotate_checkpoints = None

from .. import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig, SymBertForMaskedLM, SymBertSelfAttention, attention_class
from ..cli import UserError, command_parser, group_arguments, run_command
from ..fresh_load import load_in_fresh_process
from . import data as data_module
from .reporting import (
    MetricsLogCallback,
    comparison_table,
    load_log_history,
    masked_token_scores,
    plot_comparison,
    plot_losses,
    unigram_baseline,
    write_atomically,
    write_metrics,
)

RECIPES_DIR = Path(__file__).parent / "recipes"


TRAINER_HAS_OVERWRITE = "overwrite_output_dir" in {f.name for f in fields(TrainingArguments)}


def overwrite_requested(run_args, training_args):
    """--overwrite_output_dir, parsed into our arguments (transformers 5) or the Trainer's (4.x)."""
    return getattr(run_args, "overwrite_output_dir", False) or getattr(training_args, "overwrite_output_dir", False)


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
    global_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "sequences per optimizer step, over all processes: sets gradient_accumulation_steps = global / "
            "(per-device batch × processes)"
        },
    )
    precision: str = field(
        default="auto", metadata={"help": "auto (bf16 or fp16 on GPU, fp32 on CPU), bf16, fp16, fp32"}
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
    attention_type: str = field(default="original", metadata={"help": f"one of {', '.join(ATTENTION_TYPES)}"})
    config_overrides: str | None = field(
        default=None, metadata={"help": 'JSON object of SymBertConfig fields, e.g. \'{"pairwise_init": "identity"}\''}
    )
    pad_vocab_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "round the model's vocab_size up to a multiple of this (e.g. 64: faster matrix products on GPU); "
            "the extra ids are never input. Default: the tokenizer's size"
        },
    )
    paper_weight_decay: bool = field(
        default=False,
        metadata={
            "help": "multiply --weight_decay by the factor the attention type's paper trains it with (no_query: "
            "0.3125, Karbevski & Mijoski's 0.03125 against their baseline's 0.1; the other types: 1)"
        },
    )


@dataclass
class DataArguments:
    """The texts trained on, their tokenizer, blocks and masking."""

    _argument_group_name = "Data arguments"

    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset id; default: the embedded corpus"})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name"})
    dataset_split: str = field(default="train", metadata={"help": "split of --dataset_name to train on"})
    train_files: list[str] | None = field(default=None, metadata={"help": "local .txt, .jsonl/.json or .parquet files"})
    text_column: str = field(default="text", metadata={"help": "column of the texts (.jsonl/.json/.parquet, Hub data)"})
    skip_records_without_text: bool = field(
        default=False,
        metadata={
            "help": "skip the records that have no text_column field (or null there), and say how many; without it "
            "such a record is an error naming its file and line"
        },
    )
    streaming: bool = field(default=False, metadata={"help": "stream the dataset instead of downloading it whole"})
    tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "tokenizer name or path; default: bert-base-uncased, or for the embedded corpus a WordPiece "
            "tokenizer trained on it"
        },
    )
    tokenizer_vocab_size: int = field(
        default=8192, metadata={"help": "vocabulary of the tokenizer trained on the corpus"}
    )
    max_seq_length: int = field(default=512, metadata={"help": "tokens per block"})
    eval_blocks: int = field(
        default=200, metadata={"help": "held-out blocks for the eval loss (the paper's recipes: 10,000)"}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "share of tokens masked, in (0, 1)"})


ARGUMENT_DATACLASSES = (RunArguments, ModelArguments, DataArguments, TrainingArguments)  # parse_arguments' order


def recipe_path(recipe):
    path = Path(recipe)
    if path.suffix == ".json" and path.is_file():
        return path
    path = RECIPES_DIR / f"{recipe}.json"
    if not path.is_file():
        known = sorted(p.stem for p in RECIPES_DIR.glob("*.json"))
        raise UserError(f"Unknown recipe {recipe!r}: not a .json file and not one of {', '.join(known)}.")
    return path


def unknown_name_message(kind, name, known):
    close = difflib.get_close_matches(name, known, n=3)
    return f"unknown {kind} {name!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")


def read_recipe(recipe):
    """The recipe's settings as command-line arguments; keys starting with "_" are comments."""
    path = recipe_path(recipe)
    try:
        settings = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
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


def recipe_list():
    """Each recipe of training/recipes/ with its _comment, for --help."""
    lines = []
    for path in sorted(RECIPES_DIR.glob("*.json")):
        comment = json.loads(path.read_text()).get("_comment", "")
        lines.append(
            textwrap.fill(f"{path.stem}: {comment}", width=110, initial_indent="  ", subsequent_indent="      ")
        )
    return "Recipes (--recipe NAME):\n" + "\n".join(lines)


def argument_parser():
    """Our arguments first, each dataclass under its heading, then the Trainer's under theirs."""
    parser = command_parser(
        f"{__doc__}\n{recipe_list()}",
        parser_class=HfArgumentParser,
        dataclass_types=ARGUMENT_DATACLASSES,
    )
    group_arguments(parser, TrainingArguments, TRAINER_HEADING)
    return parser


def recipe_named(argv):
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


def parse_arguments(argv):
    """(run, model, data, Trainer) arguments. A recipe's values become the parser's defaults (so --help shows
    them), and the command line wins."""
    parser = argument_parser()
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
    return run_args, model_args, data_args, check_arguments(run_args, model_args, data_args, training_args, named)


def settle_attention_type(run_args, model_args, named):
    """One attention type per run: an attention_type in --config_overrides becomes the run's when neither
    --attention_type nor --compare is given; otherwise it must equal the type (each compared type), or the run is
    refused naming both."""
    overridden = config_overrides(model_args).get("attention_type")
    if overridden is None:
        return model_args
    if run_args.compare:
        for kind in run_args.compare.split(","):
            if kind != overridden:
                raise UserError(
                    f"config_overrides sets attention_type={overridden!r} but --compare trains {kind!r}; with "
                    "--compare, leave attention_type out of --config_overrides."
                )
        return replace(model_args, attention_type=overridden)
    if "attention_type" not in named:
        return replace(model_args, attention_type=overridden)
    if overridden != model_args.attention_type:
        raise UserError(
            f"config_overrides sets attention_type={overridden!r} but --attention_type is "
            f"{model_args.attention_type!r}; name the type once (--attention_type), or the same in both."
        )
    return model_args


def argument_names(argv):
    """The names of the options in `argv` (a command line or a recipe's arguments): {"optim"} for ["--optim", "sgd"]
    or ["--optim=sgd"]."""
    return {arg[2:].partition("=")[0] for arg in argv if arg.startswith("--")}


def min_block_length(mlm_probability):
    """The shortest block with at least one masked token on average: (length - 2) × p ≥ 1, the 2 for a text's
    [CLS] and [SEP]. Shorter blocks leave eval batches with nothing masked, and a NaN eval loss."""
    return 2 + math.ceil(1 / mlm_probability - 1e-9)


def check_numbers(run_args, data_args, training_args):
    """Numbers TrainingArguments accepts but that make no training, or NaN losses: (name, value, ok, allowed)."""
    args = training_args
    finite = math.isfinite
    checks = [
        ("mlm_probability", data_args.mlm_probability, 0 < data_args.mlm_probability < 1, "strictly between 0 and 1"),
        (
            "learning_rate",
            args.learning_rate,
            finite(args.learning_rate) and args.learning_rate > 0,
            "a finite number above 0",
        ),
        (
            "weight_decay",
            args.weight_decay,
            finite(args.weight_decay) and args.weight_decay >= 0,
            "a finite number ≥ 0",
        ),
        (
            "warmup_steps",
            args.warmup_steps,
            finite(args.warmup_steps) and args.warmup_steps >= 0,
            "a finite number ≥ 0",
        ),
        ("adam_beta1", args.adam_beta1, 0 <= args.adam_beta1 < 1, "in [0, 1)"),
        ("adam_beta2", args.adam_beta2, 0 <= args.adam_beta2 < 1, "in [0, 1)"),
        (
            "adam_epsilon",
            args.adam_epsilon,
            finite(args.adam_epsilon) and args.adam_epsilon >= 0,
            "a finite number ≥ 0",
        ),
        (
            "max_grad_norm",
            args.max_grad_norm,
            finite(args.max_grad_norm) and args.max_grad_norm >= 0,
            "a finite number ≥ 0 (0: no clipping)",
        ),
        (
            "max_steps",
            args.max_steps,
            args.max_steps > 0 or args.max_steps == -1,
            "a positive number of steps, or -1 to train num_train_epochs",
        ),
        (
            "per_device_train_batch_size",
            args.per_device_train_batch_size,
            args.per_device_train_batch_size > 0,
            "at least 1",
        ),
        (
            "per_device_eval_batch_size",
            args.per_device_eval_batch_size,
            args.per_device_eval_batch_size > 0,
            "at least 1",
        ),
        (
            "gradient_accumulation_steps",
            args.gradient_accumulation_steps,
            args.gradient_accumulation_steps > 0,
            "at least 1",
        ),
        ("seed", args.seed, args.seed >= 0, "an integer ≥ 0"),
    ]
    if args.max_steps == -1:
        epochs = args.num_train_epochs
        checks.append(
            ("num_train_epochs", epochs, finite(epochs) and epochs > 0, "a finite number above 0 (or set max_steps)")
        )
    for strategy, steps in (
        ("eval_strategy", "eval_steps"),
        ("save_strategy", "save_steps"),
        ("logging_strategy", "logging_steps"),
    ):
        value = getattr(args, steps)
        if getattr(args, strategy) == "steps" and value is not None:
            checks.append((steps, value, finite(value) and value > 0, f"above 0 with {strategy}=steps"))
    if run_args.global_batch_size is not None:
        checks.append(("global_batch_size", run_args.global_batch_size, run_args.global_batch_size > 0, "at least 1"))
    for name, value, ok, allowed in checks:
        if not ok:
            raise UserError(f"{name}={value} is not allowed; it must be {allowed}.")
    shortest = min_block_length(data_args.mlm_probability)
    if data_args.max_seq_length < shortest:
        raise UserError(
            f"max_seq_length={data_args.max_seq_length} is too short to mask: with mlm_probability="
            f"{data_args.mlm_probability} a block needs (max_seq_length - 2) × mlm_probability ≥ 1 masked token on "
            f"average (2 for [CLS] and [SEP]), so max_seq_length ≥ {shortest}."
        )
    if data_args.streaming and args.max_steps <= 0:
        raise UserError("streaming=True needs --max_steps: a stream has no length to count num_train_epochs in.")


def check_arguments(run_args, model_args, data_args, training_args, named=frozenset()):
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
                "original,symmetric."
            )
        if twice := sorted({kind for kind in kinds if kinds.count(kind) > 1}):
            raise UserError(
                f"compare={run_args.compare!r} names {', '.join(map(repr, twice))} more than once; name each type "
                "once (each trains into OUTPUT_DIR/<type>)."
            )
    if model_args.size not in SIZE_PRESETS:
        raise UserError(f"size {model_args.size!r} is not a preset; allowed: {', '.join(SIZE_PRESETS)}.")
    if run_args.precision not in ("auto", "bf16", "fp16", "fp32"):
        raise UserError(f"precision {run_args.precision!r} is not supported; allowed: auto, bf16, fp16, fp32.")
    for name in ("max_seq_length", "eval_blocks", "tokenizer_vocab_size"):
        if getattr(data_args, name) <= 0:
            raise UserError(f"{name}={getattr(data_args, name)} must be positive.")
    if run_args.target_eval_loss is not None and not math.isfinite(run_args.target_eval_loss):
        raise UserError(f"target_eval_loss={run_args.target_eval_loss} is not allowed; it must be a finite number.")
    multiple = model_args.pad_vocab_to_multiple_of
    if multiple is not None and (type(multiple) is not int or multiple <= 0):  # bool is an int subclass: refused
        raise UserError(
            f"pad_vocab_to_multiple_of={multiple!r} is not allowed; it must be a positive integer (e.g. 64), or unset "
            "for a vocab_size of exactly the tokenizer's size."
        )
    check_numbers(run_args, data_args, training_args)
    check_output_dir(training_args.output_dir)
    config = model_config(model_args)  # validates the size and overrides before any data is read
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
    on_gpu = torch.cuda.is_available() and not training_args.use_cpu
    precision = run_args.precision
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if on_gpu else "fp32"
    updates["bf16"], updates["fp16"] = precision == "bf16", precision == "fp16"
    updates["optim"] = optimizer_for("cuda" if on_gpu else "cpu", training_args.optim, "optim" in named)
    return replace(training_args, **updates)


def check_output_dir(output_dir):
    """The output folder, or the nearest of its parents that exists, must be a folder: not a file, nor a link to
    nothing (a folder that is not there, on a drive not mounted...)."""
    path = Path(output_dir)
    for folder in [path, *path.parents]:
        if folder.is_symlink() and not folder.exists():
            raise UserError(
                f"output_dir={output_dir!r}: {folder} is a symbolic link to {os.readlink(folder)}, which does not "
                "exist; create that folder, remove the link, or choose another --output_dir."
            )
        if folder.exists():
            if not folder.is_dir():
                raise UserError(
                    f"output_dir={output_dir!r}: {folder} is a file, not a folder; choose another --output_dir."
                )
            return


FUSED_ADAMW = "adamw_torch_fused"


def optimizer_for(device_type, optim, optim_named):
    """The optimizer: fused AdamW on CUDA (one kernel for all parameters) unless --optim or the recipe names one;
    elsewhere `optim` as it is, so CPU runs keep their results. The Trainer's own default is fused AdamW only with
    torch ≥ 2.8 (so in transformers 4.54 as in 5.x), plain AdamW before."""
    if device_type == "cuda" and not optim_named:
        return FUSED_ADAMW
    return optim


STAGING_DIR = ".checkpoint-in-progress"  # not "checkpoint-*": neither resume nor save_total_limit counts it
FINAL_STAGING_DIR = ".final-model-in-progress"  # the final model, before it is moved into the output folder
LOCK_FILE = ".pretrain.lock"


class SymBertPretrainingTrainer(Trainer):
    """The Trainer with atomic checkpoints and SymBERT's weight-decay groups."""

    staging = False  # while True, the Trainer's run folder is the staging folder: checkpoints are written there

    def get_decay_parameter_names(self, model):
        """As the Trainer (no decay on biases and LayerNorm), and none on the parameters each attention type names
        (multiplicative gains: the δ scales of `shared`, the head embeddings of `mhe_mul`)."""
        no_decay = {
            f"{module_name}.{name}"
            for module_name, module in model.named_modules()
            if isinstance(module, SymBertSelfAttention)
            for name in module.no_weight_decay
        }
        return [name for name in super().get_decay_parameter_names(model) if name not in no_decay]

    def _get_output_dir(self, trial):
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, STAGING_DIR) if self.staging else run_dir

    def _save_checkpoint(self, model, trial):
        """The Trainer writes checkpoint-N into the staging folder; once every process has written its part (each
        its rng_state_K.pth), the main process renames it into the run folder. A checkpoint-N folder is therefore
        always complete: a run killed while saving leaves only the staging folder, which the next run removes."""
        run_dir = self._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staged, final = os.path.join(run_dir, STAGING_DIR, name), os.path.join(run_dir, name)
        self.staging = True
        try:
            super()._save_checkpoint(model, trial)
        except OSError as error:  # a full disk: the staged part goes, the checkpoints in place stay
            shutil.rmtree(os.path.join(run_dir, STAGING_DIR), ignore_errors=True)
            raise write_error(error, Path(error.filename or staged), f"checkpoint {name}") from None
        finally:
            self.staging = False
        self.accelerator.wait_for_everyone()
        if self.state.best_model_checkpoint == staged:  # load_best_model_at_end: the path it will have
            self.state.best_model_checkpoint = final
            if self.args.should_save:
                self.state.save_to_json(os.path.join(staged, TRAINER_STATE_NAME))
        if self.args.should_save:
            if os.path.isdir(final):  # the same step of an earlier run that resumed from an older checkpoint
                shutil.rmtree(final)
            os.replace(staged, final)
            os.rmdir(os.path.dirname(staged))
            if rotate_checkpoints is None:
                self._rotate_checkpoints(use_mtime=True, output_dir=run_dir)
            else:
                rotate_checkpoints(
                    run_dir, self.args.save_total_limit, self.state.best_model_checkpoint, use_mtime=True
                )
        self.accelerator.wait_for_everyone()


class StopOnNonFiniteEvalLoss(TrainerCallback):
    """A NaN or infinite eval loss, at any step (step 0 of --eval_on_start included), ends the run at once with the
    divergence message: before that step's checkpoint is saved, so the newest checkpoint is the last good one, and
    before another step is trained."""

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        eval_loss = (metrics or {}).get("eval_loss", 0.0)
        if not math.isfinite(eval_loss):
            raise UserError(divergence_message(args, state.global_step, eval_loss))


class RemoveStaleCheckpoints(TrainerCallback):
    """--overwrite_output_dir: the old run's files go when training begins, that is once the Trainer has built its
    optimizer and scheduler from the arguments, so a value only they refuse leaves the old run untouched."""

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save:
            deleted = remove_stale_checkpoints(args.output_dir)
            if deleted:
                print(f"--overwrite_output_dir: deleted the earlier run's {', '.join(deleted)} from {args.output_dir}")


def padded_vocab_size(tokens, multiple):
    """`tokens` rounded up to a multiple of `multiple`; `tokens` itself for None."""
    return tokens if multiple is None else -(-tokens // multiple) * multiple


def config_overrides(model_args):
    """--config_overrides as a dict of config fields ({} when not given)."""
    try:
        overrides = json.loads(model_args.config_overrides) if model_args.config_overrides else {}
    except json.JSONDecodeError as error:
        raise UserError(f"config_overrides={model_args.config_overrides!r} is not a JSON object: {error}") from None
    if not isinstance(overrides, dict):
        raise UserError(f"config_overrides={model_args.config_overrides!r} must be a JSON object of config fields.")
    return overrides


def model_config(model_args, tokenizer=None):
    """The preset, the attention type and the overrides; vocabulary (the tokenizer's size, rounded up to a multiple
    of pad_vocab_to_multiple_of if set) and padding id from the tokenizer when given."""
    overrides = config_overrides(model_args)
    if overrides.get("attention_type", model_args.attention_type) != model_args.attention_type:
        raise UserError(
            f"config_overrides sets attention_type={overrides['attention_type']!r} but the run trains "
            f"attention_type={model_args.attention_type!r}; name the type once, or the same in both."
        )
    known = list(SymBertConfig().to_dict())
    for key in overrides:
        if key not in known:
            raise UserError(f"config_overrides: {unknown_name_message('SymBertConfig field', key, known)}.")
    settings = {"attention_type": model_args.attention_type, **overrides}
    if tokenizer is not None:
        multiple = model_args.pad_vocab_to_multiple_of
        expected = padded_vocab_size(len(tokenizer), multiple)
        vocab_size = settings.setdefault("vocab_size", expected)
        if vocab_size != expected:
            if multiple is None:
                rule = (
                    "they must be equal (with --pad_vocab_to_multiple_of N, vocab_size is the tokenizer's size rounded "
                    "up to a multiple of N)"
                )
            else:
                rule = (
                    f"with pad_vocab_to_multiple_of={multiple} it must be {expected}, {len(tokenizer)} rounded up to a "
                    f"multiple of {multiple}"
                )
            raise UserError(
                f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {vocab_size}; {rule}: drop "
                "vocab_size from --config_overrides or pass a matching --tokenizer."
            )
        settings.setdefault("pad_token_id", tokenizer.pad_token_id)
    try:
        return SymBertConfig.from_preset(model_args.size, **settings)
    except ValueError as error:  # the config's own checks name the field and what is allowed
        raise UserError(f"config_overrides: {error}") from None


def resume_checkpoint(run_args, training_args):
    """The checkpoint to resume from, or None for a fresh run; raises (and writes nothing) if the output folder
    holds a finished run and neither resume nor overwrite was asked, or if the checkpoint asked for is damaged."""
    if training_args.resume_from_checkpoint:
        checkpoint = Path(training_args.resume_from_checkpoint)
        if not (checkpoint / TRAINER_STATE_NAME).is_file():
            raise UserError(f"resume_from_checkpoint={str(checkpoint)!r} is not a Trainer checkpoint folder.")
        if problem := checkpoint_problem(checkpoint):
            raise UserError(f"resume_from_checkpoint={str(checkpoint)!r} cannot be resumed from: {problem}.")
        return str(checkpoint)
    output_dir = Path(training_args.output_dir)
    if overwrite_requested(run_args, training_args) or not output_dir.is_dir():
        return None
    if (output_dir / "training_summary.json").is_file():
        raise UserError(
            f"output_dir={str(output_dir)!r} already holds a finished run; pass --overwrite_output_dir true to train "
            "again from scratch there, --resume_from_checkpoint DIR to continue one, or choose another folder."
        )
    return last_complete_checkpoint(output_dir)  # an interrupted run resumes by itself


def last_complete_checkpoint(output_dir):
    """The newest checkpoint-N folder of `output_dir` that can be resumed from, saying which newer ones it skips."""
    checkpoints = [
        path for path in Path(output_dir).iterdir() if re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", path.name)
    ]
    for checkpoint in sorted(checkpoints, key=lambda path: int(path.name.split("-")[1]), reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return str(checkpoint)
        print(f"Skipping {checkpoint}: {problem} (a run killed while saving it, or a damaged file).")
    return None


def checkpoint_problem(checkpoint):
    """Why `checkpoint` cannot be resumed from (a part missing or unreadable), or None when every part loads as the
    Trainer will load it: JSON, safetensors, and torch.load(weights_only=True), so nothing unpickles code."""

    def load_state(path):
        with safe_globals():  # RNG states hold numpy arrays, which the Trainer allows the same way
            torch.load(path, map_location="cpu", weights_only=True)

    checkpoint = Path(checkpoint)
    rng_states = sorted(path.name for path in checkpoint.glob("rng_state*.pth")) or ["rng_state.pth"]
    parts = {
        TRAINER_STATE_NAME: lambda path: json.loads(path.read_text()),
        CONFIG_NAME: lambda path: json.loads(path.read_text()),
        SAFE_WEIGHTS_NAME: safetensors.torch.load_file,
        OPTIMIZER_NAME: load_state,
        SCHEDULER_NAME: load_state,
        **{name: load_state for name in rng_states},  # rng_state.pth, or one rng_state_K.pth per process
    }
    for name, load in parts.items():
        if not (checkpoint / name).is_file():
            return f"{name} is missing"
        try:
            load(checkpoint / name)
        except Exception as error:  # whatever a damaged file raises: name the file and say why
            reason = " ".join(str(error).split())[:200]
            return f"{name} is unreadable ({type(error).__name__}: {reason})"
    return None


# Config fields that say how a config was saved, not what model it describes (use_cache: a decoder's runtime flag,
# which the Trainer turns off while it trains): a resumed run may differ in these only
BOOKKEEPING_CONFIG_FIELDS = frozenset(
    {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "model_type"}
    | {"use_cache"}
)


def check_checkpoint_matches(checkpoint, config):
    """A resumed run must train the same model as the checkpoint: every field of its config but the bookkeeping ones
    (activation, sizes, dropout, attention type, initialisation, ...) as this run's; each that differs is named, with
    both values, before anything is trained."""
    try:
        saved = SymBertConfig.from_pretrained(checkpoint).to_dict()
    except (OSError, ValueError) as error:  # a config this version cannot read, or one its checks refuse
        raise UserError(f"Cannot resume from {checkpoint}: its {CONFIG_NAME} cannot be read ({error}).") from None
    ours = config.to_dict()
    differences = [
        f"its {name} is {saved.get(name)!r} but this run's is {ours.get(name)!r}"
        for name in sorted(set(saved) | set(ours), key=lambda name: (name != "attention_type", name))
        if name not in BOOKKEEPING_CONFIG_FIELDS and saved.get(name) != ours.get(name)
    ]
    if differences:
        raise UserError(
            f"Cannot resume from {checkpoint}: {'; '.join(differences)}. Use the same arguments as the interrupted "
            "run, or another output_dir."
        )


# What a run writes into its output folder, besides checkpoint-N folders: --overwrite_output_dir deletes these and
# nothing else (a user's notes.txt or checkpoint-backup/ stays).
RUN_FILES = (
    "training_summary.json",
    "metrics.csv",
    "metrics.json",
    "loss.png",
    TRAINER_STATE_NAME,
    # the final model: weights, config, code, tokenizer (transformers 4.x adds special_tokens_map.json and vocab.txt)
    SAFE_WEIGHTS_NAME,
    CONFIG_NAME,
    "configuration_symbert.py",
    "modeling_symbert.py",
    "training_args.bin",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
)


def run_file_names():
    """The files and folders a run writes into its output folder, its temporary files and staging folder
    included."""
    return {*RUN_FILES, *(f".{name}.tmp" for name in RUN_FILES), STAGING_DIR, FINAL_STAGING_DIR}


def remove_stale_checkpoints(output_dir):
    """With --overwrite_output_dir, the old run's files must go: its checkpoints, or a later automatic resume would
    pick them up; its summary, which marks the folder as holding a finished run; its metrics, plot and final model.
    Only what a run writes goes (folders named checkpoint-<digits>, the files of RUN_FILES); returns their names."""
    deleted = []
    names = run_file_names()
    for path in sorted(Path(output_dir).iterdir()):
        ours = path.name in names or re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", path.name)
        if ours:
            remove_path(path)
            deleted.append(path.name)
    return deleted


@contextmanager
def output_folder_lock(output_dir):
    """Holds OUTPUT_DIR/.pretrain.lock while the run uses the folder, so that a second run into it is refused at
    once. It is an OS lock (flock): a killed run releases it. A run that fails leaves no lock file, and a folder it
    did not change, or in which it saved no checkpoint, as it found it (remove_failed_run_leftovers)."""
    output_dir = Path(output_dir)
    lock_path = output_dir / LOCK_FILE
    new_folder, new_lock = not output_dir.exists(), not lock_path.exists()
    output_dir.mkdir(parents=True, exist_ok=True)
    found = folder_state(output_dir)
    if lock_path.is_dir() and not lock_path.is_symlink():
        raise UserError(
            f"{lock_path} is a folder, where the run keeps its lock file; move it away (it is no run's) and run again."
        )
    lock = FileLock(lock_path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise UserError(
            f"output_dir={str(output_dir)!r} is in use by another run (it holds {lock_path}); wait for that run to "
            "end or choose another --output_dir."
        ) from None
    try:
        yield
    except BaseException:
        remove_failed_run_leftovers(output_dir, found, new_folder, new_lock)
        raise
    finally:
        lock.release()


def folder_state(folder):
    """{name: (modification time, size)} of what `folder` holds, its lock file aside: what a run changed there."""
    state = {}
    for name in os.listdir(folder):
        if name != LOCK_FILE:
            try:
                status = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            state[name] = (status.st_mtime_ns, status.st_size)
    return state


def remove_failed_run_leftovers(output_dir, found, new_folder, new_lock):
    """After a run that failed (a user error, a divergence, an interrupt): a folder it did not change (`found`: its
    folder_state before) stays as it was, lock file included; otherwise its lock file goes, and if no checkpoint is
    left to resume from, so does every file of a run that it added there (metrics, TensorBoard logs...), and the
    folder itself if the run made it."""
    now = folder_state(output_dir)
    if now == found and not new_lock:
        return
    if not any(re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", name) for name in now):
        for name in (set(now) - set(found)) & (run_file_names() | {"runs"}):
            remove_path(output_dir / name)
    (output_dir / LOCK_FILE).unlink(missing_ok=True)
    if new_folder and not any(output_dir.iterdir()):
        output_dir.rmdir()


def remove_path(path):
    """Remove a file, link or folder at `path`, if there is one (a staging folder a killed run left, or a file
    there in its place)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def on_main_process(training_args, decide):
    """`decide()` runs on the main process only; every process gets its result, or raises its UserError (any other
    error there ends the launch)."""
    outcome = [None, None]
    if training_args.process_index == 0:
        try:
            outcome = [decide(), None]
        except UserError as error:
            outcome = [None, error]
    if training_args.world_size > 1:
        torch.distributed.broadcast_object_list(outcome, src=0)
    result, error = outcome
    if error is not None:
        raise error
    return result


def pretrain(run_args, model_args, data_args, training_args):
    """Train one attention type; returns the Trainer's log history. The main process holds the output folder's lock
    from before anything is read there until the run ends."""
    with ExitStack() as held:

        def claim_output_folder():
            held.enter_context(output_folder_lock(training_args.output_dir))
            for name in (STAGING_DIR, FINAL_STAGING_DIR):  # left by a killed save
                remove_path(Path(training_args.output_dir) / name)
            return resume_checkpoint(run_args, training_args)

        resume = on_main_process(training_args, claim_output_folder)
        return pretrain_in_locked_folder(run_args, model_args, data_args, training_args, resume)


def pretrain_in_locked_folder(run_args, model_args, data_args, training_args, resume):
    set_seed(training_args.seed)
    with training_args.main_process_first(desc="tokenizer and data"):
        tokenizer = data_module.load_tokenizer(data_args)
        config = model_config(model_args, tokenizer)
        train_blocks, eval_blocks = data_module.load_blocks(data_args, tokenizer, seed=training_args.seed)
    if resume:
        check_checkpoint_matches(resume, config)
    if model_args.paper_weight_decay:  # recorded in the summary's training arguments as the decay trained with
        factor = attention_class(config.attention_type).paper_weight_decay_factor
        training_args = replace(training_args, weight_decay=training_args.weight_decay * factor)
    model = SymBertForMaskedLM(config)
    collator = data_module.ResumableMLMCollator(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        mask_seed=training_args.seed,
        max_predictions_per_seq=prediction_cap(config),
    )

    callbacks = [MetricsLogCallback(), StopOnNonFiniteEvalLoss()]
    if overwrite_requested(run_args, training_args) and not resume:
        callbacks.insert(0, RemoveStaleCheckpoints())  # before the metrics are written
    trainer = SymBertPretrainingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        data_collator=collator,
        processing_class=tokenizer,  # saved with every checkpoint: each folder is self-contained
        callbacks=callbacks,
    )
    if resume and training_finished_at(resume, training_args):
        # A run stopped during its final save (after its last checkpoint): training it again would take one step
        # past max_steps. The last checkpoint's weights and state are the trained model's: finish from them.
        if trainer.is_world_process_zero():
            print(f"Finishing from {resume}: it is at the last step, so there is nothing left to train")
        restore_finished_training(trainer, resume)
        train_runtime = 0.0  # seconds trained by this run
    else:
        if resume and trainer.is_world_process_zero():
            print(f"Resuming from {resume}")
        train_runtime = trainer.train(resume_from_checkpoint=resume).metrics["train_runtime"]
    evals = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    if not evals or evals[-1]["step"] != trainer.state.global_step:  # masks are fixed: no need to evaluate twice
        trainer.evaluate()
        evals = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    final_eval_loss = evals[-1]["eval_loss"]
    if not math.isfinite(final_eval_loss):  # (StopOnNonFiniteEvalLoss ends the run at such an evaluation)
        raise UserError(divergence_message(training_args, evals[-1].get("step"), final_eval_loss))
    if trainer.is_world_process_zero():
        if skipped := data_module.skipped_in_stream_message(data_args):
            print(skipped)
        print(f"{config.attention_type}: final eval loss {final_eval_loss:.4f}")
    save_final_model(trainer, title=config.attention_type)  # model, code, tokenizer, state, plot: staged, then moved
    if trainer.is_world_process_zero():
        output_dir = Path(training_args.output_dir)
        args = trainer.args
        summary = {
            "recipe": run_args.recipe,
            "attention_type": config.attention_type,  # the type trained (--config_overrides may not differ)
            "size": model_args.size,
            "parameters": model.num_parameters(),
            "world_size": args.world_size,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "global_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
            "max_seq_length": data_args.max_seq_length,
            "steps": trainer.state.global_step,
            "final_eval_loss": final_eval_loss,
            # what symbert-release reads (it unpickles nothing): the data, the machine, every training argument
            "run_arguments": asdict(run_args),
            "model_arguments": asdict(model_args),
            "data_arguments": asdict(data_args),
            "hardware": torch.cuda.get_device_name()
            if args.device.type == "cuda"
            else f"CPU ({torch.get_num_threads()} threads)",
            "training_arguments": json.loads(json.dumps(args.to_dict(), default=str)),
            "train_runtime": train_runtime,  # seconds, of this run (after a resume: since it; 0 when only finishing)
        }
        # written last and atomically: its presence marks the folder as holding a finished run
        path = output_dir / "training_summary.json"
        try:
            write_atomically(path, lambda file: file.write(json.dumps(summary, indent=2) + "\n"))
        except OSError as error:
            raise write_error(error, path, "the training summary") from None
    return trainer.state.log_history


def save_final_model(trainer, title):
    """The final model (weights, config, code, tokenizer, training arguments), the Trainer's state and the loss plot,
    written as a checkpoint is: into a staging folder of the output folder, then moved into place. A write that fails
    (a full disk) leaves the output folder as it was, and ends the run with one line naming the path and the free
    space; run again, the run then finishes from its last checkpoint."""
    output_dir = Path(trainer.args.output_dir)
    staging = output_dir / FINAL_STAGING_DIR
    failure = None
    try:
        if trainer.is_world_process_zero():
            remove_path(staging)
        trainer.save_model(str(staging), _internal_call=True)  # every process: sharded models gather there
    except OSError as error:
        failure = error

    def install():
        try:
            if failure is not None:
                raise failure
            trainer.state.save_to_json(str(staging / TRAINER_STATE_NAME))
            plot_losses(trainer.state.log_history, staging / "loss.png", title=title)
            for path in sorted(staging.iterdir()):
                os.replace(path, output_dir / path.name)
            staging.rmdir()
        except OSError as error:
            shutil.rmtree(staging, ignore_errors=True)  # what was staged: the space it takes is given back
            raise write_error(error, Path(error.filename or staging), "the final model") from None

    on_main_process(trainer.args, install)
    if trainer.args.push_to_hub:  # as the Trainer's save_model() does
        trainer.push_to_hub(commit_message="Model save")


def write_error(error, path, what):
    """A write that failed (OSError: a full disk, a read-only folder...), as one line naming the path, the error and the
    free space on its disk."""
    folder = next((parent for parent in [path, *path.parents] if parent.is_dir()), Path("."))
    try:
        free = f"{shutil.disk_usage(folder).free / 2**30:.2f} GiB free on its disk"
    except OSError:
        free = "free space unknown"
    reason = error.strerror or str(error) or type(error).__name__
    return UserError(
        f"Cannot write {what}: {path}: {reason} ({free}); nothing in place was replaced and the checkpoints are kept: "
        "free some space (or fix the cause) and run the same command again to finish."
    )


def training_finished_at(checkpoint, training_args):
    """Whether `checkpoint` is at the run's last step: max_steps, or (training by epochs) the step count the
    checkpoint's own state gives."""
    state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text())
    last_step = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return last_step > 0 and state["global_step"] >= last_step


def restore_finished_training(trainer, checkpoint):
    """The Trainer as training left it at `checkpoint`: its weights, and its state (step, log history); the metrics
    files rewritten from that history, as a resumed run's start rewrites them."""
    trainer._load_from_checkpoint(checkpoint)
    state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
    state.is_local_process_zero = trainer.is_local_process_zero()
    state.is_world_process_zero = trainer.is_world_process_zero()
    trainer.state = state
    if trainer.is_world_process_zero():
        write_metrics(state.log_history, trainer.args.output_dir)


def prediction_cap(config):
    """The collator's cap on masked positions per block: the model's max_predictions_per_seq, which its sparse
    prediction uses (and refuses a batch above); None without sparse prediction."""
    return config.max_predictions_per_seq if config.sparse_prediction else None


def divergence_message(training_args, step, eval_loss):
    last = get_last_checkpoint(training_args.output_dir)
    kept = f"the checkpoints up to {last} are kept" if last else "no checkpoint was saved before it"
    return (
        f"Training diverged: the eval loss is {eval_loss} at step {step}, so training stopped there; {kept} and no "
        f"final model was written. Lower --learning_rate (it is {training_args.learning_rate}), raise --warmup_steps "
        f"(it is {training_args.warmup_steps}) or clip gradients harder with --max_grad_norm (it is "
        f"{training_args.max_grad_norm}), then train again with --overwrite_output_dir true or into another --output_dir."
    )


# Fixed before any training: each masked word is a common word of 19th-century English prose.
FILL_MASK_SENTENCES = [
    "The old man walked slowly along the {mask} of the river.",
    "She opened the {mask} and looked out into the garden.",
    "He put his hand into his {mask} and took out a letter.",
    "I shall never {mask} what you have done for me.",
    "It was a cold {mask} in the middle of winter.",
]


def fill_mask_example(folder, sentences=FILL_MASK_SENTENCES):
    """Top-5 predictions for each of `sentences` ("{mask}" marks the masked word) of the model saved in `folder`,
    loaded by a fresh Python process that cannot import this project (symbert/fresh_load.py) with
    `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)`, so from the folder's own code and
    tokenizer, as a user without this project would."""

    report = load_in_fresh_process([folder], "--fill_mask", json.dumps(sentences))
    (loaded,) = report["models"].values()
    if "error" in loaded:
        raise RuntimeError(f"Loading {folder} in a fresh process failed: {loaded['error']}")
    return loaded


BASELINE_MAX_TRAIN_BLOCKS = 100_000  # token frequencies from at most this many training blocks (a stream is endless)


def eval_comparison(output_dir):
    """The unigram baseline and the saved model scored on the run's held-out blocks, masked exactly as the Trainer's
    evaluation masked them: the same blocks, batches and mask seed (the collator seeds each batch's masks by its
    content), rebuilt from training_summary.json. The baseline's token frequencies are the training blocks'."""
    summary = json.loads((Path(output_dir) / "training_summary.json").read_text())
    known = {f.name for f in fields(DataArguments)}  # a summary may hold fields of another version
    data_args = DataArguments(**{k: v for k, v in summary["data_arguments"].items() if k in known})
    seed, batch_size = (
        summary["training_arguments"]["seed"],
        summary["training_arguments"]["per_device_eval_batch_size"],
    )
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    train_blocks, eval_blocks = data_module.load_blocks(data_args, tokenizer, seed=seed, report_skipped=False)
    collator = data_module.ResumableMLMCollator(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        mask_seed=seed,
        max_predictions_per_seq=prediction_cap(SymBertConfig.from_pretrained(output_dir)),
    )
    eval_blocks = list(eval_blocks)
    batches = [collator(eval_blocks[start : start + batch_size]) for start in range(0, len(eval_blocks), batch_size)]

    counts = torch.zeros(len(tokenizer), dtype=torch.int64)
    train_batches = train_blocks.iter(batch_size=1000)
    for batch in islice(train_batches, math.ceil(BASELINE_MAX_TRAIN_BLOCKS / 1000)):
        counts += torch.bincount(torch.tensor(batch["input_ids"]).flatten(), minlength=len(tokenizer))
    counts[tokenizer.all_special_ids] = 0  # never masked: the baseline spreads nothing on them
    labels = torch.cat([batch["labels"][batch["labels"] != -100] for batch in batches])
    # logits at exactly the masked positions, one row per masked token as masked_token_scores reads them, not padded
    # to the fixed number that max_predictions_per_seq gives
    model = SymBertForMaskedLM.from_pretrained(output_dir, max_predictions_per_seq=None)
    return {
        "eval_blocks": len(eval_blocks),
        "unigram": unigram_baseline(counts, labels),
        "model": masked_token_scores(model, batches),
    }


def report(output_dir, log_history):
    """What the main job prints at the end: eval loss before and after, the model against the unigram baseline on the
    same masked tokens, fill-mask examples, where the results are."""
    evals = [(entry["step"], entry["eval_loss"]) for entry in log_history if "eval_loss" in entry]
    (first_step, first_loss), (last_step, last_loss) = evals[0], evals[-1]
    comparison = eval_comparison(output_dir)
    unigram, model = comparison["unigram"], comparison["model"]
    print(f"\nEval loss: {first_loss:.4f} at step {first_step} -> {last_loss:.4f} at step {last_step}")
    print(
        f"\nMasked-token prediction on the {comparison['eval_blocks']} held-out blocks ({model['masked_tokens']:,} "
        "masked tokens, the same masks for both):"
    )
    print(f"  {'':40} {'cross-entropy':>13} {'top-1 accuracy':>15}")
    for name, scores in (
        ("unigram baseline (train token frequencies)", unigram),
        (f"model at step {last_step}", model),
    ):
        print(f"  {name:40} {scores['loss']:13.4f} {scores['accuracy']:15.1%}")
    example = fill_mask_example(output_dir)
    print(f"\nfill-mask ({example['class']} loaded from {output_dir} in a fresh process with trust_remote_code=True):")
    for item in example["examples"]:
        predictions = ", ".join(f"{token} ({score})" for token, score in item["predictions"])
        print(f"  {item['sentence']}\n    -> {predictions}")
    print(
        f"\nResults in {output_dir}: model + code + tokenizer (load with "
        f"AutoModelForMaskedLM.from_pretrained('{output_dir}', trust_remote_code=True)), training_summary.json, "
        f"metrics.csv, metrics.json, loss.png, TensorBoard logs in {output_dir}/runs"
    )


# Training arguments that change what a run trains: a finished run of a comparison is reused only if they are the same
COMPARED_TRAINING_ARGUMENTS = (
    "max_steps",
    "num_train_epochs",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "eval_steps",
    "seed",
    "data_seed",
    "bf16",
    "fp16",
)


def finished_comparison_run(run_args, model_args, data_args, training_args):
    """Whether the output folder of one type of a comparison holds a finished run of the same settings (to reuse);
    False with --overwrite_output_dir or without training_summary.json. A finished run of other settings is refused,
    naming each that differs with both values."""
    path = Path(training_args.output_dir) / "training_summary.json"
    if overwrite_requested(run_args, training_args) or not path.is_file():
        return False
    try:
        summary = json.loads(path.read_text())
        saved = {
            **{f"model_arguments.{k}": v for k, v in summary["model_arguments"].items()},
            **{f"data_arguments.{k}": v for k, v in summary["data_arguments"].items()},
            **{f"run_arguments.{k}": v for k, v in summary["run_arguments"].items()},
            **{name: summary["training_arguments"].get(name) for name in COMPARED_TRAINING_ARGUMENTS},
        }
    except (ValueError, KeyError, AttributeError, TypeError) as error:  # not JSON, or not a summary
        raise UserError(
            f"{path} is not a training summary ({type(error).__name__}: {error}); delete it, or pass "
            "--overwrite_output_dir true to train every type of the comparison again."
        ) from None
    arguments = json.loads(json.dumps(training_args.to_dict(), default=str))
    current = {
        **{f"model_arguments.{k}": v for k, v in asdict(model_args).items()},
        **{f"data_arguments.{k}": v for k, v in asdict(data_args).items()},
        # the list of types compared and the target may change between the runs of a comparison
        **{f"run_arguments.{k}": v for k, v in asdict(run_args).items() if k not in ("compare", "target_eval_loss")},
        **{name: arguments.get(name) for name in COMPARED_TRAINING_ARGUMENTS},
    }
    differences = [
        f"{name} is {saved.get(name)!r} there but {value!r} here"
        for name, value in current.items()
        if name != "run_arguments.overwrite_output_dir" and saved.get(name) != value
    ]
    if differences:
        raise UserError(
            f"{training_args.output_dir} holds a finished run of other settings than this comparison: "
            f"{'; '.join(differences)}. Pass --overwrite_output_dir true to train every type again, or choose another "
            "--output_dir."
        )
    return True


def set_torch_threads(training_args):
    """On CPU, one torch thread per core that other processes leave idle, at least one, shared by this machine's
    processes. A thread whose core is busy with other work makes every step wait for it: on 2 cores already busy,
    the cpu-demo step took 4.9 s with 2 threads and 1.05 s with 1. A set OMP_NUM_THREADS is left as it is."""
    if "OMP_NUM_THREADS" in os.environ or (torch.cuda.is_available() and not training_args.use_cpu):
        return
    cores = len(os.sched_getaffinity(0))
    idle = cores - round(os.getloadavg()[0])
    torch.set_num_threads(max(1, min(cores, idle) // training_args.world_size))


def main(argv=None):
    try:
        run_command(run, argv)
    finally:  # a clean exit for every process of a torchrun / accelerate launch
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def run(argv):
    run_args, model_args, data_args, training_args = parse_arguments(argv)
    set_torch_threads(training_args)
    output_dir = Path(training_args.output_dir)
    is_main = training_args.process_index == 0
    if not run_args.compare:
        log_history = pretrain(run_args, model_args, data_args, training_args)
        if is_main:
            report(output_dir, log_history)
        return

    kinds = run_args.compare.split(",")
    plans = {
        kind: (replace(model_args, attention_type=kind), replace(training_args, output_dir=str(output_dir / kind)))
        for kind in kinds
    }
    # a rerun of an interrupted comparison: the types already trained (their folder holds training_summary.json) are
    # not trained again, their results are read back; checked, all of them, before anything trains
    finished = on_main_process(
        training_args,
        lambda: [
            kind
            for kind, (kind_model_args, kind_training_args) in plans.items()
            if finished_comparison_run(run_args, kind_model_args, data_args, kind_training_args)
        ],
    )
    runs = {}
    for kind, (kind_model_args, kind_training_args) in plans.items():
        if kind in finished:
            if is_main:
                print(
                    f"{kind}: already trained in {kind_training_args.output_dir} (it holds training_summary.json); "
                    "its results are reused"
                )
            runs[kind] = load_log_history(kind_training_args.output_dir)
            continue
        runs[kind] = pretrain(run_args, kind_model_args, data_args, kind_training_args)
    if is_main:
        first = next(iter(runs.values()))
        target = run_args.target_eval_loss
        if target is None:
            target = [e["eval_loss"] for e in first if "eval_loss" in e][-1]
        table = comparison_table(runs, target)
        write_atomically(output_dir / "comparison.md", lambda file: file.write(table + "\n"))
        plot_comparison(runs, output_dir / "comparison.png", target_loss=target)
        print(f"\n{table}\nComparison in {output_dir}/comparison.md and comparison.png")


if __name__ == "__main__":
    main()
