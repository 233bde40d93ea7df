"""Bad input files of benchmarks/convergence.py and benchmarks/convergence_factor.py: each is one line on stderr and
exit status 2 naming the file and the problem (never a traceback, a hang on a named pipe, or an input overwritten by
--output), and a good one still gives the right table."""

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import convergence  # noqa: E402
import convergence_factor  # noqa: E402

from helpers.assertions import assert_one_line  # noqa: E402
from symbert.cli import UserError, run_command  # noqa: E402


@pytest.fixture(autouse=True)
def no_hang():
    """A read that waits on a named pipe fails the test after 20 s instead of hanging the suite."""

    def stop(signum, frame):
        raise TimeoutError("a read waited on its input for 20 s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def study(exits_by_type, seeds=None):
    """A convergence.json record whose plateau exits are {type: [exit per seed]}, its other metrics null."""
    rows = [
        {
            "attention_type": name,
            **{
                metric: {"per_seed": list(exits) if metric == "plateau_exit" else [None] * len(exits)}
                for metric in convergence.METRICS
            },
        }
        for name, exits in exits_by_type.items()
    ]
    return {"summary": rows, **({"seeds": seeds} if seeds is not None else {})}


GOOD = study({"original": [800, 900, 700], "symmetric": [600, 650, 580]})


def write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        (json.dumps(GOOD).replace("800", "NaN"), "is not a readable JSON file (NaN is not a number JSON allows"),
        (json.dumps(GOOD).replace("800", "Infinity"), "(Infinity is not a number JSON allows"),
        (json.dumps(GOOD).replace("800", "-Infinity"), "(-Infinity is not a number JSON allows"),
        (json.dumps(GOOD).replace("800", "1e400"), "(1e400 is past the largest float"),
        ('{"summary": [], "summary": ' + json.dumps(GOOD["summary"]) + "}", "(the key 'summary' appears twice"),
        ("[" * 100_000, "(it is nested too deeply for Python's JSON parser)"),
        ("", "{bad} is empty: give a JSON file"),
        (" \n\t", "{bad} is empty: give a JSON file"),
        (b'{"summary": "\xe9"}', "('utf-8' codec can't decode byte 0xe9"),
        ("1" + "0" * 5000, "(Exceeds the limit (4300 digits)"),
        ("not json", "is not a readable JSON file (Expecting value: line 1 column 1 (char 0))"),
    ],
    ids=["nan", "infinity", "minus-infinity", "1e400", "key-twice", "deep", "empty", "blank", "latin-1", "huge-int",
         "text"],
)  # fmt: skip
def test_a_study_that_is_not_strict_json_is_one_line(content, message, tmp_path, capsys):
    good, bad = write(tmp_path / "good.json", GOOD), write(tmp_path / "bad.json", content)
    expected = full_message("study b: {bad}", message)
    assert_one_line(convergence_factor.main, ["a={good}", "b={bad}"], expected, capsys, good=good, bad=bad)


def full_message(named_file, message):
    """The refusal `named_file` (the file as the message names it) then `message`: the parser's reason in
    parentheses, or what follows the file's name."""
    if message.startswith("("):
        return f"{named_file} is not a readable JSON file {message}"
    return f"{named_file} {message.removeprefix('{bad} ')}"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: os.mkfifo(path), "{bad} is a named pipe, not a regular file: give a JSON file"),
        (lambda path: path.mkdir(), "{bad} is a folder, not a regular file: give a JSON file"),
        (lambda path: None, "{bad} does not exist"),
    ],
    ids=["named-pipe", "folder", "missing"],
)
def test_a_study_that_is_not_a_regular_file_is_one_line_and_never_waits(make, message, tmp_path, capsys):
    good, bad = write(tmp_path / "good.json", GOOD), tmp_path / "bad.json"
    make(bad)  # a named pipe with no writer: opening it to read would wait forever
    assert_one_line(convergence_factor.main, ["a={good}", "b={bad}"], f"study b: {message}", capsys, good=good, bad=bad)
    link = tmp_path / "link.json"
    link.symlink_to(bad)  # a link to it is what it links to
    if bad.exists():
        assert_one_line(
            convergence_factor.main, ["a={good}", "b={link}"], f"study b: {message.replace('{bad}', '{link}')}",
            capsys, good=good, link=link,
        )  # fmt: skip


def with_row(record, name, metric, per_seed):
    record = json.loads(json.dumps(record))
    row = next(row for row in record["summary"] if row["attention_type"] == name)
    row[metric] = {"per_seed": per_seed}
    return record


