"""Tokenise once: a corpus (local files, a Hub dataset, streamed or not, or the embedded corpus) tokenised and cut
into memory-mapped shards of token ids with a manifest (symbert-prepare-data, prepare_data.py), which
symbert-pretrain --blocks_dir DIR trains from with no tokenizer in the data path.

The folder holds train-NNNNN.bin (blocks × block length raw token ids; one shard per process that cut them),
held_out.bin (the held-out blocks), tokenizer/ and manifest.json (the source, the block length, the tokenizer's
fingerprint, the block counts and each shard's sha256, the held-out split, and the sha256 of all that: manifest.py). It
appears whole or not at all: it is written under a temporary name beside it and renamed when complete.
"""

import json
import multiprocessing
import os
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from datasets import Dataset, IterableDataset
from filelock import FileLock, Timeout
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ...cli import UserError
from ...files import file_sha256, write_error
from ...tools import written_folder
from .block_cutting import cut_blocks
from .blocks import stream_for_reader
from .corpus_files import describe_source
from .manifest import (
    FORMAT,
    HELD_OUT_FILE,
    MANIFEST,
    PREPARED_SOURCE_FIELDS,
    TOKENIZER_DIR,
    VERSION,
    check_shard_digests,
    file_identity,
    manifest_problem,
    read_manifest,
    sealed,
)
from .options import DataArguments
from .tokenizer import corpus_tokenizer, keep_token_type_ids, tokenizer_fingerprint

WRITE_ROWS = 65_536  # blocks gathered per write: bounded memory for any corpus


def block_map(path: Path, blocks: int, length: int, dtype: np.dtype) -> np.ndarray:
    """The blocks of a raw shard file, memory-mapped (read-only)."""
    if blocks == 0:
        return np.zeros((0, length), dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(blocks, length))


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def check_ids(ids: np.ndarray, vocab_size: int | None, where: str) -> None:
    """Every id of `ids` must be one of the tokenizer's (below `vocab_size`): a damaged shard's id past it would
    index the embedding out of range, or, with --pad_vocab_to_multiple_of, train a padding row no token uses."""
    if vocab_size is not None and ids.size and (largest := int(ids.max())) >= vocab_size:
        raise UserError(
            f"{where} holds token id {largest}, but the tokenizer has {vocab_size} tokens (ids 0 to {vocab_size - 1}); "
            "the folder is damaged: prepare it again."
        )


