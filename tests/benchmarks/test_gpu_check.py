"""benchmarks/gpu_check.py (every GPU figure from one command within a budget) rehearsed on the CPU, its budget and
process handling, benchmarks/finetune_throughput.py's batches, and the training-speed figure pre-training logs."""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from symbert import ATTENTION_TYPES
from symbert.training import reporting

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import finetune_throughput  # noqa: E402
import gpu_check  # noqa: E402

from helpers.assertions import assert_one_line  # noqa: E402
from helpers.deadlines import stopped_once_written  # noqa: E402


def planned(tmp_path, *argv):
    args = gpu_check.parse_command_line(["--dry_run", "--output", str(tmp_path / "out"), *argv])
    return gpu_check.plan(args, tmp_path)


def test_the_parts_share_the_whole_budget_and_keep_their_order(tmp_path):
    parts = planned(tmp_path)
    assert [part.name for part in parts] == list(gpu_check.PART_NAMES)
    assert sum(part.share for part in parts) == pytest.approx(1.0)
    chosen = planned(tmp_path, "--parts", "data-pipeline", "throughput-compiled")
    assert [part.name for part in chosen] == ["throughput-compiled", "data-pipeline"]  # the plan's order, not argv's
    assert sum(part.share for part in chosen) == pytest.approx(1.0)
    # the data path runs with the GPU hidden: its forked preparation workers must not inherit a CUDA context
    assert chosen[1].environment == {"CUDA_VISIBLE_DEVICES": ""}


def test_types_limit_the_throughput_parts(tmp_path):
    parts = {part.name: part for part in planned(tmp_path, "--types", "symmetric", "shared")}
    eager = parts["throughput-eager"].commands[0]
    assert eager[eager.index("--types") + 1 :][:2] == ["symmetric", "shared"]
    first = parts["throughput-compiled"].commands[0]
    assert first[first.index("--types") + 1] == "symmetric" and "shared" not in first
    others = parts["throughput-compiled-others"].commands[0]
    assert others[others.index("--types") + 1 :][:1] == ["shared"]
    # no type left for the last compiled part: it has no command and is dropped
    names = [part.name for part in planned(tmp_path, "--types", "original")]
    assert "throughput-compiled-others" not in names
    every = planned(tmp_path)[-1].commands[0]
    listed = every[every.index("--types") + 1 : every.index("--output")]
    assert sorted(listed + list(gpu_check.FIRST_COMPILED_TYPES)) == sorted(ATTENTION_TYPES)


def test_a_part_is_stopped_with_its_workers_at_its_deadline(tmp_path):
    child_pid = tmp_path / "child.pid"
    sleeper = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(child_pid)!r}, 'w').write(str(child.pid)); time.sleep(120)"
    )
    part = gpu_check.Part("sleeper", 1.0, [[sys.executable, "-c", sleeper], [sys.executable, "-c", "print('next')"]])
    gpu_check.MINIMUM_PART_SECONDS, minimum = 0, gpu_check.MINIMUM_PART_SECONDS
    try:
        began = time.monotonic()
        gpu_check.run_part(part, time.monotonic() + 3, tmp_path / "sleeper.log")
    finally:
        gpu_check.MINIMUM_PART_SECONDS = minimum
    assert part.status.startswith("stopped at its deadline") and time.monotonic() - began < 30
    assert "print('next')" not in (tmp_path / "sleeper.log").read_text()  # the part's later commands do not run
    pid = int(child_pid.read_text())
    for _ in range(50):  # the grandchild, in the part's process group, is gone too
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the part's child process {pid} outlived its deadline")


STOPPED_CHECK = """
import sys, time
sys.path.insert(0, {benchmarks!r})
import gpu_check
sleeper = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "open({pids!r}, 'w').write(f'{{child.pid}} ' + str(__import__('os').getpid())); time.sleep(120)"
)
gpu_check.plan = lambda args, workdir: [gpu_check.Part("sleeper", 1.0, [[sys.executable, "-c", sleeper]])]
gpu_check.main(["--dry_run", "--budget", "300", "--output", {output!r}])
"""


