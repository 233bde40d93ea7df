"""The manifest of a folder of prepared blocks (symbert-prepare-data, data/prepared.py), read and checked: what
the folder holds, and whether it still holds it. Apart from prepared.py so that the command line's checks
(arguments.py) can read a folder without importing the data path."""

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...cli import UserError
from ...files import file_sha256
from ...json_files import load_json

MANIFEST = "manifest.json"
FORMAT = "symbert-blocks"
# 2 adds each shard's sha256, 3 the manifest's own (of all its other fields); folders of versions 1 (shards checked
# by size only) and 2 (the manifest checked by nothing) are still read, with a notice
VERSION = 3
DTYPES = ("uint16", "uint32")  # token_dtype's: ids are never negative
HELD_OUT_FILE = "held_out.bin"
TOKENIZER_DIR = "tokenizer"
# The data arguments a preparation fixes: a --blocks_dir run takes them from the manifest, never from its own options
PREPARED_SOURCE_FIELDS = (
    "dataset_name",
    "dataset_config",
    "dataset_split",
    "train_files",
    "text_column",
    "skip_records_without_text",
    "streaming",
    "tokenizer_vocab_size",
    "eval_blocks",
    "num_proc",
)


def manifest_digest(manifest: dict) -> str:
    """The sha256 of a manifest's fields but its own digest (`sha256`), as canonical JSON: any edit changes it."""
    fields = {name: value for name, value in manifest.items() if name != "sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed(manifest: dict) -> dict:
    """`manifest` with its own digest (manifest_digest), as prepare writes it."""
    return {**manifest, "sha256": manifest_digest(manifest)}


def file_identity(status: os.stat_result) -> list[int]:
    """What tells a file apart from another or from its rewritten self, from its stat: device, inode, size and
    modification time (a rewrite in place or a file renamed over it changes one)."""
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns]


