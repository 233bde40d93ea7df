"""Speed, memory and resume time of the pre-training data path: what SymBertPretrainingTrainer's DataLoader delivers
(TrainingBlocks + DataLoader + BatchCollator around ResumableMLMCollator, mlm 0.15), and symbert-prepare-data.

    OMP_NUM_THREADS=1 python benchmarks/data_pipeline.py
    OMP_NUM_THREADS=1 python benchmarks/data_pipeline.py --quick --output /tmp/data-pipeline

From the embedded corpus (training/corpus/english_prose.txt.gz), its lines repeated to --corpus_mb MB of text, each
of --files files starting at another line, it writes the same texts as .txt, .jsonl and .parquet files, and one .txt
file of the same size (`txt, 1 file`), and prepares them once with symbert-prepare-data. All tokenising uses the
WordPiece tokenizer trained on the embedded corpus (bert-base-uncased cannot be downloaded here). Then, in order:

1. preparation: tokens/s of training.prepared.prepare (what symbert-prepare-data runs, timed without the command's
   Python start-up and imports) on the .txt files with --num_proc 1 and 2, read whole and with --streaming true, each
   in a fresh process (forked) with an empty datasets cache, so that no run reuses another's Arrow files;
2. memory: the peak resident memory (RSS, summed over the process and its dataloader workers, sampled every 10 ms)
   of reading the first --memory_batches micro-batches with --memory_workers workers, from a stream and from prepared
   blocks of --corpus_mb MB and of --large_mb MB; the large stream is the corpus repeated, the large prepared folder
   random token ids written straight in the manifest's format (a real preparation's tokenizer and held-out blocks).
   Each case runs in its own forked process, so none inherits another's memory;
3. delivery: tokens/s delivered by the training DataLoader per format and worker count, wall clock over --batches
   micro-batches after --warmup, --rounds times (median, and the range), and per reader (workers, or the process
   itself with 0 workers); dataloader workers are forked and the tokenizer runs single-threaded in them
   (TOKENIZERS_PARALLELISM=false), as symbert-pretrain sets it;
4. resume: the time from constructing TrainingBlocks at micro-batch j (for the stream, with the reader state a
   PositionTracker held after reading the first j micro-batches) to the first collated micro-batch, 0 workers, for j
   at --resume_passes passes over the data, from the prepared blocks of both sizes and from the .txt stream.

Writes OUTPUT.md and OUTPUT.json (default benchmarks/results/data-pipeline) with the command, the machine, the load
average, the library versions, the date and the wall time. The files it generates are removed at the end.
"""

import argparse
import contextlib
import datetime
import gzip
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import tempfile
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
import transformers
from machine import describe_machine  # benchmarks/machine.py

from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically
from symbert.training import data as data_module
from symbert.training import prepared
from symbert.training.arguments import check_output_dir, parse_arguments
from symbert.training.blocks import ERROR_KEY, PositionTracker, Readers, TrainingBlocks
from symbert.training.pretrain import BatchCollator