def gone(pid):
    for _ in range(150):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.heavy  # a fresh interpreter
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stopped_check_stops_its_running_part_too(tmp_path, sig):
    """Ctrl-C or SIGTERM printed "interrupted" while the part's processes (in sessions of their own) went on."""
    pids = tmp_path / "pids"
    code = STOPPED_CHECK.format(benchmarks=str(BENCHMARKS), pids=str(pids), output=str(tmp_path / "out"))
    check = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for _ in range(1200):
        if pids.exists() and len(pids.read_text().split()) == 2:
            break
        time.sleep(0.1)
    else:
        check.kill()
        pytest.fail(f"the part never started: {check.communicate()[1][-2000:]}")
    check.send_signal(getattr(signal, sig))
    err = check.communicate(timeout=120)[1]
    assert check.returncode == 130 and err.count("\n") == 1, err
    assert "interrupted: sleeper was running; its processes were stopped" in err
    assert all(gone(int(pid)) for pid in pids.read_text().split())


def test_a_failing_or_late_part_is_recorded_and_the_next_runs(tmp_path):
    failing = gpu_check.Part("failing", 1.0, [[sys.executable, "-c", "raise SystemExit(3)"]])
    gpu_check.run_part(failing, time.monotonic() + 60, tmp_path / "failing.log")
    assert failing.status == "failed: exit status 3 (see failing.log)"
    late = gpu_check.Part("late", 1.0, [[sys.executable, "-c", "pass"]])
    gpu_check.run_part(late, time.monotonic() + gpu_check.MINIMUM_PART_SECONDS - 5, tmp_path / "late.log")
    assert late.status.startswith("skipped:") and not (tmp_path / "late.log").exists()
    done = gpu_check.Part("done", 1.0, [[sys.executable, "-c", "print('measured')"]])
    gpu_check.run_part(done, time.monotonic() + 60, tmp_path / "done.log")
    assert done.status == "done" and "measured" in (tmp_path / "done.log").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dry_run", "--budget", "10"], "--budget=10.0: must be at least 60 seconds."),
        (["--dry_run", "--recipe_steps", "1"], "--recipe_steps=1: must be at least 2"),
        (["--budget", "600"], "torch sees no CUDA device; this command measures a GPU"),
        (["--dry_run", "--parts", "everything"], "argument --parts: invalid choice: 'everything'"),
    ],
)
def test_bad_arguments_are_one_line(argv, message, capsys, tmp_path):
    assert_one_line(gpu_check.main, [*argv, "--output", str(tmp_path / "out")], message, capsys)


