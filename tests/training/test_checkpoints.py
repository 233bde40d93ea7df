"""Pre-training's run folder under faults: atomic checkpoints, resume past damaged ones, the output-folder lock,
--overwrite_output_dir that deletes nothing a refused run needs, a diverging run, the training summary."""

import csv
import errno
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError
from transformers import PreTrainedTokenizerBase, modeling_utils

from helpers.corpora import run_args
from helpers.runs import assert_same_metrics, assert_same_training, eval_losses, resume_args, resume_from
from symbert.cli import UserError
from symbert.files import file_sha256
from symbert.training.arguments import RECIPES_DIR, parse_arguments
from symbert.training.checkpoint_checks import checkpoint_problem
from symbert.training.data.blocks import DATA_POSITION_FILE
from symbert.training.data.corpus_files import SAMPLED_BYTES, file_fingerprint
from symbert.training.data.loading import data_fingerprint, load_tokenizer
from symbert.training.pretrain import SymBertPretrainingTrainer, main, pretrain, run
from symbert.training.reporting import write_metrics
from symbert.training.run_folder import FINAL_STAGING_DIR, LOCK_FILE, STAGING_DIR, resume_checkpoint

pytestmark = pytest.mark.heavy

# Child process: pre-training with a SIGKILL (or a pause) at one moment of saving checkpoint-STEP. The hooks wrap the Trainer's
# own saving steps, so nothing of this lives in the project's code.
KILL_DRIVER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from transformers import Trainer
    from symbert.training import pretrain, run_folder, summary

    moment, step = os.environ["HOOK_AT"].split(":")
    signal_number = int(os.environ.get("KILL_SIGNAL", signal.SIGKILL))

    def kill():
        os.kill(os.getpid(), signal_number)
        time.sleep(60)  # the signal ends the process before anything else runs

    def wait_for_release():
        while not Path(os.environ["RELEASE_FILE"]).exists():
            time.sleep(0.05)

    def hook(owner, name, before=None, after=None, nth=1):
        original, calls = getattr(owner, name), []
        def hooked(self, *args, **kwargs):
            at_step = self.state.global_step == int(step)
            calls.append(at_step)
            at = at_step and calls.count(True) == nth
            if at and before:
                before()
            result = original(self, *args, **kwargs)
            if at and after:
                after()
            return result
        setattr(owner, name, hooked)

    if moment == "after-weights":  # model and tokenizer written, optimizer not yet
        hook(Trainer, "_save_optimizer_and_scheduler", before=kill)
    elif moment == "after-optimizer":  # optimizer and scheduler written, RNG and trainer state not yet
        hook(Trainer, "_save_rng_state", before=kill)
    elif moment == "before-rename":  # every part written to the staging folder, not renamed into place
        hook(Trainer, "_save_checkpoint", after=kill)
    elif moment == "wait-after-save":  # pause until the test creates RELEASE_FILE
        hook(pretrain.SymBertPretrainingTrainer, "_save_checkpoint", after=wait_for_release)
    elif moment == "after-last-checkpoint":  # checkpoint-STEP in place, the final save not begun
        hook(pretrain.SymBertPretrainingTrainer, "_save_checkpoint", after=kill)
    elif moment == "during-final-save":  # the final model's weights, config and tokenizer written, its state not
        hook(Trainer, "_save", after=kill, nth=2)  # the first call at STEP writes checkpoint-STEP
    elif moment == "mid-install":  # the final model staged, three of its files moved into place, the rest not
        replace, moved = os.replace, []
        def replace_or_kill(source, *args, **kwargs):
            result = replace(source, *args, **kwargs)
            if run_folder.FINAL_STAGING_DIR in str(source):
                moved.append(source)
                if len(moved) == 3:
                    kill()
            return result
        os.replace = replace_or_kill
    elif moment == "before-summary":  # the final model saved, training_summary.json not yet written
        write_atomically = summary.write_atomically
        def write_or_kill(path, write):
            if path.name == "training_summary.json":
                kill()
            return write_atomically(path, write)
        summary.write_atomically = write_or_kill
    pretrain.main(sys.argv[1:])
    """
)


def child_command(args, hook_at=None, **env):
    """The pre-training command in a fresh process, with a hook at one moment of saving a checkpoint."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HOOK_AT": hook_at or "none:-1", **env}
    return [sys.executable, "-c", KILL_DRIVER, *args], env


