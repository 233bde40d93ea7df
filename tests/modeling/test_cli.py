"""The `symbert-*` commands: --help says what each does and shows the defaults it applies; a user error is one line
on stderr and exit status 2, with the traceback only under SYMBERT_DEBUG=1."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from symbert.cli import UserError
from symbert.hub_cards import release
from symbert.tools import bert_export, onnx_export, parameter_table, symmetry
from symbert.training import arguments, pretrain
from symbert.training.glue import command as glue

COMMANDS = {
    "symbert-params": parameter_table,
    "symbert-onnx": onnx_export,
    "symbert-to-bert": bert_export,
    "symbert-symmetry": symmetry,
    "symbert-pretrain": pretrain,
    "symbert-glue": glue,
    "symbert-release": release,
}


def run_main(monkeypatch, capsys, name, argv):
    """`name`'s main(argv) in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [name])
    with pytest.raises(SystemExit) as exit_info:
        COMMANDS[name].main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def help_text(monkeypatch, capsys, name, *argv):
    status, out, _ = run_main(monkeypatch, capsys, name, [*argv, "--help"])
    assert status == 0
    return out


def option_help(text, option):
    """The help of `option` in --help's output: from its line to the next option's."""
    match = re.search(rf"^  {re.escape(option)}\b.*?(?=^  -|^\S|\Z)", text, flags=re.S | re.M)
    assert match, f"{option} is not in --help"
    return " ".join(match.group(0).split())


@pytest.mark.parametrize("name", COMMANDS)
def test_help_starts_with_description_and_example(monkeypatch, capsys, name):
    text = help_text(monkeypatch, capsys, name)
    description = COMMANDS[name].__doc__.strip()
    assert text.startswith(description.splitlines()[0])  # no usage block first
    assert re.search(rf"^    {name} ", text, flags=re.M), "no example line"
    assert "SYMBERT_DEBUG=1" in text


def test_pretrain_help_lists_recipes_and_shows_their_values(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "symbert-pretrain")
    for path in sorted(arguments.RECIPES_DIR.glob("*.json")):
        comment = json.loads(path.read_text())["_comment"]
        assert re.search(rf"^  {path.stem}: {re.escape(comment.split()[0])}", text, flags=re.M), path.stem
    assert "replace the defaults shown" in text
    assert option_help(text, "--learning_rate").endswith("(default: 5e-05)")  # the Trainer's, without a recipe
    headings = ["Run arguments:", "Model arguments:", "Data arguments:", "Trainer arguments"]
    assert [text.index(h) for h in headings] == sorted(text.index(h) for h in headings)
    assert (
        text.index("Run arguments:") < text.index("--precision") < text.index("Model arguments:") < text.index("--size")
    )
    assert text.index("Trainer arguments") < text.index("--learning_rate")
    with_recipe = help_text(monkeypatch, capsys, "symbert-pretrain", "--recipe", "cpu-demo")
    recipe = json.loads((arguments.RECIPES_DIR / "cpu-demo.json").read_text())
    assert option_help(with_recipe, "--learning_rate").endswith(f"(default: {recipe['learning_rate']})")
    assert option_help(with_recipe, "--max_seq_length").endswith(f"(default: {recipe['max_seq_length']})")
    assert option_help(help_text(monkeypatch, capsys, "symbert-pretrain", "--recipe=paper-base"), "--size").endswith(
        "(default: base)"
    )


def test_glue_help_lists_tasks_and_shows_the_protocol_it_applies(monkeypatch, capsys, tmp_path):
    text = help_text(monkeypatch, capsys, "symbert-glue")
    tasks = text[text.index("Tasks (--tasks") :].split("\n\n")[0]
    assert all(f"{task} (" in tasks for task in glue.TASKS)
    assert option_help(text, "--learning_rate").endswith("(default: 1e-05)")
    assert option_help(text, "--num_train_epochs").endswith("(default: 5.0)")
    assert option_help(text, "--per_device_train_batch_size").endswith("(default: 16)")
    warmup = "--warmup_steps" if "--warmup_ratio" not in text else "--warmup_ratio"  # 4.x: a ratio of its own
    assert option_help(text, warmup).endswith("(default: 0.1)")
    assert text.index("--skip_malformed_rows") < text.index("Trainer arguments") < text.index("--learning_rate")
    # and the values shown are the values applied
    _, args, _, _ = glue.parse_arguments(["--model", "m", "--output_dir", str(tmp_path)])
    assert (args.learning_rate, args.num_train_epochs, args.per_device_train_batch_size) == (1e-5, 5, 16)