@pytest.mark.parametrize(
    "summary, message",
    [
        (None, "output='': the path is empty"),
        ({"dry_run": False}, "holds a GPU check's measured figures ({OUT}/summary.json); a dry run would replace them"),
        ("{not json", "holds a GPU check's measured figures ({OUT}/summary.json)"),
    ],
)
def test_an_output_a_dry_run_must_not_write_is_refused(tmp_path, capsys, summary, message):
    """--output '' wrote every result into the current folder; a dry run into the committed results replaced the
    GPU's figures with a CPU's. A dry run's own earlier output is written again."""
    output = tmp_path / "gpu-check"
    output.mkdir()
    if summary is not None:
        (output / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    argv = ["--dry_run", "--output", "" if summary is None else str(output)]
    assert_one_line(gpu_check.main, argv, message, capsys, OUT=output)
    assert sorted(p.name for p in output.iterdir()) == ([] if summary is None else ["summary.json"])
    (output / "summary.json").write_text(json.dumps({"dry_run": True}))
    assert gpu_check.parse_command_line(["--dry_run", "--output", str(output)]).output == output


def test_the_recipe_figures_are_its_logged_rates_after_warm_up(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    from symbert import SymBertConfig

    config = SymBertConfig.from_preset("tiny", sparse_prediction=True, max_predictions_per_seq=8, vocab_size=99)
    config.save_pretrained(run)
    metrics = [{"loss": 9.0, "step": 1}, *({"loss": 8.0, "step": s, "train_tokens_per_second": r} for s, r in
               ((2, 50.0), (3, 200.0), (4, 100.0), (5, 300.0)))]  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(metrics))
    summary = {"max_seq_length": 32, "global_batch_size": 8, "steps": 5, "final_eval_loss": 7.5}
    (run / "training_summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(gpu_check, "matmul_rate", lambda device, precision: 1e9)
    figures = gpu_check.recipe_figures(run, gpu_check.torch.device("cpu"), "fp32")
    assert figures["tokens_per_second"] == 200.0  # the median of 200, 100 and 300: 50 is the warm-up interval
    flops = gpu_check.training_flops_per_token(config, 32)
    assert figures["mfu"] == pytest.approx(flops * 200.0 / 1e9)
    (run / "metrics.json").write_text(json.dumps(metrics[:2]))
    with pytest.raises(ValueError, match="1 logged training rate"):
        gpu_check.recipe_figures(run, gpu_check.torch.device("cpu"), "fp32")


def test_the_training_speed_counts_the_steps_between_logs_without_evaluations(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(reporting.time, "perf_counter", lambda: now[0])
    callback = reporting.TrainingSpeedCallback(tokens_per_step=1000)
    state = SimpleNamespace(log_history=[])

    def step(seconds):
        now[0] += seconds
        callback.on_step_end(None, state, None)

    def log(entry):
        state.log_history.append(entry)
        callback.on_log(None, state, None, logs=entry)
        return entry

    callback.on_train_begin(None, state, None)
    step(30.0)  # the first step (a compiled model's compilation) has no interval: it is not counted
    step(2.0)
    step(2.0)
    assert log({"loss": 1.0, "step": 3})["train_tokens_per_second"] == 500.0  # 2 steps, 4 s
    now[0] += 1.0  # logging (the loss's device sync, where a GPU's queued work is waited for) is training time
    step(1.0)
    callback.on_evaluate(None, state, None)
    step(60.0)  # the step after an evaluation holds it: left out
    step(1.0)
    assert log({"eval_loss": 2.0, "step": 6}) == {"eval_loss": 2.0, "step": 6}  # eval entries get no rate
    assert log({"loss": 0.9, "step": 6})["train_tokens_per_second"] == round(2000 / 3, 1)  # 2 steps, 1 + 1 + 1 s


def test_glue_shaped_batches_are_padded_to_their_longest(tmp_path):
    args = finetune_throughput.parse_command_line(
        [
            "--batch_size",
            "6",
            "--min_length",
            "5",
            "--max_length",
            "20",
            "--batches",
            "4",
            "--output",
            str(tmp_path / "f"),
        ]
    )
    batches = finetune_throughput.glue_shaped_batches(args, finetune_throughput.torch.device("cpu"))
    assert len(batches) == 4
    for batch in batches:
        lengths = batch["attention_mask"].sum(dim=1)
        assert batch["input_ids"].shape == (6, int(lengths.max()))  # padded to the batch's longest, no further
        assert ((lengths >= 5) & (lengths <= 20)).all()
        assert (batch["input_ids"] * (1 - batch["attention_mask"]) == 0).all()  # padding is id 0
        assert (batch["input_ids"][:, 0] == 2).all()  # [CLS] first
    again = finetune_throughput.glue_shaped_batches(args, finetune_throughput.torch.device("cpu"))
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(batches, again))  # the same for every model


def test_finetune_throughput_refuses_bad_lengths_in_one_line(capsys, tmp_path):
    argv = ["--min_length", "30", "--max_length", "20", "--output", str(tmp_path / "f")]
    assert_one_line(finetune_throughput.main, argv, "--min_length 30 and --max_length 20", capsys)


@pytest.mark.heavy
def test_a_dry_run_of_one_part_writes_its_results_and_summary(tmp_path):
    output = tmp_path / "gpu-check"
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--dry_run", "--parts", "finetune", "--budget", "90"]
    result = subprocess.run([*command, "--output", str(output)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert [(part["name"], part["status"]) for part in summary["parts"]] == [("finetune", "done")]
    rows = json.loads((output / "finetune-throughput.json").read_text())["rows"]
    assert [row["model"] for row in rows] == ["bert", "original", "symmetric"]
    assert rows[0]["vs_bert"] == 1.0 and all(row["real_tokens_per_second"] > 0 for row in rows)
    assert "OUTPUT/finetune-throughput" in (output / "summary.md").read_text()  # no local path in the table


@pytest.mark.slow
@pytest.mark.xdist_group("several_processes")  # .ci/run: one at a time beside the other slow tests
def test_the_whole_dry_run_completes_every_part_within_its_budget(tmp_path):
    # two types: the reference and one of a compiled part's own (the throughput of each type is tested on its own)
    output = tmp_path / "gpu-check"
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--dry_run", "--budget", "600"]
    command += ["--types", "original", "gqa"]
    began = time.monotonic()
    result = subprocess.run([*command, "--output", str(output)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - began < 600
    summary = json.loads((output / "summary.json").read_text())
    assert {part["name"]: part["status"] for part in summary["parts"]} == dict.fromkeys(gpu_check.PART_NAMES, "done")
    eager = json.loads((output / "throughput-eager.json").read_text())["rows"]
    assert {row["model"] for row in eager} == {"bert", "original", "gqa"}
    assert {row["seq_len"] for row in eager} == {16, 32}
    compiled = [row for name in ("first", "others") for row in
                json.loads((output / f"throughput-compiled-{name}.json").read_text())["rows"]]  # fmt: skip
    assert {row["model"] for row in compiled if row["mode"] == "compiled"} >= {"original", "gqa"}
    recipe = summary["recipe"]
    assert len(recipe["logged_rates"]) == 9  # 10 logged steps, the first without an interval before it
    assert recipe["mfu"] == pytest.approx(
        recipe["training_flops_per_token"] * recipe["tokens_per_second"] / recipe["matmul_flops_per_second"]
    )
    assert json.loads((output / "data-pipeline.json").read_text())["command"].startswith("python benchmarks/")


def gpu_plan(tmp_path, *argv):
    args = gpu_check.parse_command_line(["--plan", "--output", str(tmp_path / "out"), *argv])
    return args, gpu_check.plan(args, tmp_path)


@pytest.mark.parametrize("budget", [60, 200, 400, 540, 600])
def test_a_plan_s_shares_never_exceed_the_budget_and_every_part_runs_in_one_call(tmp_path, budget):
    args, parts = gpu_plan(tmp_path, "--budget", str(budget))
    assert [part.name for part in parts] == list(gpu_check.PART_NAMES)  # each once, in the order of importance
    room = budget - gpu_check.SUMMARY_MARGIN_SECONDS
    this_call = [part for part in parts if part.call == 1]
    assert this_call[0] is parts[0] and sum(part.share for part in this_call) == pytest.approx(1.0)
    if len(this_call) > 1:  # together within the budget, each part's deadline slot at least its expected seconds
        assert sum(part.expected for part in this_call) <= room
        assert all(part.share * room >= part.expected - 1e-9 for part in this_call)
    expected = {name: cost["seconds"] for name, cost in gpu_check.read_costs(gpu_check.RECORDED_COSTS).items()}
    assert {part.name: part.expected for part in parts} == expected


def test_the_default_call_fits_ten_minutes_and_the_plan_prints_the_second(tmp_path, capsys):
    args, parts = gpu_plan(tmp_path)
    assert args.budget <= 600 - 60  # a 10-minute call with a minute's margin
    assert [part.name for part in parts if part.call == 2] == ["throughput-compiled-others"]
    gpu_check.main(["--plan", "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "Call 2: python benchmarks/gpu_check.py --parts throughput-compiled-others --budget " in printed
    assert not (tmp_path / "out").exists()  # --plan runs nothing, writes nothing
    # the chosen parts run in this call, whatever they cost
    _, chosen = gpu_plan(tmp_path, "--parts", "throughput-compiled-others", "recipe")
    assert [part.call for part in chosen] == [1, 1]


def test_a_measured_run_s_costs_plan_the_next(tmp_path):
    recorded = gpu_check.read_costs(gpu_check.RECORDED_COSTS)
    done = gpu_check.Part("recipe", 1.0, [], status="done", seconds=61.0)
    stopped = gpu_check.Part("finetune", 1.0, [], status="stopped at its deadline (30 s)", seconds=30.0)
    failed = gpu_check.Part("data-pipeline", 1.0, [], status="failed: exit status 1", seconds=3.0)
    costs = gpu_check.recorded_costs([done, stopped, failed], recorded, "NVIDIA H200")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / gpu_check.COSTS_FILE).write_text(json.dumps(costs))
    args, parts = gpu_plan(tmp_path)  # OUTPUT's own costs, not the recorded ones
    expected = {part.name: part.expected for part in parts}
    assert expected["recipe"] == 61.0 and expected["finetune"] == max(45.0, recorded["finetune"]["seconds"])
    assert expected["data-pipeline"] == recorded["data-pipeline"]["seconds"]  # a failed part tells nothing
    (tmp_path / "bad.json").write_text('{"parts": {"recipe": {"seconds": -1}}}')
    with pytest.raises(gpu_check.UserError, match="bad.json'?: not a costs file"):
        gpu_plan(tmp_path, "--costs", str(tmp_path / "bad.json"))


@pytest.mark.heavy  # a fresh interpreter
def test_a_throughput_part_stopped_mid_setting_keeps_the_rounds_it_timed(tmp_path):
    output = tmp_path / "throughput"
    command = [sys.executable, str(BENCHMARKS / "throughput.py"), "--sizes", "tiny", "--seq_lens", "16"]
    command += ["--tokens_per_batch", "32", "--vocab_size", "99", "--matmul_size", "64", "--types", "symmetric"]
    command += ["--warmup", "1", "--rounds", "100000", "--output", str(output)]
    stopped_once_written(command, output.with_suffix(".json"), gpu_check.stop)
    rows = json.loads(output.with_suffix(".json").read_text())["rows"]
    assert [row["model"] for row in rows] == ["bert", "original", "symmetric"]
    for row in rows:
        assert 1 <= row["rounds_timed"] < 100000 and len(row["train_seconds"]) == row["rounds_timed"]
        assert row["train_tokens_per_s"] == 32 / statistics.median(row["train_seconds"])
    assert rows[2]["train_ratio_original"] is not None


def test_the_recipe_part_compiles_one_graph_for_all_encoder_layers(tmp_path, monkeypatch):
    from accelerate.utils import TorchDynamoPlugin, compile_regions
    from torch._dynamo.utils import counters

    from helpers.tiny import tiny_config
    from symbert import SymBertForMaskedLM

    _, parts = gpu_plan(tmp_path)
    for name, value in next(part for part in parts if part.name == "recipe").environment.items():
        monkeypatch.setenv(name, value)
    plugin = TorchDynamoPlugin(backend="aot_eager", mode=None, dynamic=None)  # as the Trainer builds it
    assert plugin.use_regional_compilation  # so accelerate compiles the model with compile_regions
    model = SymBertForMaskedLM(tiny_config("symmetric"))  # 2 layers
    compiled = compile_regions(model, **plugin.to_kwargs())
    assert all(isinstance(layer, torch._dynamo.eval_frame.OptimizedModule) for layer in compiled.bert.encoder.layer)
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    input_ids = torch.randint(5, 99, (2, 16))
    compiled(input_ids, labels=input_ids).loss.backward()
    regions = [module for module in compiled.modules() if isinstance(module, torch._dynamo.eval_frame.OptimizedModule)]
    # one graph a compiled region (the embeddings, the head), the two layers' one between them
    assert counters["stats"]["unique_graphs"] - before == len(regions) - 1 and counters["graph_break"] == {}
    assert compiled._orig_mod is model  # what the Trainer saves: the model's own keys, no wrapper in them


@pytest.mark.heavy  # a fresh interpreter
def test_a_part_stopped_mid_table_keeps_the_rows_it_measured(tmp_path):
    output = tmp_path / "finetune"
    command = [sys.executable, str(BENCHMARKS / "finetune_throughput.py"), "--device", "cpu", "--size", "tiny"]
    command += ["--batch_size", "2", "--max_length", "24", "--batches", "2", "--warmup", "1", "--rounds", "100000"]
    stopped_once_written([*command, "--output", str(output)], output.with_suffix(".json"), gpu_check.stop)
    rows = json.loads(output.with_suffix(".json").read_text())["rows"]
    assert [row["model"] for row in rows] == ["bert", "original", "symmetric"]
    assert all(row["real_tokens_per_second"] > 0 and 1 <= row["rounds"] < 100000 for row in rows)
    assert rows[0]["vs_bert"] == 1.0 and rows[1]["vs_bert"] == pytest.approx(
        rows[1]["real_tokens_per_second"] / rows[0]["real_tokens_per_second"]
    )