class PreparedBlocks:
    """The training blocks of a prepared folder as one map-style sequence over its shards: len(), [index] →
    {"input_ids": [...]}, rows(indices) for a micro-batch, and iter(batch_size) as datasets has it.

    A micro-batch's blocks are read with one pread each rather than through a memory map: the file's pages stay in the
    page cache without counting in the process's resident memory, which a map of a freshly written shard fills with
    whole cached folios around every block read at random (here 1 GB of RSS for 3,200 blocks of a 1 GB shard).

    Given the shards' `identities` (manifest.file_identity) as their digests were checked, each file opened is
    compared with its own, and again after each read (one fstat per shard a micro-batch reads, whatever the steps
    done): a shard rewritten, cut or replaced during a run is refused where it is read rather than trained on."""

    def __init__(
        self,
        folder: str | Path,
        shards: list[dict],
        block_length: int,
        dtype: np.dtype,
        vocab_size: int | None = None,
        identities: list[list[int]] | None = None,
    ):
        self.folder, self.shards, self.block_length, self.dtype = Path(folder), shards, block_length, dtype
        self.vocab_size = vocab_size  # the tokenizer's: a block with a larger id is refused when read
        self.identities = identities
        self.ends = np.cumsum([shard["blocks"] for shard in shards])
        self.starts = self.ends - [shard["blocks"] for shard in shards]
        self._files = None  # opened in the process that reads (each dataloader worker opens the files itself)

    def files(self) -> list[int]:
        if self._files is None:
            self._files = [os.open(self.folder / shard["file"], os.O_RDONLY) for shard in self.shards]
            for index, file in enumerate(self._files):
                self.check_unchanged(index, os.fstat(file))
        return self._files

    def check_unchanged(self, shard: int, status: os.stat_result) -> None:
        """The shard file `status` describes must be the one checked when the run started (its identity), if known."""
        if self.identities is not None and file_identity(status) != self.identities[shard]:
            raise UserError(
                f"{self.folder / self.shards[shard]['file']} changed during the run (its size, modification time or "
                "file is not the one checked when the run started); a prepared folder must not change under a run: "
                "prepare into a new folder and train again."
            )

    def __getstate__(self):
        return {**self.__dict__, "_files": None}

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def rows(self, indices: list[int]) -> list[list[int]]:
        size = self.block_length * self.dtype.itemsize
        files = self.files()
        blocks = []
        for index in indices:
            shard = int(np.searchsorted(self.ends, index, side="right"))
            data = os.pread(files[shard], size, (index - int(self.starts[shard])) * size)
            if len(data) != size:
                self.check_unchanged(shard, os.fstat(files[shard]))
                raise UserError(
                    f"{self.folder / self.shards[shard]['file']} ends before block {index}: it was cut short."
                )
            blocks.append((index, shard, np.frombuffer(data, dtype=self.dtype)))
        for shard in {shard for _, shard, _ in blocks}:  # after the reads: a change before or while they ran is seen
            self.check_unchanged(shard, os.fstat(files[shard]))
        for index, shard, block in blocks:
            check_ids(block, self.vocab_size, f"{self.folder / self.shards[shard]['file']}, block {index}")
        return [block.tolist() for _, _, block in blocks]

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"block {index} of {len(self)}")
        return {"input_ids": self.rows([index % len(self)])[0]}

    def iter(self, batch_size: int):
        for index, shard in enumerate(self.shards):
            path = self.folder / shard["file"]
            self.check_unchanged(index, path.stat())
            blocks = block_map(path, shard["blocks"], self.block_length, self.dtype)
            for start in range(0, len(blocks), batch_size):
                rows = blocks[start : start + batch_size].tolist()
                self.check_unchanged(index, path.stat())
                yield {"input_ids": rows}


def load_prepared(
    data_args: DataArguments, tokenizer: PreTrainedTokenizerBase | None = None
) -> tuple[PreparedBlocks, Dataset, dict]:
    """(training blocks, held-out blocks, manifest) of data_args.blocks_dir, refused with both values when the run
    differs from the preparation in block length or tokenizer."""
    folder = Path(data_args.blocks_dir)
    manifest = read_manifest(folder)
    shards = manifest["train"]["shards"]
    identities = [file_identity((folder / shard["file"]).stat()) for shard in shards]  # before the digests are read
    check_shard_digests(folder, manifest)
    if manifest["version"] < VERSION:
        unchecked = (
            "its shards are checked by size only"
            if manifest["version"] < 2
            else "its manifest is covered by no digest (an edit of it is not noticed)"
        )
        print(
            f"{data_args.blocks_dir} was prepared by an older symbert-prepare-data: {unchecked} (prepare it again "
            "for checked contents)."
        )
    if data_args.max_seq_length != manifest["block_length"]:
        raise UserError(
            f"blocks_dir {data_args.blocks_dir} holds blocks of {manifest['block_length']} tokens but this run's "
            f"max_seq_length is {data_args.max_seq_length}; pass --max_seq_length {manifest['block_length']} or "
            "prepare the data again with this length."
        )
    if tokenizer is not None and tokenizer_fingerprint(tokenizer) != manifest["tokenizer"]["fingerprint"]:
        raise UserError(
            f"blocks_dir {data_args.blocks_dir} was tokenised by {manifest['tokenizer']['name']} (fingerprint "
            f"{manifest['tokenizer']['fingerprint']}) but this run's tokenizer {data_args.tokenizer} has fingerprint "
            f"{tokenizer_fingerprint(tokenizer)}; leave out --tokenizer (the folder's own is used) or prepare again."
        )
    length, dtype = manifest["block_length"], np.dtype(manifest["dtype"])
    vocab_size = manifest["tokenizer"]["vocab_size"]  # len() of the tokenizer whose fingerprint matched
    train = PreparedBlocks(folder, shards, length, dtype, vocab_size, identities)
    held_out_file = folder / manifest["held_out"]["file"]
    held_out = block_map(held_out_file, manifest["held_out"]["blocks"], length, dtype)
    check_ids(held_out, vocab_size, str(held_out_file))
    return train, Dataset.from_dict({"input_ids": held_out.tolist()}), manifest