@pytest.mark.parametrize(
    "arguments",
    [arguments.RunArguments, arguments.ModelArguments, arguments.DataArguments, glue.GlueArguments],
    ids=lambda c: c.__name__,
)
def test_every_argument_of_ours_has_help(arguments):
    assert [f.name for f in dataclasses.fields(arguments) if not f.metadata.get("help", "").strip()] == []


USER_ERRORS = {
    "symbert-params": (["--sizes", "tiny,huge"], "'huge'"),
    "symbert-onnx": (["some/model", "model.txt"], "'model.txt'"),
    "symbert-to-bert": (["./no/such/model", "{tmp}"], "no/such/model"),
    "symbert-symmetry": (["./no/such/model"], "no/such/model"),
    "symbert-pretrain": (["--size", "huge", "--output_dir", "{tmp}"], "'huge'"),
    "symbert-glue": (["--model", "m", "--tasks", "rte,nope", "--output_dir", "{tmp}"], "nope"),
    "symbert-release": (["--tiny_random", "--namespace", "my-org", "--checkpoints", "1,x"], "'1,x'"),
}
ARGPARSE_ERRORS = {  # argparse's own errors (unknown option, value of the wrong type) are one line too
    "symbert-params": (["--sises", "tiny"], "--sises"),
    "symbert-onnx": (["m", "m.onnx", "--head", "decoder"], "'decoder'"),
    "symbert-to-bert": (["m"], "output"),
    "symbert-symmetry": ([], "model"),
    "symbert-pretrain": (["--max_steps", "ten", "--output_dir", "{tmp}"], "'ten'"),
    "symbert-glue": (["--model", "m", "--learning_rte", "1e-5"], "--learning_rte"),
    "symbert-release": (["--tiny_random"], "--namespace"),
}


@pytest.mark.parametrize("errors", [USER_ERRORS, ARGPARSE_ERRORS], ids=["user-error", "argparse-error"])
@pytest.mark.parametrize("name", COMMANDS)
def test_user_error_is_one_line_and_exit_status_2(monkeypatch, capsys, tmp_path, name, errors):
    argv, named = errors[name]
    monkeypatch.delenv("SYMBERT_DEBUG", raising=False)
    status, out, err = run_main(monkeypatch, capsys, name, [arg.format(tmp=tmp_path / "out") for arg in argv])
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{name}: error: ") and named in err
    assert not (tmp_path / "out").exists()


@pytest.mark.heavy
def test_symbert_debug_raises_with_traceback(monkeypatch):
    monkeypatch.setenv("SYMBERT_DEBUG", "1")
    with pytest.raises(UserError, match="'huge'"):
        parameter_table.main(["--sizes", "huge"])
    # as a command: the traceback, ending in the same message
    env = {**os.environ, "SYMBERT_DEBUG": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "symbert.tools.parameter_table", "--sizes", "huge"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback") and "symbert.cli.UserError: unknown size 'huge'" in result.stderr
    env["SYMBERT_DEBUG"] = "0"
    result = subprocess.run(
        [sys.executable, "-m", "symbert.tools.parameter_table", "--sizes", "huge"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.heavy
def test_a_failed_onnx_export_leaves_the_earlier_file_as_it_was(monkeypatch, capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    import torch

    from helpers.tiny import tiny_config
    from symbert import SymBertModel

    good = tmp_path / "good"
    SymBertModel(tiny_config()).save_pretrained(good)
    output = tmp_path / "model.onnx"
    onnx_export.main([str(good), str(output)])
    exported = output.read_bytes()
    bad = SymBertModel(tiny_config())
    with torch.no_grad():
        bad.encoder.layer[0].attention.output.dense.weight[0, 0] = float("nan")
    bad.save_pretrained(tmp_path / "bad")
    status, _, err = run_main(monkeypatch, capsys, "symbert-onnx", [str(tmp_path / "bad"), str(output)])
    assert status == 2 and "holds non-finite weights (encoder.layer.0.attention.output.dense.weight)" in err
    monkeypatch.setattr(onnx_export, "max_difference", lambda model, path: 1.0)  # an export that does not match
    status, _, err = run_main(monkeypatch, capsys, "symbert-onnx", [str(good), str(output)])
    assert status == 2 and "differs from PyTorch by 1.00e+00" in err and "was not written" in err
    assert output.read_bytes() == exported and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad",
        "good",
        "model.onnx",
    ]
