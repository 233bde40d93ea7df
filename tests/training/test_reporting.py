import csv
import json
import math
import re
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from symbert.cli import UserError
from symbert.training.reporting import (
    MetricsLogCallback,
    comparison_table,
    load_log_history,
    plot_comparison,
    plot_losses,
    steps_to_reach,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def history(eval_losses=(3.0, 2.5, 2.0)):
    """A Trainer-like log_history: a train then an eval entry every 10 steps, then the end-of-train summary."""
    entries = []
    for i, eval_loss in enumerate(eval_losses, start=1):
        step, epoch = i * 10, i / 10
        train = {"loss": eval_loss + 0.1, "grad_norm": 1.3, "learning_rate": 1e-4 / i, "epoch": epoch, "step": step}
        entries.append(train)
        entries.append({"eval_loss": eval_loss, "eval_runtime": 0.5, "epoch": epoch, "step": step})
    entries.append({"train_runtime": 9.0, "train_loss": 2.6, "epoch": epoch, "step": step})
    return entries


def assert_png(path, size=(840, 540)):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 5000
    image = pytest.importorskip("PIL.Image").open(path)
    assert image.format == "PNG" and image.size == size


def test_callback_writes_csv_and_json_from_whole_history(tmp_path):
    log_history = history()
    args, state = SimpleNamespace(output_dir=str(tmp_path / "run")), TrainerState(log_history=log_history)
    callback = MetricsLogCallback()
    callback.on_log(args, state, TrainerControl(), logs=log_history[-1])

    with open(tmp_path / "run" / "metrics.csv", newline="") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
    assert reader.fieldnames == [
        "step",
        "epoch",
        "loss",
        "eval_loss",
        "learning_rate",
        "grad_norm",
        "eval_runtime",
        "train_runtime",
        "train_loss",
    ]
    assert len(rows) == len(log_history)
    assert rows[0] == {
        "step": "10",
        "epoch": "0.1",
        "loss": "3.1",
        "eval_loss": "",
        "learning_rate": "0.0001",
        "grad_norm": "1.3",
        "eval_runtime": "",
        "train_runtime": "",
        "train_loss": "",
    }
    assert rows[1]["eval_loss"] == "3.0" and rows[1]["loss"] == ""
    assert rows[-1]["train_loss"] == "2.6" and rows[-1]["step"] == "30"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == log_history

    # A resumed run restores a shorter history: the files follow it instead of growing.
    state.log_history = log_history[:2]
    callback.on_train_end(args, state, TrainerControl())
    with open(tmp_path / "run" / "metrics.csv", newline="") as file:
        assert len(list(csv.DictReader(file))) == 2
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == log_history[:2]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["metrics.csv", "metrics.json"]  # no temp files


def test_callback_writes_nothing_off_the_main_process(tmp_path):
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = TrainerState(log_history=history(), is_world_process_zero=False)
    MetricsLogCallback().on_log(args, state, TrainerControl(), logs={})
    MetricsLogCallback().on_train_end(args, state, TrainerControl())
    assert list(tmp_path.iterdir()) == []


def test_steps_to_reach():
    log_history = history((3.0, 2.5, 2.0, 2.2))
    assert steps_to_reach(log_history, 2.5) == 20  # exact equality counts
    assert steps_to_reach(log_history, 2.1) == 30  # first crossing, not the last
    assert steps_to_reach(log_history, 5.0) == 10
    assert steps_to_reach(log_history, 1.9) is None
    assert steps_to_reach([{"loss": 0.1, "step": 5}], 1.0) is None  # train loss does not count


def test_comparison_table():
    runs = {"original": history((3.0, 2.5, 2.0)), "symmetric": history((2.8, 2.1, 2.3)), "pairwise": history((3.5,))}
    lines = comparison_table(runs, 2.2).splitlines()
    assert len(lines) == 5
    assert "2.2" in lines[0] and lines[1].startswith("| ---")
    assert lines[2].split("|")[1:-1] == [" original ", " 2.0000 ", " 2.0000 ", " 30 "]
    assert lines[3].split("|")[1:-1] == [" symmetric ", " 2.3000 ", " 2.1000 ", " 20 "]
    assert lines[4].split("|")[1:-1] == [" pairwise ", " 3.5000 ", " 3.5000 ", " not reached "]


@pytest.mark.parametrize("keep", ["both", "loss", "eval_loss"])
def test_plot_losses(tmp_path, keep):
    log_history = [e for e in history() if keep == "both" or keep in e]
    path = tmp_path / "loss.png"
    assert plot_losses(log_history, path, title="original") == path
    assert_png(path)


def test_plot_comparison(tmp_path):
    runs = {"original": history((3.0, 2.5, 2.0)), "symmetric": history((2.8, 2.1))}
    for target in (2.2, None):
        path = tmp_path / f"comparison-{target}.png"
        assert plot_comparison(runs, path, target_loss=target, title="eval loss") == path
        assert_png(path)


def write_state(folder, log_history):
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": log_history}))


def test_load_log_history_picks_the_newest_checkpoint_numerically(tmp_path):
    write_state(tmp_path / "checkpoint-9", [{"loss": 9.0, "step": 9}])
    write_state(tmp_path / "checkpoint-10", [{"loss": 10.0, "step": 10}])
    (tmp_path / "checkpoint-11").mkdir()  # killed while saving: no trainer_state.json
    (tmp_path / "checkpoint-12.tmp").mkdir()
    assert load_log_history(tmp_path) == [{"loss": 10.0, "step": 10}]

    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"loss": 1.0, "step": 20}]}))
    assert load_log_history(tmp_path) == [{"loss": 1.0, "step": 20}]  # the output_dir's own state comes first


def test_load_log_history_without_state_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path))):
        load_log_history(tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"log_history": [], "log_history": [{"loss": 1.0, "step": 1}]}', "the key 'log_history' is given 2 times"),
        ('{"log_history": [{"loss": 1.0, "step": 1.5}]}', r"log_history\[0\].step=1.5 is not an integer >= 0"),
        ('{"global_step": 10}', 'is not a trainer state: a JSON object with a "log_history"'),
    ],
    ids=["key-twice", "fractional-step", "no-log"],
)
def test_load_log_history_reads_the_state_strictly(tmp_path, text, message):
    """A --compare rerun plots a reused run's log: one it cannot trust is one line naming the file, not a plot of
    the last of two logs."""
    (tmp_path / "trainer_state.json").write_text(text)
    with pytest.raises(UserError, match=rf"{re.escape(str(tmp_path / 'trainer_state.json'))}.*{message}"):
        load_log_history(tmp_path)


def test_a_diverged_run_s_nan_loss_is_reported_but_never_released(tmp_path):
    # the report and a comparison's reuse read a run that diverged as it logged; the release refuses its losses
    from symbert.training.reporting import read_log_history

    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"eval_loss": 2.5, "step": 5}, {"eval_loss": NaN, "step": 10}]}')
    losses = [entry["eval_loss"] for entry in load_log_history(tmp_path)]
    assert losses[0] == 2.5 and math.isnan(losses[1])
    with pytest.raises(UserError, match=r"log_history\[1\].eval_loss=nan is not a finite number >= 0"):
        read_log_history(state)
