"""Texts → tokens → fixed-length blocks (texts concatenated and cut, as the paper does), with the held-out blocks:
a random split of a corpus read into memory, or the first blocks of a stream."""

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
from datasets import Dataset, IterableDataset
from transformers import PreTrainedTokenizerBase

from ...cli import UserError
from .corpus_files import describe_source, load_texts, missing_text_error, not_text_error
from .options import DataArguments
from .tokenizer import token_ids_function


def group_into_blocks(batch: Mapping[str, list], block_size: int) -> dict[str, list[list[int]]]:
    """Concatenate the batch's token lists and cut them into full blocks of `block_size` (the tail is dropped)."""
    ids = list(chain.from_iterable(batch["input_ids"]))
    usable = len(ids) // block_size * block_size
    return {"input_ids": [ids[i : i + block_size] for i in range(0, usable, block_size)]}


def blocks_of_batch(batch: pa.Table, block_size: int) -> pa.Table:
    """`group_into_blocks` on an Arrow batch, without Python lists: the same blocks, eight times faster."""
    ids = batch.column("input_ids").combine_chunks().flatten()
    usable = len(ids) // block_size * block_size
    offsets = pa.array(np.arange(0, usable + 1, block_size, dtype=np.int32))
    return pa.table({"input_ids": pa.ListArray.from_arrays(offsets, ids.slice(0, usable))})


@dataclass
class SkippedRecords:
    """The records without a text a run skipped (--skip_records_without_text): counted as a stream is read, so the
    count covers the records read so far (a stream's indices count from 0 on each pass: each counted once)."""

    source: str
    text_column: str
    indices: set[int] = field(default_factory=set)

    def message(self) -> str | None:
        if not self.indices:
            return None
        return (
            f"Skipped {len(self.indices):,} records of {self.source} without a text in field {self.text_column!r} "
            "(--skip_records_without_text true), of the records the stream was read to."
        )


def cut_blocks(
    data_args: DataArguments,
    tokenizer: PreTrainedTokenizerBase,
    seed: int = 0,
    report_skipped: bool = True,
    skipped: SkippedRecords | None = None,
) -> tuple[Dataset | IterableDataset, Dataset | IterableDataset]:
    """(train, eval) datasets of `max_seq_length`-token blocks of the corpus's texts; eval holds `eval_blocks` blocks
    out of training. A record without a text is an error naming it, unless data_args.skip_records_without_text: then
    their number is printed (unless not `report_skipped`), and for a stream counted in `skipped` as it is read."""
    texts = load_texts(data_args)
    block_size = data_args.max_seq_length
    # Each text gets [CLS] ... [SEP]; blocks then span text boundaries, as in the paper.

    # no "longer than model_max_length" warning: a long text is cut into blocks, never fed whole
    token_ids = token_ids_function(tokenizer)

    def tokenize(batch):
        return {"input_ids": token_ids(batch[data_args.text_column])}

    skip = data_args.skip_records_without_text
    skipped = skipped if skipped is not None else SkippedRecords(describe_source(data_args), data_args.text_column)

    def has_text(batch, indices):
        for text, index in zip(batch[data_args.text_column], indices, strict=True):
            if text is None:  # the record has no such field, or null
                if not skip:
                    raise missing_text_error(data_args, index)
                skipped.indices.add(index)
            elif not isinstance(text, str):  # a stream's later rows may hold numbers, lists, ...
                raise not_text_error(data_args, type(text).__name__)
        return [bool(text and text.strip()) for text in batch[data_args.text_column]]

    if not isinstance(texts, IterableDataset):
        column = texts.data.column(data_args.text_column)  # Arrow: the nulls are counted without reading the texts
        if column.null_count and not skip:
            raise missing_text_error(data_args, column.is_null().to_pylist().index(True))
        if column.null_count and report_skipped:
            print(
                f"Skipped {column.null_count:,} of {len(texts):,} records of {describe_source(data_args)} without a "
                f"text in field {data_args.text_column!r} (--skip_records_without_text true)."
            )
    # Blank lines would only add [CLS] [SEP] pairs to the blocks.
    if isinstance(texts, IterableDataset):
        return stream_blocks(texts, data_args, has_text, tokenize)
    texts = texts.filter(has_text, batched=True, with_indices=True, num_proc=data_args.num_proc)
    if len(texts) == 0:
        raise UserError(f"The training data are empty: {describe_source(data_args)} hold no text.")
    tokens = texts.map(tokenize, batched=True, num_proc=data_args.num_proc).select_columns(["input_ids"])
    # In one process: the blocks are cut per batch of 1,000 texts, and --num_proc's processes would start their
    # batches at their shards' starts, giving other blocks for every process count (filtering and tokenising
    # are per text, the same whatever the count)
    blocks = (
        tokens.with_format("arrow")
        .map(blocks_of_batch, batched=True, batch_size=1000, fn_kwargs={"block_size": block_size})
        .with_format(None)
    )
    if len(blocks) <= data_args.eval_blocks:
        raise UserError(
            f"{describe_source(data_args)} give {len(blocks)} blocks of {block_size} tokens, not more than eval_blocks="
            f"{data_args.eval_blocks}; lower eval_blocks or max_seq_length, or add data."
        )
    split = blocks.train_test_split(test_size=data_args.eval_blocks, seed=seed)
    return split["train"], split["test"]