def read_manifest(folder: str | Path, check_digests: bool = False) -> dict:
    """The manifest of a prepared folder, checked: its format and values, its own digest (version 3), and every shard
    a regular file of the folder (not a link), named once, with the size it names; with `check_digests`, its sha256
    too (a shard swapped for another of the same size: check_digests)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise UserError(f"blocks_dir={str(folder)!r} is not a folder; prepare one with symbert-prepare-data.")
    if not path.is_file():
        raise UserError(
            f"blocks_dir={str(folder)!r} has no {MANIFEST}: it is not a prepared folder (or its preparation never "
            "finished); prepare it with symbert-prepare-data."
        )
    try:
        manifest = load_json(path)
        problem = manifest_problem(manifest)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        problem = f"{type(error).__name__}: {error}"
    if problem is not None:
        raise UserError(f"{path} is not a manifest of symbert-prepare-data: {problem}; prepare the folder again.")
    length, dtype = manifest["block_length"], np.dtype(manifest["dtype"])
    for shard in [*manifest["train"]["shards"], manifest["held_out"]]:
        name, blocks = shard["file"], shard["blocks"]
        file = folder / name  # a name checked above: never a path out of the folder
        if file.is_symlink():  # (a link may lead out of the folder, to a file that changes under it)
            raise UserError(f"{file} is a link; a prepared folder holds its shards itself: prepare it again.")
        expected = blocks * length * dtype.itemsize
        size = file.stat().st_size if file.is_file() else None
        if size != expected:
            raise UserError(
                f"{file} holds {'nothing (missing)' if size is None else f'{size:,} bytes'} but the manifest names "
                f"{blocks:,} blocks of {length} {dtype.name} ids ({expected:,} bytes); the folder is damaged: prepare "
                "it again."
            )
    if check_digests:
        check_shard_digests(folder, manifest)
    return manifest


def check_shard_digests(folder: Path, manifest: dict) -> None:
    """Every shard of a read manifest (read_manifest) holds the bytes its sha256 names (version 2 on): a shard
    swapped for another of the same size is refused. It reads every shard once."""
    for shard in [*manifest["train"]["shards"], manifest["held_out"]]:
        file = folder / shard["file"]
        if "sha256" in shard and file_sha256(file) != shard["sha256"]:
            raise UserError(
                f"{file} is not the shard that was prepared (its sha256 differs from the manifest's "
                f"{shard['sha256'][:16]}...); the folder was changed or damaged: prepare it again."
            )


def manifest_problem(manifest: object) -> str | None:
    """What makes `manifest` (parsed JSON) other than a manifest written by `prepare`, or None."""
    if not isinstance(manifest, dict):
        return f"it holds a {type(manifest).__name__}, not an object"
    if manifest.get("format") != FORMAT or manifest.get("version") not in range(1, VERSION + 1):
        return f"format {manifest.get('format')!r} version {manifest.get('version')!r}, not {FORMAT!r} 1 to {VERSION}"
    length, tokenizer = manifest.get("block_length"), manifest.get("tokenizer")
    if type(length) is not int or length < 1:
        return f"block_length {length!r} is not a positive integer"
    if manifest.get("dtype") not in DTYPES:
        return f"dtype {manifest.get('dtype')!r} is not one of {', '.join(DTYPES)}"
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("fingerprint"), str):
        return "it names no tokenizer fingerprint"
    if type(tokenizer.get("vocab_size")) is not int or tokenizer["vocab_size"] < 1:
        return f"the tokenizer's vocab_size {tokenizer.get('vocab_size')!r} is not a positive integer"
    if not isinstance(manifest.get("data_arguments", {}), dict):
        return "data_arguments is not an object"
    train, held_out = manifest.get("train"), manifest.get("held_out")
    if not isinstance(train, dict) or not isinstance(train.get("shards"), list) or not train["shards"]:
        return "it lists no training shard"
    if not isinstance(held_out, dict):
        return "it names no held-out file"
    shards = [*train["shards"], held_out]
    for shard in shards:
        name, blocks = (shard.get("file"), shard.get("blocks")) if isinstance(shard, dict) else (shard, None)
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..", MANIFEST):
            return f"shard {name!r} is not a file name in the folder"
        if type(blocks) is not int or blocks < 0:
            return f"shard {name!r} has {blocks!r} blocks, not a count"
        if manifest["version"] >= 2 and not (isinstance(shard.get("sha256"), str) and len(shard["sha256"]) == 64):
            return f"shard {name!r} has no sha256"
    names = [shard["file"] for shard in shards]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        return f"{', '.join(twice)} is listed more than once"
    if sum(shard["blocks"] for shard in train["shards"]) == 0:
        return "its training shards hold no block"
    if held_out["blocks"] == 0:
        return "it holds no held-out block"
    digests = [(shard["file"], shard.get("sha256")) for shard in train["shards"] if shard["blocks"]]
    for index, (name, digest) in enumerate(digests):  # a copy listed under another name: trained on twice a pass
        if same := [other for other, other_digest in digests[index + 1 :] if digest and other_digest == digest]:
            return f"{name} and {same[0]} hold the same blocks (sha256 {digest[:16]}...), which a pass would read twice"
    if manifest["version"] >= 3 and manifest.get("sha256") != manifest_digest(manifest):
        return f"its sha256 {manifest.get('sha256')!r} is not that of its fields: it was edited after preparation"
    return None


def with_prepared_source(data_args, given: set[str]):
    """`data_args` (DataArguments with a blocks_dir) with the data arguments of PREPARED_SOURCE_FIELDS taken from the
    folder's manifest, which recorded what its blocks were cut from: those the run records and reports are then the
    data it trained on. An option of them given on the command line (`given`) with another value is refused."""
    manifest = read_manifest(data_args.blocks_dir)
    prepared_with = manifest.get("data_arguments", {})
    values = {name: prepared_with.get(name, getattr(data_args, name)) for name in PREPARED_SOURCE_FIELDS}
    if conflicts := [
        name for name in PREPARED_SOURCE_FIELDS if name in given and getattr(data_args, name) != values[name]
    ]:
        name = conflicts[0]
        raise UserError(
            f"--{name} {getattr(data_args, name)!r} was given with --blocks_dir {data_args.blocks_dir}, whose blocks "
            f"were prepared with {name}={values[name]!r} (from {manifest.get('source', 'its source')}); a run trains on "
            f"the folder's blocks: leave out --{', --'.join(conflicts)}, or prepare a folder of that data with "
            "symbert-prepare-data."
        )
    return replace(data_args, **values)
