"""A pre-training run's data, built in one place: its tokenizer, training and held-out blocks, masking collator and
the records it skipped, from a folder of prepared blocks (--blocks_dir, prepared.py) or from a corpus's texts
(corpus_files.py → tokenizer.py → block_cutting.py), chosen here once; and what identifies that data."""

import json
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, IterableDataset
from transformers import PreTrainedTokenizerBase

from ...files import file_sha256
from . import corpus_files
from .block_cutting import SkippedRecords, cut_blocks
from .corpus_files import describe_source, file_fingerprint, uses_embedded_corpus
from .masking import ResumableMLMCollator
from .options import DataArguments
from .prepared import PreparedBlocks, folder_tokenizer, load_prepared
from .tokenizer import corpus_tokenizer, tokenizer_fingerprint


def load_tokenizer(data_args: DataArguments) -> PreTrainedTokenizerBase:
    """The run's tokenizer: with --blocks_dir (and no name given) the folder's own; else the named one, or for the
    embedded corpus the shipped one."""
    if data_args.blocks_dir is not None:
        return folder_tokenizer(data_args)
    return corpus_tokenizer(data_args)


def load_blocks(
    data_args: DataArguments,
    tokenizer: PreTrainedTokenizerBase,
    seed: int = 0,
    report_skipped: bool = True,
    skipped: SkippedRecords | None = None,
) -> tuple[Dataset | IterableDataset | PreparedBlocks, Dataset | IterableDataset]:
    """(training blocks, held-out blocks) of `max_seq_length` tokens: a prepared folder's (memory-mapped, checked
    against the run), or cut from the corpus (block_cutting.cut_blocks; a stream's skipped records counted in
    `skipped`)."""
    if data_args.blocks_dir is not None:
        train, held_out, _ = load_prepared(data_args, tokenizer)
        return train, held_out
    return cut_blocks(data_args, tokenizer, seed=seed, report_skipped=report_skipped, skipped=skipped)


@dataclass
class RunData:
    """What a run trains and evaluates on."""

    tokenizer: PreTrainedTokenizerBase
    train_blocks: Dataset | IterableDataset | PreparedBlocks
    eval_blocks: Dataset
    collator: ResumableMLMCollator
    skipped: SkippedRecords  # a stream's records without a text, counted as training reads it

    @property
    def streamed(self) -> bool:
        return isinstance(self.train_blocks, IterableDataset)


def load_run_data(
    data_args: DataArguments,
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    max_predictions_per_seq: int | None = None,
    report_skipped: bool = True,
) -> RunData:
    """The blocks of `data_args` read with `tokenizer` (load_tokenizer's), and the collator that masks them with the
    run's seed: for training, and again for the report of a finished run."""
    skipped = SkippedRecords(describe_source(data_args), data_args.text_column)
    train, held_out = load_blocks(data_args, tokenizer, seed=seed, report_skipped=report_skipped, skipped=skipped)
    collator = ResumableMLMCollator(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        mask_seed=seed,
        max_predictions_per_seq=max_predictions_per_seq,
    )
    return RunData(tokenizer, train, held_out, collator, skipped)


def data_fingerprint(data_args: DataArguments, tokenizer: PreTrainedTokenizerBase, train_blocks) -> dict:
    """What identifies a run's training data, saved in each checkpoint's data position so that a resume on other
    data (files edited, replaced or reordered; another tokenizer or block length) is refused: the source's files in
    the order they are read (`contents`: each one's name and the sha256 of its whole content, read once per run start;
    a prepared folder's shards and their digests in the manifest's order), the same files by name with their
    file_fingerprint (`files`, all that checkpoints of earlier versions saved, compared with theirs), the tokenizer,
    the block length and, read into memory, the number of blocks. A Hub dataset is named, not fingerprinted (its
    files are not read here)."""
    if data_args.blocks_dir is not None:
        manifest = json.loads((Path(data_args.blocks_dir) / "manifest.json").read_text())  # checked when loaded
        shards = [(shard["file"], shard.get("sha256", shard["blocks"])) for shard in manifest["train"]["shards"]]
        files, contents = dict(shards), [list(shard) for shard in shards]
    else:
        if uses_embedded_corpus(data_args):
            paths = {corpus_files.EMBEDDED_CORPUS.name: corpus_files.EMBEDDED_CORPUS}
        elif data_args.dataset_name is not None:
            folder = Path(data_args.dataset_name)
            local = sorted(path for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else []
            paths = {str(path.relative_to(folder)): path for path in local}
        else:
            paths = {f"{index}: {Path(name).name}": Path(name) for index, name in enumerate(data_args.train_files)}
        files = {name: file_fingerprint(path) for name, path in paths.items()}
        contents = [[name, file_sha256(path)] for name, path in paths.items()]
        if data_args.dataset_name is not None:
            files["dataset"] = f"{data_args.dataset_name} {data_args.dataset_config} {data_args.dataset_split}"
    return {
        "files": files,
        "contents": contents,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "block_length": data_args.max_seq_length,
        "training_blocks": None if isinstance(train_blocks, IterableDataset) else len(train_blocks),
    }
