"""A quick run of benchmarks/data_pipeline.py (tiny corpora): every case it measures is in its JSON, with real
numbers, and a bad argument is one line."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import data_pipeline  # noqa: E402
import gpu_check  # noqa: E402

from helpers.assertions import assert_one_line  # noqa: E402
from helpers.deadlines import stopped_once_written  # noqa: E402


@pytest.mark.heavy
def test_quick_run_records_every_case(tmp_path):
    output = tmp_path / "results" / "data-pipeline"
    argv = ["--quick", "--output", str(output), "--workdir", str(tmp_path / "work")]
    data_pipeline.main(argv)
    record = json.loads(output.with_suffix(".json").read_text())
    settings = record["settings"]
    assert record["complete"] is True
    assert record["command"] == "python benchmarks/data_pipeline.py " + " ".join(argv)
    assert record["wall_seconds"] > 0 and len(record["load_average_start"]) == 3 and record["cpu_cores"] >= 1
    assert record["datasets"] and record["transformers"] and record["torch"] and record["date"]

    delivery = {(row["format"], row["workers"]): row for row in record["delivery"]}
    assert set(delivery) == {(kind, workers) for kind in data_pipeline.FORMATS for workers in settings["workers"]}
    for (kind, workers), row in delivery.items():
        assert row["tokens_per_s"] > 0 and len(row["tokens_per_s_rounds"]) == settings["rounds"]
        # per reader, so that every worker's start is before the clock
        timed = settings["batches"] * max(workers, 1)
        assert row["tokens_timed"] == timed * settings["batch_size"] * settings["block_length"]
        assert row["tokens_per_s_per_reader"] == pytest.approx(row["tokens_per_s"] / max(workers, 1))
        assert row["vs_0_workers"] == pytest.approx(row["tokens_per_s"] / delivery[(kind, 0)]["tokens_per_s"])
        # 0 workers tokenise with the library's default threads, each of N workers with its share of the cores
        cores = len(os.sched_getaffinity(0))
        assert row["tokenizer_threads"] == (max(1, cores // workers) if workers else "all cores")
        assert row["files"] == (None if kind == "prepared" else 1 if kind == "txt-1file" else settings["files"])

    memory = {(row["source"], row["corpus_mb"]): row for row in record["memory"]}
    sizes = (settings["corpus_mb"], settings["large_mb"])
    assert set(memory) == {(source, size) for source in ("stream", "prepared") for size in sizes}
    for row in memory.values():
        assert row["peak_rss_bytes"] >= row["rss_ready_bytes"] > 0
        assert (
            0 < row["peak_anon_bytes"] <= row["peak_rss_bytes"] and 0 < row["peak_file_bytes"] <= row["peak_rss_bytes"]
        )
        assert row["tokens_read"] == settings["memory_batches"] * settings["batch_size"] * settings["block_length"]
    # the large corpora are about large_mb on disk, ten times the small ones
    assert memory[("stream", sizes[1])]["bytes_on_disk"] == pytest.approx(sizes[1] * 1e6, rel=0.01)
    assert memory[("prepared", sizes[1])]["bytes_on_disk"] > 5 * memory[("prepared", sizes[0])]["bytes_on_disk"]
    ratios = {row["source"]: row for row in record["memory_ratios"]}
    assert set(ratios) == {"stream", "prepared"}
    for source, row in ratios.items():
        assert (
            row["peak_ratio"]
            == memory[(source, sizes[1])]["peak_rss_bytes"] / memory[(source, sizes[0])]["peak_rss_bytes"]
        )
        assert row["meets_target"] == (abs(row["peak_ratio"] - 1) <= 0.10)
        large, small = memory[(source, sizes[1])]["peak_anon_bytes"], memory[(source, sizes[0])]["peak_anon_bytes"]
        assert row["peak_anon_ratio"] == large / small

    resume = record["resume"]
    for source, size in (("prepared", sizes[0]), ("prepared", sizes[1]), ("stream", sizes[0])):
        rows = [row for row in resume if (row["source"], row["corpus_mb"]) == (source, size)]
        assert [round(row["passes"], 1) for row in rows] == [round(p, 1) for p in settings["resume_passes"]]
        assert all(row["seconds"] > 0 for row in rows) and max(row["passes"] for row in rows) > 1
        assert rows[0]["micro_batch"] == 0 and rows[-1]["micro_batch"] > 0

    preparation = {(row["streaming"], row["num_proc"]): row for row in record["preparation"]}
    assert set(preparation) == {(streaming, n) for streaming in (False, True) for n in settings["num_proc"]}
    assert all(row["tokens_per_s"] > 0 and row["tokens"] > 0 for row in preparation.values())
    # the same texts give the same number of tokens read whole with any --num_proc
    assert len({row["tokens"] for key, row in preparation.items() if not key[0]}) == 1

    report = output.with_suffix(".md").read_text()
    assert record["command"] in report and "Load average" in report and "| prepared |  | 0 |" in report
    assert not (tmp_path / "work").exists()  # the generated corpora are removed


@pytest.mark.heavy  # a fresh interpreter
def test_a_run_stopped_after_its_first_case_keeps_that_case_s_row(tmp_path):
    output = tmp_path / "data-pipeline"
    command = [sys.executable, str(Path(data_pipeline.__file__)), "--quick", "--num_proc", "1", "--rounds", "100000"]
    command += ["--output", str(output), "--workdir", str(tmp_path / "work")]
    stopped_once_written(command, output.with_suffix(".json"), gpu_check.stop)
    record = json.loads(output.with_suffix(".json").read_text())
    assert record["complete"] is False and record["command"].startswith("python benchmarks/data_pipeline.py --quick")
    first = record["preparation"][0]  # the first case: the .txt files read whole, one process
    assert (first["streaming"], first["num_proc"]) == (False, 1)
    assert first["tokens"] > 0 and first["tokens_per_s"] == first["tokens"] / first["seconds"]
    report = output.with_suffix(".md").read_text()
    assert "**Not complete**" in report and f"{first['tokens']:,}" in report


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch_size", "0"], "--batch_size=0 must be at least 1"),
        (["--block_length", "x"], "argument --block_length: invalid int value: 'x'"),
        (["--formats", "bogus"], "argument --formats: invalid choice: 'bogus'"),
        (["--corpus_mb", "nan"], "--corpus_mb=nan must be above 0 and below --large_mb=2048.0"),
        (["--resume_passes", "200"], "--resume_passes has 200.0; resume points must be in [0, 100] passes"),
        (["--workdir", "{file}"], "workdir='{file}': {file} is a file, not a folder"),
        (["--workdir", "{file}/work"], "workdir='{file}/work': {file} is a file, not a folder"),
        (["--output", "{file}/data-pipeline"], "output='{file}': {file} is a file, not a folder"),
    ],
)
def test_bad_argument_is_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert_one_line(data_pipeline.main, argv, message, capsys, file=tmp_path / "file")