def run_child(args, kill_at=None, kill_signal=signal.SIGKILL):
    command, env = child_command(args, kill_at, KILL_SIGNAL=str(int(kill_signal)))
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory):
    """An uninterrupted run: the reference for every resumed one."""
    output_dir = tmp_path_factory.mktemp("straight") / "run"
    result = run_child(run_args(corpus, output_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return output_dir


def metric_rows(output_dir):
    """metrics.csv's (step, loss, eval_loss) rows; timing columns differ between runs."""
    with open(output_dir / "metrics.csv") as file:
        return [(int(row["step"]), row["loss"], row["eval_loss"]) for row in csv.DictReader(file)]


def checkpoints(output_dir):
    return sorted(path.name for path in output_dir.glob("checkpoint-*"))


@pytest.mark.slow
def test_killed_while_saving_resumes_as_if_uninterrupted(corpus, straight, tmp_path):
    """The same command, rerun after each SIGKILL, never sees a half-written checkpoint and ends as a run that was
    never interrupted; save_total_limit=1 never counts the staging folder, and the killed runs' lock blocks nobody."""
    output_dir = tmp_path / "run"
    args = run_args(corpus, output_dir, "--save_total_limit", "1")

    killed = run_child(args, kill_at="after-weights:4")
    staged = output_dir / STAGING_DIR / "checkpoint-4"
    assert killed.returncode == -signal.SIGKILL and checkpoints(output_dir) == []
    assert (staged / "model.safetensors").is_file() and not (staged / "optimizer.pt").exists()
    assert (output_dir / LOCK_FILE).is_file()  # left by the killed run; the OS released its lock

    killed = run_child(args, kill_at="after-optimizer:8")  # no checkpoint: starts afresh
    staged = output_dir / STAGING_DIR / "checkpoint-8"
    assert killed.returncode == -signal.SIGKILL and "Resuming" not in killed.stdout
    assert checkpoints(output_dir) == ["checkpoint-4"]
    assert (staged / "optimizer.pt").is_file() and not (staged / "trainer_state.json").exists()
    assert not (output_dir / STAGING_DIR / "checkpoint-4").exists()  # the first run's leftover was removed

    killed = run_child(args, kill_at="before-rename:8")
    assert killed.returncode == -signal.SIGKILL and f"Resuming from {output_dir / 'checkpoint-4'}" in killed.stdout
    assert checkpoints(output_dir) == ["checkpoint-4"] and checkpoint_problem(staged) is None

    finished = run_child(args)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"Resuming from {output_dir / 'checkpoint-4'}" in finished.stdout and "Skipping" not in finished.stdout
    assert checkpoints(output_dir) == ["checkpoint-8"] and not (output_dir / STAGING_DIR).exists()
    assert_same_training(output_dir, straight)

    rows, reference_rows = metric_rows(output_dir), metric_rows(straight)
    assert len(rows) == len(set(rows)) == len(reference_rows)  # the killed runs' rows after step 4 are gone
    for (step, loss, eval_loss), (step_ref, loss_ref, eval_loss_ref) in zip(rows, reference_rows, strict=True):
        assert step == step_ref and bool(loss) == bool(loss_ref) and bool(eval_loss) == bool(eval_loss_ref)
        for value, ref in ((loss, loss_ref), (eval_loss, eval_loss_ref)):
            assert not value or abs(float(value) - float(ref)) <= 1e-5


def test_a_run_resumed_between_evaluations_adds_no_evaluation(corpus, tmp_path):
    """--eval_on_start evaluates at step 0 of the run, not again at the step a rerun resumes from: stopped after
    checkpoint 2 or 6, between the evaluations at steps 0, 4 and 8, the run ends with the uninterrupted run's
    evaluations, weights and metrics rows (the step and metrics of each row, the losses)."""
    extra = ("--eval_on_start", "true", "--save_steps", "2")
    straight = tmp_path / "straight"
    pretrain(*parse_arguments(run_args(corpus, straight, *extra)))
    assert [step for step, _ in eval_losses(straight)] == [0, 4, 8]
    for step in (2, 6):
        resumed = tmp_path / f"resumed-{step}"
        resumed.mkdir()
        shutil.copytree(straight / f"checkpoint-{step}", resumed / f"checkpoint-{step}")
        pretrain(*parse_arguments(run_args(corpus, resumed, *extra)))
        assert [step for step, _ in eval_losses(resumed)] == [0, 4, 8]
        assert_same_training(resumed, straight)
        assert_same_metrics(resumed, straight, values=("loss", "eval_loss", "epoch", "learning_rate"))


# a data position that is JSON but not a position (a map-style run's holds no reader state: one is added)
POSITION_DAMAGES = {
    "a damaged data position": lambda values: values.update(micro_batches="x"),
    "a position of another step": lambda values: values.update(step=4, micro_batches=4),
    "a position without its readers": lambda values: values.pop("readers_per_process"),
    "a damaged reader state": lambda values: values.update(
        reader_states={"0": {"pass": 0, "blocks_in_pass": 4, "blocks_per_pass": None, "dataset": "x"}}
    ),
    "a reader past its readers": lambda values: values.update(reader_states={"1": {"pass": 0, "blocks_in_pass": 0}}),
}


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("truncated weights", r"model\.safetensors is unreadable \(SafetensorError"),
        ("missing trainer state", r"trainer_state\.json is missing"),
        ("truncated data position", r"data_position_rank0\.json is unreadable \(JSONDecodeError"),
        ("a NaN weight", r"model\.safetensors holds a NaN value in bert\.encoder\.layer\.1\.output\.dense\.bias"),
        ("a state of another step", r"trainer_state\.json says global_step 4, not 8 \(an integer\)"),
        ("a fractional step", r"trainer_state\.json says global_step 8\.0, not 8 \(an integer\)"),
        ("a NaN eval loss", r"trainer_state\.json says log_history\[\d+\] eval_loss nan, not a finite number"),
        ("a string eval loss", r"trainer_state\.json says log_history\[\d+\] eval_loss '0\.5', not a finite number"),
        ("a damaged data position", r"data_position_rank0\.json is unreadable \(ValueError: micro_batches 'x' is not"),
        ("a position of another step", r"data_position_rank0\.json is at step 4, not 8"),
        (
            "a position without its readers",
            r"data_position_rank0\.json is unreadable \(ValueError: readers_per_process None",
        ),
        (
            "a damaged reader state",
            r"data_position_rank0\.json is unreadable \(ValueError: reader 0's stream state 'x'",
        ),
        (
            "a reader past its readers",
            r"data_position_rank0\.json is unreadable \(ValueError: reader state '1' is not one",
        ),
    ],
)
def test_a_damaged_newest_checkpoint_is_skipped(corpus, straight, tmp_path, capsys, damage, reason):
    output_dir = tmp_path / "run"
    shutil.copytree(straight, output_dir)
    for name in ("training_summary.json", "model.safetensors", "trainer_state.json"):
        (output_dir / name).unlink()  # as a run killed after its last checkpoint, before its final save
    newest = output_dir / "checkpoint-8"
    if damage == "truncated weights":
        weights = newest / "model.safetensors"
        os.truncate(weights, weights.stat().st_size // 2)
    elif damage == "a NaN weight":  # a file that reads: safetensors checks no values
        weights = safetensors.torch.load_file(newest / "model.safetensors")
        weights["bert.encoder.layer.1.output.dense.bias"][3] = float("nan")
        safetensors.torch.save_file(weights, newest / "model.safetensors", metadata={"format": "pt"})
    elif damage == "a state of another step":  # checkpoint-4's state copied over checkpoint-8's
        shutil.copyfile(output_dir / "checkpoint-4" / "trainer_state.json", newest / "trainer_state.json")
    elif damage == "a fractional step":  # accepted as 8, then every resume failed with a TypeError
        state = json.loads((newest / "trainer_state.json").read_text())
        (newest / "trainer_state.json").write_text(json.dumps({**state, "global_step": 8.0}))
    elif damage in ("a NaN eval loss", "a string eval loss"):  # they reached metrics.csv on resume
        state = json.loads((newest / "trainer_state.json").read_text())
        evaluation = next(entry for entry in state["log_history"] if "eval_loss" in entry)
        evaluation["eval_loss"] = float("nan") if damage == "a NaN eval loss" else "0.5"
        (newest / "trainer_state.json").write_text(json.dumps(state))
    elif damage in POSITION_DAMAGES:  # JSON that reads
        position = newest / "data_position_rank0.json"
        values = json.loads(position.read_text())
        POSITION_DAMAGES[damage](values)
        position.write_text(json.dumps(values))
    elif damage == "truncated data position":
        position = newest / "data_position_rank0.json"
        os.truncate(position, position.stat().st_size // 2)
    else:
        (newest / "trainer_state.json").unlink()

    # asked for by name, it is refused before anything is written
    run_arguments, _, _, training_args = parse_arguments(
        run_args(corpus, tmp_path / "other", "--resume_from_checkpoint", str(newest))
    )
    named = re.escape(f"resume_from_checkpoint='{newest}'")
    with pytest.raises(
        UserError, match=f"{named} (cannot be resumed from: {reason}|is not a Trainer checkpoint folder)"
    ):
        resume_checkpoint(run_arguments, training_args)
    assert not (tmp_path / "other").exists()

    pretrain(*parse_arguments(run_args(corpus, output_dir)))  # as rerunning the command does
    out = capsys.readouterr().out
    assert re.search(f"Skipping {re.escape(str(newest))}: {reason}", out)
    assert f"Resuming from {output_dir / 'checkpoint-4'}" in out
    assert_same_training(output_dir, straight)


def test_a_trainer_state_with_a_key_given_twice_is_no_checkpoint_to_resume(tmp_path):
    """json.loads keeps the last of two global_steps silently; a checkpoint's state is read strictly (the trainer
    state is the first part checked), so one edited into holding two is skipped, naming the key."""
    checkpoint = tmp_path / "checkpoint-8"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text('{"global_step": 4, "global_step": 8, "log_history": []}')
    assert checkpoint_problem(checkpoint) == (
        "trainer_state.json is unreadable (RepeatedKey: the key 'global_step' appears twice in one object: keep one)"
    )


def test_checkpoints_of_fsdp_and_deepspeed_are_checked_in_their_own_files(straight, tmp_path):
    """FSDP and DeepSpeed save no optimizer.pt; the check reads what each writes instead (the FSDP2 test of
    test_distributed_engines.py resumes from a real FSDP checkpoint). FSDP with full state dicts: optimizer.bin and
    pytorch_model_fsdp.bin, loaded with weights_only=True. DeepSpeed (not installed here, so its layout is built):
    global_stepN/ named by `latest`, whose torch.save archives must be whole, one optimizer file per process."""
    plain = straight / "checkpoint-4"
    fsdp = tmp_path / "fsdp"
    shutil.copytree(plain, fsdp)
    shutil.copy(plain / "scheduler.pt", fsdp / "pytorch_model_fsdp.bin")  # a state dict that loads weights-only
    assert checkpoint_problem(fsdp) == "optimizer.bin is missing"
    (fsdp / "optimizer.pt").rename(fsdp / "optimizer.bin")
    assert checkpoint_problem(fsdp) is None
    os.truncate(fsdp / "optimizer.bin", 100)
    assert checkpoint_problem(fsdp).startswith("optimizer.bin is unreadable")

    deepspeed = tmp_path / "deepspeed"
    shutil.copytree(plain, deepspeed)
    for name in ("optimizer.pt", "scheduler.pt"):  # DeepSpeed holds them
        (deepspeed / name).unlink()
    states = deepspeed / "global_step8"
    states.mkdir()
    (deepspeed / "latest").write_text("global_step8")
    torch.save({"module": {"weight": torch.ones(4)}}, states / "mp_rank_00_model_states.pt")
    for rank in (0, 1):
        torch.save({"state": torch.ones(4)}, states / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    assert checkpoint_problem(deepspeed) is None
    os.truncate(states / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", 200)
    assert checkpoint_problem(deepspeed).startswith("latest is unreadable (BadZipFile")
    (states / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    torch.save({"state": torch.ones(4)}, states / "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt")
    assert "optimizer states of processes [0, 2]" in checkpoint_problem(deepspeed)
    (deepspeed / "latest").write_text("global_step4")
    assert "it names 'global_step4', which is not a folder" in checkpoint_problem(deepspeed)
    (deepspeed / "latest").unlink()
    assert checkpoint_problem(deepspeed) == "latest is missing"  # global_step8/ is there: DeepSpeed's checkpoint


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
def test_a_second_run_into_a_folder_in_use_is_refused(corpus, straight, tmp_path, capsys):
    output_dir, release = tmp_path / "run", tmp_path / "release"
    args = run_args(corpus, output_dir)
    command, env = child_command(args, "wait-after-save:4", RELEASE_FILE=str(release))
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (output_dir / "checkpoint-4").is_dir():  # the first run is mid-training, holding the folder
        assert time.monotonic() < deadline and first.poll() is None, first.stderr.read()[-3000:]
        time.sleep(0.05)

    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2 and time.monotonic() - started < 30
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and f"output_dir='{output_dir}' is in use by another run" in error

    release.touch()
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    assert_same_training(output_dir, straight)


@pytest.mark.slow  # a stopped run in a subprocess, with the others of the slow tier
def test_ctrl_c_is_one_line_naming_the_checkpoint_the_same_command_resumes_from(corpus, straight, tmp_path):
    output_dir = tmp_path / "run"
    args = run_args(corpus, output_dir)
    command, env = child_command(args, "wait-after-save:4", RELEASE_FILE=str(tmp_path / "never"))
    # SIGINT as a terminal delivers it: a suite started in the background (`cmd &`) passes it on ignored
    restore_sigint = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=restore_sigint
    )
    deadline = time.monotonic() + 120
    while not (output_dir / "checkpoint-4").is_dir():  # saved, and the run waiting in the hook after it
        assert time.monotonic() < deadline and child.poll() is None, child.stderr.read()[-3000:]
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    expected = (
        f"interrupted: the last complete checkpoint is {output_dir}/checkpoint-4; the same command resumes from it"
    )
    assert last.endswith(expected), last
    main(args)
    assert_same_training(output_dir, straight)


@pytest.mark.parametrize(
    "extra, error, message",
    [
        (["--learning_rate", "nan"], UserError, "learning_rate=nan is not allowed"),  # refused up front
        (["--lr_scheduler_type", "cosine_with_min_lr"], ValueError, "min_lr"),  # refused by the Trainer's scheduler
    ],
)
def test_overwrite_of_a_finished_run_deletes_nothing_when_refused(corpus, straight, tmp_path, extra, error, message):
    output_dir = tmp_path / "run"
    shutil.copytree(straight, output_dir)
    before = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()}
    with pytest.raises(error, match=message):
        pretrain(*parse_arguments(run_args(corpus, output_dir, "--overwrite_output_dir", "true", *extra)))
    assert {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()} == before


def test_a_diverging_run_stops_with_an_error_and_keeps_its_last_good_checkpoint(corpus, tmp_path, capsys, monkeypatch):
    original = SymBertPretrainingTrainer.prediction_step

    def nan_after_step_4(self, *args, **kwargs):  # the eval loss of a model that diverged after step 4
        loss, logits, labels = original(self, *args, **kwargs)
        return (loss * float("nan") if self.state.global_step > 4 else loss), logits, labels

    monkeypatch.setattr(SymBertPretrainingTrainer, "prediction_step", nan_after_step_4)
    output_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(run_args(corpus, output_dir))
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert (
        f"the eval loss is nan at step 8, so training stopped there; the checkpoints up to {output_dir / 'checkpoint-4'} are kept"
        in error
    )
    learning_rate = json.loads((RECIPES_DIR / "cpu-demo.json").read_text())["learning_rate"]  # run_args' recipe
    assert f"Lower --learning_rate (it is {learning_rate})" in error
    assert checkpoints(output_dir) == ["checkpoint-4"] and checkpoint_problem(output_dir / "checkpoint-4") is None
    assert not (output_dir / STAGING_DIR).exists()
    assert not (output_dir / "model.safetensors").exists() and not (output_dir / "training_summary.json").exists()
    assert metric_rows(output_dir)[-1] == (8, "", "nan")  # the run ended at the NaN
    assert not (output_dir / LOCK_FILE).exists()

    (output_dir / LOCK_FILE).touch()  # as a killed run leaves it: run again, resumed, it diverges again
    with pytest.raises(SystemExit):
        main(run_args(corpus, output_dir))
    assert "at step 8" in capsys.readouterr().err and not (output_dir / LOCK_FILE).exists()
    assert checkpoints(output_dir) == ["checkpoint-4"]


@pytest.mark.parametrize("eval_on_start", [True, False], ids=["NaN at step 0", "NaN at step 4"])
def test_a_run_diverged_from_the_start_ends_with_the_message_and_leaves_nothing(
    corpus,
    tmp_path,
    capsys,
    eval_on_start,
):
    """A model whose eval loss is NaN from its first evaluation (initializer_range 1e30) is stopped there, with the
    divergence message and exit status 2; no checkpoint was saved, so the folder it made is gone, lock file and all."""
    output_dir = tmp_path / "run"
    overrides = ["--config_overrides", '{"initializer_range": 1e30}', "--eval_on_start", str(eval_on_start).lower()]
    with pytest.raises(SystemExit) as exit_info:
        main(run_args(corpus, output_dir, *overrides))
    captured = capsys.readouterr()
    step = 0 if eval_on_start else 4
    assert exit_info.value.code == 2 and "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    assert f"Training diverged: the eval loss is nan at step {step}, so training stopped there; no checkpoint" in line
    if eval_on_start:
        assert "'loss'" not in captured.out  # not one step trained
    assert not output_dir.exists()


def test_training_summary_holds_what_the_release_needs(straight):
    summary = json.loads((straight / "training_summary.json").read_text())
    arguments = summary["training_arguments"]
    assert (
        arguments["learning_rate"] == 0.002 and arguments["max_steps"] == 8 and arguments["save_steps"] == 4
    )  # cpu-demo's rate
    assert arguments["output_dir"] == str(straight) and arguments["lr_scheduler_type"] == "linear"
    assert 0 < summary["train_runtime"] < 600
    assert summary["steps"] == 8 and summary["world_size"] == 1 and summary["data_arguments"]["max_seq_length"] == 32
    assert not list(straight.glob(".*.tmp"))  # written through a temporary file, which is gone


def metric_keys(output_dir):
    """(step, metric) of every value in metrics.json; timing metrics aside, one of each is allowed."""
    entries = json.loads((output_dir / "metrics.json").read_text())
    return [(entry["step"], name) for entry in entries for name in entry if name not in ("step", "epoch")]


def logged_losses(output_dir):
    """metrics.csv's (step, loss, eval_loss) rows that hold a loss."""
    return [row for row in metric_rows(output_dir) if row[1] or row[2]]


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("moment", ["after-last-checkpoint", "during-final-save", "mid-install", "before-summary"])
def test_stopped_during_the_final_save_finishes_as_if_uninterrupted(
    corpus,
    straight,
    tmp_path,
    capsys,
    moment,
    kill_signal,
):
    """A run stopped after its last checkpoint (at max_steps) trains no further when run again: it finishes from that
    checkpoint with the uninterrupted run's weights and eval losses, no checkpoint past max_steps, one metrics row per
    step and metric."""
    output_dir = tmp_path / "run"
    args = run_args(corpus, output_dir)
    killed = run_child(args, kill_at=f"{moment}:8", kill_signal=kill_signal)
    assert killed.returncode == -kill_signal, killed.stderr[-3000:]
    assert checkpoints(output_dir) == ["checkpoint-4", "checkpoint-8"]
    assert not (output_dir / "training_summary.json").exists()

    main(args)  # the same command again
    out = capsys.readouterr().out
    assert f"Finishing from {output_dir / 'checkpoint-8'}: it is at the last step" in out and "Resuming" not in out
    assert checkpoints(output_dir) == ["checkpoint-4", "checkpoint-8"]  # no checkpoint-9
    assert json.loads((output_dir / "training_summary.json").read_text())["steps"] == 8
    assert_same_training(output_dir, straight)
    keys = metric_keys(output_dir)
    assert len(keys) == len(set(keys))
    rows, reference_rows = logged_losses(output_dir), logged_losses(straight)
    for (step, loss, eval_loss), (step_ref, loss_ref, eval_loss_ref) in zip(rows, reference_rows, strict=True):
        assert step == step_ref and bool(loss) == bool(loss_ref) and bool(eval_loss) == bool(eval_loss_ref)
        for value, ref in ((loss, loss_ref), (eval_loss, eval_loss_ref)):
            assert not value or abs(float(value) - float(ref)) <= 1e-5


def test_metrics_hold_one_row_per_step_and_metrics(tmp_path):
    history = [
        {"loss": 5.0, "step": 2, "epoch": 0.1},
        {"loss": 4.0, "step": 4, "epoch": 0.2},
        {"eval_loss": 4.5, "step": 4, "epoch": 0.2},
        {"loss": 3.9, "step": 4, "epoch": 0.2},  # step 4 logged again, as by a run resumed from an older state
    ]
    write_metrics(history, tmp_path)
    assert metric_rows(tmp_path) == [(2, "5.0", ""), (4, "", "4.5"), (4, "3.9", "")]
    assert metric_keys(tmp_path) == [(2, "loss"), (4, "eval_loss"), (4, "loss")]


def test_overwrite_deletes_only_what_a_run_wrote(corpus, straight, tmp_path, capsys):
    output_dir = tmp_path / "run"
    shutil.copytree(straight, output_dir)
    (output_dir / "notes.txt").write_text("mine\n")
    (output_dir / "checkpoint-backup").mkdir()
    (output_dir / "checkpoint-backup" / "model.safetensors").write_bytes(b"a copy of mine")
    (output_dir / "checkpoint-8.old").write_text("mine too\n")
    (output_dir / "data").mkdir()
    (output_dir / "data" / "metrics.csv").write_text("mine, in a subfolder\n")
    theirs = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()}
    user_files = {path: data for path, data in theirs.items() if re.search(r"notes|backup|\.old|data/", str(path))}
    previous = sorted(path.name for path in straight.iterdir() if path.name not in (LOCK_FILE, "runs"))
    assert "checkpoint-8" in previous and "model.safetensors" in previous and "training_summary.json" in previous

    main(run_args(corpus, output_dir, "--overwrite_output_dir", "true", "--max_steps", "4"))
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("--overwrite_output_dir: deleted")]
    assert line == f"--overwrite_output_dir: deleted the earlier run's {', '.join(previous)} from {output_dir}"
    assert {path: path.read_bytes() for path in user_files} == user_files  # untouched
    assert checkpoints(output_dir) == ["checkpoint-4", "checkpoint-8.old", "checkpoint-backup"]
    assert json.loads((output_dir / "training_summary.json").read_text())["steps"] == 4


def with_overrides(**changes):
    """cpu-demo's config overrides (run_args' recipe) with `changes`, as a --config_overrides argument."""
    overrides = json.loads((RECIPES_DIR / "cpu-demo.json").read_text())["config_overrides"]
    return ["--config_overrides", json.dumps({**overrides, **changes})]


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"hidden_act": "gelu_new"}, ["its hidden_act is 'gelu' but this run's is 'gelu_new'"]),
        ({"intermediate_size": 256}, ["its intermediate_size is 512 but this run's is 256"]),
        (
            {
                "hidden_dropout_prob": 0.1,
                "layer_norm_eps": 1e-6,
                "pairwise_init": "identity",
                "num_key_value_heads": 2,
                "max_position_embeddings": 64,
                "type_vocab_size": 1,
                "initializer_range": 0.02,
            },
            [
                "its hidden_dropout_prob is 0.0 but this run's is 0.1",
                "its initializer_range is 0.06 but this run's is 0.02",
                "its layer_norm_eps is 1e-12 but this run's is 1e-06",
                "its max_position_embeddings is 512 but this run's is 64",
                "its num_key_value_heads is None but this run's is 2",
                "its pairwise_init is 'normal' but this run's is 'identity'",
                "its type_vocab_size is 2 but this run's is 1",
            ],
        ),
    ],
    ids=["hidden_act", "intermediate_size", "seven at once"],
)
def test_resume_refuses_a_checkpoint_of_another_architecture(corpus, straight, tmp_path, capsys, changes, named):
    """Every architecture field of the checkpoint's config is checked against the run's, before anything trains: the
    automatic resume of an interrupted run, and --resume_from_checkpoint into another folder."""
    output_dir = tmp_path / "run"
    shutil.copytree(straight, output_dir)
    (output_dir / "training_summary.json").unlink()  # an interrupted run: it resumes from checkpoint-8
    before = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()}
    with pytest.raises(UserError) as error:
        run(run_args(corpus, output_dir, *with_overrides(**changes)))
    message = str(error.value)
    assert message.startswith(f"Cannot resume from {output_dir / 'checkpoint-8'}: its ")
    assert message.count("but this run's is") == len(named) and all(difference in message for difference in named)
    assert "Resuming" not in capsys.readouterr().out
    assert {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()} == before

    other = tmp_path / "other"
    resume = ["--resume_from_checkpoint", str(straight / "checkpoint-4")]
    with pytest.raises(UserError, match=re.escape(named[0])):
        run(run_args(corpus, other, *resume, *with_overrides(**changes)))
    assert not other.exists()


