"""The measuring half of benchmarks/data_pipeline.py: the corpora it generates (text files of each format, a
prepared folder, the large corpora of the memory cases) and its four measurements, preparation, memory, delivery and
resume, each in the forked processes and rounds its docstring describes (see data_pipeline.py's docstring)."""

import argparse
import contextlib
import gzip
import json
import multiprocessing
import os
import shutil
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from symbert.cli import UserError
from symbert.training.arguments import parse_arguments
from symbert.training.data import loading as data_module
from symbert.training.data import prepared
from symbert.training.data.blocks import ERROR_KEY, PositionTracker, Readers, TrainingBlocks
from symbert.training.data.corpus_files import EMBEDDED_CORPUS, stream_files
from symbert.training.data.manifest import sealed
from symbert.training.data.masking import ResumableMLMCollator
from symbert.training.pretrain import BatchCollator

STREAM_FORMATS = {"txt": ".txt", "txt-1file": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}
FORMATS = (*STREAM_FORMATS, "prepared")
MLM_PROBABILITY = 0.15
MEMORY_TARGET = 0.10  # peak memory of the large corpus within 10% of the small one's
SEED = 42
EVAL_BLOCKS = 16
PARQUET_ROW_GROUP = 2048
MIB = 2**20


# ---------------------------------------------------------------------------------------------------------- corpora


def corpus_lines() -> list[str]:
    """The embedded corpus's non-blank lines (one text each)."""
    with gzip.open(EMBEDDED_CORPUS, "rt", encoding="utf-8") as file:
        return [line for line in file.read().splitlines() if line.strip()]


def file_lines(lines: list[str], start: int, total_bytes: int) -> Iterator[str]:
    """The corpus's lines from line `start` on, cycled, until `total_bytes` of text (with newlines) are given."""
    written, index = 0, start
    while written < total_bytes:
        line = lines[index % len(lines)]
        written += len(line.encode("utf-8")) + 1
        index += 1
        yield line


def write_text_files(folder: Path, lines: list[str], total_bytes: int, files: int, suffix: str) -> list[Path]:
    """`files` files of total_bytes / files bytes of text each, file k starting at line k × len(lines) / files, as
    .txt (a line each), .jsonl ({"text": line}) or .parquet (column `text`, row groups of PARQUET_ROW_GROUP)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        path = folder / f"part-{index:02d}{suffix}"
        texts = file_lines(lines, index * len(lines) // files, total_bytes // files)
        if suffix == ".parquet":
            pq.write_table(pa.table({"text": list(texts)}), path, row_group_size=PARQUET_ROW_GROUP)
        else:
            with open(path, "w", encoding="utf-8") as file:
                for text in texts:
                    file.write((json.dumps({"text": text}) if suffix == ".jsonl" else text) + "\n")
        paths.append(path)
    return paths


def write_large_text_files(folder: Path, lines: list[str], total_bytes: int, files: int) -> list[Path]:
    """As write_text_files(.txt), fast for gigabytes: whole copies of the (rotated) corpus written at once."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        start = index * len(lines) // files
        copy = ("\n".join(lines[start:] + lines[:start]) + "\n").encode("utf-8")
        remaining = total_bytes // files
        path = folder / f"part-{index:02d}.txt"
        with open(path, "wb") as file:
            while remaining >= len(copy):
                file.write(copy)
                remaining -= len(copy)
            if remaining:
                cut = copy.rfind(b"\n", 0, remaining) + 1
                file.write(copy[:cut])
        paths.append(path)
    return paths


