"""How good a pre-trained model is on its run's held-out masked tokens, against the unigram baseline (token frequencies
alone) on the same tokens, and what it fills in for a masked word when a fresh process loads it from its folder."""

import json
import math
from dataclasses import dataclass, fields
from itertools import islice
from pathlib import Path

import torch
from datasets import Dataset, IterableDataset
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .. import SymBertConfig, SymBertForMaskedLM
from ..tools.fresh_load import load_in_fresh_process
from .arguments import DataArguments
from .data.blocks import Readers, StreamTrained
from .data.loading import load_run_data
from .data.masking import ResumableMLMCollator, prediction_cap
from .data.prepared import PreparedBlocks
from .summary import TrainingSummary

# Fixed before any training: each masked word is a common word of 19th-century English prose.
FILL_MASK_SENTENCES = [
    "The old man walked slowly along the {mask} of the river.",
    "She opened the {mask} and looked out into the garden.",
    "He put his hand into his {mask} and took out a letter.",
    "I shall never {mask} what you have done for me.",
    "It was a cold {mask} in the middle of winter.",
]


def fill_mask_example(folder: str | Path, sentences: list[str] = FILL_MASK_SENTENCES) -> dict:
    """Top-5 predictions for each of `sentences` ("{mask}" marks the masked word) of the model saved in `folder`,
    loaded by a fresh Python process that cannot import this project (symbert/tools/fresh_load.py) with
    `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)`, so from the folder's own code and
    tokenizer, as a user without this project would."""

    report = load_in_fresh_process([folder], "--fill_mask", json.dumps(sentences))
    (loaded,) = report["models"].values()
    if "error" in loaded:
        raise RuntimeError(f"Loading {folder} in a fresh process failed: {loaded['error']}")
    return loaded


BASELINE_MAX_TRAIN_BLOCKS = 100_000  # token frequencies from at most this many training blocks (a stream is endless)


@dataclass
class HeldOut:
    """What a run scores its model on: the training blocks (for the baseline's token frequencies: a stream's as
    training read them, see baseline_blocks), the held-out blocks, and the collator that masks them as the Trainer's
    evaluation did (it seeds each batch's masks by its content, so the same batches get the same masks)."""

    tokenizer: PreTrainedTokenizerBase
    train_blocks: Dataset | StreamTrained | PreparedBlocks
    eval_blocks: Dataset
    collator: ResumableMLMCollator
    batch_size: int


def baseline_blocks(
    train_blocks: Dataset | IterableDataset | PreparedBlocks, micro_batches: int, batch_size: int, readers: Readers
) -> Dataset | StreamTrained | PreparedBlocks:
    """The training blocks whose token frequencies the unigram baseline takes: map-style blocks as they are (read and
    checked whole before training); of a stream, the blocks that training read in its `micro_batches` micro-batches of
    `batch_size` blocks per process (StreamTrained), so the report reads no record past them (the stream may go on
    further, with records that training never read)."""
    if isinstance(train_blocks, IterableDataset):
        return StreamTrained(train_blocks, batch_size, readers, micro_batches)
    return train_blocks


def held_out_scores(model: SymBertForMaskedLM, held_out: HeldOut) -> dict:
    """The unigram baseline and `model` scored on the same masked held-out tokens: {"eval_blocks", "unigram",
    "model"}, each score {"loss", "accuracy", "masked_tokens"}. The baseline's token frequencies are the training
    blocks' (`held_out.train_blocks`, at most BASELINE_MAX_TRAIN_BLOCKS of them)."""
    tokenizer, size = held_out.tokenizer, held_out.batch_size
    eval_blocks = list(held_out.eval_blocks)
    batches = [held_out.collator(eval_blocks[start : start + size]) for start in range(0, len(eval_blocks), size)]
    counts = torch.zeros(len(tokenizer), dtype=torch.int64)
    train_batches = held_out.train_blocks.iter(batch_size=1000)
    for batch in islice(train_batches, math.ceil(BASELINE_MAX_TRAIN_BLOCKS / 1000)):
        counts += torch.bincount(torch.tensor(batch["input_ids"]).flatten(), minlength=len(tokenizer))
    counts[tokenizer.all_special_ids] = 0  # never masked: the baseline spreads nothing on them
    labels = torch.cat([batch["labels"][batch["labels"] != -100] for batch in batches])
    return {
        "eval_blocks": len(eval_blocks),
        "unigram": unigram_baseline(counts, labels),
        "model": masked_token_scores(model, batches),
    }


