"""Pre-training runs compared: the same weights, metrics and evaluations; how runs are launched; resumed runs."""

import csv
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from helpers.corpora import run_args, tiny_sentences, train_tokenizer
from symbert.training.arguments import parse_arguments
from symbert.training.pretrain import pretrain


def assert_same_metrics(output_dir, reference, values=("eval_loss",)):
    """The same metrics.csv rows as the reference run: each row's step and the metrics it holds, and `values` within
    1e-5 (timings differ; a train loss logged over a window that a resume cut averages only the steps after it)."""
    rows, reference_rows = metrics_csv(output_dir), metrics_csv(reference)

    def shape(row):
        return row["step"], sorted(name for name, value in row.items() if value and name != "step")

    assert [shape(row) for row in rows] == [shape(row) for row in reference_rows]
    for row, reference_row in zip(rows, reference_rows, strict=True):
        for name in values:
            assert not row[name] or abs(float(row[name]) - float(reference_row[name])) <= 1e-5, (row, reference_row)


def assert_same_training(output_dir, reference):
    """The same eval losses and final weights as the reference run, within 1e-5."""
    for (step_a, loss_a), (step_b, loss_b) in zip(eval_losses(reference), eval_losses(output_dir), strict=True):
        assert step_a == step_b and abs(loss_a - loss_b) <= 1e-5
    weights_a, weights_b = load_file(reference / "model.safetensors"), load_file(output_dir / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        if name.endswith("attention.self.key.bias"):
            # softmax cancels the key bias, so its exact gradient is 0 and Adam turns rounding noise into lr-sized
            # steps: it differs between two processes' runs (by ~4e-4 under transformers 4.54) while the rest agree
            continue
        torch.testing.assert_close(weights_b[name], weights_a[name], atol=1e-5, rtol=0, msg=name)


def eval_losses(output_dir):
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [(entry["step"], entry["eval_loss"]) for entry in state["log_history"] if "eval_loss" in entry]


LAUNCHERS = {
    # --standalone: a free port for the rendezvous, so that no launch waits on one that another left in use
    "torchrun": ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
    "accelerate": (
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ),
}


@pytest.fixture(scope="module")
def two_file_corpus(tmp_path_factory):
    """Two small text files (two shards of a stream: one per dataloader worker) and a tokenizer trained on them."""
    root = tmp_path_factory.mktemp("two-file-corpus")
    lines = tiny_sentences(240, seed=1)
    for index in range(2):
        (root / f"part{index}.txt").write_text("\n".join(lines[index::2]) + "\n")
    train_tokenizer(root / "tokenizer", lines)
    return root


def resume_args(corpus, output_dir, *extra):
    """test_pretrain's tiny run on the two files: 30 steps of 8 blocks, a checkpoint at every step (the later of two
    equal options wins)."""
    files = (str(corpus / "part0.txt"), str(corpus / "part1.txt"))
    steps = ("--max_steps", "30", "--eval_steps", "5", "--save_steps", "1", "--logging_steps", "5")
    return run_args(corpus, output_dir, "--train_files", *files, "--per_device_train_batch_size", "8", *steps, *extra)


def resume_from(straight, step, resumed, args):
    """A copy of `straight` as a run stopped right after checkpoint-`step` left it, run again to the end."""
    resumed.mkdir()
    shutil.copytree(straight / f"checkpoint-{step}", resumed / f"checkpoint-{step}")
    pretrain(*parse_arguments(args))


def metrics_csv(output_dir):
    with open(output_dir / "metrics.csv") as file:
        return list(csv.DictReader(file))