@pytest.mark.parametrize("state", ["trained", "finishing"])
def test_a_full_disk_during_the_final_save_leaves_the_folder_as_it_was(
    corpus,
    straight,
    tmp_path,
    capsys,
    monkeypatch,
    state,
):
    """The final model is written into a staging folder, then moved into place: a write that fails (ENOSPC, half a
    weights file written) changes nothing in place, ends with one line naming the path and the free space, and the
    same command, run again, finishes the run."""
    output_dir = tmp_path / "run"
    if state == "finishing":  # stopped before its summary: the final model of before is in place
        shutil.copytree(straight, output_dir)
        (output_dir / "training_summary.json").unlink()
    before = {
        path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file() and "metrics" not in path.name
    }
    save_file = modeling_utils.safe_save_file

    def full_disk(tensors, filename, *args, **kwargs):
        if FINAL_STAGING_DIR in str(filename):
            with open(filename, "wb") as file:
                file.write(b"\0" * 1000)  # what fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return save_file(tensors, filename, *args, **kwargs)

    args = run_args(corpus, output_dir)
    with monkeypatch.context() as patch:
        patch.setattr(modeling_utils, "safe_save_file", full_disk)
        with pytest.raises(SystemExit) as exit_info:
            main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err
    staged = output_dir / FINAL_STAGING_DIR / "model.safetensors"
    assert re.fullmatch(
        rf".*error: Cannot write the final model: {re.escape(str(staged))}: No space left on device "
        r"\(\d+\.\d\d GiB free on its disk\); nothing in place was replaced and the checkpoints are kept: .*",
        line,
    ), line
    after = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file() and "metrics" not in path.name}
    if state == "trained":  # the checkpoints and metrics only: no config or code without weights
        assert sorted(path.name for path in output_dir.iterdir()) == [
            "checkpoint-4",
            "checkpoint-8",
            "metrics.csv",
            "metrics.json",
        ]
    else:  # as it was, but for the lock file, which a failed run removes
        assert after == {path: data for path, data in before.items() if path.name != LOCK_FILE}

    main(args)  # with space again
    assert "Finishing from" in capsys.readouterr().out
    assert not (output_dir / FINAL_STAGING_DIR).exists()
    assert_same_training(output_dir, straight)