STREAM_FORMATS = {"txt": ".txt", "txt-1file": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}
FORMATS = (*STREAM_FORMATS, "prepared")
MLM_PROBABILITY = 0.15
MEMORY_TARGET = 0.10  # peak memory of the large corpus within 10% of the small one's
SEED = 42
EVAL_BLOCKS = 16
PARQUET_ROW_GROUP = 2048
MIB = 2**20
# the settings --quick replaces (any given on the command line wins); the rest keep their defaults
DEFAULTS = {
    "corpus_mb": 20.0,
    "large_mb": 2048.0,
    "warmup": 5,
    "batches": 60,
    "rounds": 3,
    "memory_batches": 100,
    "workers": [0, 1, 2],
    "resume_passes": [0.0, 0.1, 0.2, 0.45, 0.5, 1.0, 2.5],
    "resume_repeats": 3,
}
QUICK = {
    "corpus_mb": 0.25,
    "large_mb": 2.5,
    "warmup": 1,
    "batches": 2,
    "rounds": 1,
    "memory_batches": 2,
    "workers": [0, 2],
    "resume_passes": [0.0, 0.5, 1.5],
    "resume_repeats": 1,
}


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds: " + json.dumps(QUICK))
    parser.add_argument("--output", default="benchmarks/results/data-pipeline", help="results path without suffix")
    parser.add_argument("--workdir", default=None, help="where the corpora are generated (default: a temporary folder)")
    parser.add_argument("--corpus_mb", type=float, default=None, help=f"MB of text (default {DEFAULTS['corpus_mb']})")
    parser.add_argument(
        "--large_mb",
        type=float,
        default=None,
        help=f"MB of the large corpora of the memory cases ({DEFAULTS['large_mb']})",
    )
    parser.add_argument("--files", type=int, default=4, help="files (shards) of each streamed format but `txt-1file`")
    parser.add_argument("--block_length", type=int, default=128, help="tokens per block (--max_seq_length)")
    parser.add_argument("--batch_size", type=int, default=32, help="blocks per micro-batch")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS, help="delivery cases")
    parser.add_argument(
        "--workers", nargs="+", type=int, default=None, help=f"dataloader workers ({DEFAULTS['workers']})"
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help=f"micro-batches before the clock starts ({DEFAULTS['warmup']})"
    )
    parser.add_argument("--batches", type=int, default=None, help=f"micro-batches timed ({DEFAULTS['batches']})")
    parser.add_argument("--rounds", type=int, default=None, help=f"timed rounds per case ({DEFAULTS['rounds']})")
    parser.add_argument(
        "--memory_batches",
        type=int,
        default=None,
        help=f"micro-batches read per memory case ({DEFAULTS['memory_batches']})",
    )
    parser.add_argument("--memory_workers", type=int, default=2, help="dataloader workers of the memory cases")
    parser.add_argument(
        "--resume_passes",
        nargs="+",
        type=float,
        default=None,
        help=f"resume points in passes ({DEFAULTS['resume_passes']})",
    )
    parser.add_argument(
        "--resume_repeats", type=int, default=None, help=f"timings per resume point ({DEFAULTS['resume_repeats']})"
    )
    parser.add_argument(
        "--num_proc", nargs="+", type=int, default=[1, 2], help="symbert-prepare-data --num_proc values"
    )
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for name in ("files", "block_length", "batch_size", "batches", "rounds", "memory_batches", "resume_repeats"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)} must be at least 1.")
    if args.warmup < 0 or args.memory_workers < 0:
        raise UserError(f"--warmup={args.warmup} and --memory_workers={args.memory_workers} must not be negative.")
    if not 0 < args.corpus_mb < args.large_mb:
        raise UserError(f"--corpus_mb={args.corpus_mb} must be above 0 and below --large_mb={args.large_mb}.")
    if not 8 <= args.block_length <= 512:
        raise UserError(f"--block_length={args.block_length} must be in [8, 512].")
    if bad := [w for w in args.workers if w < 0]:
        raise UserError(f"--workers has {bad[0]}; worker counts must not be negative.")
    if bad := [n for n in args.num_proc if n < 1]:
        raise UserError(f"--num_proc has {bad[0]}; it must be at least 1.")
    if bad := [p for p in args.resume_passes if not 0 <= p <= 100]:
        raise UserError(f"--resume_passes has {bad[0]}; resume points must be in [0, 100] passes.")
    check_output_dir(Path(args.output).parent, "output")  # now, not after the measurements
    if args.workdir is not None:
        check_output_dir(args.workdir, "workdir")
    if args.workdir is not None and Path(args.workdir).is_dir() and any(Path(args.workdir).iterdir()):
        raise UserError(
            f"--workdir {args.workdir} is not empty; name a new or empty folder (it is removed at the end)."
        )
    args.workers = list(dict.fromkeys(args.workers))
    args.formats = [kind for kind in FORMATS if kind in args.formats]
    args.resume_passes = sorted(set(args.resume_passes))
    args.num_proc = list(dict.fromkeys(args.num_proc))
    args.output = Path(args.output)
    return args


# ---------------------------------------------------------------------------------------------------------- corpora


