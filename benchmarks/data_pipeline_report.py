"""The reporting half of benchmarks/data_pipeline.py: OUTPUT.md from the record it measured, one section per
measurement (see data_pipeline.py's docstring)."""

from data_pipeline_cases import MIB, MLM_PROBABILITY  # benchmarks/data_pipeline_cases.py
from report import header, markdown_table  # benchmarks/report.py

TEXT = "---"  # every column of these tables left-aligned


def mib(value: float) -> str:
    return f"{value / MIB:,.0f}"


def table(titles: list[str], rows: list[list[str]]) -> str:
    return markdown_table(titles, rows, TEXT)


def verdict(row: dict, met: str) -> str:
    return f"{row['target']}: {'met' if row[met] else 'missed'}"


def format_report(record: dict) -> str:
    settings = record["settings"]
    parts = [
        "# Data pipeline: delivery, memory, resume and preparation",
        header(record, [f"OMP_NUM_THREADS={record['omp_num_threads']}"]),
        f"Corpus: the embedded corpus's lines repeated to {settings['corpus_mb']:g} MB of text in {settings['files']} "
        f"files (each starting at another line), as .txt, .jsonl and .parquet, and as one .txt file (`txt-1file`); "
        f"blocks of {settings['block_length']} tokens, micro-batches of {settings['batch_size']} blocks, the WordPiece "
        f"tokenizer trained on the embedded corpus (vocabulary {record['vocab_size']}).",
    ]
    if not record.get("complete", True):  # a run stopped before its end (a deadline): the cases it measured
        parts.append("**Not complete**: the run stopped before its end; below, the cases it measured.")
    if record["preparation"]:
        parts += preparation_section(record["preparation"])
    if record["memory"]:
        parts += memory_section(record, settings)
    if record["delivery"]:
        parts += delivery_section(record, settings)
    if record["resume"]:
        parts += resume_section(record, settings)
    return "\n\n".join(parts) + "\n"


def preparation_section(rows: list[dict]) -> list[str]:
    parts = [
        "## Preparation (symbert-prepare-data)",
        "training.data.prepared.prepare, timed without the command's start-up and imports, in a fresh forked process "
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
                for row in rows
            ],
        ),
    ]
    for row in rows:
        if row["manifest_problem"] is not None:
            parts.append(
                f"**{row['folder']}**: the manifest names {row['train_blocks_in_manifest']:,} training blocks, the "
                f"shards hold {row['train_blocks_written']:,}; read_manifest says: {row['manifest_problem']}"
            )
    return parts


def memory_section(record: dict, settings: dict) -> list[str]:
    return [
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
                [row["source"], f"{row['peak_ratio']:.3f}", verdict(row, "meets_target")]
                + [f"{row['peak_anon_ratio']:.3f}", verdict(row, "anon_meets_target")]
                for row in record["memory_ratios"]
            ],
        ),
    ]


def delivery_section(record: dict, settings: dict) -> list[str]:
    return [
        "## Delivered tokens/s (what the Trainer consumes)",
        f"TrainingBlocks + DataLoader(batch_size=None, prefetch_factor 2, in order) + BatchCollator("
        f"ResumableMLMCollator, mlm {MLM_PROBABILITY}), one process; wall clock over {settings['batches']} "
        f"micro-batches per reader after {settings['warmup']} per reader (the first included), median of "
        f"{settings['rounds']} round(s), each case in a fresh process (range: min–max). Per reader: over the workers "
        "(the process itself with 0). `tokenizer threads`: each worker's (0 workers: the library's default). `vs 0 "
        "workers`: against the same format's 0 workers, measured in the same rounds. `first batch`: from creating "
        "the DataLoader's iterator to the first micro-batch (workers' start-up included).",
        table(
            [
                "format",
                "files",
                "workers",
                "tokenizer threads",
                "tokens/s",
                "range",
                "vs 0 workers",
                "tokens/s per reader",
                "first batch s",
            ],
            [
                [
                    row["format"],
                    "" if row["files"] is None else str(row["files"]),
                    str(row["workers"]),
                    str(row.get("tokenizer_threads", "")),
                    f"{row['tokens_per_s']:,.0f}",
                    f"{min(row['tokens_per_s_rounds']):,.0f}–{max(row['tokens_per_s_rounds']):,.0f}",
                    "" if row.get("vs_0_workers") is None else f"{row['vs_0_workers']:.2f}",
                    f"{row['tokens_per_s_per_reader']:,.0f}",
                    f"{row['first_batch_s']:.2f}",
                ]
                for row in record["delivery"]
            ],
        ),  # fmt: skip
    ]


def resume_section(record: dict, settings: dict) -> list[str]:
    parts = [
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
    return parts