def no_space(filename):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)


# How each writer of a checkpoint reports a full disk: (what it writes, the error it raises, the reason named)
WRITER_FAILURES = {
    "OSError": ("weights", no_space, "No space left on device"),
    "SafetensorError": (
        "weights",
        lambda filename: SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
        "No space left on device",
    ),
    "torch RuntimeError": (
        "optimizer",
        lambda filename: RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),
        "the write failed",
    ),
    "tokenizers Exception": ("tokenizer", lambda filename: Exception("File too large (os error 27)"), "File too large"),
}


def fail_writer(monkeypatch, writer, where):
    """Make WRITER_FAILURES[writer]'s writer fail, as a full disk does, for what it writes into `where`; returns the
    reason the error line names."""
    part, failure, reason = WRITER_FAILURES[writer]
    save_file, torch_save = modeling_utils.safe_save_file, torch.save
    save_tokenizer = PreTrainedTokenizerBase.save_pretrained

    def save_weights(tensors, filename, *args, **kwargs):
        if part == "weights" and where in str(filename):
            raise failure(filename)
        return save_file(tensors, filename, *args, **kwargs)

    def save_state(state, filename, *args, **kwargs):
        if part == "optimizer" and where in str(filename):
            with open(filename, "wb") as file:
                file.write(b"\0" * 1000)  # what fitted
            raise failure(filename)
        return torch_save(state, filename, *args, **kwargs)

    def save_tokenizer_files(self, directory, *args, **kwargs):
        if part == "tokenizer" and where in str(directory):
            raise failure(directory)
        return save_tokenizer(self, directory, *args, **kwargs)

    monkeypatch.setattr(modeling_utils, "safe_save_file", save_weights)
    monkeypatch.setattr(torch, "save", save_state)
    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", save_tokenizer_files)
    return reason