@pytest.mark.parametrize(
    "record, message",
    [
        # json reads true as the int 1: a boolean is refused where a number is read
        (with_row(GOOD, "symmetric", "plateau_exit", [600, True, 580]),
         "{bad}: symmetric plateau_exit per_seed[1] is true, not a finite number"),
        (with_row(GOOD, "symmetric", "top1", ["0.2", None, None]),
         '{bad}: symmetric top1 per_seed[0] is "0.2", not a finite number'),
        (with_row(GOOD, "original", "final_eval_loss", [1.0, 2.0]),
         "{bad}: original final_eval_loss has 2 per-seed values, not one per seed (3)"),
        (with_row(GOOD, "original", "step_to_target", None), "{bad}: original step_to_target has no per_seed list"),
        ({"summary": GOOD["summary"] + GOOD["summary"][1:]}, "{bad} has 'symmetric' twice in its summary"),
        ({**GOOD, "seeds": [1, 2, 1]}, "{bad}: seeds names a seed twice ([1, 2, 1])"),
        ({**GOOD, "seeds": [1, True, 3]}, "{bad}: seeds[1] is true, not a whole number of at least 0"),
        ({**GOOD, "seeds": [1, 2]}, "{bad}: original plateau_exit has 3 per-seed values, not one per seed (2)"),
        ({**GOOD, "eval_loss_curves": {"original seed 1": {"50": True}}},
         "{bad}: eval_loss_curves['original seed 1']['50'] is true, not a finite number"),
        ({**GOOD, "eval_loss_curves": {"original seed 1": {"fifty": 5.0}}},
         "{bad}: eval_loss_curves['original seed 1']['fifty']: 'fifty' is not a step"),
        ({**GOOD, "eval_loss_curves": [1, 2]}, "{bad}: eval_loss_curves is not an object of curves"),
        ({"summary": [{"attention_type": 1}]}, "{bad} holds no convergence summary"),
        # finite, but the differences and variances of the table overflowed (OverflowError)
        (with_row(GOOD, "symmetric", "plateau_exit", [1e308, -1e308, 580]),
         "{bad}: symmetric plateau_exit per_seed[0] is 1e+308, past what a study holds: allowed, -1e15 to 1e15"),
        ({**GOOD, "eval_loss_curves": {"original seed 1": {"50": -1e308}}},
         "{bad}: eval_loss_curves['original seed 1']['50'] is -1e+308, past what a study holds"),
    ],
    ids=["boolean", "string", "short-row", "no-per-seed", "type-twice", "seed-twice", "boolean-seed",
         "seeds-count", "boolean-loss", "step-name", "curves-list", "type-not-a-string", "1e308", "1e308-loss"],
)  # fmt: skip
def test_a_study_with_values_it_cannot_hold_is_one_line(record, message, tmp_path, capsys):
    good, bad = write(tmp_path / "good.json", GOOD), write(tmp_path / "bad.json", record)
    assert_one_line(convergence_factor.main, ["a={good}", "b={bad}"], f"study b: {message}", capsys, good=good, bad=bad)


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, capsys, monkeypatch):
    (tmp_path / "in").mkdir()
    first = write(tmp_path / "in" / "a.json", GOOD)
    second = write(tmp_path / "b.json", study({"original": [360, 340, 380], "symmetric": [420, 400, 450]}))
    kept = {path: path.read_bytes() for path in (first, second)}
    (tmp_path / "link.md").symlink_to(first)
    os.link(second, tmp_path / "hard.md")
    monkeypatch.chdir(tmp_path)  # relative paths name the same files another way
    for output, study_path in [
        (str(first), first),
        ("in/../in/a.json", first),  # the same file by another path
        (str(tmp_path / "link.md"), first),  # a link to a study: writing through it would replace the study
        (str(tmp_path / "hard.md"), second),  # a hard link: the same file under another name
        ("b.json", second),
    ]:
        argv = [f"a={first}", "b=b.json", "--output", output]
        expected = (
            f"--output {output} is the study {study_path if study_path == first else 'b.json'}: writing the table"
        )
        assert_one_line(convergence_factor.main, argv, expected, capsys)
    assert {path: path.read_bytes() for path in kept} == kept and (tmp_path / "link.md").is_symlink()
    argv = [f"a={first}", f"b={second}", "--output"]
    assert_one_line(convergence_factor.main, [*argv, str(tmp_path / "in")], "is not a regular file (a folder", capsys)
    assert_one_line(
        convergence_factor.main, [*argv, str(tmp_path / "none" / "f.md")], "its folder {none} does not exist", capsys,
        none=tmp_path / "none",
    )  # fmt: skip
    assert_one_line(convergence_factor.main, [*argv, ""], "--output '' is not a file name", capsys)

    # a good output is written through a temporary file renamed over it: another name for the old file (a hard
    # link) keeps the old text, and no temporary file is left
    output = write(tmp_path / "factor.md", "old table\n")
    os.link(output, tmp_path / "old.md")
    convergence_factor.main([*argv, str(output)])
    table = capsys.readouterr().out
    assert (
        output.read_text() == table and "| `symmetric` | plateau exit (step) | -190 [-353, -27], p = 0.037 |" in table
    )
    assert (tmp_path / "old.md").read_text() == "old table\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["b.json", "factor.md", "hard.md", "in", "link.md",
                                                                "old.md"]  # fmt: skip
    assert {path: path.read_bytes() for path in kept} == kept