def folder_tokenizer(data_args: DataArguments) -> PreTrainedTokenizerBase:
    """The tokenizer of a --blocks_dir run: the folder's own, or the one named (load_prepared checks that it is the
    folder's)."""
    if data_args.tokenizer is not None:
        return corpus_tokenizer(data_args)
    folder = Path(data_args.blocks_dir) / TOKENIZER_DIR
    read_manifest(data_args.blocks_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception as error:  # noqa: BLE001
        # a missing file or folder, damaged JSON, or a tokenizer.json the tokenizers library cannot parse, which
        # older tokenizers report as a bare Exception: whatever loading this one folder raises is its damage
        reason = " ".join(str(error).split())[:300]
        raise UserError(
            f"{folder} is not a tokenizer that loads ({type(error).__name__}: {reason}); the prepared folder is "
            "damaged: prepare it again."
        ) from None
    return keep_token_type_ids(tokenizer)


def write_blocks(path: Path, blocks: Dataset | IterableDataset, dtype: np.dtype) -> int:
    """Write `blocks` as raw token ids to `path`, WRITE_ROWS at a time (bounded memory for any corpus); returns the
    number of blocks."""
    count = 0
    with open(path, "wb") as file:
        for batch in blocks.iter(batch_size=WRITE_ROWS):
            array = np.asarray(batch["input_ids"], dtype=dtype)
            file.write(array.tobytes())
            count += len(array)
    return count


def prepare(data_args: DataArguments, output_dir: str | Path, seed: int) -> dict:
    """Tokenise and block the corpus of `data_args` into `output_dir` (which must not hold anything yet); returns the
    manifest. A stream is split between data_args.num_proc processes, one shard each."""
    output_dir = Path(output_dir)
    check_new_folder(output_dir)
    made = [folder for folder in [output_dir.parent, *output_dir.parent.parents] if not folder.exists()]
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(output_dir.with_name(f".{output_dir.name}.prepare.lock"))
    try:
        try:
            lock.acquire(blocking=False)
        except Timeout:
            raise UserError(
                f"output_dir={str(output_dir)!r} is being prepared by another symbert-prepare-data; wait for it to "
                "end or choose another --output_dir."
            ) from None
        try:
            check_new_folder(output_dir)  # the other preparation may have finished meanwhile
            return prepare_unlocked(data_args, output_dir, seed)
        finally:
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    except BaseException:  # a refused corpus, a full disk...: the parent folders made for it go, where empty
        for folder in made:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def check_new_folder(output_dir: Path) -> None:
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise UserError(
            f"output_dir={str(output_dir)!r} already exists and is not empty; prepare into a new folder (a prepared "
            "folder is never changed in place)."
        )


def prepare_unlocked(data_args: DataArguments, output_dir: Path, seed: int) -> dict:
    tokenizer = corpus_tokenizer(data_args)
    train, held_out = cut_blocks(data_args, tokenizer, seed=seed)
    dtype, length = token_dtype(len(tokenizer)), data_args.max_seq_length
    try:
        with written_folder(output_dir, ".prepare", "the prepared blocks", "preparing") as staging:
            if isinstance(train, IterableDataset):
                shards = write_stream_shards(train, staging, dtype, length, data_args.num_proc or 1)
            else:
                train_file = staging / "train-00000.bin"
                shards = [{"file": train_file.name, "blocks": write_blocks(train_file, train, dtype)}]
            held = write_blocks(staging / HELD_OUT_FILE, held_out, dtype)
            for shard in shards:
                shard["sha256"] = file_sha256(staging / shard["file"])
            tokenizer.save_pretrained(staging / TOKENIZER_DIR)
            manifest = {
                "format": FORMAT,
                "version": VERSION,
                "block_length": length,
                "dtype": dtype.name,
                "tokenizer": {
                    "name": data_args.tokenizer or "trained on the embedded corpus",
                    "fingerprint": tokenizer_fingerprint(tokenizer),
                    "vocab_size": len(tokenizer),
                },
                "source": describe_source(data_args),
                "seed": seed,
                "data_arguments": asdict(data_args),
                "held_out": {
                    "file": HELD_OUT_FILE,
                    "blocks": held,
                    "sha256": file_sha256(staging / HELD_OUT_FILE),
                    "split": "the first blocks of the stream" if data_args.streaming else f"random, seed {seed}",
                },
                "train": {"shards": shards, "blocks": sum(shard["blocks"] for shard in shards)},
                "tokens": (sum(shard["blocks"] for shard in shards) + held) * length,
            }
            if problem := manifest_problem(manifest := sealed(manifest)):  # two processes' shards alike: a text twice
                raise UserError(
                    f"The blocks prepared from {describe_source(data_args)} cannot be trained from: {problem}; the "
                    "corpus holds the same texts twice: name each once."
                )
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # last: the folder is complete
    except OSError as error:  # not a full disk (written_folder words those): a read-only folder, no permission
        raise write_error(error, Path(error.filename or output_dir), "the prepared blocks") from None
    return manifest


def write_stream_shards(
    train: IterableDataset, folder: Path, dtype: np.dtype, length: int, processes: int
) -> list[dict]:
    """A stream's training blocks, split between `processes` (datasets' split_dataset_by_node), one shard each. The
    processes are forked, so the stream's functions need not be picklable; each writes its shard or its error."""
    names = [f"train-{index:05d}.bin" for index in range(processes)]
    if processes == 1:
        return [{"file": names[0], "blocks": write_blocks(folder / names[0], train, dtype)}]

    def write_shard(index: int) -> None:
        try:
            write_blocks(folder / names[index], stream_for_reader(train, index, processes), dtype)
        except BaseException as error:
            if isinstance(error, OSError) and error.errno:  # a full disk: raised again in the parent, which words it
                kind, detail = "OSError", json.dumps([error.errno, error.strerror, str(error.filename or "")])
            else:
                kind = "UserError" if isinstance(error, UserError) else "".join(traceback.format_exception(error))
                detail = str(error)
            (folder / f".{names[index]}.error").write_text(f"{kind}\n{detail}")
            os._exit(1)
        os._exit(0)

    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=write_shard, args=(index,)) for index in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for index, worker in enumerate(workers):
        if worker.exitcode != 0:
            kind, _, message = (folder / f".{names[index]}.error").read_text().partition("\n")
            if kind == "UserError":
                raise UserError(message)
            if kind == "OSError":
                raise OSError(*json.loads(message))
            raise RuntimeError(f"Preparing shard {index} failed:\n{kind}")
    return [{"file": name, "blocks": (folder / name).stat().st_size // (dtype.itemsize * length)} for name in names]


# What decides the blocks a preparation holds: a prepared folder is reused for a run only if these are the same
SOURCE_FIELDS = (*PREPARED_SOURCE_FIELDS, "tokenizer", "max_seq_length")


def prepared_once(data_args: DataArguments, folder: str | Path, seed: int) -> DataArguments:
    """`data_args` reading from `folder`: prepared there now, or reused when an earlier preparation of the same data
    (SOURCE_FIELDS and split seed) is there; a preparation of other data is refused naming what differs."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        manifest = read_manifest(folder)
        saved = {name: manifest["data_arguments"].get(name) for name in SOURCE_FIELDS} | {"seed": manifest.get("seed")}
        current = {name: getattr(data_args, name) for name in SOURCE_FIELDS} | {"seed": seed}
        differences = [
            f"{name} is {saved[name]!r} there but {value!r} here"
            for name, value in current.items()
            if saved[name] != value
        ]
        if differences:
            raise UserError(
                f"{folder} holds blocks prepared from other data: {'; '.join(differences)}; delete it or choose "
                "another --output_dir."
            )
        print(f"Reusing the blocks prepared in {folder}")
    else:
        manifest = prepare(data_args, folder, seed)
        print(f"Prepared {manifest['train']['blocks']:,} training blocks once, in {folder}")
    return replace(data_args, blocks_dir=str(folder))