def saved_model_scores(output_dir: str | Path) -> dict:
    """held_out_scores of the model saved in `output_dir`, its held-out blocks and masks rebuilt from its training
    summary (for a run finished earlier; a run just trained is scored from what it built)."""
    summary = TrainingSummary.read(output_dir)
    known = {f.name for f in fields(DataArguments)}  # a summary may hold fields of another version
    data_args = DataArguments(**{k: v for k, v in summary.data_arguments.items() if k in known})
    arguments = summary.training_arguments
    seed, batch_size = arguments["seed"], arguments["per_device_eval_batch_size"]
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    cap = prediction_cap(SymBertConfig.from_pretrained(output_dir))
    data = load_run_data(data_args, tokenizer, seed, max_predictions_per_seq=cap, report_skipped=False)
    model = SymBertForMaskedLM.from_pretrained(output_dir)
    micro_batches = summary.steps * arguments["gradient_accumulation_steps"]
    readers = Readers(summary.world_size, workers=arguments["dataloader_num_workers"])
    train_blocks = baseline_blocks(data.train_blocks, micro_batches, summary.per_device_train_batch_size, readers)
    return held_out_scores(model, HeldOut(tokenizer, train_blocks, data.eval_blocks, data.collator, batch_size))


def print_run_report(output_dir: str | Path, log_history: list[dict], comparison: dict) -> None:
    """What the main job prints at the end: eval loss before and after, the model against the unigram baseline on the
    same masked tokens (`comparison`: held_out_scores), fill-mask examples from the saved folder, where the results
    are."""
    evals = [(entry["step"], entry["eval_loss"]) for entry in log_history if "eval_loss" in entry]
    (first_step, first_loss), (last_step, last_loss) = evals[0], evals[-1]
    unigram, model = comparison["unigram"], comparison["model"]
    # the Trainer's eval loss averages its eval batches, the table below every masked token: hence two final losses
    print(
        f"\nEval loss (the Trainer's, a mean over eval batches): {first_loss:.4f} at step {first_step} -> "
        f"{last_loss:.4f} at step {last_step}"
    )
    print(
        f"\nMasked-token prediction on the {comparison['eval_blocks']} held-out blocks ({model['masked_tokens']:,} "
        "masked tokens, the same masks for both; cross-entropy per masked token):"
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
        f"AutoModelForMaskedLM.from_pretrained('{output_dir}', trust_remote_code=True)), {TrainingSummary.FILE_NAME}, "
        f"metrics.csv, metrics.json, loss.png, TensorBoard logs in {output_dir}/runs"
    )


def unigram_baseline(token_counts: torch.Tensor, labels: torch.Tensor) -> dict:
    """Cross-entropy (nats per token) and top-1 accuracy of predicting each of `labels` (token ids) from token
    frequencies alone: `token_counts[i]` is how often token i occurs in the training set. Add-one smoothing keeps
    a token unseen in training at a finite loss. Returns {"loss", "accuracy", "masked_tokens"}."""
    counts = torch.as_tensor(token_counts, dtype=torch.float64)
    labels = torch.as_tensor(labels).flatten()
    log_probabilities = ((counts + 1) / (counts.sum() + len(counts))).log()
    return {
        "loss": -log_probabilities[labels].mean().item(),
        "accuracy": (labels == counts.argmax()).double().mean().item(),
        "masked_tokens": labels.numel(),
    }


@torch.no_grad()
def masked_token_scores(model: PreTrainedModel, batches: list[dict[str, torch.Tensor]]) -> dict:
    """The model's cross-entropy (nats per masked token) and top-1 accuracy over every masked token of `batches`
    (dicts of model inputs with `labels`, -100 where nothing is masked). Returns {"loss", "accuracy",
    "masked_tokens"}. Works with logits at every position or, with sparse_prediction, at the masked ones only
    (padded to a fixed number with max_predictions_per_seq)."""
    model.eval()
    parameter = next(model.parameters(), None)
    loss = correct = count = 0
    for batch in batches:
        if parameter is not None:  # a trained model may be on an accelerator
            batch = {name: tensor.to(parameter.device) for name, tensor in batch.items()}
        labels = batch["labels"]
        logits = model(**batch).logits
        masked = labels != -100
        if logits.shape[:-1] == labels.shape:  # dense: one row of logits per position
            logits = logits[masked]
        # sparse: the masked positions' rows first, in order (with max_predictions_per_seq, padding rows after them)
        labels = labels[masked]
        logits = logits[: labels.numel()]
        loss += torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        count += labels.numel()
    return {"loss": loss / count, "accuracy": correct / count, "masked_tokens": count}
