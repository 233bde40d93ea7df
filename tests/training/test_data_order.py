"""The order pre-training reads its blocks in (training/data/blocks.py): passes chained, split across processes and
dataloader workers, and resumed from a saved position exactly, without reading what came before it."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset, IterableDataset

from symbert.cli import UserError
from symbert.training.data import corpus_files
from symbert.training.data.blocks import (
    ERROR_KEY,
    PositionTracker,
    Readers,
    StreamTrained,
    TrainingBlocks,
    resumed_reader_states,
)


def loader(blocks, workers):
    return torch.utils.data.DataLoader(blocks, batch_size=None, num_workers=workers, collate_fn=lambda item: item)


def take(blocks, count):
    return list(itertools.islice(loader(blocks, blocks.readers.workers), count))


def map_style_blocks(count=10):
    return Dataset.from_dict({"input_ids": [[index] * 3 for index in range(count)]})


def stream_blocks(count=23, shards=2):
    """A stream of `count` one-id blocks in `shards` shards (data sources), as datasets streams local files."""

    def generate(shard_ids):
        for shard in shard_ids:
            for index in range(shard, count, shards):
                yield {"input_ids": [index, index]}

    return IterableDataset.from_generator(generate, gen_kwargs={"shard_ids": list(range(shards))})


def ids(batches):
    return [[block[0] for block in batch["blocks"]] for batch in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_passes_are_permutations_and_processes_split_one_process_s_order(workers):
    single = ids(take(TrainingBlocks(map_style_blocks(), batch_size=4, seed=3, readers=Readers(workers=workers)), 10))
    flat = list(itertools.chain.from_iterable(single))
    for pass_index in range(4):  # every block once per pass, a new order each pass
        assert sorted(flat[pass_index * 10 : (pass_index + 1) * 10]) == list(range(10))
    assert flat[:10] != flat[10:20]
    halves = [
        ids(take(TrainingBlocks(map_style_blocks(), batch_size=2, seed=3, readers=Readers(2, rank, workers)), 10))
        for rank in range(2)
    ]
    assert [a + b for a, b in zip(*halves, strict=True)] == single  # rank 0 then rank 1: one process's micro-batch


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_order_starts_at_any_micro_batch(workers):
    whole = ids(take(TrainingBlocks(map_style_blocks(), batch_size=3, seed=0), 12))
    for start in (1, 3, 4, 7):  # inside a pass, at a pass boundary (micro-batch 3 holds blocks 9..11), past it
        readers = Readers(workers=workers)
        resumed = TrainingBlocks(map_style_blocks(), batch_size=3, seed=0, readers=readers, first_micro_batch=start)
        assert ids(take(resumed, 12 - start)) == whole[start:]


def resume_stream_at(stop, workers, count=23, batches=14):
    """The micro-batches of a stream read from the start, and those of a reader resumed after `stop` of them from
    the positions they carried."""
    readers = Readers(workers=workers)
    whole = take(TrainingBlocks(stream_blocks(count), batch_size=3, seed=0, readers=readers), batches)
    tracker = PositionTracker(readers, None, 3)
    for batch in whole[:stop]:
        tracker.consumed(batch["position"])
    resumed = TrainingBlocks(
        stream_blocks(count),
        batch_size=3,
        seed=0,
        readers=readers,
        first_micro_batch=tracker.micro_batches,
        reader_states=tracker.reader_states,
    )
    return whole, take(resumed, batches - stop), tracker


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop", [2, 7, 8, 11])
def test_a_stream_resumes_exactly_inside_and_after_a_pass(workers, stop):
    whole, resumed, _ = resume_stream_at(stop, workers)
    assert ids(resumed) == ids(whole[stop:])
    assert [batch["position"] for batch in resumed] == [batch["position"] for batch in whole[stop:]]


def test_a_stream_s_passes_are_counted_and_each_block_is_read_once_per_pass():
    whole, _, tracker = resume_stream_at(14, 0, count=24, batches=14)  # 8 micro-batches of 3 per pass
    flat = list(itertools.chain.from_iterable(ids(whole)))
    assert sorted(flat[:24]) == list(range(24)) and flat[24:] == flat[: len(flat) - 24]  # no shuffle: same order
    assert tracker.passes() == pytest.approx(14 * 3 / 24)
    _, _, inside_first = resume_stream_at(5, 0, count=24, batches=5)
    assert inside_first.passes() == 0.0  # the length of a pass is not known before one ends


def test_two_workers_read_disjoint_shards_of_a_stream():
    batches = take(TrainingBlocks(stream_blocks(24, shards=4), batch_size=2, seed=0, readers=Readers(workers=2)), 12)
    flat = list(itertools.chain.from_iterable(ids(batches)))
    assert sorted(flat) == list(range(24))  # one pass: each block once
    by_reader = {0: set(), 1: set()}
    for batch in batches:
        by_reader[batch["position"]["reader"]].update(block[0] for block in batch["blocks"])
    assert not by_reader[0] & by_reader[1]


def test_two_processes_read_disjoint_parts_of_a_stream():
    parts = [
        set(
            itertools.chain.from_iterable(
                ids(take(TrainingBlocks(stream_blocks(24, shards=4), batch_size=2, seed=0, readers=Readers(2, r)), 6))
            )
        )
        for r in range(2)
    ]
    assert not parts[0] & parts[1] and parts[0] | parts[1] == set(range(24))


def stream_with_bad_records(count, shards):
    """stream_blocks, each shard ending with a record that cannot be read (as a corpus with a bad line further on)."""

    def generate(shard_ids):
        for shard in shard_ids:
            yield from ({"input_ids": [index, index]} for index in range(shard, count, shards))
            raise UserError(f"shard {shard} has a bad record after its {len(range(shard, count, shards))} blocks")

    return IterableDataset.from_generator(generate, gen_kwargs={"shard_ids": list(range(shards))})


@pytest.mark.parametrize(
    "processes, workers, micro_batches", [(1, 0, 13), (2, 2, 4)], ids=["one-reader-2-passes", "2x2-readers"]
)
def test_the_blocks_a_stream_trained_on_are_read_again_in_order_and_no_further(processes, workers, micro_batches):
    """What the end-of-run report counts the baseline's tokens on: each process's micro-batches as its dataloader
    (workers included) gave them, micro-batch by micro-batch, rank after rank; and nothing of a stream past them, so a
    bad record that training never reached is never read (the stream read from its start meets it)."""
    trained = [
        ids(take(TrainingBlocks(stream_blocks(), 3, seed=0, readers=Readers(processes, rank, workers)), micro_batches))
        for rank in range(processes)
    ]
    expected = list(itertools.chain.from_iterable(itertools.chain.from_iterable(zip(*trained, strict=True))))
    again = StreamTrained(stream_blocks(), 3, Readers(processes, workers=workers), micro_batches)
    assert [block[0] for batch in again.iter(batch_size=5) for block in batch["input_ids"]] == expected
    if processes == 1:
        assert len(expected) > 23  # into the second pass
        return
    bad = stream_with_bad_records(count=40, shards=4)  # a shard of 10 blocks per reader, 6 of them trained
    again = StreamTrained(bad, 3, Readers(processes, workers=workers), micro_batches)
    assert sorted(block[0] for batch in again.iter(batch_size=1000) for block in batch["input_ids"]) == sorted(
        index for shard in range(4) for index in range(shard, 40, 4)[:6]
    )
    with pytest.raises(UserError, match="shard 0 has a bad record after its 10 blocks"):
        list(bad.iter(batch_size=1000))


def test_a_reader_without_data_is_one_line_from_a_worker():
    # one shard, three readers: datasets gives one record in three to each; 2 records leave reader 2 with nothing
    blocks = TrainingBlocks(stream_blocks(2, shards=1), batch_size=1, seed=0, readers=Readers(workers=3))
    items = take(blocks, 3)
    errors = [item[ERROR_KEY] for item in items if ERROR_KEY in item]
    assert errors and "got no block of the training stream" in errors[0] and "\n" not in errors[0]


def test_a_stream_resumed_with_other_readers_is_refused(tmp_path):
    position = {"micro_batches": 8, "world_size": 1, "readers_per_process": 2, "reader_states": {0: {}, 1: {}}}
    with pytest.raises(UserError, match="read by 1 processes × 2 readers each, this run has 1 × 1"):
        resumed_reader_states(position, tmp_path, Readers(workers=0), 8, streamed=True)
    with pytest.raises(UserError, match="at micro-batch 8 but its Trainer state at 6"):
        resumed_reader_states(position, tmp_path, Readers(workers=2), 6, streamed=True)
    with pytest.raises(UserError, match="has no data_position_rank0.json"):
        resumed_reader_states(None, tmp_path, Readers(), 8, streamed=True)
    assert resumed_reader_states(None, tmp_path, Readers(), 8, streamed=False) == {}


def inner_state(position):  # the stream's own examples iterable in a reader's saved state
    return position["reader_states"][1]["dataset"]["examples_iterable"]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda position: position["reader_states"][1].update(dataset={"x": 1}), r"dataset holds \['x'\], not"),
        (lambda position: position["reader_states"][1]["dataset"].update(epoch=2), r"dataset.epoch is 2, not 0"),
        (lambda position: inner_state(position).pop("shard_idx"), r"examples_iterable holds \['shard_example_idx',"),
        (lambda position: inner_state(position).update(shard_idx="1"), r"shard_idx is '1', not of type int"),
        (lambda position: inner_state(position).update(shard_example_idx=-4), r"shard_example_idx is -4, not a count"),
        (lambda position: inner_state(position).update(type="Other"), r"type is 'Other', not 'ExamplesIterable'"),
    ],
    ids=["not the stream's", "another epoch", "a key missing", "a count as text", "a negative count", "another type"],
)
def test_a_damaged_reader_state_of_a_stream_is_refused_naming_the_checkpoint(tmp_path, damage, message):
    """A saved stream state must have the shape of the stream's own (keys, iterable types, epoch, counts): datasets
    would fail on it in a worker, or resume elsewhere in the stream. The states that training saves resume."""
    readers = Readers(workers=2)
    tracker = PositionTracker(readers, None, 3)
    for batch in take(TrainingBlocks(stream_blocks(), batch_size=3, seed=0, readers=readers), 5):
        tracker.consumed(batch["position"])
    position = tracker.to_json(5, 1, None)
    position["reader_states"] = {int(key): state for key, state in position["reader_states"].items()}
    assert resumed_reader_states(position, tmp_path, readers, 5, True, source=stream_blocks()) == tracker.reader_states
    damage(position)
    with pytest.raises(UserError, match=rf"Cannot resume the stream from {tmp_path}: reader 1's .*{message}") as error:
        resumed_reader_states(position, tmp_path, readers, 5, True, source=stream_blocks())
    assert "\n" not in str(error.value) and "the checkpoint is damaged" in str(error.value)


EMBEDDED_TOKENIZER = Path(corpus_files.EMBEDDED_CORPUS).parent / "wordpiece-8192"
THREADED_WORKERS = """
import itertools, json, os, sys
import torch
from symbert.training.arguments import parse_arguments
from symbert.training.data.blocks import (PositionTracker, Readers, StreamTrained, TrainingBlocks,
    release_tokenizer_threads, worker_tokenizer_threads)
