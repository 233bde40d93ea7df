"""Pre-training corpora: the texts of a Hub dataset, local files (text, JSON Lines, Parquet; each checked before
it is read, and named in read errors) or the embedded corpus, and what identifies them."""

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
from datasets import Dataset, IterableDataset, Value, load_dataset
from fsspec.utils import infer_compression

from ...cli import UserError
from .options import DataArguments

EMBEDDED_CORPUS = Path(__file__).parent.parent / "corpus" / "english_prose.txt.gz"


LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


# How much of each local file is checked before loading; a problem further on is reported when the file is read.
CHECKED_BYTES = 2**16


JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named does not exist."""


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
    except GeneratorExit:  # a stream closed unread, maybe at interpreter exit, when UserError may already be None
        raise
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