def write_synthetic_prepared(folder: Path, template: Path, total_bytes: int, shards: int = 2) -> dict:
    """A prepared folder of about `total_bytes` of random token ids, in symbert-prepare-data's format: `shards` raw
    .bin shards with the manifest, tokenizer and held-out blocks of the real preparation `template`."""
    manifest = json.loads((template / prepared.MANIFEST).read_text())
    length, dtype = manifest["block_length"], np.dtype(manifest["dtype"])
    vocab = manifest["tokenizer"]["vocab_size"]
    chunk_blocks = max(1, 2**24 // (length * dtype.itemsize))  # 16 MiB of random ids, written over and over
    folder.mkdir(parents=True)
    blocks_per_shard = max(1, total_bytes // (length * dtype.itemsize) // shards)
    manifest_shards = []
    for index in range(shards):
        # each shard its own ids: shards of equal digests are refused (a pass would read the same blocks twice)
        random_ids = np.random.default_rng(index).integers(5, vocab, size=(chunk_blocks, length))
        chunk = random_ids.astype(dtype).tobytes()
        name = f"train-{index:05d}.bin"
        with open(folder / name, "wb") as file:
            left = blocks_per_shard
            while left:
                write = min(left, chunk_blocks)
                file.write(chunk[: write * length * dtype.itemsize])
                left -= write
        manifest_shards.append(
            {"file": name, "blocks": blocks_per_shard, "sha256": prepared.file_sha256(folder / name)}
        )
    shutil.copyfile(template / prepared.HELD_OUT_FILE, folder / prepared.HELD_OUT_FILE)
    shutil.copytree(template / prepared.TOKENIZER_DIR, folder / prepared.TOKENIZER_DIR)
    manifest["source"] = f"synthetic: random token ids in [5, {vocab})"
    manifest["train"] = {"shards": manifest_shards, "blocks": blocks_per_shard * shards}
    manifest["tokens"] = (blocks_per_shard * shards + manifest["held_out"]["blocks"]) * length
    manifest = sealed(manifest)  # its own digest over the edited fields, as symbert-prepare-data writes it
    (folder / prepared.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    prepared.read_manifest(folder, check_digests=True)  # as symbert-pretrain --blocks_dir checks it
    return manifest


class Corpora:
    """The generated files, tokenizer and prepared folders, and the data arguments that read them."""

    def __init__(self, args: argparse.Namespace, root: Path):
        self.args, self.root = args, root
        self.tokenizer_dir = root / "tokenizer"
        self.streams: dict[str, list[Path]] = {}
        self.large_stream: list[Path] = []
        self.prepared: Path | None = None
        self.large_prepared: Path | None = None

    def data_argv(
        self, files: list[Path] | None = None, blocks_dir: Path | None = None, streaming: bool = True
    ) -> list[str]:
        argv = ["--output_dir", str(self.root / "unused"), "--max_seq_length", str(self.args.block_length)]
        argv += ["--eval_blocks", str(EVAL_BLOCKS), "--seed", str(SEED)]
        if blocks_dir is not None:
            return argv + ["--blocks_dir", str(blocks_dir)]
        argv += ["--train_files", *map(str, files), "--tokenizer", str(self.tokenizer_dir)]
        return argv + (["--streaming", "true", "--max_steps", "1"] if streaming else [])

    def load(self, files: list[Path] | None = None, blocks_dir: Path | None = None) -> tuple[Any, Any]:
        """(training blocks, tokenizer) as symbert-pretrain loads them: a stream of the files, or a prepared folder."""
        data_args = parse_arguments(self.data_argv(files, blocks_dir))[2]
        tokenizer = data_module.load_tokenizer(data_args)
        train, _ = data_module.load_blocks(data_args, tokenizer, seed=SEED)
        return train, tokenizer


def bytes_of(path: Path) -> int:
    return (
        sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) if path.is_dir() else path.stat().st_size
    )


# ------------------------------------------------------------------------------------------------- measurement tools


def training_loader(
    train: Any, tokenizer: Any, batch_size: int, workers: int, first: int = 0, states=None, tokenizer_threads: int = 1
):
    """The DataLoader of SymBertPretrainingTrainer.get_train_dataloader, on one process."""
    blocks = TrainingBlocks(
        train,
        batch_size=batch_size,
        seed=SEED,
        readers=Readers(1, 0, workers),
        first_micro_batch=first,
        reader_states=states or {},
        tokenizer_threads=tokenizer_threads,
    )
    collator = ResumableMLMCollator(tokenizer=tokenizer, mlm_probability=MLM_PROBABILITY, mask_seed=SEED)
    return torch.utils.data.DataLoader(
        blocks,
        batch_size=None,
        collate_fn=BatchCollator(collator),
        num_workers=workers,
        prefetch_factor=2 if workers else None,
    )  # in order, torch's default: micro-batch j from worker j mod N


def checked(batch: dict) -> dict:
    if ERROR_KEY in batch:
        raise UserError(batch[ERROR_KEY])
    return batch


@contextlib.contextmanager
def tokenizer_threads_for(workers: int) -> Iterator[None]:
    """TOKENIZERS_PARALLELISM as symbert-pretrain has it: false with dataloader workers (forked, one thread each), the
    tokenizers library's default (threads over the cores) with none."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    if workers and saved is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


MEMORY_KINDS = {"rss": "VmRSS", "anon": "RssAnon", "file": "RssFile"}  # /proc/PID/status fields, in kB


def process_tree_memory(process: psutil.Process) -> dict[str, int]:
    """Resident memory of `process` and its descendants, summed: all (rss), anonymous (anon: the heap, arrays) and
    file-backed (file: mapped files such as memory-mapped shards and libraries, page cache the kernel can drop)."""
    total, members = dict.fromkeys(MEMORY_KINDS, 0), [process]
    with contextlib.suppress(psutil.NoSuchProcess):
        members += process.children(recursive=True)
    for member in members:
        with contextlib.suppress(OSError):
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{member.pid}/status").read_text().splitlines())
            for kind, name in MEMORY_KINDS.items():
                total[kind] += int(fields.get(name, "0 kB").split()[0]) * 1024
    return total


# set by data_pipeline.run where it turned parallel tokenising off in its own process (TOKENIZERS_PARALLELISM=false)
THREADS_LEFT_TO_FORKS = False


@contextlib.contextmanager
def library_threads_in_forks() -> Iterator[None]:
    """TOKENIZERS_PARALLELISM unset while forking (blocks.release_tokenizer_threads): the forked process tokenises
    with the library's default threads, or one if this process ever used them (the library turns them off there)."""
    if not THREADS_LEFT_TO_FORKS:
        yield
        return
    os.environ.pop("TOKENIZERS_PARALLELISM", None)
    try:
        yield
    finally:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"


def in_forked_process(target: Callable[..., dict], *arguments: Any, sample_memory: bool = False) -> tuple[dict, dict]:
    """Run target(report, *arguments) in a forked process (whose dataloader workers and tokenising processes are its
    children); returns (its result, memory): for each of process_tree_memory's kinds, the tree's memory when target
    called report() (`KIND_ready`) and its peak over the whole run (`KIND_peak`), sampled every 10 ms."""
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)

    def child() -> None:
        try:
            result = target(lambda: send.send(("ready", None)), *arguments)
            send.send(("done", result))
        except BaseException as error:  # noqa: BLE001  (carried to the parent whatever it is)
            send.send(("error", "".join(traceback.format_exception(error))))
        finally:
            send.close()
            os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=child)
    with library_threads_in_forks():
        process.start()
    tree = psutil.Process(process.pid)
    memory = {f"{kind}_peak": 0 for kind in MEMORY_KINDS}
    result = None
    while True:
        if sample_memory:
            for kind, value in process_tree_memory(tree).items():
                memory[f"{kind}_peak"] = max(memory[f"{kind}_peak"], value)
        if receive.poll(0.01):
            kind, value = receive.recv()
            if kind == "ready":
                memory.update({f"{kind}_ready": value for kind, value in process_tree_memory(tree).items()})
                continue
            if kind == "error":
                process.join()
                raise RuntimeError(f"A measurement process failed:\n{value}")
            result = value
            break
        if not process.is_alive() and not receive.poll():
            raise RuntimeError(f"A measurement process ended (exit code {process.exitcode}) without a result.")
    process.join()
    return result, memory


