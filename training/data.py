"""Pre-training data: texts → tokens → fixed-length blocks (texts concatenated and cut, as the paper does)."""

import hashlib
import os
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import torch
from datasets import IterableDataset, load_dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, PreTrainedTokenizerFast

EMBEDDED_CORPUS = Path(__file__).parent / "corpus" / "english_prose.txt.gz"
DEFAULT_TOKENIZER = "bert-base-uncased"
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def cache_dir():
    return Path(os.environ.get("SYMBERT_CACHE", Path.home() / ".cache" / "symbert"))


def uses_embedded_corpus(data_args):
    return data_args.dataset_name is None and not data_args.train_files


def load_texts(data_args):
    """The raw texts: a Hub dataset, local files, or the embedded corpus."""
    if uses_embedded_corpus(data_args):
        if not EMBEDDED_CORPUS.is_file():
            raise FileNotFoundError(
                f"The embedded corpus {EMBEDDED_CORPUS} is missing from this installation; "
                "pass --train_files or --dataset_name."
            )
        return load_dataset("text", data_files=str(EMBEDDED_CORPUS), split="train", streaming=data_args.streaming)
    if data_args.dataset_name is not None:
        dataset = load_dataset(
            data_args.dataset_name, data_args.dataset_config, split=data_args.dataset_split, streaming=data_args.streaming
        )
    else:
        files = [Path(f) for f in data_args.train_files]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"train_files not found: {', '.join(missing)}")
        formats = {LOCAL_FORMATS.get(f.suffixes[0] if f.suffixes else "", None) for f in files}
        if None in formats or len(formats) != 1:
            raise ValueError(
                f"train_files must all be one of {', '.join(LOCAL_FORMATS)} (optionally compressed): {data_args.train_files}"
            )
        dataset = load_dataset(formats.pop(), data_files=[str(f) for f in files], split="train", streaming=data_args.streaming)
    columns = dataset.column_names
    if columns is None:  # a stream whose features are unknown until read: look at its first example
        columns = list(next(iter(dataset), {}))
    if columns and data_args.text_column not in columns:
        raise ValueError(f"text_column {data_args.text_column!r} is not in the dataset; its columns are {columns}.")
    return dataset


def describe_source(data_args):
    if uses_embedded_corpus(data_args):
        return "the embedded corpus"
    if data_args.dataset_name is not None:
        return f"dataset {data_args.dataset_name!r} (config {data_args.dataset_config!r}, split {data_args.dataset_split!r})"
    return f"train_files {', '.join(data_args.train_files)}"


def train_wordpiece(texts, vocab_size):
    """An uncased BERT-style WordPiece tokenizer trained on `texts` (an iterable of strings)."""
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    backend.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def load_tokenizer(data_args):
    """The named tokenizer; for the embedded corpus (and no name given), one trained on it and cached."""
    if data_args.tokenizer is not None or not uses_embedded_corpus(data_args):
        name = data_args.tokenizer or DEFAULT_TOKENIZER
        try:
            return AutoTokenizer.from_pretrained(name)
        except OSError as error:
            raise OSError(
                f"Tokenizer {name!r} is neither a local tokenizer folder nor on the Hub or in the local Hugging Face "
                f"cache ({error.__class__.__name__}); pass --tokenizer PATH to a saved tokenizer."
            ) from error
    digest = hashlib.sha256(EMBEDDED_CORPUS.read_bytes()).hexdigest()[:16]
    folder = cache_dir() / "tokenizers" / f"wordpiece-{data_args.tokenizer_vocab_size}-{digest}"
    if not (folder / "tokenizer.json").is_file():
        texts = load_dataset("text", data_files=str(EMBEDDED_CORPUS), split="train")["text"]
        tokenizer = train_wordpiece(texts, data_args.tokenizer_vocab_size)
        tokenizer.save_pretrained(folder)  # written whole before anyone reads it: see main_process_first
    return AutoTokenizer.from_pretrained(folder)


def group_into_blocks(batch, block_size):
    """Concatenate the batch's token lists and cut them into full blocks of `block_size` (the tail is dropped)."""
    ids = list(chain.from_iterable(batch["input_ids"]))
    usable = len(ids) // block_size * block_size
    return {"input_ids": [ids[i : i + block_size] for i in range(0, usable, block_size)]}


def load_blocks(data_args, tokenizer, seed=0):
    """(train, eval) datasets of `max_seq_length`-token blocks; eval holds `eval_blocks` blocks out of training."""
    texts = load_texts(data_args)
    block_size = data_args.max_seq_length
    # Each text gets [CLS] ... [SEP]; blocks then span text boundaries, as in the paper.

    def tokenize(batch):
        return {"input_ids": tokenizer(batch[data_args.text_column], add_special_tokens=True)["input_ids"]}

    def has_text(batch):
        return [bool(text and text.strip()) for text in batch[data_args.text_column]]

    # Blank lines would only add [CLS] [SEP] pairs to the blocks.
    texts = texts.filter(has_text, batched=True)
    if not isinstance(texts, IterableDataset) and len(texts) == 0:
        raise ValueError(f"The training data are empty: {describe_source(data_args)} hold no text.")
    # select_columns rather than remove_columns: a stream may not know its columns before it is read
    tokens = texts.map(tokenize, batched=True).select_columns(["input_ids"])
    blocks = tokens.map(group_into_blocks, batched=True, batch_size=1000, fn_kwargs={"block_size": block_size})
    if isinstance(blocks, IterableDataset):
        if next(iter(blocks), None) is None:
            raise ValueError(f"The training data are empty: {describe_source(data_args)} give no block of {block_size} tokens.")
        return blocks.skip(data_args.eval_blocks), blocks.take(data_args.eval_blocks)
    if len(blocks) <= data_args.eval_blocks:
        raise ValueError(
            f"{describe_source(data_args)} give {len(blocks)} blocks of {block_size} tokens, not more than eval_blocks="
            f"{data_args.eval_blocks}; lower eval_blocks or max_seq_length, or add data."
        )
    split = blocks.train_test_split(test_size=data_args.eval_blocks, seed=seed)
    return split["train"], split["test"]


@dataclass
class ResumableMLMCollator(DataCollatorForLanguageModeling):
    """BERT's dynamic masking (80/10/10), with each batch's masks drawn from a generator seeded by `mask_seed` and the
    batch's token ids instead of the global RNG.

    The Trainer collates a batch ahead of the checkpoint it saves, out of reach of the RNG state stored there, so with
    the global RNG a resumed run would mask differently from an uninterrupted one. Seeded by content, every batch is
    masked the same in both; shuffling still gives a block different masks in different epochs, and the held-out
    blocks get the same masks at every evaluation, so eval losses along a run are comparable.
    """

    mask_seed: int = 0

    def torch_call(self, examples):
        ids = np.asarray([example["input_ids"] for example in examples], dtype=np.int64)
        digest = hashlib.blake2b(ids.tobytes(), digest_size=8, key=self.mask_seed.to_bytes(8, "little")).digest()
        self.generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        return super().torch_call(examples)
