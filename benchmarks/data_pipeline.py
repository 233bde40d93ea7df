"""Speed, memory and resume time of the pre-training data path: what SymBertPretrainingTrainer's DataLoader delivers
(TrainingBlocks + DataLoader + BatchCollator around ResumableMLMCollator, mlm 0.15), and symbert-prepare-data.

    OMP_NUM_THREADS=1 python benchmarks/data_pipeline.py
    OMP_NUM_THREADS=1 python benchmarks/data_pipeline.py --quick --output /tmp/data-pipeline

From the embedded corpus (training/corpus/english_prose.txt.gz), its lines repeated to --corpus_mb MB of text, each
of --files files starting at another line, it writes the same texts as .txt, .jsonl and .parquet files, and one .txt
file of the same size (`txt, 1 file`), and prepares them once with symbert-prepare-data. All tokenising uses the
WordPiece tokenizer trained on the embedded corpus (bert-base-uncased cannot be downloaded here). Then, in order:

1. preparation: tokens/s of training.data.prepared.prepare (what symbert-prepare-data runs, timed without the command's
   Python start-up and imports) on the .txt files with --num_proc 1 and 2, read whole and with --streaming true, each
   in a fresh process (forked) with an empty datasets cache, so that no run reuses another's Arrow files;
2. memory: the peak resident memory (RSS, summed over the process and its dataloader workers, sampled every 10 ms)
   of reading the first --memory_batches micro-batches with --memory_workers workers, from a stream and from prepared
   blocks of --corpus_mb MB and of --large_mb MB; the large stream is the corpus repeated, the large prepared folder
   random token ids written straight in the manifest's format (a real preparation's tokenizer and held-out blocks).
   Each case runs in its own forked process, so none inherits another's memory;
3. delivery: tokens/s delivered by the training DataLoader per format and worker count, wall clock over --batches
   micro-batches per reader after --warmup per reader (so that every worker's start is before the clock), --rounds
   times (median, and the range), per reader (workers, or the process itself with 0 workers), and against 0 workers
   of the same format in the same rounds; each case in a forked process. As symbert-pretrain has it, this process
   never tokenises in parallel (TOKENIZERS_PARALLELISM=false from its start, unless set already), so that 0 workers
   tokenise with the library's default (threads over every core) and each of N forked workers with cores/N threads;
4. resume: the time from constructing TrainingBlocks at micro-batch j (for the stream, with the reader state a
   PositionTracker held after reading the first j micro-batches) to the first collated micro-batch, 0 workers, for j
   at --resume_passes passes over the data, from the prepared blocks of both sizes and from the .txt stream.

Writes OUTPUT.md and OUTPUT.json (default benchmarks/results/data-pipeline/data-pipeline) with the command, the machine, the load
average, the library versions, the date and the wall time. The files it generates are removed at the end. This file is
the command line; the corpora and the measurements are in data_pipeline_cases.py, the report in data_pipeline_report.py.
"""

import argparse
import json
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import data_pipeline_cases  # benchmarks/data_pipeline_cases.py
import datasets
import transformers
from data_pipeline_cases import (  # benchmarks/data_pipeline_cases.py
    FORMATS,
    MLM_PROBABILITY,
    STREAM_FORMATS,
    Corpora,
    corpus_lines,
    ensure_prepared,
    measure_delivery,
    measure_memory,
    measure_preparation,
    measure_resume,
    read_through_rate,
    resume_summary,
    write_large_text_files,
    write_synthetic_prepared,
    write_text_files,
)
from data_pipeline_report import format_report  # benchmarks/data_pipeline_report.py
from machine import cpu_model  # benchmarks/machine.py
from report import Stopwatch, write_report  # benchmarks/report.py

from symbert.cli import UserError, command_parser, run_command
from symbert.training.arguments import check_output_dir, parse_arguments
from symbert.training.data import loading as data_module

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
    parser.add_argument(
        "--output", default="benchmarks/results/data-pipeline/data-pipeline", help="results path without suffix"
    )
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


# --------------------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


def run(argv: list[str]) -> None:
    args = parse_command_line(argv)
    # before anything tokenises, as symbert-pretrain: a thread pool used here would be broken in the processes forked
    # from here, so this one tokenises on one thread and they get the threads (data_pipeline_cases.in_forked_process)
    args.tokenizer_threads_allowed = "TOKENIZERS_PARALLELISM" not in os.environ
    if not args.tokenizer_threads_allowed:
        measure(args, argv)
        return
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    data_pipeline_cases.THREADS_LEFT_TO_FORKS = True
    try:
        measure(args, argv)
    finally:
        data_pipeline_cases.THREADS_LEFT_TO_FORKS = False
        os.environ.pop("TOKENIZERS_PARALLELISM", None)