def corpus_lines() -> list[str]:
    """The embedded corpus's non-blank lines (one text each)."""
    with gzip.open(data_module.EMBEDDED_CORPUS, "rt", encoding="utf-8") as file:
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
    chunk = np.random.default_rng(0).integers(5, vocab, size=(chunk_blocks, length)).astype(dtype).tobytes()
    folder.mkdir(parents=True)
    blocks_per_shard = max(1, total_bytes // (length * dtype.itemsize) // shards)
    manifest_shards = []
    for index in range(shards):
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


def training_loader(train: Any, tokenizer: Any, batch_size: int, workers: int, first: int = 0, states=None):
    """The DataLoader of SymBertPretrainingTrainer.get_train_dataloader, on one process."""
    blocks = TrainingBlocks(
        train,
        batch_size=batch_size,
        seed=SEED,
        readers=Readers(1, 0, workers),
        first_micro_batch=first,
        reader_states=states or {},
    )
    collator = data_module.ResumableMLMCollator(tokenizer=tokenizer, mlm_probability=MLM_PROBABILITY, mask_seed=SEED)
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


def measure_preparation(args: argparse.Namespace, corpora: Corpora) -> list[dict]:
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


def measure_memory(args: argparse.Namespace, corpora: Corpora) -> tuple[list[dict], list[dict]]:
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


def measure_delivery_once(train: Any, tokenizer: Any, workers: int, args: argparse.Namespace) -> dict:
    with tokenizer_threads_for(workers):
        start = time.perf_counter()
        iterator = iter(training_loader(train, tokenizer, args.batch_size, workers))
        checked(next(iterator))
        first = time.perf_counter() - start
        for _ in range(max(args.warmup - 1, 0)):
            checked(next(iterator))
        tokens, start = 0, time.perf_counter()
        for _ in range(args.batches):
            tokens += checked(next(iterator))["input_ids"].numel()
        seconds = time.perf_counter() - start
        del iterator
    return {"first_batch_s": first, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def measure_delivery(args: argparse.Namespace, corpora: Corpora) -> list[dict]:
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
            timings.setdefault((kind, workers), []).append(measure_delivery_once(train, tokenizer, workers, args))
    rows = []
    for kind in args.formats:
        files = sources[kind][1]
        for workers in args.workers:
            runs = timings[(kind, workers)]
            speed = statistics.median(run["tokens_per_s"] for run in runs)
            rows.append(
                {
                    "format": kind,
                    "files": len(files) if files else None,
                    "workers": workers,
                    "tokens_per_s": speed,
                    "tokens_per_s_per_reader": speed / max(workers, 1),
                    "tokens_per_s_rounds": [run["tokens_per_s"] for run in runs],
                    "first_batch_s": statistics.median(run["first_batch_s"] for run in runs),
                    "batches_timed": args.batches,
                    "tokens_timed": runs[0]["tokens"],
                }
            )
            print(f"delivery {kind} workers {workers}: {speed:,.0f} tokens/s", flush=True)
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


def measure_resume(args: argparse.Namespace, corpora: Corpora) -> list[dict]:
    rows = []
    for folder, megabytes in ((corpora.prepared, args.corpus_mb), (corpora.large_prepared, args.large_mb)):
        train, tokenizer = corpora.load(blocks_dir=folder)
        firsts = [round(passes * len(train) / args.batch_size) for passes in args.resume_passes]
        timings = interleaved_timings(train, tokenizer, args, [(first, {}) for first in firsts])
        for first, seconds in zip(firsts, timings, strict=True):
            rows.append(resume_row("prepared", megabytes, len(train), first, args.batch_size, seconds))
            print(f"resume prepared {megabytes:g} MB at j={first}: {rows[-1]['seconds']:.3f} s", flush=True)
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
    return rows


def read_through_rate(files: list[Path]) -> dict:
    """Texts/s and MB/s at which the stream's source yields the texts of its first file untokenised: the rate at
    which datasets reads through a shard to a saved position inside it."""
    start, texts = time.perf_counter(), 0
    for _ in data_module.stream_files([str(files[0])], "text", "text"):
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


# ---------------------------------------------------------------------------------------------------------- reporting


def mib(value: float) -> str:
    return f"{value / MIB:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def format_report(record: dict) -> str:
    settings = record["settings"]
    parts = [
        "# Data pipeline: delivery, memory, resume and preparation",
        f"Command: `{record['command']}`",
        f"Code: commit {record['commit']}. Machine: {record['machine']}; transformers {record['transformers']}; datasets {record['datasets']}; "
        f"{record['python']}. Date {record['date']}. Wall time {record['wall_seconds'] / 60:.1f} min. Load average "
        f"(1, 5, 15 min): {tuple(round(x, 2) for x in record['load_average_start'])} at the start, "
        f"{tuple(round(x, 2) for x in record['load_average_end'])} at the end. OMP_NUM_THREADS="
        f"{record['omp_num_threads']}, {record['torch_threads']} torch thread(s).",
        f"Corpus: the embedded corpus's lines repeated to {settings['corpus_mb']:g} MB of text in {settings['files']} "
        f"files (each starting at another line), as .txt, .jsonl and .parquet, and as one .txt file (`txt-1file`); "
        f"blocks of {settings['block_length']} tokens, micro-batches of {settings['batch_size']} blocks, the WordPiece "
        f"tokenizer trained on the embedded corpus (vocabulary {record['vocab_size']}).",
    ]
    if record["preparation"]:
        parts += [
            "## Preparation (symbert-prepare-data)",
            "training.prepared.prepare, timed without the command's start-up and imports, in a fresh forked process "
            "with an empty datasets cache; tokens = the blocks written (training and held-out) × block length.",
            table(
                ["input", "read", "num_proc", "tokens", "seconds", "tokens/s", "tokens/s per process", "manifest"],
                [
                    [
                        row["input"],
                        "streamed" if row["streaming"] else "whole",
                        str(row["num_proc"]),
                        f"{row['tokens']:,}",
                        f"{row['seconds']:.1f}",
                        f"{row['tokens_per_s']:,.0f}",
                        f"{row['tokens_per_s_per_process']:,.0f}",
                        "ok" if row["manifest_problem"] is None else "**refused by --blocks_dir** (below)",
                    ]
                    for row in record["preparation"]
                ],
            ),
        ]
        for row in record["preparation"]:
            if row["manifest_problem"] is not None:
                parts.append(
                    f"**{row['folder']}**: the manifest names {row['train_blocks_in_manifest']:,} training blocks, the "
                    f"shards hold {row['train_blocks_written']:,}; read_manifest says: {row['manifest_problem']}"
                )
    parts += [
        "## Peak memory of reading the first micro-batches",
        f"Resident memory summed over the process and its {settings['memory_workers']} dataloader worker(s) (pages "
        "shared between them counted in each), from /proc/PID/status every 10 ms, in a process forked for the case: "
        "`RSS` all of it (VmRSS), `anonymous` its heap and arrays (RssAnon), `file-backed` mapped files (RssFile: "
        "libraries and memory-mapped shards, page cache the kernel can take back). `after setup`: when the training "
        "blocks were loaded, before the DataLoader. The large stream is the corpus repeated; the large prepared "
        "folder random token ids in the manifest's format.",
        table(
            [
                "source",
                "corpus MB",
                "on disk MB",
                "micro-batches",
                "RSS after setup MiB",
                "peak RSS MiB",
                "peak anonymous MiB",
                "peak file-backed MiB",
            ],
            [
                [
                    row["source"],
                    f"{row['corpus_mb']:g}",
                    f"{row['bytes_on_disk'] / 1e6:,.1f}",
                    str(row["batches"]),
                    mib(row["rss_ready_bytes"]),
                    mib(row["peak_rss_bytes"]),
                    mib(row["peak_anon_bytes"]),
                    mib(row["peak_file_bytes"]),
                ]
                for row in record["memory"]
            ],
        ),
        table(
            ["source", "peak RSS ratio (large / small)", "target", "peak anonymous ratio", "target"],
            [
                [
                    row["source"],
                    f"{row['peak_ratio']:.3f}",
                    f"{row['target']}: {'met' if row['meets_target'] else 'missed'}",
                    f"{row['peak_anon_ratio']:.3f}",
                    f"{row['target']}: {'met' if row['anon_meets_target'] else 'missed'}",
                ]
                for row in record["memory_ratios"]
            ],
        ),
        "## Delivered tokens/s (what the Trainer consumes)",
        f"TrainingBlocks + DataLoader(batch_size=None, prefetch_factor 2, in order) + BatchCollator("
        f"ResumableMLMCollator, mlm {MLM_PROBABILITY}), one process; wall clock over {settings['batches']} "
        f"micro-batches after {settings['warmup']} (the first included), median of {settings['rounds']} round(s) with "
        "a fresh DataLoader each (range: min–max). Per reader: over the workers (the process itself with 0). `first "
        "batch`: from creating the DataLoader's iterator to the first micro-batch (workers' start-up included).",
        table(
            ["format", "files", "workers", "tokens/s", "range", "tokens/s per reader", "first batch s"],
            [
                [
                    row["format"],
                    "" if row["files"] is None else str(row["files"]),
                    str(row["workers"]),
                    f"{row['tokens_per_s']:,.0f}",
                    f"{min(row['tokens_per_s_rounds']):,.0f}–{max(row['tokens_per_s_rounds']):,.0f}",
                    f"{row['tokens_per_s_per_reader']:,.0f}",
                    f"{row['first_batch_s']:.2f}",
                ]
                for row in record["delivery"]
            ],
        ),
        "## Resume: time to the first micro-batch at micro-batch j",
        "From constructing TrainingBlocks(first_micro_batch=j) (a stream: with the reader state of a PositionTracker "
        "that followed a first read of j micro-batches) to the first collated micro-batch, DataLoader with 0 "
        f"workers; median of {settings['resume_repeats']} (in rounds over all j, each round starting at another j). `shard, texts skipped`: where datasets resumes the stream, "
        "the texts of its shard it reads through to get there (it skips inside a file by reading it).",
        table(
            ["source", "corpus MB", "blocks per pass", "j", "passes", "shard, texts skipped", "seconds", "range"],
            [
                [
                    row["source"],
                    f"{row['corpus_mb']:g}",
                    f"{row['blocks_per_pass']:,}",
                    f"{row['micro_batch']:,}",
                    f"{row['passes']:.2f}",
                    "" if row["shard"] is None else f"{row['shard']}, {row['texts_skipped_in_shard']:,}",
                    f"{row['seconds']:.3f}",
                    f"{min(row['seconds_repeats']):.3f}–{max(row['seconds_repeats']):.3f}",
                ]
                for row in record["resume"]
            ],
        ),
    ]
    for entry in record["resume_summary"]:
        line = (
            f"{entry['source']} {entry['corpus_mb']:g} MB: {entry['fastest_s']:.3f} to {entry['slowest_s']:.3f} s, "
            f"slowest / fastest {entry['slowest_over_fastest']:.2f}"
        )
        if entry["source"] == "stream":
            for name, where in (("median_at_shard_start_s", "at a shard's start"), ("median_inside_shard_s", "inside")):
                line += f"; median {where}: " + ("none" if entry[name] is None else f"{entry[name]:.3f} s")
            if "seconds_per_text_skipped_inside" in entry:
                line += f" (least squares inside: {entry['seconds_per_text_skipped_inside'] * 1e3:+.4f} ms per text)"
            if "read_through" in entry:
                rate = entry["read_through"]
                line += (
                    f". Its source reads a file's texts (untokenised) at {rate['texts_per_s']:,.0f} texts/s, "
                    f"{rate['mb_per_s']:.1f} MB/s: reading through a whole {entry['large_shard_mb']:g} MB shard of "
                    f"the {settings['large_mb']:g} MB corpus, the worst case of a resume there, would take "
                    f"{entry['large_shard_read_through_s']:.0f} s"
                )
        parts.append(f"- {line}.")
    return "\n\n".join(parts) + "\n"


def git_commit() -> str | None:
    """The repository's commit, with `+changes` when training/ differs from it: the code these numbers measured."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "training", "modeling"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+changes" if changed else "")


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


# --------------------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


def run(argv: list[str]) -> None:
    args = parse_command_line(argv)
    transformers.logging.set_verbosity_error()  # the tokenizer's "longer than 512" notes: blocks are cut after it
    datasets.disable_progress_bars()
    load_before, date = os.getloadavg(), datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    start = time.perf_counter()
    if args.workdir is None:
        root = Path(tempfile.mkdtemp(prefix="symbert-data-pipeline-"))
    else:
        root = Path(args.workdir)
        root.mkdir(parents=True, exist_ok=True)
    needed = 2.2 * args.large_mb * 1e6 + 10 * args.corpus_mb * 1e6
    if shutil.disk_usage(root).free < needed:
        raise UserError(
            f"{root} has {shutil.disk_usage(root).free / 1e9:.1f} GB free; this run writes {needed / 1e9:.1f} GB."
        )
    try:
        record = measure_all(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    wall_seconds = time.perf_counter() - start
    record = {
        "command": shlex.join(["python", "benchmarks/data_pipeline.py", *argv]),
        "commit": git_commit(),
        "machine": describe_machine(),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "datasets": datasets.__version__,
        "python": f"Python {platform.python_version()}",
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "torch_threads": torch.get_num_threads(),
        "date": date,
        "wall_seconds": wall_seconds,
        "load_average_start": load_before,
        "load_average_end": os.getloadavg(),
        **record,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(args.output.with_suffix(".md"), lambda file: file.write(format_report(record)))
    write_atomically(args.output.with_suffix(".json"), lambda file: json.dump(record, file, indent=2))
    print(f"Wall time {wall_seconds / 60:.1f} min. Results in {args.output}.md and .json")


def measure_all(args: argparse.Namespace, root: Path) -> dict:
    start = time.perf_counter()
    corpora = Corpora(args, root)
    tokenizer = data_module.load_tokenizer(parse_arguments(["--output_dir", str(root / "unused")])[2])
    tokenizer.save_pretrained(corpora.tokenizer_dir)
    lines = corpus_lines()
    total = int(args.corpus_mb * 1e6)
    for kind, suffix in STREAM_FORMATS.items():
        if kind in args.formats or kind == "txt":  # .txt: the preparation's, the memory and resume cases' input
            files = 1 if kind == "txt-1file" else args.files
            corpora.streams[kind] = write_text_files(root / "corpus" / kind, lines, total, files, suffix)
    seconds = {"corpora": time.perf_counter() - start}
    preparation = timed(seconds, "preparation", measure_preparation, args, corpora)
    corpora.prepared = ensure_prepared(args, corpora, preparation)
    start = time.perf_counter()
    corpora.large_stream = write_large_text_files(root / "large-stream", lines, int(args.large_mb * 1e6), args.files)
    write_synthetic_prepared(root / "large-prepared", corpora.prepared, int(args.large_mb * 1e6))
    corpora.large_prepared = root / "large-prepared"
    seconds["large_corpora"] = time.perf_counter() - start
    memory, memory_ratios = timed(seconds, "memory", measure_memory, args, corpora)
    for path in corpora.large_stream:  # the large text is no longer needed
        path.unlink()
    delivery = timed(seconds, "delivery", measure_delivery, args, corpora)
    resume = timed(seconds, "resume", measure_resume, args, corpora)
    read_rate = read_through_rate(corpora.streams["txt"])
    settings = {
        name: getattr(args, name)
        for name in (
            "quick",
            "corpus_mb",
            "large_mb",
            "files",
            "block_length",
            "batch_size",
            "formats",
            "workers",
            "warmup",
            "batches",
            "rounds",
            "memory_batches",
            "memory_workers",
            "resume_passes",
            "resume_repeats",
            "num_proc",
        )
    }
    return {
        "settings": settings,
        "vocab_size": len(tokenizer),
        "mlm_probability": MLM_PROBABILITY,
        "preparation": preparation,
        "memory": memory,
        "memory_ratios": memory_ratios,
        "delivery": delivery,
        "resume": resume,
        "resume_summary": resume_summary(resume, read_rate, args.large_mb / args.files),
        "section_seconds": seconds,
    }


def timed(seconds: dict, name: str, function: Callable[..., Any], *arguments: Any) -> Any:
    start = time.perf_counter()
    result = function(*arguments)
    seconds[name] = time.perf_counter() - start
    return result


if __name__ == "__main__":
    main()