@pytest.mark.parametrize("writer", WRITER_FAILURES)
def test_a_full_disk_while_saving_a_checkpoint_is_one_line(corpus, tmp_path, capsys, monkeypatch, writer):
    """However the writer reports it (an OSError, safetensors', torch's or tokenizers' own error), a failed write
    of checkpoint-8 is one line naming the path and the free space, and its staging folder is gone."""
    reason = fail_writer(monkeypatch, writer, f"{STAGING_DIR}/checkpoint-8")
    output_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(run_args(corpus, output_dir))
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    staged = output_dir / STAGING_DIR / "checkpoint-8"
    if writer == "OSError":
        staged = staged / "model.safetensors"
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert re.search(
        rf"error: Cannot write checkpoint checkpoint-8: {re.escape(str(staged))}: {reason}.* "
        r"\(\d+\.\d\d GiB free on its disk\)",
        line,
    ), line
    assert checkpoints(output_dir) == ["checkpoint-4"] and not (output_dir / STAGING_DIR).exists()
    assert checkpoint_problem(output_dir / "checkpoint-4") is None and not (output_dir / LOCK_FILE).exists()


def test_a_file_size_limit_is_one_line(corpus, tmp_path):
    """Under `ulimit -f` (RLIMIT_FSIZE) the command ignores SIGXFSZ, so the write that passes the limit fails with
    EFBIG: one line naming the path, no core dump, no staging folder left."""
    output_dir = tmp_path / "run"
    command, env = child_command(run_args(corpus, output_dir))
    limit = 200_000  # bytes: the metrics fit, the first checkpoint's weights do not

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, preexec_fn=limit_file_size)
    staged = output_dir / STAGING_DIR / "checkpoint-4"
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"Cannot write checkpoint checkpoint-4: {staged}" in line and "File too large" in line, line
    assert not (output_dir / STAGING_DIR).exists() and not list(output_dir.glob("checkpoint-*"))


