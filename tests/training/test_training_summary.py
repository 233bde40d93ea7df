"""training_summary.json read and written through TrainingSummary: a round trip keeps the file's keys, and a missing
file, bad JSON, a value of the wrong type or range, or a summary of a newer layout is one clear error."""

import json

import pytest

from symbert.cli import UserError
from symbert.training.summary import FILE_NAME, VERSION, TrainingSummary

TRAINING_ARGUMENTS = {
    "learning_rate": 5e-4,
    "warmup_steps": 1,
    "lr_scheduler_type": "linear",
    "weight_decay": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "bf16": False,
    "fp16": False,
    "seed": 7,
    "use_cpu": True,
    "per_device_eval_batch_size": 4,
}


def summary(**changes) -> TrainingSummary:
    values = dict(
        recipe="cpu-demo",
        attention_type="pairwise",
        size="tiny",
        parameters=1234,
        world_size=2,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        global_batch_size=16,
        max_seq_length=32,
        steps=8,
        passes=1.5,
        final_eval_loss=4.25,
        precision="fp32",
        run_arguments={"recipe": "cpu-demo"},
        model_arguments={"size": "tiny"},
        data_arguments={"max_seq_length": 32},
        hardware="CPU (1 thread)",
        training_arguments=TRAINING_ARGUMENTS,
        train_runtime=12.5,
    )
    return TrainingSummary(**{**values, **changes})


def written(folder, **changes) -> dict:
    """The JSON of a summary written into `folder`, with `changes` applied to the file (None removes a key)."""
    summary().write(folder)
    data = json.loads((folder / FILE_NAME).read_text())
    data.update(changes)
    data = {key: value for key, value in data.items() if value is not None}
    (folder / FILE_NAME).write_text(json.dumps(data))
    return data


def test_round_trip_keeps_every_field_and_the_file_s_keys(tmp_path):
    path = summary().write(tmp_path)
    assert path == tmp_path / FILE_NAME and not list(tmp_path.glob(".*.tmp"))
    data = json.loads(path.read_text())
    assert list(data)[:3] == ["summary_version", "recipe", "attention_type"] and data["summary_version"] == VERSION
    assert data["training_arguments"] == TRAINING_ARGUMENTS and data["final_eval_loss"] == 4.25
    assert TrainingSummary.read(tmp_path) == summary()


def test_a_summary_written_before_the_version_is_read_as_the_current_layout(tmp_path):
    written(tmp_path, summary_version=None, world_size=None, global_batch_size=8, size=None, train_runtime=None)
    read = TrainingSummary.read(tmp_path)
    assert read.summary_version == VERSION and read.world_size == 1 and read.size is None
    assert read.train_runtime is None and read.global_batch_size == 8


def test_a_summary_of_a_newer_version_is_refused(tmp_path):
    written(tmp_path, summary_version=VERSION + 1, new_field="?")
    with pytest.raises(UserError, match=rf"of version {VERSION + 1}, newer than this symbert reads .*update symbert"):
        TrainingSummary.read(tmp_path)


def test_a_missing_or_unreadable_summary_is_one_error_naming_it(tmp_path):
    with pytest.raises(UserError, match=rf"{tmp_path / FILE_NAME} does not exist"):
        TrainingSummary.read(tmp_path)
    (tmp_path / FILE_NAME).write_text('{"steps": 8,')
    with pytest.raises(UserError, match=r"training_summary.json is not a training summary \(JSONDecodeError: "):
        TrainingSummary.read(tmp_path)
    (tmp_path / FILE_NAME).write_text("[1, 2]")
    with pytest.raises(UserError, match=r'is not a training summary: a JSON object whose "training_arguments"'):
        TrainingSummary.read(tmp_path)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": "8"}, r"steps='8' is not an integer >= 1"),
        ({"world_size": 0}, r"world_size=0 is not an integer >= 1"),
        ({"final_eval_loss": "low"}, r"final_eval_loss='low' is not a finite number >= 0"),
        ({"passes": -1.0}, r"passes=-1.0 is not a finite number >= 0"),
        ({"hardware": 3}, r"hardware=3 is not a non-empty string"),
        ({"model_arguments": ["tiny"]}, r"model_arguments is a JSON list, not an object"),
        ({"global_batch_size": 8}, r"global_batch_size=8 is not per_device_train_batch_size × "),
        ({"training_arguments": {**TRAINING_ARGUMENTS, "bf16": "no"}}, r"training_arguments.bf16='no' is not true"),
        ({"steps": None}, r"lacks 'steps': it is the output of an older symbert-pretrain"),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_refused(tmp_path, changes, message):
    written(tmp_path, **changes)
    with pytest.raises(UserError, match=message):
        TrainingSummary.read(tmp_path)


def test_a_summary_with_a_key_given_twice_is_refused(tmp_path):
    """json.loads keeps the last of two values silently; a summary is read strictly, so a hand-edited one with a
    field twice is refused rather than read as either."""
    path = summary().write(tmp_path)
    text = path.read_text()
    path.write_text(text.replace('"steps": 8,', '"steps": 8, "steps": 800,', 1))
    assert '"steps": 800' in path.read_text()
    with pytest.raises(UserError, match="is not a training summary \\(RepeatedKey: the key 'steps' appears twice"):
        TrainingSummary.read(tmp_path)