def stream_blocks(
    texts: IterableDataset, data_args: DataArguments, has_text: Callable, tokenize: Callable
) -> tuple[IterableDataset, Dataset]:
    """(training stream, held-out blocks) of a stream of texts. The held-out blocks are its first `eval_blocks`, and
    every text they were cut from is left out of training by its digest, not by its place: a place in the stream is
    not one once the stream is split between processes and dataloader workers."""
    if hasattr(texts, "reshard"):  # datasets >= 4.4
        texts = texts.reshard()  # Parquet: a shard per row group, so that many readers each get whole shards
    held_out, held_out_texts = held_out_stream_blocks(
        texts.filter(has_text, batched=True, with_indices=True), tokenize, data_args
    )
    column = data_args.text_column

    def training_blocks(batch: dict, indices: list[int]) -> dict:
        # One map for the check, the held-out texts, tokenising and blocking: a stream joins each batched step's
        # example keys into the next one's, which costs more than tokenising when steps are chained.
        keep = [
            kept and text_digest(text) not in held_out_texts
            for kept, text in zip(has_text(batch, indices), batch[column], strict=True)
        ]
        texts_kept = {column: [text for text, kept in zip(batch[column], keep, strict=True) if kept]}
        return group_into_blocks(tokenize(texts_kept), data_args.max_seq_length)

    columns = texts.column_names or list(next(iter(texts), {}))  # a stream may know its columns only once read
    train = texts.map(training_blocks, batched=True, batch_size=1000, with_indices=True, remove_columns=columns)
    if next(iter(train.iter(batch_size=1)), None) is None:
        raise UserError(
            f"{describe_source(data_args)} give no training block besides the {data_args.eval_blocks} held-out "
            "blocks; lower eval_blocks or max_seq_length, or add data."
        )
    return train, held_out


def text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def held_out_stream_blocks(texts: IterableDataset, tokenize, data_args: DataArguments) -> tuple[Dataset, set[bytes]]:
    """The first `eval_blocks` blocks of a stream, cut as the training blocks are (batches of 1,000 texts, each
    batch's tail dropped), and the digests of the texts they were cut from (a text that ends in a block's tokens
    included)."""
    block_size, wanted = data_args.max_seq_length, data_args.eval_blocks
    blocks, digests = [], set()
    for batch in texts.iter(batch_size=1000):
        tokens = tokenize(batch)["input_ids"]
        cut = group_into_blocks({"input_ids": tokens}, block_size)["input_ids"][: wanted - len(blocks)]
        held_out_tokens, start = len(cut) * block_size, 0
        for text, ids in zip(batch[data_args.text_column], tokens, strict=True):
            if start >= held_out_tokens:
                break
            digests.add(text_digest(text))
            start += len(ids)
        blocks += cut
        if len(blocks) == wanted:
            break
    if len(blocks) < wanted:
        raise UserError(
            f"{describe_source(data_args)} give {len(blocks)} blocks of {block_size} tokens, not more than "
            f"eval_blocks={wanted}, so none would be left to train on; lower eval_blocks or max_seq_length, or add data."
            if blocks
            else f"The training data are empty: {describe_source(data_args)} give no block of {block_size} tokens."
        )
    return Dataset.from_dict({"input_ids": blocks}), digests
