"""The order in which pre-training reads its blocks, and where it stands in it: passes over the data chained into one
endless sequence, split across processes and dataloader workers, with a position that every batch carries and every
checkpoint saves, so that a resumed run reads on from exactly where the stopped run was, at a cost that does not grow
with the steps already done.

Two kinds of block source:
- map-style blocks (a tokenised corpus in memory, or prepared shards on disk, see prepared.py): pass p reads the
  blocks in a permutation seeded by (seed, p). Micro-batch j of process r is the slice [(j·W + r)·b, (j·W + r + 1)·b)
  of the endless sequence (W processes, b blocks per micro-batch), so W processes train on exactly the blocks that one
  process with b·W blocks per micro-batch would, each once per pass, and the position is a function of j alone.
- a stream (datasets' IterableDataset of blocks): split between the readers (processes × workers) with datasets'
  split_dataset_by_node (by shards when they divide evenly, else one record in every R); each reader's position is
  its pass and datasets' own state_dict, which resumes a stream without reading what came before its shard.

With N dataloader workers, the DataLoader takes micro-batch j from worker j mod N, round robin from worker 0 on each
new iterator. Micro-batch j belongs to reader j mod N; after a resume at micro-batch j0, worker k plays reader
(j0 + k) mod N, so the round robin goes on where it was.

A stream's cost is tokenising, which the tokenizers library spreads over every core from one process; each worker
tokenises with `tokenizer_threads` threads (1 unless the process that forks the workers never tokenised in parallel),
so that N workers use the cores that 0 workers would, and more.
"""

import inspect
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, IterableDataset
from datasets.distributed import split_dataset_by_node

from ...cli import UserError
from ...json_files import load_json

DATA_POSITION_FILE = "data_position_rank{rank}.json"  # one per process, in every checkpoint
SPLIT_STRATEGIES = "strategy" in inspect.signature(split_dataset_by_node).parameters  # datasets >= 5
POSITION_KEY = "data_position"  # the key under which a collated batch carries its position (taken off before the model)
ERROR_KEY = "data_error"  # a UserError raised in a dataloader worker, carried to the training process as one line


@dataclass
class Readers:
    """Who reads what: `world_size` processes, each with `workers` dataloader workers (0: it reads itself)."""

    world_size: int = 1
    rank: int = 0
    workers: int = 0

    @property
    def per_process(self) -> int:
        return max(self.workers, 1)


class MapStyleOrder:
    """The blocks of a map-style source in passes, each a permutation seeded by (seed, pass)."""

    def __init__(self, blocks: Any, seed: int):
        self.blocks, self.seed = blocks, seed
        self.count = len(blocks)
        self._permutation = (None, None)

    def permutation(self, pass_index: int) -> np.ndarray:
        if self._permutation[0] != pass_index:  # one pass at a time: O(blocks) once per pass
            # generator.permutation(count) as 4-byte indices: the same order, half its memory per reader
            order = np.arange(self.count, dtype=np.uint32 if self.count < 2**32 else np.int64)
            np.random.default_rng([self.seed, pass_index]).shuffle(order)
            self._permutation = (pass_index, order)
        return self._permutation[1]

    def indices(self, start: int, size: int) -> list[int]:
        """The block indices at positions [start, start + size) of the endless sequence of passes."""
        indices = []
        for position in range(start, start + size):
            pass_index, offset = divmod(position, self.count)
            indices.append(int(self.permutation(pass_index)[offset]))
        return indices

    def rows(self, indices: list[int]) -> list[list[int]]:
        if isinstance(self.blocks, Dataset):
            return self.blocks[indices]["input_ids"]
        return self.blocks.rows(indices)  # PreparedBlocks: read from its memory maps


def stream_for_reader(blocks: IterableDataset, reader: int, readers: int) -> IterableDataset:
    """The part of `blocks` that `reader` of `readers` reads: a new IterableDataset (also for a single reader), so
    that a state loaded into it for one pass does not carry over to the next."""
    if readers > 1 and blocks.num_shards >= readers and SPLIT_STRATEGIES:
        # whole shards (files, Parquet row groups) per reader even when they do not divide evenly: no reader reads
        # the records of another's shards (datasets' "auto" would have every reader read all, keeping 1 in R)
        return split_dataset_by_node(blocks, rank=reader, world_size=readers, strategy="shards")
    return split_dataset_by_node(blocks, rank=reader, world_size=readers)


