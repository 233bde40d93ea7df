"""Pre-training data: texts → tokens → fixed-length blocks (texts concatenated and cut, as the paper does)."""

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, count
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets import Dataset, IterableDataset, Value, load_dataset
from filelock import FileLock
from fsspec.utils import infer_compression
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, BertTokenizerFast, DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .. import SymBertConfig
from ..cli import UserError, missing_local_path
from .arguments import DataArguments

EMBEDDED_CORPUS = Path(__file__).parent / "corpus" / "english_prose.txt.gz"
DEFAULT_TOKENIZER = "bert-base-uncased"
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# How much of each local file is checked before loading; a problem further on is reported when the file is read.
CHECKED_BYTES = 2**16
JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named does not exist."""


def cache_dir() -> Path:
    return Path(os.environ.get("SYMBERT_CACHE", Path.home() / ".cache" / "symbert"))


def uses_embedded_corpus(data_args: DataArguments) -> bool:
    return data_args.dataset_name is None and not data_args.train_files and data_args.blocks_dir is None


def load_texts(data_args: DataArguments) -> Dataset | IterableDataset:
    """The raw texts: a Hub dataset, local files, or the embedded corpus."""
    if uses_embedded_corpus(data_args):
        if not EMBEDDED_CORPUS.is_file():
            raise MissingFileError(
                f"The embedded corpus {EMBEDDED_CORPUS} is missing from this installation; "
                "pass --train_files or --dataset_name."
            )
        return load_dataset("text", data_files=str(EMBEDDED_CORPUS), split="train", streaming=data_args.streaming)
    if data_args.dataset_name is not None:
        dataset = load_dataset(
            data_args.dataset_name,
            data_args.dataset_config,
            split=data_args.dataset_split,
            streaming=data_args.streaming,
        )
    else:
        dataset = load_local_files(data_args)
    columns = dataset.column_names
    if columns is None:  # a stream whose features are unknown until read: look at its first example
        columns = list(next(iter(dataset), {}))
    if columns and data_args.text_column not in columns:
        raise UserError(f"text_column {data_args.text_column!r} is not in the dataset; its columns are {columns}.")
    feature = (dataset.features or {}).get(data_args.text_column)
    if feature is not None and feature not in (Value("string"), Value("large_string")):
        raise not_text_error(data_args, feature.dtype if isinstance(feature, Value) else type(feature).__name__)
    return dataset


def not_text_error(data_args: DataArguments, type_name: str) -> UserError:
    """A text column that holds other values than strings; for local files, the file and line that do."""
    for file in map(Path, data_args.train_files or []):
        if data_args.dataset_name is None and (problem := file_problem(file, data_args.text_column, limit=None)):
            return UserError(f"{file} {problem}")
    return UserError(
        f"text_column {data_args.text_column!r} of {describe_source(data_args)} holds values of type {type_name}, "
        "not strings; pass --text_column with a column of texts."
    )


def local_format(path: Path) -> str | None:
    return LOCAL_FORMATS.get(path.suffixes[0] if path.suffixes else "")


def load_local_files(data_args: DataArguments) -> Dataset | IterableDataset:
    """`train_files` as one dataset, each file checked first (its first CHECKED_BYTES) and named in read errors."""
    files = [Path(f) for f in data_args.train_files]
    if folders := [str(f) for f in files if f.is_dir()]:
        raise UserError(
            f"train_files: {', '.join(folders)} {'is a folder' if len(folders) == 1 else 'are folders'}, not a file; "
            f"pass the corpus files in it (one of {', '.join(LOCAL_FORMATS)}, optionally compressed), e.g. "
            f"--train_files {folders[0]}/*.txt"
        )
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise MissingFileError(f"train_files not found: {', '.join(missing)}")
    if twice := same_files(files):
        raise UserError(
            f"train_files: {twice[0]} and {twice[1]} are the same file ({twice[2]}); name each corpus file once: a "
            "file read twice puts the same texts in the training and the held-out blocks."
        )
    formats = {local_format(f) for f in files}
    if None in formats or len(formats) != 1:
        raise UserError(
            f"train_files must all be one of {', '.join(LOCAL_FORMATS)} (optionally compressed): {data_args.train_files}"
        )
    builder = formats.pop()
    for file in files:
        if problem := file_problem(
            file, data_args.text_column, CHECKED_BYTES, require_text=not data_args.skip_records_without_text
        ):
            raise UserError(f"{file} {problem}")
    if data_args.streaming:  # read errors happen while training: each file's rows are read under its name
        return IterableDataset.from_generator(
            stream_files,
            gen_kwargs={"files": [str(f) for f in files], "builder": builder, "text_column": data_args.text_column},
        )
    with errors_named_by_file(files, data_args.text_column):
        return load_dataset(builder, data_files=[str(f) for f in files], split="train")


def same_files(files: list[Path]) -> tuple[Path, Path, str] | None:
    """The first two of `files` that are one file (the same resolved path: a link, ./a.txt and a.txt) or hold the
    same bytes (a copy), with which; None if there are none. Only files of equal size are hashed."""
    first_by_path, first_by_digest, sizes = {}, {}, {}
    for file in files:
        resolved = file.resolve()
        if resolved in first_by_path:
            return first_by_path[resolved], file, f"both resolve to {resolved}"
        first_by_path[resolved] = file
        sizes.setdefault(file.stat().st_size, []).append(file)
    for same_size in (group for group in sizes.values() if len(group) > 1):
        for file in same_size:
            with open(file, "rb") as handle:
                key = hashlib.file_digest(handle, "sha256").hexdigest()
            if key in first_by_digest:
                return first_by_digest[key], file, f"the same {file.stat().st_size} bytes"
            first_by_digest[key] = file
    return None


def stream_files(files: list[str], builder: str, text_column: str) -> Iterator[dict]:
    for file in files:
        with errors_named_by_file([Path(file)], text_column):
            stream = load_dataset(builder, data_files=file, split="train", streaming=True)
            # .iter, not iteration: in a dataloader worker, iterating would split this one file between the workers
            for batch in stream.iter(batch_size=1000):
                columns = list(batch)
                yield from (dict(zip(columns, row, strict=True)) for row in zip(*batch.values(), strict=True))


@contextmanager
def errors_named_by_file(files: list[Path], text_column: str) -> Iterator[None]:
    """A read error (datasets' DatasetGenerationError, a UnicodeDecodeError, a truncated archive, bad JSON) becomes a
    UserError naming the file and the problem, found by reading the files through; other errors pass unchanged."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        for file in files:
            if problem := file_problem(file, text_column, limit=None):
                raise UserError(f"{file} {problem}") from error
        raise


def file_problem(path: Path, text_column: str, limit: int | None, require_text: bool = False) -> str | None:
    """What is wrong with a local corpus file, judged on its first `limit` bytes of text (all for None), or None.
    With `require_text`, a record without a text (no `text_column` field, or null) is a problem too."""
    if path.stat().st_size == 0:
        return "is empty (0 bytes); remove it from --train_files."
    if local_format(path) == "parquet":
        return parquet_problem(path, text_column, require_text, whole=limit is None)
    # A .json file holds JSON lines if its first line is an object; else one JSON document, checked when read.
    json_lines = {".jsonl": True, ".json": None}.get(path.suffixes[0], False)
    seen = texts = 0
    try:
        with fsspec.open(str(path), "rb", compression="infer") as file:
            for number in count(1):
                line = file.readline(-1 if limit is None else limit - seen)
                seen += len(line)
                if not line or (limit is not None and seen >= limit and not line.endswith(b"\n")):
                    break  # the end of the file, or a line cut by the limit: the rest is checked when read
                if json_lines is None and line.strip():
                    json_lines = is_json_object(line)
                if problem := line_problem(line, number, json_lines, text_column, require_text):
                    return problem
                texts += bool(line.strip())
    except Exception as error:  # whatever the decompressor raises: EOFError, BadGzipFile, LZMAError, ...
        compression = infer_compression(str(path))
        if compression is None:
            raise
        return f"is a truncated or corrupt {compression} archive ({type(error).__name__}: {error})."
    if texts == 0 and (limit is None or seen < limit):
        return "holds only blank lines; remove it from --train_files."
    if require_text and limit is None and json_lines is False and local_format(path) == "json":
        return json_document_problem(path, text_column)
    return None


def json_document_problem(path: Path, text_column: str) -> str | None:
    """A .json file holding one JSON document, an array of records: the first record without a text, if any."""
    try:
        with fsspec.open(str(path), "rt", compression="infer", encoding="utf-8") as file:
            records = json.load(file)
    except ValueError:  # not JSON: datasets names that when it reads the file
        return None
    for number, record in enumerate(records if isinstance(records, list) else [], start=1):
        if isinstance(record, dict) and record.get(text_column) is None:
            return missing_text_problem(f"record {number}", record, text_column)
    return None


def missing_text_problem(where: str, record: dict, text_column: str) -> str:
    has = f"null in field {text_column!r}" if text_column in record else f"no field {text_column!r}"
    fields = ", ".join(map(repr, list(record)[:8])) + (", ..." if len(record) > 8 else "")
    return (
        f"has {has} on {where} (its fields: {fields or 'none'}): a record without a text; pass --text_column with the "
        "field that holds the texts, or --skip_records_without_text true to skip such records."
    )


def line_problem(
    line: bytes, number: int, json_lines: bool | None, text_column: str, require_text: bool = False
) -> str | None:
    if b"\0" in line:
        return f"is not text: line {number} holds a NUL byte (binary data, or UTF-16 text); only UTF-8 text is read."
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return (
            f"is not UTF-8 text: line {number}, byte {error.start + 1} is 0x{line[error.start]:02x}; "
            "it may be Latin-1 or Windows-1252: convert it to UTF-8, e.g. iconv -f latin1 -t utf-8 FILE > NEW_FILE."
        )
    if not json_lines or not text.strip():
        return None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as error:
        return f"is not valid JSON lines: line {number}: {error.msg} at column {error.colno}."
    if not isinstance(row, dict):
        return f"is not JSON lines of objects: line {number} is a JSON {JSON_TYPES.get(type(row), 'value')}."
    value = row.get(text_column)
    if value is None and require_text:
        return missing_text_problem(f"line {number}", row, text_column)
    if value is not None and not isinstance(value, str):
        return (
            f"has a {JSON_TYPES.get(type(value), type(value).__name__)} in column {text_column!r} on line {number} "
            f"({json.dumps(value)[:40]}); text_column must hold strings."
        )
    return None


def is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # not JSON, or not UTF-8
        return False


def parquet_problem(path: Path, text_column: str, require_text: bool = False, whole: bool = False) -> str | None:
    """What is wrong with a Parquet file, from its footer; with `require_text`, a null text found by the footer's
    statistics (or, `whole`, by reading the column)."""
    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # pyarrow's ArrowInvalid, OSError, ...: the footer cannot be read
        return f"is not a readable Parquet file ({type(error).__name__}: {error})."
    if parquet.metadata.num_rows == 0:
        return "holds no rows; remove it from --train_files."
    schema = parquet.schema_arrow
    if text_column not in schema.names:
        return None  # datasets' column check names the columns there are
    if str(schema.field(text_column).type) not in ("string", "large_string"):
        return f"has {schema.field(text_column).type} values in column {text_column!r}; text_column must hold strings."
    if require_text:
        column = schema.get_field_index(text_column)
        start = 0
        for group in range(parquet.metadata.num_row_groups):
            metadata = parquet.metadata.row_group(group)
            statistics = metadata.column(column).statistics
            if (statistics is not None and statistics.has_null_count and statistics.null_count) or (
                whole and (statistics is None or not statistics.has_null_count)
            ):
                values = parquet.read_row_group(group, columns=[text_column]).column(0)
                nulls = [index for index, value in enumerate(values.is_null().to_pylist()) if value]
                if nulls:
                    record = {name: None for name in schema.names}
                    return missing_text_problem(f"record {start + nulls[0] + 1}", record, text_column)
            start += metadata.num_rows
    return None


def missing_text_error(data_args: DataArguments, record_index: int | None = None) -> UserError:
    """A record without a text (no `text_column` field, or null): for local files the file and its first such line or
    record, found by reading the files through; otherwise the record's number in the dataset."""
    if data_args.dataset_name is None:
        for file in map(Path, data_args.train_files or []):
            if problem := file_problem(file, data_args.text_column, limit=None, require_text=True):
                return UserError(f"{file} {problem}")
    where = "a record" if record_index is None else f"record {record_index + 1}"
    return UserError(
        f"{describe_source(data_args)} has {where} without a text in field {data_args.text_column!r} (no such field, "
        "or null); pass --text_column with the field that holds the texts, or --skip_records_without_text true to "
        "skip such records."
    )


def describe_source(data_args: DataArguments) -> str:
    if data_args.blocks_dir is not None:
        return f"blocks_dir {data_args.blocks_dir}"
    if uses_embedded_corpus(data_args):
        return "the embedded corpus"
    if data_args.dataset_name is not None:
        return f"dataset {data_args.dataset_name!r} (config {data_args.dataset_config!r}, split {data_args.dataset_split!r})"
    return f"train_files {', '.join(data_args.train_files)}"


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """What decides the ids a tokenizer gives: its whole pipeline (vocabulary, normalizer, pre-tokenizer, special
    tokens' post-processor) for a fast tokenizer, else its vocabulary."""
    if getattr(tokenizer, "is_fast", False):
        description = tokenizer.backend_tokenizer.to_str()
    else:
        description = json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(description.encode("utf-8")).hexdigest()[:16]


SAMPLED_BYTES = 65_536  # read at each end of a corpus file for its fingerprint: a cost that does not grow with it


def file_fingerprint(path: Path) -> str:
    """A file's size and the sha256 of its first and last SAMPLED_BYTES: an edit, a truncation, an append or another
    file under the same name changes it, at the cost of 128 KiB read whatever the file's size."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as file:
        digest.update(file.read(SAMPLED_BYTES))
        file.seek(max(size - SAMPLED_BYTES, 0))
        digest.update(file.read(SAMPLED_BYTES))
    return f"{size}:{digest.hexdigest()[:16]}"


def data_fingerprint(data_args: DataArguments, tokenizer: PreTrainedTokenizerBase, train_blocks) -> dict:
    """What identifies a run's training data, saved in each checkpoint's data position so that a resume on other
    data (files edited, replaced or reordered; another tokenizer or block length) is refused: the source's files
    (their names and file_fingerprint; a prepared folder's shard digests), the tokenizer, the block length and, read
    into memory, the number of blocks. A Hub dataset is named, not fingerprinted (its files are not read here)."""
    if data_args.blocks_dir is not None:
        manifest = json.loads((Path(data_args.blocks_dir) / "manifest.json").read_text())  # checked when loaded
        files = {shard["file"]: shard.get("sha256", shard["blocks"]) for shard in manifest["train"]["shards"]}
    elif uses_embedded_corpus(data_args):
        files = {EMBEDDED_CORPUS.name: file_fingerprint(EMBEDDED_CORPUS)}
    elif data_args.dataset_name is not None:
        folder = Path(data_args.dataset_name)
        local = sorted(path for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else []
        files = {str(path.relative_to(folder)): file_fingerprint(path) for path in local}
        files["dataset"] = f"{data_args.dataset_name} {data_args.dataset_config} {data_args.dataset_split}"
    else:
        files = {
            f"{index}: {Path(name).name}": file_fingerprint(Path(name))
            for index, name in enumerate(data_args.train_files)
        }
    return {
        "files": files,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "block_length": data_args.max_seq_length,
        "training_blocks": None if isinstance(train_blocks, IterableDataset) else len(train_blocks),
    }


# BERT's inputs, token_type_ids included. Saved in tokenizer_config.json ("model_input_names"), so that a tokenizer
# saved next to a SymBERT config.json returns token_type_ids under every supported transformers: 5.0 to 5.2 load such
# a tokenizer as TokenizersBackend (the config's model_type, symbert, maps to no tokenizer class of its own), whose
# default model_input_names lack token_type_ids, so sentence pairs would get all-zero segments silently.
BERT_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")


def keep_token_type_ids(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """`tokenizer`, set to save its model_input_names in tokenizer_config.json when they include token_type_ids
    (BERT's do), so that every transformers that loads the saved folder returns token_type_ids for sentence pairs."""
    if "token_type_ids" in tokenizer.model_input_names:
        tokenizer.init_kwargs["model_input_names"] = list(tokenizer.model_input_names)
    return tokenizer


def train_wordpiece(texts: Iterable[str], vocab_size: int) -> BertTokenizerFast:
    """An uncased BERT-style WordPiece tokenizer trained on `texts` (an iterable of strings), as a BertTokenizerFast:
    saved, its tokenizer_config.json names `BertTokenizer`, which transformers 4.x (as BertTokenizerFast) and 5.x both
    load from its tokenizer.json. (A plain PreTrainedTokenizerFast saves as `TokenizersBackend` under 5.x, a class
    4.x does not know.) It gives the ids BERT's pipeline gives, and token_type_ids as bert-base-uncased does, under
    every supported transformers (BERT_INPUT_NAMES)."""
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    backend.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return BertTokenizerFast(
        tokenizer_object=backend,
        do_lower_case=True,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
        model_input_names=list(BERT_INPUT_NAMES),
    )


def load_tokenizer(data_args: DataArguments) -> PreTrainedTokenizerBase:
    """The named tokenizer; for the embedded corpus (and no name given), one trained on it and cached; for a
    --blocks_dir (and no name given), the folder's own."""
    if data_args.tokenizer is None and data_args.blocks_dir is not None:
        from .prepared import prepared_tokenizer

        return prepared_tokenizer(data_args)
    if data_args.tokenizer is None and uses_embedded_corpus(data_args):
        return keep_token_type_ids(cached_wordpiece(data_args.tokenizer_vocab_size))  # caches from before the pin too
    name = data_args.tokenizer or DEFAULT_TOKENIZER
    if missing := missing_local_path(name):
        raise missing
    if Path(name).is_dir() and not any((Path(name) / file).is_file() for file in TOKENIZER_FILES):
        held = sorted(path.name for path in Path(name).iterdir())
        raise UserError(
            f"Tokenizer folder {name!r} holds no vocabulary: none of {', '.join(TOKENIZER_FILES)} is in it (it holds "
            f"{', '.join(held[:10]) + (', ...' if len(held) > 10 else '') if held else 'nothing'}); pass --tokenizer "
            "with a folder written by a tokenizer's save_pretrained, or a Hub id such as bert-base-uncased."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except OSError as error:
        raise UserError(
            f"Tokenizer {name!r} is neither a local tokenizer folder nor on the Hub or in the local Hugging Face "
            f"cache ({error.__class__.__name__}); pass --tokenizer PATH to a saved tokenizer."
        ) from error
    except ValueError as error:  # e.g. a truncated tokenizer.json
        raise UserError(f"Tokenizer {name!r} cannot be read: {error.__class__.__name__}: {error}") from error
    return keep_token_type_ids(checked_tokenizer(tokenizer, name))


# The files from which AutoTokenizer builds a tokenizer's vocabulary (fast, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
MLM_SPECIAL_TOKENS = ("cls_token", "sep_token", "mask_token", "pad_token")  # BERT's [CLS] [SEP] [MASK] [PAD]


def checked_tokenizer(tokenizer: PreTrainedTokenizerBase, name: str) -> PreTrainedTokenizerBase:
    """`tokenizer`, if masked-language-model pre-training can use it: a vocabulary, and the special tokens that wrap
    each text ([CLS] ... [SEP]), replace masked tokens ([MASK]) and pad batches ([PAD]), each in the vocabulary."""
    if len(tokenizer) == 0:
        raise UserError(
            f"Tokenizer {name!r} has no vocabulary (0 tokens); pass --tokenizer with a trained tokenizer, e.g. "
            "bert-base-uncased."
        )
    missing = []
    for role in MLM_SPECIAL_TOKENS:
        token = getattr(tokenizer, role)
        token_id = None if token is None else tokenizer.convert_tokens_to_ids(token)
        if token_id is None or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
            missing.append(role if token is None else f"{role} {token!r} (not in the vocabulary)")
    if missing:
        raise UserError(
            f"Tokenizer {name!r} ({len(tokenizer)} tokens) lacks {', '.join(missing)}: masked-language-model "
            "pre-training needs all of cls_token, sep_token, mask_token and pad_token (BERT's [CLS] [SEP] [MASK] "
            "[PAD]); pass --tokenizer with a BERT-style tokenizer."
        )
    return tokenizer


# The embedded corpus's WordPiece tokenizer at the default vocabulary size, trained once and shipped: tokenizers'
# WordPiece trainer breaks ties between equally frequent pairs in no fixed order, so two trainings on the same text
# differ (a few hundred tokens of 8,192), and with them the main job's figures.
SHIPPED_WORDPIECE = Path(__file__).parent / "corpus" / "wordpiece-8192"
SHIPPED_WORDPIECE_SIZE = 8192


def cached_wordpiece(vocab_size: int) -> PreTrainedTokenizerBase:
    """The WordPiece tokenizer of the embedded corpus: the shipped one at its vocabulary size; at another size, one
    trained on the corpus, from the cache, (re)trained and cached if missing or unreadable (not reproducible across
    trainings, see SHIPPED_WORDPIECE). The folder appears whole (written under a temporary name, then renamed); the
    lock makes parallel runs on one machine train it once."""
    if vocab_size == SHIPPED_WORDPIECE_SIZE:
        return AutoTokenizer.from_pretrained(SHIPPED_WORDPIECE, trust_remote_code=False)
    digest = hashlib.sha256(EMBEDDED_CORPUS.read_bytes()).hexdigest()[:16]
    # "-bert": saved as BertTokenizer; older caches (no suffix) saved under 5.x name a class 4.x lacks
    folder = cache_dir() / "tokenizers" / f"wordpiece-{vocab_size}-{digest}-bert"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{folder}.lock"):
            if folder.exists():
                try:
                    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
                except Exception as error:  # truncated JSON, missing files, a vocabulary tokenizers rejects, ...
                    print(
                        f"The cached tokenizer {folder} is unreadable ({error.__class__.__name__}); training it again."
                    )
            texts = load_dataset("text", data_files=str(EMBEDDED_CORPUS), split="train")["text"]
            staging = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
            try:
                train_wordpiece(texts, vocab_size).save_pretrained(staging)
                shutil.rmtree(folder, ignore_errors=True)
                os.replace(staging, folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as error:
        raise UserError(
            f"Cannot write the tokenizer cache {folder} ({error.__class__.__name__}: {error}); set SYMBERT_CACHE to a "
            "writable folder."
        ) from error
    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


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


# Streamed records without a text skipped so far, per source (describe_source): {source: {record index}}
SKIPPED_IN_STREAMS = {}


def skipped_in_stream_message(data_args: DataArguments) -> str | None:
    """The line that says how many records without a text a streamed run skipped; None if none (or not streamed)."""
    skipped = SKIPPED_IN_STREAMS.get(describe_source(data_args)) if data_args.streaming else None
    if not skipped:
        return None
    return (
        f"Skipped {len(skipped):,} records of {describe_source(data_args)} without a text in field "
        f"{data_args.text_column!r} (--skip_records_without_text true), of the records the stream was read to."
    )


def load_blocks(
    data_args: DataArguments, tokenizer: PreTrainedTokenizerBase, seed: int = 0, report_skipped: bool = True
) -> tuple[Dataset | IterableDataset, Dataset | IterableDataset]:
    """(train, eval) datasets of `max_seq_length`-token blocks; eval holds `eval_blocks` blocks out of training.
    A record without a text is an error naming it, unless data_args.skip_records_without_text (then their number
    is printed, unless not `report_skipped`; for a stream, by skipped_in_stream_message). With blocks_dir, the
    prepared folder's blocks (memory-mapped) and held-out blocks, checked against the run."""
    if data_args.blocks_dir is not None:
        from .prepared import load_prepared

        train, held_out, _ = load_prepared(data_args, tokenizer)
        return train, held_out
    texts = load_texts(data_args)
    block_size = data_args.max_seq_length
    # Each text gets [CLS] ... [SEP]; blocks then span text boundaries, as in the paper.

    def tokenize(batch):
        # verbose=False: a text longer than model_max_length is cut into blocks, never fed whole, so transformers'
        # "Token indices sequence length is longer than ..." warning does not apply
        texts = batch[data_args.text_column]
        return {"input_ids": tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]}

    skip = data_args.skip_records_without_text
    skipped = SKIPPED_IN_STREAMS[describe_source(data_args)] = set()

    def has_text(batch, indices):
        for text, index in zip(batch[data_args.text_column], indices, strict=True):
            if text is None:  # the record has no such field, or null
                if not skip:
                    raise missing_text_error(data_args, index)
                skipped.add(index)  # a stream's indices count from 0 on each pass: counted once
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


@dataclass
class ResumableMLMCollator(DataCollatorForLanguageModeling):
    """BERT's dynamic masking (80/10/10), with each batch's masks drawn from a generator seeded by `mask_seed` and the
    batch's token ids instead of the global RNG.

    The Trainer collates a batch ahead of the checkpoint it saves, out of reach of the RNG state stored there, so with
    the global RNG a resumed run would mask differently from an uninterrupted one. Seeded by content, every batch is
    masked the same in both; shuffling still gives a block different masks in different epochs, and the held-out
    blocks get the same masks at every evaluation, so eval losses along a run are comparable.

    With `max_predictions_per_seq` (the model config's, for a compiled step's static shapes), a batch never holds
    more than batch × that many masked positions: a random few of the extras, drawn from the same generator, are
    left unmasked. A batch within the cap draws nothing more, so it is masked exactly as without one.
    """

    mask_seed: int = 0
    max_predictions_per_seq: int | None = None

    def torch_call(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        ids = np.asarray([example["input_ids"] for example in examples], dtype=np.int64)
        digest = hashlib.blake2b(ids.tobytes(), digest_size=8, key=self.mask_seed.to_bytes(8, "little")).digest()
        self.generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        if all(example.keys() == {"input_ids"} for example in examples):
            # Blocks of one length: the batch as the tokenizer's padding and special-token mask would make it, without
            # their per-token Python loops (the same masks: tests/training/test_pretrain.py)
            input_ids = torch.from_numpy(ids)
            special = torch.isin(input_ids, torch.tensor(self.tokenizer.all_special_ids))
            batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
            batch["input_ids"], batch["labels"] = self.torch_mask_tokens(input_ids, special_tokens_mask=special)
        else:
            batch = super().torch_call(examples)
        if self.max_predictions_per_seq is not None:
            cap_predictions(batch, len(examples) * self.max_predictions_per_seq, self.generator)
        return batch


def cap_predictions(batch: dict[str, torch.Tensor], cap: int, generator: torch.Generator) -> None:
    """Unmask a random subset of `batch`'s masked positions (labels != -100) beyond `cap`, in place: each gets its
    original id back (its label) and the label -100, so the model sees and predicts it as an ordinary token."""
    input_ids, labels = batch["input_ids"].view(-1), batch["labels"].view(-1)
    masked = (labels != -100).nonzero().squeeze(1)
    extra = masked.numel() - cap
    if extra <= 0:
        return
    unmasked = masked[torch.randperm(masked.numel(), generator=generator)[:extra]]
    input_ids[unmasked] = labels[unmasked]
    labels[unmasked] = -100


def prediction_cap(config: SymBertConfig) -> int | None:
    """The collator's cap on masked positions per block: the model's max_predictions_per_seq, which its sparse
    prediction uses (and refuses a batch above); None without sparse prediction."""
    return config.max_predictions_per_seq if config.sparse_prediction else None