from symbert.training.data.loading import load_blocks, load_tokenizer

threads = worker_tokenizer_threads(2, cores=4)  # first: nothing has tokenised yet
data_args = parse_arguments(["--output_dir", sys.argv[1], "--train_files", *sys.argv[3:], "--streaming", "true",
                             "--max_steps", "1", "--max_seq_length", "16", "--eval_blocks", "4", "--tokenizer", sys.argv[2]])[2]
tokenizer = load_tokenizer(data_args)
train, _ = load_blocks(data_args, tokenizer)
readers = Readers(workers=2)

def read(first=0, states=None, count=12):
    blocks = TrainingBlocks(train, 8, 0, readers, first, states or {}, tokenizer_threads=threads)
    release_tokenizer_threads(threads)
    noted = lambda item: {**item, "rayon": os.environ.get("RAYON_NUM_THREADS")}  # in the worker that tokenised
    loader = torch.utils.data.DataLoader(blocks, batch_size=None, num_workers=2, collate_fn=noted)
    return list(itertools.islice(loader, count))

whole = read()
tracker = PositionTracker(readers, None, 8)
for batch in whole[:5]:
    tracker.consumed(batch["position"])
resumed = read(tracker.micro_batches, tracker.reader_states, 7)
tokenizer(["threads used before the workers fork"] * 64)  # parallel here: the workers' pool would be broken
again = read()  # the library turns the workers' threads off itself: no hang
print(json.dumps({
    "threads": threads, "rayon": sorted({batch["rayon"] for batch in whole}),
    "whole": [batch["blocks"] for batch in whole], "resumed": [batch["blocks"] for batch in resumed],
    "again": [batch["blocks"] for batch in again],
    "serial": list(StreamTrained(train, 8, readers, 12).blocks()),  # one thread, in this process
}))
"""


@pytest.mark.heavy  # a fresh interpreter, whose tokenizer never ran threads before the workers fork
def test_workers_tokenising_with_threads_read_the_same_blocks_in_order_and_resume_exactly(tmp_path):
    """Each worker tokenises with its share of the cores (blocks.worker_tokenizer_threads): the blocks, their order
    and a resume are those of one-thread tokenising."""
    files = []
    for index in range(4):  # a shard per file: each worker reads two whole files
        path = tmp_path / f"part-{index}.txt"
        path.write_text("".join(f"file {index} line {line} holds some words to tokenise\n" for line in range(60)))
        files.append(str(path))
    environment = {key: value for key, value in os.environ.items() if key != "TOKENIZERS_PARALLELISM"}
    result = subprocess.run(
        [sys.executable, "-c", THREADED_WORKERS, str(tmp_path / "unused"), str(EMBEDDED_TOKENIZER), *files],
        capture_output=True, text=True, timeout=300, env=environment,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    read = json.loads(result.stdout.strip().splitlines()[-1])
    assert read["threads"] == 2 and read["rayon"] == ["2"]  # the workers tokenised with 2 threads each
    serial = read["serial"]
    assert len(serial) == 12 * 8 and len({tuple(block) for block in serial}) > 80  # real blocks, most distinct
    assert [block for batch in read["whole"] for block in batch] == serial
    assert read["resumed"] == read["whole"][5:]
    assert read["again"] == read["whole"]  # after this process used threads: the workers did not hang