@pytest.mark.parametrize("writer", ["SafetensorError", "tokenizers Exception"])
def test_a_full_disk_during_the_final_save_is_one_line_whatever_the_writer(
    corpus,
    tmp_path,
    capsys,
    monkeypatch,
    writer,
):
    """safetensors' and tokenizers' own errors in the final save: one line naming the staging path and the free
    space, and the staging folder removed (its space given back); the checkpoints stay."""
    reason = fail_writer(monkeypatch, writer, FINAL_STAGING_DIR)
    output_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(run_args(corpus, output_dir))
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert exit_info.value.code == 2 and "Traceback" not in err
    staged = output_dir / FINAL_STAGING_DIR
    assert f"Cannot write the final model: {staged}: {reason} (" in line and "GiB free on its disk" in line, line
    assert checkpoints(output_dir) == ["checkpoint-4", "checkpoint-8"] and not staged.exists()


def test_the_hub_token_is_in_no_file_of_the_run(corpus, tmp_path):
    secret = "hf_thisIsNotARealTokenButMustNeverBeSaved"
    output_dir = tmp_path / "run"
    main(run_args(corpus, output_dir, hub_token=secret))
    files = [path for path in output_dir.rglob("*") if path.is_file()]
    assert any(path.name == "training_args.bin" for path in files)
    assert [path for path in files if secret.encode() in path.read_bytes()] == []