def measure(args: argparse.Namespace, argv: list[str]) -> None:
    transformers.logging.set_verbosity_error()  # the tokenizer's "longer than 512" notes: blocks are cut after it
    datasets.disable_progress_bars()
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
    results = KeptResults(args, shlex.join(["python", "benchmarks/data_pipeline.py", *argv]))
    try:
        measure_all(args, root, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results.record["complete"] = True
    record = results.write()
    print(f"Wall time {record['wall_seconds'] / 60:.1f} min. Results in {args.output}.md and .json")


class KeptResults:
    """The record so far, written to OUTPUT.md and OUTPUT.json (each atomically) after every measured case, so that
    a run stopped before its end (a deadline) keeps the rows it measured; `complete` is false until the end."""

    def __init__(self, args: argparse.Namespace, command: str) -> None:
        self.args, self.command, self.stopwatch = args, command, Stopwatch()
        settings = {name: getattr(args, name) for name in SETTINGS}
        self.record = {"complete": False, "settings": settings, "vocab_size": None, "mlm_probability": MLM_PROBABILITY}
        self.record.update({section: [] for section in SECTIONS})
        self.record["section_seconds"] = {}

    def keep(self, section: str) -> Callable[[list[dict]], None]:
        """What a measurement calls with its rows so far: they replace the section's, and the record is written."""

        def kept(rows: list[dict]) -> None:
            self.record[section] = list(rows)
            self.write()

        return kept

    def write(self) -> dict:
        facts = self.stopwatch.facts(
            self.command,
            datasets=datasets.__version__,
            cpu_model=cpu_model(),
            cpu_cores=os.cpu_count(),
            omp_num_threads=os.environ.get("OMP_NUM_THREADS", "unset"),
        )
        record = {**facts, **self.record}
        write_report(self.args.output, format_report(record), record)
        return record


SETTINGS = (
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
SECTIONS = ("preparation", "memory", "memory_ratios", "delivery", "resume", "resume_summary")


def measure_all(args: argparse.Namespace, root: Path, results: KeptResults) -> None:
    """Every measurement, in order, into `results.record` (written after each case)."""
    record, seconds = results.record, results.record["section_seconds"]
    start = time.perf_counter()
    corpora = Corpora(args, root)
    tokenizer = data_module.load_tokenizer(parse_arguments(["--output_dir", str(root / "unused")])[2])
    tokenizer.save_pretrained(corpora.tokenizer_dir)
    record["vocab_size"] = len(tokenizer)
    lines = corpus_lines()
    total = int(args.corpus_mb * 1e6)
    for kind, suffix in STREAM_FORMATS.items():
        if kind in args.formats or kind == "txt":  # .txt: the preparation's, the memory and resume cases' input
            files = 1 if kind == "txt-1file" else args.files
            corpora.streams[kind] = write_text_files(root / "corpus" / kind, lines, total, files, suffix)
    seconds["corpora"] = time.perf_counter() - start
    preparation = timed(seconds, "preparation", measure_preparation, args, corpora, results.keep("preparation"))
    corpora.prepared = ensure_prepared(args, corpora, preparation)
    start = time.perf_counter()
    corpora.large_stream = write_large_text_files(root / "large-stream", lines, int(args.large_mb * 1e6), args.files)
    write_synthetic_prepared(root / "large-prepared", corpora.prepared, int(args.large_mb * 1e6))
    corpora.large_prepared = root / "large-prepared"
    seconds["large_corpora"] = time.perf_counter() - start
    _, record["memory_ratios"] = timed(seconds, "memory", measure_memory, args, corpora, results.keep("memory"))
    for path in corpora.large_stream:  # the large text is no longer needed
        path.unlink()
    timed(seconds, "delivery", measure_delivery, args, corpora, results.keep("delivery"))
    resume = timed(seconds, "resume", measure_resume, args, corpora, results.keep("resume"))
    read_rate = read_through_rate(corpora.streams["txt"])
    record["resume_summary"] = resume_summary(resume, read_rate, args.large_mb / args.files)


def timed(seconds: dict, name: str, function: Callable[..., Any], *arguments: Any) -> Any:
    start = time.perf_counter()
    result = function(*arguments)
    seconds[name] = time.perf_counter() - start
    return result


if __name__ == "__main__":
    main()