def worker_tokenizer_threads(workers: int, cores: int) -> int:
    """Tokenizer threads for each of `workers` dataloader workers sharing `cores`; from now until
    release_tokenizer_threads this process tokenises on one thread (TOKENIZERS_PARALLELISM=false), so that its
    workers, forked after, may have threads. 1 where the variable was set already (the user's choice) or no workers."""
    if not workers or "TOKENIZERS_PARALLELISM" in os.environ:
        return 1
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    return max(1, cores // workers)


def release_tokenizer_threads(tokenizer_threads: int) -> None:
    """Before the workers fork: TOKENIZERS_PARALLELISM unset again, so that the tokenizers library itself turns
    threads off in a worker forked from a process that used them (their pool does not survive a fork; a caller that
    tokenised before worker_tokenizer_threads), and leaves them to a worker forked from one that never did."""
    if tokenizer_threads > 1:
        os.environ.pop("TOKENIZERS_PARALLELISM", None)


@dataclass
class TrainingBlocks(torch.utils.data.IterableDataset):
    """Micro-batches of blocks in the run's order from `first_micro_batch` on, for one process and its workers, each
    as {"blocks": [...], "position": ...}; `reader_states` are the positions a checkpoint saved (streams only)."""

    source: Dataset | IterableDataset | Any
    batch_size: int
    seed: int
    readers: Readers = field(default_factory=Readers)
    first_micro_batch: int = 0
    reader_states: dict[int, dict] = field(default_factory=dict)
    tokenizer_threads: int = 1  # per dataloader worker: more than 1 only under worker_tokenizer_threads' condition

    @property
    def streamed(self) -> bool:
        return isinstance(self.source, IterableDataset)

    def __iter__(self) -> Iterator[dict]:
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        if info is not None and self.tokenizer_threads > 1:
            # read by the tokenizers library at each call (unless it turned threads off at the fork), and for its
            # thread pool at the pool's first use, here
            os.environ["TOKENIZERS_PARALLELISM"] = "true"
            os.environ["RAYON_NUM_THREADS"] = str(self.tokenizer_threads)
        try:
            if self.streamed:
                yield from self._stream_batches(worker)
            else:
                yield from self._map_style_batches(worker)
        except UserError as error:  # in a worker the DataLoader would wrap it in a traceback: carry the line instead
            if info is None:
                raise
            yield {ERROR_KEY: str(error)}

    def _map_style_batches(self, worker: int) -> Iterator[dict]:
        order, readers = MapStyleOrder(self.source, self.seed), self.readers
        micro_batch = self.first_micro_batch + worker
        while True:
            start = (micro_batch * readers.world_size + readers.rank) * self.batch_size
            indices = order.indices(start, self.batch_size)
            yield {"blocks": order.rows(indices), "position": {"micro_batch": micro_batch}}
            micro_batch += readers.per_process

    def _stream_batches(self, worker: int) -> Iterator[dict]:
        readers = self.readers
        reader = (self.first_micro_batch + worker) % readers.per_process
        state = dict(self.reader_states.get(reader) or {"pass": 0, "blocks_in_pass": 0, "blocks_per_pass": None})
        global_reader = readers.rank * readers.per_process + reader
        total_readers = readers.world_size * readers.per_process
        micro_batch = self.first_micro_batch + worker
        batch = []
        while True:
            stream = stream_for_reader(self.source, global_reader, total_readers)
            if state.get("dataset") is not None:
                stream.load_state_dict(state["dataset"])
            read = 0
            for example in stream.iter(batch_size=1):
                read += 1
                state["blocks_in_pass"] += 1
                state["dataset"] = stream.state_dict()
                batch.append(example["input_ids"][0])
                if len(batch) == self.batch_size:
                    position = {"micro_batch": micro_batch, "reader": reader, "state": dict(state)}
                    yield {"blocks": batch, "position": position}
                    batch, micro_batch = [], micro_batch + readers.per_process
            if read == 0 and state["blocks_in_pass"] == 0:
                raise UserError(
                    f"Reader {global_reader} of {total_readers} ({readers.world_size} processes × "
                    f"{readers.per_process} per process) got no block of the training stream in a whole pass: the "
                    "data has fewer shards or records than readers; lower --dataloader_num_workers or use more data."
                )
            state = {"pass": state["pass"] + 1, "blocks_in_pass": 0, "blocks_per_pass": state["blocks_in_pass"]}


@dataclass
class StreamTrained:
    """The blocks of a stream that a run's processes trained on, read again in the order they trained them: micro-batch
    j of each process, for j < `micro_batches`, from its reader j mod N (N dataloader workers, each reading its part
    of the stream as training split it, in passes). A reader reads no further than its last trained block, so no
    record past what training read is read (a bad one there never stops a finished run)."""

    source: IterableDataset
    batch_size: int
    readers: Readers
    micro_batches: int

    def iter(self, batch_size: int) -> Iterator[dict]:
        """Batches of `batch_size` blocks, {"input_ids": [...]}, as datasets' iter() gives them."""
        blocks = self.blocks()
        while batch := list(itertools.islice(blocks, batch_size)):
            yield {"input_ids": batch}

    def blocks(self) -> Iterator[list[int]]:
        readers = self.readers
        total_readers = readers.world_size * readers.per_process
        streams = {}
        for micro_batch in range(self.micro_batches):
            for rank in range(readers.world_size):
                reader = rank * readers.per_process + micro_batch % readers.per_process
                if reader not in streams:
                    streams[reader] = self._reader_blocks(reader, total_readers)
                yield from itertools.islice(streams[reader], self.batch_size)

    def _reader_blocks(self, reader: int, total_readers: int) -> Iterator[list[int]]:
        while True:  # passes, as TrainingBlocks chains them
            read = 0
            for example in stream_for_reader(self.source, reader, total_readers).iter(batch_size=1):
                read += 1
                yield example["input_ids"][0]
            if read == 0:
                return


class PositionTracker:
    """In the training process: the position of the last micro-batch trained, per reader, and what a checkpoint saves
    of it."""

    def __init__(self, readers: Readers, blocks_per_pass: int | None, batch_size: int):
        self.readers, self.blocks_per_pass, self.batch_size = readers, blocks_per_pass, batch_size
        self.micro_batches = 0
        self.reader_states: dict[int, dict] = {}

    def start_at(self, micro_batches: int, reader_states: dict[int, dict]) -> None:
        self.micro_batches, self.reader_states = micro_batches, dict(reader_states)

    def consumed(self, position: dict) -> None:
        if position["micro_batch"] != self.micro_batches:  # would mean the round robin or a reader went astray
            raise RuntimeError(
                f"Data order broken: micro-batch {position['micro_batch']} arrived where {self.micro_batches} was due."
            )
        self.micro_batches += 1
        if "reader" in position:
            self.reader_states[position["reader"]] = position["state"]

    def passes(self) -> float | None:
        """Passes over the training data so far, by this process's count (map-style: exact; a stream: whole passes
        until every reader has finished one, then with the fraction)."""
        if self.blocks_per_pass is not None:  # map-style: every process reads its share of each global micro-batch
            blocks = self.micro_batches * self.readers.world_size * self.batch_size
            return blocks / self.blocks_per_pass
        states = [self.reader_states.get(reader) for reader in range(self.readers.per_process)]
        if any(state is None for state in states):
            return float(min((state["pass"] for state in states if state), default=0))
        if all(state["blocks_per_pass"] for state in states):
            done = sum(state["pass"] * state["blocks_per_pass"] + state["blocks_in_pass"] for state in states)
            return done / sum(state["blocks_per_pass"] for state in states)
        return float(min(state["pass"] for state in states))

    def to_json(self, step: int, micro_batches_per_step: int, data: dict | None) -> dict:
        return {
            "step": step,
            "micro_batches_per_step": micro_batches_per_step,
            "data": data,  # the fingerprint of the data read: a resume on other data is refused
            "micro_batches": self.micro_batches,
            "world_size": self.readers.world_size,
            "readers_per_process": self.readers.per_process,
            "passes": self.passes(),
            "reader_states": {str(reader): state for reader, state in sorted(self.reader_states.items())},
        }


def read_position(checkpoint: str | Path, rank: int) -> dict | None:
    """The data position a checkpoint saved for process `rank`, or None if it has none (a checkpoint of a run that
    did not save one)."""
    path = Path(checkpoint) / DATA_POSITION_FILE.format(rank=rank)
    if not path.is_file():
        return None
    try:
        return load_position(path)
    except ValueError as error:
        raise UserError(f"{path} is not a data position ({error}).") from None


def load_position(path: Path) -> dict:
    """A data position file, its reader states keyed by reader; ValueError naming what is wrong with it."""
    position = load_json(path)
    if problem := position_problem(position):
        raise ValueError(problem)
    position["reader_states"] = {int(key): value for key, value in position["reader_states"].items()}
    return position


def is_count(value: Any, least: int = 0) -> bool:
    return type(value) is int and value >= least


def position_problem(position: Any) -> str | None:
    """What makes `position` (parsed JSON) other than a data position PositionTracker.to_json wrote, or None."""
    if not isinstance(position, dict):
        return f"it holds a {type(position).__name__}, not an object"
    if not is_count(position.get("micro_batches")):
        return f"micro_batches {position.get('micro_batches')!r} is not a count"
    for name in ("world_size", "readers_per_process"):  # every version wrote both
        if not is_count(position.get(name), least=1):
            return f"{name} {position.get(name)!r} is not a positive count"
    for name in ("step", "micro_batches_per_step"):
        if name in position and not is_count(position[name], least=name == "micro_batches_per_step"):
            return f"{name} {position[name]!r} is not a count"
    if position.get("data") is not None and not isinstance(position["data"], dict):
        return f"data {position['data']!r} is not an object"
    states = position.get("reader_states")
    if not isinstance(states, dict):
        return f"reader_states {states!r} is not an object"
    for key, state in states.items():
        if not (key.isdigit() and int(key) < position["readers_per_process"]) or not isinstance(state, dict):
            return f"reader state {key!r} is not one of its {position['readers_per_process']} readers'"
        counts = [state.get("pass"), state.get("blocks_in_pass")]
        if not all(map(is_count, counts)) or not (
            state.get("blocks_per_pass") is None or is_count(state["blocks_per_pass"])
        ):
            return f"reader {key}'s pass and block counts {state!r} are not counts"
        if not isinstance(state.get("dataset"), dict) and (state["blocks_in_pass"] or "dataset" in state):
            return f"reader {key}'s stream state {state.get('dataset')!r} is not an object"
    if "step" in position and "micro_batches_per_step" in position:
        if position["micro_batches"] != position["step"] * position["micro_batches_per_step"]:
            return (
                f"micro_batches {position['micro_batches']} is not step {position['step']} × "
                f"{position['micro_batches_per_step']} micro-batches a step"
            )
    return None


def reader_state_problem(source: IterableDataset, readers: Readers, reader: int, state: dict) -> str | None:
    """What makes the stream state a checkpoint saved for `reader` (of this process) other than one its part of
    `source` gives, or None: the same keys, iterable types and epoch, and counts where the stream has counts, as the
    state of that part after its first block (one block read, whatever the steps done). A damaged state would
    otherwise fail inside datasets, in a worker, or resume at another place of the stream."""
    if state.get("dataset") is None:
        return None
    total_readers = readers.world_size * readers.per_process
    stream = stream_for_reader(source, readers.rank * readers.per_process + reader, total_readers)
    if next(iter(stream.iter(batch_size=1)), None) is None:
        return None  # a reader without data: training says so in one line
    return state_shape_problem(state["dataset"], stream.state_dict(), "dataset")


def state_shape_problem(saved: Any, fresh: Any, where: str) -> str | None:
    """Where `saved` (a datasets state_dict read from JSON) differs in shape from `fresh`, the stream's own, or None."""
    if isinstance(fresh, dict):
        if not isinstance(saved, dict) or saved.keys() != fresh.keys():
            found = sorted(saved) if isinstance(saved, dict) else repr(saved)
            return f"{where} holds {found}, not the stream's {sorted(fresh)}"
        problems = (state_shape_problem(saved[key], value, f"{where}.{key}") for key, value in fresh.items())
        return next((problem for problem in problems if problem), None)
    if isinstance(fresh, list):
        if not isinstance(saved, list) or len(saved) != len(fresh):
            return f"{where} is {saved!r}, not a list of {len(fresh)}"
        pairs = enumerate(zip(saved, fresh, strict=True))
        problems = (state_shape_problem(item, value, f"{where}[{index}]") for index, (item, value) in pairs)
        return next((problem for problem in problems if problem), None)
    if fresh is None:
        return None  # a part not yet started there: whatever the stream saved later
    if type(saved) is not type(fresh):
        return f"{where} is {saved!r}, not of type {type(fresh).__name__}"
    if (isinstance(fresh, str) or where == "dataset.epoch") and saved != fresh:  # an iterable's type; the pass's epoch
        return f"{where} is {saved!r}, not {fresh!r}"
    if isinstance(fresh, int) and saved < 0:
        return f"{where} is {saved!r}, not a count"
    return None


# fingerprint keys that checkpoints of earlier versions did not save: compared where the checkpoint has them
LATER_DATA_KEYS = ("contents",)  # the whole files in the order read (before: sizes and 64 KiB at each end)


def data_changes(saved: dict | None, current: dict) -> list[str]:
    """What differs between the data fingerprint a checkpoint saved (None: a checkpoint from before they were
    saved, not compared) and this run's: each key with both values (`contents`, the first entry that differs)."""
    if saved is None:
        return []
    keys = [key for key in sorted(saved.keys() | current.keys()) if key in saved or key not in LATER_DATA_KEYS]
    return [
        describe_contents_change(saved[key], current.get(key) or [])
        if key == "contents" and isinstance(saved[key], list)
        else f"{key} is {saved.get(key)!r} there but {current.get(key)!r} here"
        for key in keys
        if saved.get(key) != current.get(key) and key != "teacher"
    ]


def describe_contents_change(saved: list, current: list) -> str:
    """The first entry in which two `contents` (lists of [name, sha256] in the order read) differ, in words."""

    def entry(item: Any) -> str:
        if isinstance(item, list) and len(item) == 2:
            return f"{item[0]} (sha256 {str(item[1])[:16]})"
        return "nothing" if item is None else repr(item)

    pairs = enumerate(itertools.zip_longest(saved, current))
    index, (was, now) = next((index, pair) for index, pair in pairs if pair[0] != pair[1])
    return f"contents (the data in the order read) hold at {index} {entry(was)} there but {entry(now)} here"


def distilled_toward(teacher: dict | None) -> str:
    """A data fingerprint's teacher (distillation.teacher_fingerprint) in words."""
    if teacher is None:
        return "without a teacher"
    losses = "".join(f", {name} {weight}" for name, weight in (teacher.get("losses") or {}).items())
    return (
        f"toward {teacher.get('name')!r} (weights {teacher.get('weights')}, tokenizer {teacher.get('tokenizer')}, "
        f"stage {teacher.get('stage')!r}{losses})"
    )


def resumed_reader_states(
    position: dict | None,
    checkpoint: str | Path,
    readers: Readers,
    micro_batches: int,
    streamed: bool,
    data_fingerprint: dict | None = None,
    source: IterableDataset | None = None,
) -> dict[int, dict]:
    """The reader states to resume a stream from (map-style positions follow from the step alone), checked against
    this run: the same data (`data_fingerprint`, where the checkpoint saved one), the same micro-batch count as the
    Trainer's step, and for a stream the same readers and, given the stream (`source`), states of its shape."""
    if position is None:
        if streamed:
            raise UserError(
                f"Cannot resume the stream from {checkpoint}: it has no {DATA_POSITION_FILE.format(rank=readers.rank)} "
                "(a checkpoint of an older version); train again with --overwrite_output_dir true."
            )
        return {}
    saved = position.get("data") or {}
    if "teacher" in saved and saved["teacher"] != (data_fingerprint or {}).get("teacher"):
        raise UserError(
            f"Cannot resume from {checkpoint}: it was trained {distilled_toward(saved['teacher'])}, this run "
            f"{distilled_toward((data_fingerprint or {}).get('teacher'))}; resume with the teacher it was trained "
            "toward, or train again with --overwrite_output_dir true."
        )
    if changes := data_changes(position.get("data"), data_fingerprint):
        raise UserError(
            f"Cannot resume from {checkpoint}: the training data are not those it was trained on ({'; '.join(changes)}); "
            "resume with the data it was trained on, or train again with --overwrite_output_dir true."
        )
    if data_fingerprint is not None and position.get("data") is not None and "contents" not in position["data"]:
        print(
            f"{checkpoint} was saved by an earlier version, which fingerprinted each training file by its size and "
            "its first and last 64 KiB (a prepared folder by its shards' digests, not their order): the data are "
            "compared by those."
        )
    if position["micro_batches"] != micro_batches:
        raise UserError(
            f"{checkpoint}: its data position is at micro-batch {position['micro_batches']} but its Trainer state at "
            f"{micro_batches}; the checkpoint is damaged: resume from an earlier one."
        )
    if streamed:
        saved = (position.get("world_size"), position.get("readers_per_process"))
        if saved != (readers.world_size, readers.per_process):
            raise UserError(
                f"Cannot resume the stream from {checkpoint}: it was read by {saved[0]} processes × {saved[1]} readers "
                f"each, this run has {readers.world_size} × {readers.per_process} (--dataloader_num_workers "
                f"{readers.workers}); resume with --dataloader_num_workers {saved[1] if saved[1] > 1 else 0} on "
                f"{saved[0]} processes."
            )
        for reader, state in sorted(position["reader_states"].items() if source is not None else ()):
            if problem := reader_state_problem(source, readers, reader, state):
                raise UserError(
                    f"Cannot resume the stream from {checkpoint}: reader {reader}'s saved place in it is not one of "
                    f"this stream's ({problem}); the checkpoint is damaged: resume from an earlier one."
                )
    return position["reader_states"]