def large_corpus(two_file_corpus, folder):  # noqa: F811
    """A copy of the two-file corpus whose second file is past twice the 64 KiB the sampled fingerprint reads at each
    end."""
    shutil.copytree(two_file_corpus, folder)
    (folder / "part1.txt").write_text((folder / "part1.txt").read_text() * 24)
    assert (folder / "part1.txt").stat().st_size > 3 * SAMPLED_BYTES
    return folder


def edit_in_the_middle(path):
    """One word changed halfway through: the size and both 64 KiB ends stay as they were."""
    text = path.read_text()
    middle = text.index(" the ", len(text) // 2)
    path.write_text(text[:middle] + " a   " + text[middle + 5 :])


@pytest.mark.parametrize("streaming", ["true", "false"], ids=["stream", "map"])
def test_a_resume_on_changed_data_is_refused_naming_the_file(two_file_corpus, tmp_path, streaming):  # noqa: F811
    """An edit in the middle of a file (size and ends unchanged) is refused: `contents` is the sha256 of each whole
    file, in the order read."""
    corpus = large_corpus(two_file_corpus, tmp_path / "corpus")
    extra = ("--streaming", streaming, "--max_steps", "4", "--save_steps", "2", "--eval_steps", "2")
    straight = tmp_path / "straight"
    pretrain(*parse_arguments(resume_args(corpus, straight, *extra)))
    saved = json.loads((straight / "checkpoint-2" / DATA_POSITION_FILE.format(rank=0)).read_text())["data"]
    assert list(saved["files"]) == ["0: part0.txt", "1: part1.txt"] and saved["block_length"] == 32
    assert saved["contents"] == [
        [f"{index}: part{index}.txt", file_sha256(corpus / f"part{index}.txt")] for index in (0, 1)
    ]
    sampled = file_fingerprint(corpus / "part1.txt")
    edit_in_the_middle(corpus / "part1.txt")
    assert file_fingerprint(corpus / "part1.txt") == sampled  # what the size and ends alone would not see
    resumed = tmp_path / "resumed"
    with pytest.raises(
        UserError,
        match=r"Cannot resume from .*checkpoint-2: the training data are not those it was trained on \(contents "
        r"\(the data in the order read\) hold at 1 1: part1.txt \(sha256 [0-9a-f]{16}\) there but 1: part1.txt "
        r"\(sha256 [0-9a-f]{16}\) here\).*--overwrite_output_dir true",
    ):
        resume_from(straight, 2, resumed, resume_args(corpus, resumed, *extra))


def copied_over_itself(path):
    shutil.copy2(path, path.with_name("copy.txt"))  # another file (inode), the same bytes and times
    os.replace(path.with_name("copy.txt"), path)


@pytest.mark.parametrize(
    "edit, same",
    [
        (lambda path: None, True),
        (lambda path: os.utime(path, (0, 0)), True),
        (copied_over_itself, True),
        (edit_in_the_middle, False),
        (lambda path: path.write_text(path.read_text() + "x"), False),
    ],
    ids=["read again", "touched", "copied over itself", "a word in the middle", "a byte appended"],
)
def test_the_data_fingerprint_follows_the_whole_content_only(two_file_corpus, tmp_path, edit, same):  # noqa: F811
    """The same files give the same fingerprint, whatever their times or inodes; any change of content another."""
    corpus = large_corpus(two_file_corpus, tmp_path / "corpus")
    data_args = parse_arguments(resume_args(corpus, tmp_path / "run"))[2]
    tokenizer = load_tokenizer(data_args)
    before = data_fingerprint(data_args, tokenizer, [])
    edit(corpus / "part1.txt")
    after = data_fingerprint(data_args, tokenizer, [])
    assert (after == before) is same
    assert [name for name, _ in after["contents"]] == ["0: part0.txt", "1: part1.txt"]


def test_a_checkpoint_of_the_sampled_fingerprint_resumes_with_a_notice(two_file_corpus, tmp_path, capsys):  # noqa: F811
    """A checkpoint saved before `contents` (each file by its size and 64 KiB ends only) resumes on the same files,
    with a notice that the data are compared by what it saved; a change that fingerprint sees is still refused."""
    corpus = large_corpus(two_file_corpus, tmp_path / "corpus")
    extra = ("--max_steps", "4", "--save_steps", "2", "--eval_steps", "2")
    straight = tmp_path / "straight"
    pretrain(*parse_arguments(resume_args(corpus, straight, *extra)))
    position = straight / "checkpoint-2" / DATA_POSITION_FILE.format(rank=0)
    values = json.loads(position.read_text())
    del values["data"]["contents"]
    position.write_text(json.dumps(values))
    resumed = tmp_path / "resumed"
    capsys.readouterr()
    resume_from(straight, 2, resumed, resume_args(corpus, resumed, *extra))
    assert (
        f"{resumed / 'checkpoint-2'} was saved by an earlier version, which fingerprinted each training file by its "
        in capsys.readouterr().out
    )
    assert_same_training(resumed, straight)
    (corpus / "part0.txt").write_text((corpus / "part0.txt").read_text().replace("the", "a", 1))
    again = tmp_path / "again"
    with pytest.raises(
        UserError, match=r"the training data are not those it was trained on \(files is .*'0: part0.txt'"
    ):
        resume_from(straight, 2, again, resume_args(corpus, again, *extra))


def test_a_stream_resumed_with_two_workers_checks_its_reader_states(two_file_corpus, tmp_path, capsys):  # noqa: F811
    """A stream read by 2 dataloader workers resumes from its checkpoint as the uninterrupted run (each saved reader
    state has the stream's own shape); one whose reader state is damaged is one line naming the checkpoint (no
    worker traceback), exit status 2 (the states' every damage: data_order::test_a_damaged_reader_state_...)."""
    extra = ("--streaming", "true", "--dataloader_num_workers", "2", "--max_steps", "4", "--save_steps", "2")
    straight = tmp_path / "straight"
    pretrain(*parse_arguments(resume_args(two_file_corpus, straight, *extra, "--eval_steps", "2")))
    resumed = tmp_path / "resumed"
    resume_from(straight, 2, resumed, resume_args(two_file_corpus, resumed, *extra, "--eval_steps", "2"))
    assert_same_training(resumed, straight)

    damaged = tmp_path / "damaged"
    shutil.copytree(straight / "checkpoint-2", damaged / "checkpoint-2")
    position = damaged / "checkpoint-2" / DATA_POSITION_FILE.format(rank=0)
    values = json.loads(position.read_text())
    values["reader_states"]["1"]["dataset"]["epoch"] = 3  # datasets would restart the reader's part of the stream
    position.write_text(json.dumps(values))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(resume_args(two_file_corpus, damaged, *extra, "--eval_steps", "2"))
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert exit_info.value.code == 2 and "Traceback" not in err, err[-3000:]
    assert f"Cannot resume the stream from {damaged / 'checkpoint-2'}: reader 1's" in line, line
    assert "dataset.epoch is 3, not 0" in line and "the checkpoint is damaged" in line, line