def refusal(function):
    """`function` run as a command's body: a UserError becomes one line on stderr and exit status 2."""
    return lambda argv: run_command(lambda _: function(), argv)


def state(log_history):
    return {"global_step": 2, "log_history": log_history}


GOOD_HISTORY = [
    {"eval_loss": 6.0, "step": 0},
    {"loss": 6.1, "step": 1},
    {"eval_loss": 5.0, "step": 1},
    {"eval_loss": 4.5, "step": 2},
    {"train_runtime": 3.5, "step": 2},
]


@pytest.mark.parametrize(
    "content, message",
    [
        (json.dumps(state(GOOD_HISTORY)).replace("5.0", "NaN"), "is not a readable JSON file (NaN is not a number"),
        (state([*GOOD_HISTORY[:3], {"eval_loss": True, "step": 2}]), "log_history[3].eval_loss is true, not a finite"),
        (state([*GOOD_HISTORY[:3], {"eval_loss": "4.5", "step": 2}]), 'log_history[3].eval_loss is "4.5", not a'),
        (state([{"eval_loss": 6.0, "step": False}]), "log_history[0].step is false, not a whole number of at least 0"),
        (state([{"eval_loss": 6.0, "step": 1.5}]), "log_history[0].step is 1.5, not a whole number"),
        (state([*GOOD_HISTORY[:3], {"eval_loss": 4.9, "step": 1}]),
         "log_history[3] evaluates step 1 after step 1: each step once, in order"),
        (state([*GOOD_HISTORY[:4], {"train_runtime": True, "step": 2}]), "log_history[4].train_runtime is true"),
        (state([{"loss": 6.1, "step": 1}]), "holds no evaluation (no log_history entry with an eval_loss)"),
        (state({"eval_loss": 6.0}), "holds no log_history (a list of objects)"),
        ('{"log_history": [], "log_history": []}', "(the key 'log_history' appears twice in one object"),
        ('{"log_history": ' + "[" * 100_000, "(it is nested too deeply for Python's JSON parser)"),
        ("", "is empty: give a JSON file"),
    ],
    ids=["nan", "boolean-loss", "string-loss", "boolean-step", "fractional-step", "step-twice", "boolean-runtime",
         "no-evaluation", "not-a-list", "key-twice", "deep", "empty"],
)  # fmt: skip
def test_a_finished_runs_trainer_state_is_read_strictly(content, message, tmp_path, capsys):
    path = write(tmp_path / "trainer_state.json", content)
    expected = f"{path}: {message}" if message.startswith("log_history") else full_message(str(path), message)
    assert_one_line(refusal(lambda: convergence.run_log_history(tmp_path)), [], expected, capsys)


def test_a_good_trainer_state_is_read_and_a_pipe_or_folder_never_opened(tmp_path, capsys):
    write(tmp_path / "trainer_state.json", state(GOOD_HISTORY))
    assert convergence.run_log_history(tmp_path) == GOOD_HISTORY
    assert convergence.final_eval_loss(GOOD_HISTORY) == 4.5
    for make, kind in [(os.mkfifo, "a named pipe"), (os.mkdir, "a folder")]:
        folder = tmp_path / kind.replace(" ", "-")
        folder.mkdir()
        make(folder / "trainer_state.json")
        message = f"the Trainer state {folder / 'trainer_state.json'} is {kind}, not a regular file"
        assert_one_line(refusal(lambda: convergence.run_log_history(folder)), [], message, capsys)