# ------------------------------------------------------------------------------------------------------ 1. preparation


def prepare_in_fresh_cache(report: Callable[[], None], argv: list[str], cache: str) -> dict:
    datasets.config.HF_DATASETS_CACHE = Path(cache)  # nothing reused from another run's Arrow files
    os.environ["HF_DATASETS_CACHE"] = cache
    _, _, data_args, training_args = parse_arguments(argv)
    start = time.perf_counter()
    manifest = prepared.prepare(data_args, training_args.output_dir, seed=training_args.seed)
    seconds = time.perf_counter() - start
    # the tokens written, counted from the files: the manifest's counts are checked, not trusted
    folder, itemsize = Path(training_args.output_dir), np.dtype(manifest["dtype"]).itemsize
    written = sum((folder / shard["file"]).stat().st_size for shard in manifest["train"]["shards"]) // itemsize
    written += (folder / prepared.HELD_OUT_FILE).stat().st_size // itemsize
    try:
        prepared.read_manifest(folder)
        problem = None
    except UserError as error:
        problem = str(error)
    return {
        "seconds": seconds,
        "tokens": written,
        "train_blocks_written": (written // manifest["block_length"]) - manifest["held_out"]["blocks"],
        "train_blocks_in_manifest": manifest["train"]["blocks"],
        "manifest_problem": problem,
    }


def measure_preparation(args: argparse.Namespace, corpora: Corpora, keep: Callable[[list[dict]], None]) -> list[dict]:
    """The preparation cases' rows; `keep` is given the rows so far after each case."""
    rows = []
    files = corpora.streams["txt"]
    for streaming in (False, True):
        for num_proc in args.num_proc:
            name = f"{'streamed' if streaming else 'whole'}-np{num_proc}"
            output = corpora.root / "prepared" / name
            argv = corpora.data_argv(files, streaming=streaming) + ["--num_proc", str(num_proc)]
            argv[argv.index("--output_dir") + 1] = str(output)
            cache = corpora.root / "hf-cache" / name
            result, _ = in_forked_process(prepare_in_fresh_cache, argv, str(cache))
            shutil.rmtree(cache, ignore_errors=True)
            row = {
                "input": f"{len(files)} .txt files, {args.corpus_mb:g} MB",
                "streaming": streaming,
                "num_proc": num_proc,
                **result,
                "tokens_per_s": result["tokens"] / result["seconds"],
                "tokens_per_s_per_process": result["tokens"] / result["seconds"] / num_proc,
                "folder": name,
            }
            rows.append(row)
            keep(rows)
            problem = "" if row["manifest_problem"] is None else f"; MANIFEST REFUSED: {row['manifest_problem']}"
            print(
                f"prepare {name}: {row['tokens_per_s']:,.0f} tokens/s ({result['seconds']:.1f} s){problem}", flush=True
            )
    return rows


def ensure_prepared(args: argparse.Namespace, corpora: Corpora, preparation: list[dict]) -> Path:
    """The prepared folder of the corpus: the whole-read preparation with the most processes, else one made now."""
    whole = [row for row in preparation if not row["streaming"] and row["manifest_problem"] is None]
    if whole:
        return corpora.root / "prepared" / max(whole, key=lambda row: row["num_proc"])["folder"]
    output = corpora.root / "prepared" / "whole"
    argv = corpora.data_argv(corpora.streams["txt"], streaming=False)
    argv[argv.index("--output_dir") + 1] = str(output)
    in_forked_process(prepare_in_fresh_cache, argv, str(corpora.root / "hf-cache" / "whole"))
    return output


# ----------------------------------------------------------------------------------------------------------- 2. memory


def read_first_batches(
    report: Callable[[], None],
    corpora: Corpora,
    files: list[Path] | None,
    blocks_dir: Path | None,
    workers: int,
    batches: int,
    batch_size: int,
) -> dict:
    with tokenizer_threads_for(workers):
        train, tokenizer = corpora.load(files, blocks_dir)
        report()
        tokens = 0
        iterator = iter(training_loader(train, tokenizer, batch_size, workers))
        for _ in range(batches):
            tokens += checked(next(iterator))["input_ids"].numel()
        del iterator
    return {"tokens": tokens}


def measure_memory(
    args: argparse.Namespace, corpora: Corpora, keep: Callable[[list[dict]], None]
) -> tuple[list[dict], list[dict]]:
    """The memory cases' rows and their ratios; `keep` is given the rows so far after each case."""
    cases = [
        ("stream", args.corpus_mb, corpora.streams["txt"], None),
        ("stream", args.large_mb, corpora.large_stream, None),
        ("prepared", args.corpus_mb, None, corpora.prepared),
        ("prepared", args.large_mb, None, corpora.large_prepared),
    ]
    rows = []
    for source, megabytes, files, blocks_dir in cases:
        result, memory = in_forked_process(
            read_first_batches,
            corpora,
            files,
            blocks_dir,
            args.memory_workers,
            args.memory_batches,
            args.batch_size,
            sample_memory=True,
        )
        on_disk = sum(map(bytes_of, files)) if files else bytes_of(blocks_dir)
        rows.append(
            {
                "source": source,
                "corpus_mb": megabytes,
                "bytes_on_disk": on_disk,
                "batches": args.memory_batches,
                "workers": args.memory_workers,
                "tokens_read": result["tokens"],
                "rss_ready_bytes": memory["rss_ready"],
                "peak_rss_bytes": memory["rss_peak"],
                "peak_anon_bytes": memory["anon_peak"],
                "peak_file_bytes": memory["file_peak"],
                "anon_ready_bytes": memory["anon_ready"],
            }
        )
        keep(rows)
        print(
            f"memory {source} {megabytes:g} MB: peak RSS {memory['rss_peak'] / MIB:,.0f} MiB, anonymous "
            f"{memory['anon_peak'] / MIB:,.0f} MiB",
            flush=True,
        )
    ratios = []
    for source in ("stream", "prepared"):
        small, large = [row for row in rows if row["source"] == source]
        ratio = large["peak_rss_bytes"] / small["peak_rss_bytes"]
        anon_ratio = large["peak_anon_bytes"] / small["peak_anon_bytes"]
        ratios.append(
            {
                "source": source,
                "sizes_mb": [small["corpus_mb"], large["corpus_mb"]],
                "peak_ratio": ratio,
                "peak_anon_ratio": anon_ratio,
                "peak_file_difference_bytes": large["peak_file_bytes"] - small["peak_file_bytes"],
                "target": f"within {MEMORY_TARGET:.0%}",
                "meets_target": abs(ratio - 1) <= MEMORY_TARGET,
                "anon_meets_target": abs(anon_ratio - 1) <= MEMORY_TARGET,
            }
        )
    return rows, ratios


# --------------------------------------------------------------------------------------------------------- 3. delivery


def measure_delivery_once(report: Callable[[], None], train: Any, tokenizer: Any, workers: int, args) -> dict:
    """In a forked process of this one, which never tokenised in parallel (run() turns it off first): with 0 workers
    the tokenizers library's default (threads over every core), with N each worker's share of the cores, as
    symbert-pretrain has them. Warm-up and timed micro-batches are counted per reader, so that every worker's start
    (its first batch of 1,000 texts tokenised) is before the clock, whatever N."""
    threads = max(1, len(os.sched_getaffinity(0)) // workers) if workers and args.tokenizer_threads_allowed else 1
    readers = max(workers, 1)
    start = time.perf_counter()
    iterator = iter(training_loader(train, tokenizer, args.batch_size, workers, tokenizer_threads=threads))
    checked(next(iterator))
    first = time.perf_counter() - start
    for _ in range(max(args.warmup * readers - 1, 0)):
        checked(next(iterator))
    tokens, start = 0, time.perf_counter()
    for _ in range(args.batches * readers):
        tokens += checked(next(iterator))["input_ids"].numel()
    seconds = time.perf_counter() - start
    del iterator
    return {
        "first_batch_s": first,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tokenizer_threads": threads if workers or not args.tokenizer_threads_allowed else "all cores",
    }


def measure_delivery(args: argparse.Namespace, corpora: Corpora, keep: Callable[[list[dict]], None]) -> list[dict]:
    """The delivery cases' rows, over --rounds rounds of every case; `keep` is given the rows so far (each case's
    median over its rounds so far) after each case."""
    sources = {}
    for kind in args.formats:
        files = corpora.streams.get(kind)
        sources[kind] = (corpora.load(files) if files else corpora.load(blocks_dir=corpora.prepared), files)
    timings: dict[tuple[str, int], list[dict]] = {}
    for round_index in range(args.rounds):
        order = [(kind, workers) for kind in args.formats for workers in args.workers]
        shift = round_index * len(args.workers)  # each round starts at another case: slow drifts spread over all
        for kind, workers in order[shift % len(order) :] + order[: shift % len(order)]:
            (train, tokenizer), _ = sources[kind]
            measured, _ = in_forked_process(measure_delivery_once, train, tokenizer, workers, args)
            timings.setdefault((kind, workers), []).append(measured)
            keep(delivery_rows(args, sources, timings))
    rows = delivery_rows(args, sources, timings)
    for row in rows:
        ratio = "" if row["vs_0_workers"] is None else f" ({row['vs_0_workers']:.2f} × 0 workers)"
        print(
            f"delivery {row['format']} workers {row['workers']}: {row['tokens_per_s']:,.0f} tokens/s{ratio}", flush=True
        )
    return rows


def delivery_rows(args: argparse.Namespace, sources: dict, timings: dict[tuple[str, int], list[dict]]) -> list[dict]:
    """A row for each case measured so far, in table order (format, then workers)."""
    rows = []
    for kind in args.formats:
        files = sources[kind][1]
        format_rows = []
        for workers in args.workers:
            runs = timings.get((kind, workers))
            if not runs:
                continue
            speed = statistics.median(run["tokens_per_s"] for run in runs)
            format_rows.append(
                {
                    "format": kind,
                    "files": len(files) if files else None,
                    "workers": workers,
                    "tokenizer_threads": runs[0]["tokenizer_threads"],
                    "tokens_per_s": speed,
                    "tokens_per_s_per_reader": speed / max(workers, 1),
                    "tokens_per_s_rounds": [run["tokens_per_s"] for run in runs],
                    "first_batch_s": statistics.median(run["first_batch_s"] for run in runs),
                    "batches_timed": args.batches * max(workers, 1),
                    "tokens_timed": runs[0]["tokens"],
                }
            )
        reference = next((row["tokens_per_s"] for row in format_rows if row["workers"] == 0), None)
        for row in format_rows:  # against 0 workers of the same format, measured in the same rounds
            row["vs_0_workers"] = row["tokens_per_s"] / reference if reference else None
        rows += format_rows
    return rows


# ----------------------------------------------------------------------------------------------------------- 4. resume


def shard_position(state: dict | None) -> tuple[int, int] | None:
    """(shard, texts into it) from which datasets resumes a stream state: the innermost examples' position, through
    each batched map's `previous_state` (the start of the batch it re-reads) where it has one."""
    while isinstance(state, dict):
        if "shard_example_idx" in state:
            return state["shard_idx"], state["shard_example_idx"]
        state = state.get("previous_state") or state.get("examples_iterable")
    return None


def time_to_first_batch(
    train: Any, tokenizer: Any, batch_size: int, first: int, states: dict, repeats: int
) -> list[float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        iterator = iter(training_loader(train, tokenizer, batch_size, 0, first, states))
        batch = checked(next(iterator))
        seconds.append(time.perf_counter() - start)
        if batch["data_position"]["micro_batch"] != first:
            raise RuntimeError(f"Resumed at micro-batch {first} but got micro-batch {batch['data_position']}.")
        del iterator
    return seconds


def resume_row(
    source: str, corpus_mb: float, blocks_per_pass: int, first: int, batch_size: int, seconds: list[float], state=None
) -> dict:
    position = shard_position(state["dataset"]) if state and state.get("dataset") else None
    return {
        "source": source,
        "corpus_mb": corpus_mb,
        "blocks_per_pass": blocks_per_pass,
        "micro_batch": first,
        "passes": first * batch_size / blocks_per_pass,
        "pass": state["pass"] if state else None,
        "shard": position[0] if position else None,
        "texts_skipped_in_shard": position[1] if position else None,
        "seconds": statistics.median(seconds),
        "seconds_repeats": seconds,
    }


def interleaved_timings(train: Any, tokenizer: Any, args: argparse.Namespace, points: list[tuple[int, dict]]) -> list:
    """time_to_first_batch at each (micro-batch, reader states), in --resume_repeats rounds over all the points, each
    round starting at another: a drift of the machine's speed spreads over them instead of following j."""
    seconds: list[list[float]] = [[] for _ in points]
    for repeat in range(args.resume_repeats):
        for index in [(repeat + k) % len(points) for k in range(len(points))]:
            first, states = points[index]
            seconds[index] += time_to_first_batch(train, tokenizer, args.batch_size, first, states, 1)
    return seconds


def measure_resume(args: argparse.Namespace, corpora: Corpora, keep: Callable[[list[dict]], None]) -> list[dict]:
    """The resume rows; `keep` is given the rows so far after each source (its resume points are timed together)."""
    rows = []
    for folder, megabytes in ((corpora.prepared, args.corpus_mb), (corpora.large_prepared, args.large_mb)):
        train, tokenizer = corpora.load(blocks_dir=folder)
        firsts = [round(passes * len(train) / args.batch_size) for passes in args.resume_passes]
        timings = interleaved_timings(train, tokenizer, args, [(first, {}) for first in firsts])
        for first, seconds in zip(firsts, timings, strict=True):
            rows.append(resume_row("prepared", megabytes, len(train), first, args.batch_size, seconds))
            print(f"resume prepared {megabytes:g} MB at j={first}: {rows[-1]['seconds']:.3f} s", flush=True)
        keep(rows)
    # the stream: read once to past the last resume point, keeping the tracker's reader states at every micro-batch
    train, tokenizer = corpora.load(corpora.streams["txt"])
    tracker = PositionTracker(Readers(), None, args.batch_size)
    snapshots = [dict(tracker.reader_states)]
    start = time.perf_counter()
    with tokenizer_threads_for(0):
        for item in TrainingBlocks(train, batch_size=args.batch_size, seed=SEED):
            tracker.consumed(item["position"])
            snapshots.append(dict(tracker.reader_states))
            state = tracker.reader_states[0]
            if state["pass"] >= 1 and tracker.passes() >= max(args.resume_passes):
                break
    read_seconds = time.perf_counter() - start
    blocks_per_pass = tracker.reader_states[0]["blocks_per_pass"]
    print(
        f"read {len(snapshots) - 1} micro-batches of the stream ({read_seconds:.0f} s) to take its states", flush=True
    )
    points = []
    for passes in args.resume_passes:
        first = min(round(passes * blocks_per_pass / args.batch_size), len(snapshots) - 1)
        points.append((first, snapshots[first]))
    with tokenizer_threads_for(0):
        timings = interleaved_timings(train, tokenizer, args, points)
    for (first, states), seconds in zip(points, timings, strict=True):
        rows.append(
            resume_row("stream", args.corpus_mb, blocks_per_pass, first, args.batch_size, seconds, states.get(0))
        )
        print(f"resume stream at j={first}: {rows[-1]['seconds']:.3f} s", flush=True)
    keep(rows)
    return rows


def read_through_rate(files: list[Path]) -> dict:
    """Texts/s and MB/s at which the stream's source yields the texts of its first file untokenised: the rate at
    which datasets reads through a shard to a saved position inside it."""
    start, texts = time.perf_counter(), 0
    for _ in stream_files([str(files[0])], "text", "text"):
        texts += 1
    seconds = time.perf_counter() - start
    return {"texts_per_s": texts / seconds, "mb_per_s": files[0].stat().st_size / 1e6 / seconds, "texts": texts}


def resume_summary(rows: list[dict], read_rate: dict | None, shard_mb: float) -> list[dict]:
    """Per source and size: the fastest and slowest resume and their ratio (flat: near 1); for the stream also its
    median at a shard's start (nothing to read through) and inside one, and the time to read through a whole shard
    of the large corpus at the measured rate (the worst case of a resume there)."""
    summary = []
    for key in dict.fromkeys((row["source"], row["corpus_mb"]) for row in rows):
        group = [row for row in rows if (row["source"], row["corpus_mb"]) == key]
        times = [row["seconds"] for row in group]
        entry = {"source": key[0], "corpus_mb": key[1], "fastest_s": min(times), "slowest_s": max(times)}
        entry["slowest_over_fastest"] = max(times) / min(times)
        if key[0] == "stream":
            at_start = [row["seconds"] for row in group if not row["texts_skipped_in_shard"]]
            inside = [row for row in group if row["texts_skipped_in_shard"]]
            entry["median_at_shard_start_s"] = statistics.median(at_start) if at_start else None
            entry["median_inside_shard_s"] = statistics.median(row["seconds"] for row in inside) if inside else None
            if len({row["texts_skipped_in_shard"] for row in inside}) > 1:
                fit = statistics.linear_regression(
                    [row["texts_skipped_in_shard"] for row in inside], [row["seconds"] for row in inside]
                )
                entry["seconds_per_text_skipped_inside"] = fit.slope
            if read_rate:
                entry["read_through"] = read_rate
                entry["large_shard_mb"] = shard_mb
                entry["large_shard_read_through_s"] = shard_mb / read_rate["mb_per_s"]
        summary.append(entry)
    return summary
