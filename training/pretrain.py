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

import contextlib
import functools
import io
import json
import math
import os
import signal
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from datasets import IterableDataset
from transformers import (
    Trainer,
    TrainerCallback,
    TrainerState,
    TrainingArguments,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import get_last_checkpoint

from .. import SymBertForMaskedLM, SymBertSelfAttention, attention_class
from ..cli import Interrupted, UserError, run_command
from ..files import write_atomically
from .arguments import DataArguments, ModelArguments, RunArguments, parse_arguments
from .checkpoint_checks import check_checkpoint_matches
from .comparison_reuse import finished_comparison_run
from .compat import overwrite_requested
from .data.blocks import (
    DATA_POSITION_FILE,
    ERROR_KEY,
    POSITION_KEY,
    PositionTracker,
    Readers,
    TrainingBlocks,
    read_position,
    release_tokenizer_threads,
    resumed_reader_states,
    worker_tokenizer_threads,
)
from .data.loading import RunData, data_fingerprint, load_run_data, load_tokenizer
from .data.masking import prediction_cap
from .data.prepared import prepared_once
from .distillation import DistillationLoss, RunStart, run_start, trainable_only_attention
from .evaluation import HeldOut, baseline_blocks, held_out_scores, print_run_report, saved_model_scores
from .reporting import (
    MetricsLogCallback,
    TrainingSpeedCallback,
    comparison_report,
    load_log_history,
    plot_comparison,
)
from .run_folder import (
    FINAL_STAGING_DIR,
    STAGING_DIR,
    AtomicCheckpoints,
    RemoveStaleCheckpoints,
    last_complete_checkpoint,
    on_main_process,
    output_folder_lock,
    remove_path,
    restore_finished_training,
    resume_checkpoint,
    save_final_model,
    training_finished_at,
    write_summary,
)
from .summary import TrainingSummary

PREPARED_BLOCKS_DIR = "blocks"  # of a --compare's output folder: the blocks every compared type trains on


class BatchCollator:
    """Collates a micro-batch of TrainingBlocks (in a dataloader worker, if any) and keeps its data position with it,
    for the training process to note once the micro-batch is trained."""

    def __init__(self, collator: Callable[[list[dict]], dict]):
        self.collator = collator

    def __call__(self, item: dict) -> dict:
        if ERROR_KEY in item:
            return item
        batch = self.collator([{"input_ids": block} for block in item["blocks"]])
        batch[POSITION_KEY] = item["position"]
        return batch


class SymBertPretrainingTrainer(AtomicCheckpoints, Trainer):
    """The Trainer with atomic checkpoints (training/run_folder.py), SymBERT's weight-decay groups, and the training
    data read in the run's order (training/data/blocks.py): every checkpoint saves the data position, and a resume reads on
    from it without replaying what was read before."""

    resume_from: str | None = None  # the checkpoint train() resumes from: where the data position is read
    data_fingerprint: dict | None = None  # what identifies the training data (data.data_fingerprint), in every position
    distillation: DistillationLoss | None = None  # --teacher: the loss is the distance to the teacher's outputs
    tokenizer_threads: int = 1  # each dataloader worker's (blocks.worker_tokenizer_threads, set before any tokenising)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.distillation is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = self.distillation(model, {**inputs, "num_items_in_batch": num_items_in_batch})
        return (loss, {"loss": loss}) if return_outputs else loss

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        args = self.args
        readers = Readers(args.world_size, args.process_index, args.dataloader_num_workers)
        streamed = isinstance(self.train_dataset, IterableDataset)
        blocks_per_pass = None if streamed else len(self.train_dataset)
        self.data_positions = PositionTracker(readers, blocks_per_pass, self._train_batch_size)
        if self.resume_from is not None:
            state = TrainerState.load_from_json(os.path.join(self.resume_from, TRAINER_STATE_NAME))
            micro_batches = state.global_step * args.gradient_accumulation_steps
            position = read_position(self.resume_from, args.process_index)
            states = resumed_reader_states(
                position,
                self.resume_from,
                readers,
                micro_batches,
                streamed,
                self.data_fingerprint,
                self.train_dataset if streamed else None,
            )
            self.data_positions.start_at(micro_batches, states)
        shards, total = getattr(self.train_dataset, "num_shards", None), readers.world_size * readers.per_process
        if streamed and shards is not None and shards < total and total > 1 and self.is_world_process_zero():
            print(
                f"The stream has {shards} shard(s) for {total} readers ({readers.world_size} processes × "
                f"{readers.per_process}): each reader reads all of it and keeps 1 record in {total}; give it at least "
                f"{total} files (or Parquet row groups) for each reader to read only its own."
            )
        blocks = TrainingBlocks(
            self.train_dataset,
            batch_size=self._train_batch_size,
            seed=args.seed if args.data_seed is None else args.data_seed,
            readers=readers,
            first_micro_batch=self.data_positions.micro_batches,
            reader_states=self.data_positions.reader_states,
            tokenizer_threads=self.tokenizer_threads,
        )
        workers = args.dataloader_num_workers
        release_tokenizer_threads(self.tokenizer_threads)
        if workers and "TOKENIZERS_PARALLELISM" not in os.environ and self.tokenizer_threads == 1:
            os.environ["TOKENIZERS_PARALLELISM"] = "false"  # forked workers: one tokenizer thread each, no warning
        return torch.utils.data.DataLoader(
            blocks,
            batch_size=None,  # TrainingBlocks yields whole micro-batches
            collate_fn=BatchCollator(self.data_collator),
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory and args.device.type == "cuda",
            prefetch_factor=args.dataloader_prefetch_factor if workers else None,
            # transformers 5's argument (4.x forks, as torch does on Linux)
            multiprocessing_context=getattr(args, "dataloader_multiprocessing_context", None) if workers else None,
        )  # in order (torch's default, whatever --dataloader_in_order says): micro-batch j from worker j mod N

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """As the Trainer's, but a resumed run does not evaluate again at its start (--eval_on_start): the run it
        resumes evaluated at step 0 and the checkpoint's history holds that; another evaluation at the checkpoint's
        step would add a point (to the metrics, the plot, the comparison) that the uninterrupted run does not have."""
        eval_on_start = self.args.eval_on_start
        if resume_from_checkpoint:
            self.args.eval_on_start = False
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self.args.eval_on_start = eval_on_start

    def training_step(self, model, inputs, num_items_in_batch=None):
        if ERROR_KEY in inputs:  # a bad record met by a dataloader worker
            raise UserError(inputs[ERROR_KEY])
        self.data_positions.consumed(inputs.pop(POSITION_KEY))
        return super().training_step(model, inputs, num_items_in_batch)

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        # The Trainer counts epochs of an unsized loader as shares of max_steps; the data position knows the passes.
        self.state.epoch = self.data_positions.passes()
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def get_decay_parameter_names(self, model: torch.nn.Module) -> list[str]:
        """As the Trainer (no decay on biases and LayerNorm), and none on the parameters each attention type names
        (multiplicative gains, such as per-channel scales or per-head embeddings)."""
        no_decay = {
            f"{module_name}.{name}"
            for module_name, module in model.named_modules()
            if isinstance(module, SymBertSelfAttention)
            for name in module.no_weight_decay
        }
        return [name for name in super().get_decay_parameter_names(model) if name not in no_decay]

    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        if self.is_fsdp_enabled and getattr(self.accelerator.state.fsdp_plugin, "fsdp_version", 1) == 2:
            self.accelerator.prepare = mlm_head_kept_in_the_root_unit(self.accelerator.prepare)

    def _save(self, output_dir=None, state_dict=None):
        """As the Trainer, and under FSDP2 saved as the model's own class. fully_shard changes the model's class to
        torch's FSDPSymBertForMaskedLM (module torch.distributed.fsdp._fully_shard): save_pretrained would copy
        torch's source files instead of modeling_symbert.py and write that class into config.json (auto_map,
        architectures). While it saves (from the full state dict it is given), the model is the first class of its
        MRO that is not an FSDP module, SymBertForMaskedLM, as without FSDP."""
        fsdp_module = ()
        if self.is_fsdp_enabled:
            from torch.distributed import fsdp

            fsdp_module = getattr(fsdp, "FSDPModule", ())  # the base of FSDP2's classes (torch 2.6+)
        if not isinstance(self.model, fsdp_module):
            return super()._save(output_dir, state_dict)
        sharded_class = type(self.model)
        self.model.__class__ = next(cls for cls in sharded_class.__mro__ if not issubclass(cls, fsdp_module))
        try:
            return super()._save(output_dir, state_dict)
        finally:
            self.model.__class__ = sharded_class

    def save_checkpoint_extras(self, checkpoint: str) -> None:
        position = Path(checkpoint) / DATA_POSITION_FILE.format(rank=self.args.process_index)
        positions = self.data_positions.to_json(
            self.state.global_step, self.args.gradient_accumulation_steps, self.data_fingerprint
        )
        write_atomically(position, lambda file: file.write(json.dumps(positions) + "\n"))


def mlm_head_kept_in_the_root_unit(prepare: Callable) -> Callable:
    """accelerate's `prepare`, for FSDP2, with the word embeddings and the MLM head left in the root FSDP unit.

    accelerate's fsdp2_prepare_model puts a model's input and output embeddings (get_input_embeddings and
    get_output_embeddings: the word embeddings and cls.predictions.decoder, whose weight is tied) into one FSDP unit
    of their own. BERT's head also ties the decoder's bias to cls.predictions.bias, a parameter of the head itself,
    which stays in the root unit; torch (2.13) rejects a parameter that two units share ("Parameter
    'cls.predictions.decoder.bias' is shared with a parameter already managed by another FSDP group"), and
    transformers' BertForMaskedLM fails the same way. accelerate has no setting for this grouping, and the model's
    state-dict keys (BERT's: cls.predictions.bias and cls.predictions.decoder.bias) must stay. So while `prepare`
    runs, the model answers None for both embeddings: accelerate then makes no unit of them, and the root unit holds
    the embeddings and the whole head with their tied weight and bias (each SymBertLayer still has its own unit).
    The root unit is gathered at the start of the forward and kept until the backward ends, as accelerate's unit for
    the embeddings would be (it is not resharded after forward). (With fsdp_cpu_ram_efficient_loading, which
    fsdp2.yaml turns off, accelerate would also call tie_weights meanwhile; transformers 4.x ties the decoder
    through get_output_embeddings there.)"""

    @functools.wraps(prepare)
    def prepare_with_the_head_in_the_root_unit(*args, **kwargs):
        models = [arg for arg in args if isinstance(arg, SymBertForMaskedLM)]
        for model in models:  # instance attributes over the class's methods, removed below
            model.get_input_embeddings = model.get_output_embeddings = lambda: None
        try:
            return prepare(*args, **kwargs)
        finally:
            for model in models:
                del model.get_input_embeddings, model.get_output_embeddings

    return prepare_with_the_head_in_the_root_unit


class StopOnNonFiniteEvalLoss(TrainerCallback):
    """A NaN or infinite eval loss, at any step (step 0 of --eval_on_start included), ends the run at once with the
    divergence message: before that step's checkpoint is saved, so the newest checkpoint is the last good one, and
    before another step is trained."""

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        eval_loss = (metrics or {}).get("eval_loss", 0.0)
        if not math.isfinite(eval_loss):
            raise UserError(divergence_message(args, state.global_step, eval_loss))


@dataclass
class StopWhenFlat(TrainerCallback):
    """Ends training once the eval loss has not improved on its best by at least `threshold` (relative) for
    `patience` evaluations in a row. Read from the state's log history, which a checkpoint keeps: a resumed run stops
    where the uninterrupted one would."""

    patience: int
    threshold: float = 0.005

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if flat_for(state.log_history, self.threshold) >= self.patience:
            control.should_training_stop = True


def flat_for(log_history: list[dict], threshold: float) -> int:
    """How many of the latest evaluations did not improve the best eval loss before them by `threshold` (relative)."""
    losses = [entry["eval_loss"] for entry in log_history if "eval_loss" in entry]
    best, flat = math.inf, 0
    for loss in losses:
        if loss < best * (1 - threshold):
            best, flat = loss, 0
        else:
            flat += 1
    return flat


@dataclass
class TrainedRun:
    """A finished run as training left it: its log history, and the model and held-out data it built, which the
    end-of-run report scores without reading them back from the folder (None under FSDP or DeepSpeed, whose model
    is sharded over the processes: the report then loads the saved one)."""

    log_history: list[dict]
    start: RunStart
    model: SymBertForMaskedLM | None = None
    held_out: HeldOut | None = None


def pretrain(
    run_args: RunArguments, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments
) -> TrainedRun:
    """Train one attention type in its output folder; returns the run as training left it (TrainedRun). The main
    process holds the folder's lock from before anything is read there until the run ends."""
    with ExitStack() as held:

        def claim_output_folder():
            held.enter_context(output_folder_lock(training_args.output_dir))
            for name in (STAGING_DIR, FINAL_STAGING_DIR):  # left by a killed save
                remove_path(Path(training_args.output_dir) / name)
            return resume_checkpoint(run_args, training_args)

        resume = on_main_process(training_args, claim_output_folder)
        return pretrain_in_locked_folder(run_args, model_args, data_args, training_args, resume)


def pretrain_in_locked_folder(
    run_args: RunArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    resume: str | None,
) -> TrainedRun:
    """Build, train (or finish from the last checkpoint), then write the summary that marks the run finished."""
    setup = build_trainer(
        model_args,
        data_args,
        training_args,
        resume,
        overwrite_requested(run_args, training_args),
        run_args.stop_when_flat,
    )
    train_runtime, final_eval_loss = train_or_finish(setup, resume, data_args)
    if setup.trainer.is_world_process_zero():
        summary = training_summary(setup, run_args, model_args, data_args, train_runtime, final_eval_loss)
        write_summary(summary, training_args.output_dir)
    return setup.trained_run()


@dataclass
class PretrainingSetup:
    """What a run trains: its Trainer, and the data (tokenizer, blocks, collator) it was built with."""

    trainer: SymBertPretrainingTrainer
    start: RunStart  # the config, the --init_from model and the --teacher
    model: SymBertForMaskedLM  # as built (the Trainer may hold a wrapped or compiled one)
    data: RunData
    precision: str  # what the forward and backward run in, as accelerate applies it
    carried: dict[str, Path] = field(
        default_factory=dict
    )  # kept of --init_from: conversion and sentence-transformers files

    def trained_run(self) -> TrainedRun:
        """The run as training left it, with what the end-of-run report scores (nothing under FSDP or DeepSpeed)."""
        trainer = self.trainer
        if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
            return TrainedRun(trainer.state.log_history, self.start)
        micro_batches = trainer.state.global_step * trainer.args.gradient_accumulation_steps
        readers = Readers(trainer.args.world_size, workers=trainer.args.dataloader_num_workers)
        data = self.data
        train_blocks = baseline_blocks(data.train_blocks, micro_batches, trainer._train_batch_size, readers)
        held_out = HeldOut(
            data.tokenizer, train_blocks, data.eval_blocks, data.collator, trainer.args.per_device_eval_batch_size
        )
        return TrainedRun(trainer.state.log_history, self.start, self.model, held_out)


def build_trainer(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    resume: str | None,
    overwrite: bool,
    stop_when_flat: int | None = None,
) -> PretrainingSetup:
    """The tokenizer, data, model and Trainer of a run, checked against the checkpoint it resumes from (if any) and
    the precision the device trains in, before anything is trained."""
    set_seed(training_args.seed)
    with training_args.main_process_first(desc="tokenizer and data"):
        tokenizer = load_tokenizer(data_args)
        start = run_start(model_args, tokenizer, data_args.max_seq_length)
        config = start.config
        data = load_run_data(data_args, tokenizer, training_args.seed, max_predictions_per_seq=prediction_cap(config))
    if resume:
        check_checkpoint_matches(resume, config)
    if model_args.paper_weight_decay:  # recorded in the summary's training arguments as the decay trained with
        factor = attention_class(config.attention_type).paper_weight_decay_factor
        training_args = replace(training_args, weight_decay=training_args.weight_decay * factor)
    training_args = data_order_arguments(training_args, data.train_blocks)
    tokens_per_step = (
        training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size
        * data_args.max_seq_length
    )
    callbacks = [TrainingSpeedCallback(tokens_per_step), MetricsLogCallback(), StopOnNonFiniteEvalLoss()]
    if stop_when_flat:
        callbacks.append(StopWhenFlat(stop_when_flat))
    if overwrite and not resume:
        callbacks.insert(0, RemoveStaleCheckpoints())  # before the metrics are written
    if start.teacher is not None:  # only the loss is evaluated: the eval loop keeps no logits
        training_args = replace(training_args, prediction_loss_only=True)
    model = start.model()
    if start.trains_only_attention:
        trainable_only_attention(model)
    trainer = SymBertPretrainingTrainer(
        model=model,
        args=training_args,
        train_dataset=data.train_blocks,
        eval_dataset=data.eval_blocks,
        data_collator=data.collator,
        processing_class=tokenizer,  # saved with every checkpoint: each folder is self-contained
        callbacks=callbacks,
    )
    trainer.data_fingerprint = {
        **data_fingerprint(data_args, tokenizer, data.train_blocks),
        "teacher": start.teacher_fingerprint(),
    }
    trainer.distillation = start.distillation(trainer.args.device, tokenizer)
    precision = precision_trained(trainer)
    if precision != precision_named(training_args):  # a Python caller's TrainingArguments (the command checks them)
        raise UserError(
            f"The training arguments ask for {precision_named(training_args)} but accelerate would train in "
            f"{precision} on {training_args.device}; set bf16 and fp16 for what the device runs (symbert-pretrain's "
            "--precision checks that)."
        )
    return PretrainingSetup(trainer, start, model, data, precision, start.carried_files())


def train_or_finish(setup: PretrainingSetup, resume: str | None, data_args: DataArguments) -> tuple[float, float]:
    """Trains (or resumes) to the last step, or finishes a run stopped during its final save from its last
    checkpoint; evaluates at the last step if training did not, and saves the final model. Returns the seconds this
    run trained and the final eval loss."""
    trainer = setup.trainer
    if resume and training_finished_at(resume, trainer.args):
        # A run stopped during its final save (after its last checkpoint): training it again would take one step
        # past max_steps. The last checkpoint's weights and state are the trained model's: finish from them.
        if trainer.is_world_process_zero():
            print(f"Finishing from {resume}: it is at the last step, so there is nothing left to train")
        restore_finished_training(trainer, resume)
        train_runtime = 0.0  # seconds trained by this run
    else:
        if resume and trainer.is_world_process_zero():
            print(f"Resuming from {resume}")
        trainer.resume_from = resume
        train_runtime = trainer.train(resume_from_checkpoint=resume).metrics["train_runtime"]
    evals = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    if not evals or evals[-1]["step"] != trainer.state.global_step:  # masks are fixed: no need to evaluate twice
        trainer.evaluate()
        evals = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    final_eval_loss = evals[-1]["eval_loss"]
    if not math.isfinite(final_eval_loss):  # (StopOnNonFiniteEvalLoss ends the run at such an evaluation)
        raise UserError(divergence_message(trainer.args, evals[-1].get("step"), final_eval_loss))
    attention_type = setup.model.config.attention_type
    if trainer.is_world_process_zero():
        if skipped := setup.data.skipped.message():
            print(skipped)
        print(f"{attention_type}: final eval loss {final_eval_loss:.4f}")
    # model, code, tokenizer, state, plot, what it keeps of --init_from: staged, then moved
    save_final_model(trainer, title=attention_type, carried=setup.carried)
    return train_runtime, final_eval_loss


def training_summary(
    setup: PretrainingSetup,
    run_args: RunArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    train_runtime: float,
    final_eval_loss: float,
) -> TrainingSummary:
    """The record of the run just finished (training/summary.py)."""
    trainer, args, model = setup.trainer, setup.trainer.args, setup.model
    threads = torch.get_num_threads()
    made_from = setup.start.made_from()
    return TrainingSummary(
        recipe=run_args.recipe,
        attention_type=model.config.attention_type,  # the type trained (--config_overrides may not differ)
        size=model_args.size if setup.start.init_from is None else None,  # --init_from: the folder's shape
        parameters=model.num_parameters(),
        world_size=args.world_size,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        global_batch_size=args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        max_seq_length=data_args.max_seq_length,
        steps=trainer.state.global_step,
        passes=trainer.state.epoch,
        final_eval_loss=final_eval_loss,
        precision=setup.precision,
        run_arguments=asdict(run_args),
        model_arguments=asdict(model_args),
        data_arguments=asdict(data_args),
        made_from=made_from and made_from.to_json(),
        hardware=torch.cuda.get_device_name()
        if args.device.type == "cuda"
        else f"CPU ({threads} thread{'' if threads == 1 else 's'})",
        training_arguments=json.loads(json.dumps(args.to_dict(), default=str)),
        train_runtime=train_runtime,
    )


def precision_named(training_args: TrainingArguments) -> str:
    return "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"


def precision_trained(trainer: Trainer) -> str:
    """The precision a Trainer trains in, as accelerate applies it: its mixed precision where it autocasts, else fp32
    (accelerate takes a launcher's --mixed_precision when bf16 and fp16 are off, and autocasts fp16 on GPUs only: on
    a CPU, fp16 trains in fp32). Under DeepSpeed, which casts as its config says, the bf16 or fp16 that transformers
    fills the config's "auto" with (tests/training/test_distributed_engines.py)."""
    if trainer.is_deepspeed_enabled:
        return precision_named(trainer.args)
    accelerator = trainer.accelerator
    return accelerator.mixed_precision if accelerator.native_amp and accelerator.mixed_precision != "no" else "fp32"


def data_order_arguments(training_args: TrainingArguments, train_blocks) -> TrainingArguments:
    """The Trainer's arguments for reading the data in the run's order (training/data/blocks.py): no batches skipped on
    resume (the data position says where to go on), and for map-style data trained by epochs, the steps they take
    (the order chains passes, so the loader has no length to count epochs in)."""
    updates = {"ignore_data_skip": True}
    if training_args.max_steps <= 0:  # not a stream (those need max_steps)
        blocks_per_step = (
            training_args.per_device_train_batch_size
            * training_args.gradient_accumulation_steps
            * training_args.world_size
        )
        updates["max_steps"] = math.ceil(training_args.num_train_epochs * len(train_blocks) / blocks_per_step)
    return replace(training_args, **updates)


def divergence_message(training_args: TrainingArguments, step: int | None, eval_loss: float) -> str:
    last = get_last_checkpoint(training_args.output_dir)
    kept = f"the checkpoints up to {last} are kept" if last else "no checkpoint was saved before it"
    return (
        f"Training diverged: the eval loss is {eval_loss} at step {step}, so training stopped there; {kept} and no "
        f"final model was written. Lower --learning_rate (it is {training_args.learning_rate}), raise --warmup_steps "
        f"(it is {training_args.warmup_steps}) or clip gradients harder with --max_grad_norm (it is "
        f"{training_args.max_grad_norm}), then train again with --overwrite_output_dir true or into another --output_dir."
    )


def set_torch_threads(training_args: TrainingArguments) -> None:
    """On CPU, one torch thread per core of this machine, shared by the run's processes; a set OMP_NUM_THREADS is
    left as it is. Never from the machine's momentary load: the thread count changes the order of float sums, so one
    command must give the same figures on a busy and an idle machine (it runs slower on a busy one; set
    OMP_NUM_THREADS=1 there for speed). The run prints the count and its summary records it."""
    if "OMP_NUM_THREADS" in os.environ or (torch.cuda.is_available() and not training_args.use_cpu):
        return
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, cores // training_args.world_size))


def main(argv: list[str] | None = None) -> None:
    # Past a file-size limit (ulimit -f), a write fails with EFBIG, reported in one line, instead of the signal
    # SIGXFSZ killing the process with a core dump.
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        run_command(run, argv)
    finally:  # a clean exit for every process of a torchrun / accelerate launch
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def run(argv: list[str]) -> None:
    run_args, model_args, data_args, training_args = parse_arguments(argv, usage=__doc__)
    try:
        train_and_report(run_args, model_args, data_args, training_args)
    except KeyboardInterrupt:
        raise Interrupted(interrupted_message(run_args, training_args)) from None


def interrupted_message(run_args: RunArguments, training_args: TrainingArguments) -> str:
    """What a run stopped by Ctrl-C kept, and that the same command goes on from it."""
    output_dir = Path(training_args.output_dir)
    if run_args.compare:
        return (
            f"the same command goes on: the types finished in {output_dir} are kept, the others resume from their "
            "last complete checkpoint"
        )
    with contextlib.redirect_stdout(io.StringIO()):  # (its notes on skipped checkpoints are not news here)
        checkpoint = last_complete_checkpoint(output_dir) if output_dir.is_dir() else None
    if checkpoint is None:
        return f"no checkpoint was complete in {output_dir}; the same command starts the run again"
    return f"the last complete checkpoint is {checkpoint}; the same command resumes from it"


def print_distillation_report(output_dir: Path, log_history: list[dict], model_args: ModelArguments) -> None:
    """The end of a distillation whose MLM head was not trained (a teacher without one, or the attention stage):
    the distillation loss before and after, and where the results are; no masked-token scores."""
    evals = [(entry["step"], entry["eval_loss"]) for entry in log_history if "eval_loss" in entry]
    (first_step, first_loss), (last_step, last_loss) = evals[0], evals[-1]
    what = {
        "attention": "the layers' normalised attention-output error on the teacher's inputs",
        "model": "the layers' normalised hidden-state error plus the sentence embeddings' 1 - cosine",
    }[model_args.distill_stage]
    print(
        f"\nDistilled toward {model_args.teacher} (stage {model_args.distill_stage!r}): held-out loss ({what}) "
        f"{first_loss:.4f} at step {first_step} -> {last_loss:.4f} at step {last_step}. The model's MLM head was not "
        f"trained. Results in {output_dir}: model + code + tokenizer, {TrainingSummary.FILE_NAME}, metrics.csv, "
        "metrics.json, loss.png."
    )


def train_and_report(
    run_args: RunArguments, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments
) -> None:
    set_torch_threads(training_args)
    # before anything tokenises: the workers may then tokenise with the cores this process's share holds
    cores = max(1, len(os.sched_getaffinity(0)) // training_args.world_size)
    workers = training_args.dataloader_num_workers
    SymBertPretrainingTrainer.tokenizer_threads = worker_tokenizer_threads(workers, cores)
    output_dir = Path(training_args.output_dir)
    is_main = training_args.process_index == 0
    if is_main and training_args.device.type == "cpu":  # the figures depend on it: said, and in the summary
        threads = torch.get_num_threads()
        source = "OMP_NUM_THREADS" if "OMP_NUM_THREADS" in os.environ else "one per core"
        print(f"CPU: {threads} torch thread{'' if threads == 1 else 's'} per process ({source})")
    if not run_args.compare:
        trained = pretrain(run_args, model_args, data_args, training_args)
        if is_main and not trained.start.trains_mlm_head():  # its masked-token scores would mean nothing
            print_distillation_report(output_dir, trained.log_history, model_args)
        elif is_main:
            if trained.model is None:
                comparison = saved_model_scores(output_dir)
            else:
                comparison = held_out_scores(trained.model, trained.held_out)
            print_run_report(output_dir, trained.log_history, comparison)
            if trained.start.teacher is not None:
                print(
                    f"Distilled toward {model_args.teacher}: the eval loss is the distillation loss (the layers' "
                    "normalised hidden-state error, the sentence embeddings' and the masked-LM divergence). "
                    "python benchmarks/agreement.py measures the agreement with the teacher."
                )
        return

    kinds = run_args.compare.split(",")
    if data_args.blocks_dir is None and not data_args.streaming:  # tokenise once for every type
        folder = output_dir / PREPARED_BLOCKS_DIR
        if run_args.summarize_only:  # the blocks the types trained on; nothing is read or prepared
            data_args = replace(data_args, blocks_dir=str(folder))
        else:
            data_args = on_main_process(training_args, lambda: prepared_once(data_args, folder, training_args.seed))
    plans = {
        kind: (replace(model_args, attention_type=kind), replace(training_args, output_dir=str(output_dir / kind)))
        for kind in kinds
    }
    # a rerun of an interrupted comparison: the types already trained (their folder holds its summary) are
    # not trained again, their results are read back; checked, all of them, before anything trains. Every path is
    # this folder's own: one the runs recorded inside the comparison's folder of then (a copy's original) is read
    # as the same place in this one.
    finished = on_main_process(
        training_args,
        lambda: [
            kind
            for kind, (kind_model_args, kind_training_args) in plans.items()
            if finished_comparison_run(run_args, kind_model_args, data_args, kind_training_args, root=output_dir)
        ],
    )
    if run_args.summarize_only and (unfinished := [kind for kind in kinds if kind not in finished]):
        raise UserError(
            f"summarize_only=True: {', '.join(str(output_dir / kind) for kind in unfinished)} "
            f"hold{'s' if len(unfinished) == 1 else ''} no finished run (no {TrainingSummary.FILE_NAME}); run the "
            "command without --summarize_only to train them."
        )
    runs = {}
    for kind, (kind_model_args, kind_training_args) in plans.items():
        if kind in finished:
            if is_main and not run_args.summarize_only:
                print(
                    f"{kind}: already trained in {kind_training_args.output_dir} (it holds {TrainingSummary.FILE_NAME}); "
                    "its results are reused"
                )
            runs[kind] = load_log_history(kind_training_args.output_dir)
            continue
        runs[kind] = pretrain(run_args, kind_model_args, data_args, kind_training_args).log_history
    if is_main:
        first = next(iter(runs.values()))
        target = run_args.target_eval_loss
        if target is None:
            target = [e["eval_loss"] for e in first if "eval_loss" in e][-1]
        table = comparison_report(
            runs, target, run_args.target_eval_loss is not None, training_args.seed, training_args.data_seed
        )
        write_atomically(output_dir / "comparison.md", lambda file: file.write(table + "\n"))
        plot_comparison(runs, output_dir / "comparison.png", target_loss=target)
        print(f"\n{table}\nComparison in {output_dir}/comparison.md and comparison.png")


if __name__ == "__main__":
    main()