RUN_RECORD = {
    "command": "python benchmarks/convergence.py --seeds 1",
    "parallel": 1,
    "machine": "a CPU",
    "wall_seconds": 60.0,
    "load_average_start": [0.5, 0.4, 0.3],
    "load_average_end": [1.0, 0.8, 0.6],
    "runs": {"trained": 2, "resumed": 0, "reused": 0},
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"parallel": True}, "parallel is true, not a whole number of at least 1"),
        ({"wall_seconds": "60"}, 'wall_seconds is "60", not a finite number'),
        ({"wall_seconds": -1}, "wall_seconds is -1, below 0"),
        ({"load_average_end": [1.0, True, 0.6]}, "load_average_end (5 min) is true, not a finite number"),
        ({"load_average_start": [0.5]}, "load_average_start is [0.5], not 3 numbers"),
        ({"machine": None}, "machine is null, not a string"),
        ({"runs": {"trained": 2, "resumed": False, "reused": 0}}, "runs.resumed is false, not a whole number"),
    ],
)
def test_a_damaged_run_record_is_one_line(change, message, tmp_path, capsys):
    path = write(tmp_path / "convergence_run.json", {**RUN_RECORD, **change})
    assert_one_line(refusal(lambda: convergence.read_run_record(path)), [], f"{path}: {message}", capsys)


def test_a_good_run_record_is_read_and_a_missing_one_is_none(tmp_path):
    assert convergence.read_run_record(tmp_path / "convergence_run.json") is None
    path = write(tmp_path / "convergence_run.json", RUN_RECORD)
    assert convergence.read_run_record(path) == RUN_RECORD
    facts = convergence.run_facts(RUN_RECORD, None, 2, 0.5, None)
    assert "Wall time 1.0 min;" in facts and "(0.5, 0.4, 0.3) at the start, (1.0, 0.8, 0.6) at the end." in facts


def test_kept_scores_that_are_not_strict_are_computed_again_and_a_pipe_is_refused(tmp_path):
    scores = {"unigram": {"loss": 6.3, "accuracy": 0.05}, "model": {"loss": 5.0, "accuracy": 0.2}}
    path = write(tmp_path / "scores.json", scores)
    assert convergence.read_json(path) == scores and convergence.valid_scores(scores, path)
    assert not convergence.valid_scores({**scores, "model": {"loss": 5.0, "accuracy": True}}, path)
    assert not convergence.valid_scores({"model": scores["model"]}, path)
    write(path, json.dumps(scores).replace("6.3", "NaN"))
    assert convergence.read_json(path) is None  # a cache: computed again and replaced
    assert convergence.read_json(tmp_path / "none.json") is None
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(UserError, match="pipe.json is not a regular file"):
        convergence.read_json(tmp_path / "pipe.json")


def test_runs_evaluated_at_other_steps_are_refused():
    curve = [{"eval_loss": 6.0, "step": 0}, {"eval_loss": 5.0, "step": 10}]
    results = {("original", 1): (curve, None), ("symmetric", 1): (curve, None), ("original", 2): (curve, None)}
    convergence.check_eval_steps(results, ["original", "symmetric"], [1, 2])  # the same steps: accepted
    results["symmetric", 2] = ([curve[0], {"eval_loss": 5.0, "step": 20}], None)
    with pytest.raises(
        UserError, match=r"symmetric seed 2's evaluation 2 is at step 20 but original seed 1's at step 10"
    ):
        convergence.check_eval_steps(results, ["original", "symmetric"], [1, 2])


@pytest.mark.parametrize(
    "value, message",
    [
        ("NaN", "the value of layer_norm_eps is refused (NaN is not a number JSON allows"),
        ("-Infinity", "(-Infinity is not a number JSON allows"),
        ("1e999", "(1e999 is past the largest float"),
        ("[" * 100_000, "(it is nested too deeply for Python's JSON parser)"),
        ("true", "layer_norm_eps=True is invalid; it must be a finite positive number"),  # json's true is the int 1
    ],
    ids=["nan", "minus-infinity", "1e999", "deep", "boolean"],
)
def test_a_types_value_that_is_not_a_number_is_one_line(value, message, tmp_path, capsys):
    argv = ["--types", f"original+layer_norm_eps={value}", "--", "--recipe", "cpu-demo", "--output_dir"]
    assert_one_line(convergence.main, [*argv, str(tmp_path / "runs")], message, capsys)
    assert not (tmp_path / "runs").exists()
