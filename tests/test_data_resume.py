"""A pre-training run stopped after any checkpoint (inside the first pass over its data, right after that pass ends,
inside the second) and run again ends with the uninterrupted run's weights and eval losses: streamed data with 0 and
2 dataloader workers, and map-style data. Also the passes the run logs and records."""

import json
import random
import shutil

import pytest

from symbert.training import data
from symbert.training.arguments import parse_arguments
from symbert.training.blocks import DATA_POSITION_FILE
from symbert.training.pretrain import pretrain
from test_pretrain import WORDS, assert_same_training, eval_losses

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_file_corpus(tmp_path_factory):
    """Two small text files (two shards of a stream: one per dataloader worker) and a tokenizer trained on them."""
    root = tmp_path_factory.mktemp("two-file-corpus")
    rng = random.Random(1)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 25))) + "." for _ in range(240)]
    for index in range(2):
        (root / f"part{index}.txt").write_text("\n".join(lines[index::2]) + "\n")
    data.train_wordpiece(lines, vocab_size=200).save_pretrained(root / "tokenizer")
    return root


def resume_args(corpus, output_dir, *extra):
    return [
        "--recipe",
        "cpu-demo",
        "--output_dir",
        str(output_dir),
        "--train_files",
        str(corpus / "part0.txt"),
        str(corpus / "part1.txt"),
        "--tokenizer",
        str(corpus / "tokenizer"),
        "--max_seq_length",
        "32",
        "--eval_blocks",
        "8",
        "--per_device_train_batch_size",
        "8",
        "--max_steps",
        "30",
        "--warmup_steps",
        "2",
        "--eval_steps",
        "5",
        "--save_steps",
        "1",
        "--logging_steps",
        "5",
        "--eval_on_start",
        "false",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def passes_at(output_dir, step):
    return json.loads((output_dir / f"checkpoint-{step}" / DATA_POSITION_FILE.format(rank=0)).read_text())["passes"]


def stop_points(output_dir, max_steps):
    """Checkpoint steps inside the first pass, the first one after it ended, and one inside the second pass."""
    ended = next(step for step in range(1, max_steps + 1) if passes_at(output_dir, step) >= 1)
    assert 2 < ended < max_steps - 3, f"the first pass should end well inside the run (at step {ended})"
    return [ended // 2, ended, (ended + max_steps) // 2]


def resume_from(straight, step, resumed, args):
    """A copy of `straight` as a run stopped right after checkpoint-`step` left it, run again to the end."""
    resumed.mkdir()
    shutil.copytree(straight / f"checkpoint-{step}", resumed / f"checkpoint-{step}")
    pretrain(*parse_arguments(args))


@pytest.mark.parametrize(
    "streaming, workers", [("true", "0"), ("true", "2"), ("false", "0")], ids=["stream", "stream-2-workers", "map"]
)
def test_a_run_stopped_at_any_pass_resumes_exactly(two_file_corpus, tmp_path, streaming, workers):
    extra = ("--streaming", streaming, "--dataloader_num_workers", workers)
    straight = tmp_path / "straight"
    pretrain(*parse_arguments(resume_args(two_file_corpus, straight, *extra)))
    summary = json.loads((straight / "training_summary.json").read_text())
    assert summary["passes"] == passes_at(straight, 30) and summary["passes"] > 1.2
    for step in stop_points(straight, 30):
        resumed = tmp_path / f"resumed-{step}"
        resume_from(straight, step, resumed, resume_args(two_file_corpus, resumed, *extra))
        assert_same_training(resumed, straight)
        assert eval_losses(resumed) == eval_losses(straight)


def test_map_style_passes_are_exact_in_the_logs(two_file_corpus, tmp_path):
    output_dir = tmp_path / "map"
    pretrain(*parse_arguments(resume_args(two_file_corpus, output_dir, "--save_steps", "100")))
    state = json.loads((output_dir / "trainer_state.json").read_text())
    data_args = parse_arguments(resume_args(two_file_corpus, output_dir))[2]
    train_blocks = len(data.load_blocks(data_args, data.load_tokenizer(data_args), seed=42)[0])
    epochs = {entry["step"]: entry["epoch"] for entry in state["log_history"] if "loss" in entry}
    assert epochs[30] == pytest.approx(30 * 8 / train_blocks)
