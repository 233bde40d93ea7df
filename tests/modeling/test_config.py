"""The configuration: BERT's defaults, the size presets, and one validation of every value: at construction, on
from_pretrained/from_bert overrides, on load and before save_pretrained writes anything; and checkpoints whose
attention tensors are not those of their config's type."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForMaskedLM,
)

from helpers.tiny import VOCAB_SIZE, bert_config, padded_batch, tiny_config
from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig, SymBertForMaskedLM, SymBertForSequenceClassification


def test_defaults_are_berts():
    ours, bert = SymBertConfig().to_dict(), BertConfig().to_dict()
    for field in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
        "pad_token_id",
        "use_cache",
        "classifier_dropout",
        "is_decoder",
        "add_cross_attention",
        "bos_token_id",
        "eos_token_id",
        "tie_word_embeddings",
    ):
        assert ours[field] == bert[field], field
    assert ours["model_type"] == "symbert"
    assert ours["attention_type"] == "original" and ours["pairwise_init"] == "normal"


@pytest.mark.parametrize(
    "size, shape",
    [
        ("tiny", (2, 2, 128, 512)),
        ("mini", (4, 4, 256, 1024)),
        ("small", (4, 8, 512, 2048)),
        ("base", (12, 12, 768, 3072)),
    ],
)
def test_size_presets(size, shape):
    config = SymBertConfig.from_preset(size, attention_type="pairwise")
    assert (config.num_hidden_layers, config.num_attention_heads, config.hidden_size, config.intermediate_size) == shape
    assert config.attention_type == "pairwise"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"attention_type": "linear"},
            "attention_type='linear'.*allowed: original, symmetric, pairwise, shared, mhe_add, mhe_mul",
        ),
        ({"pairwise_init": "zeros"}, "pairwise_init='zeros'.*allowed: normal, identity"),
        ({"hidden_size": 100, "num_attention_heads": 3}, "hidden_size=100 is not divisible by num_attention_heads=3"),
        ({"hidden_size": 0}, "hidden_size=0 .*positive integer"),
        ({"num_hidden_layers": -1}, "num_hidden_layers=-1 .*positive integer"),
        ({"num_attention_heads": 0}, "num_attention_heads=0 .*positive integer"),
        ({"intermediate_size": 2.5}, "intermediate_size=2.5 .*positive integer"),
        ({"vocab_size": 0}, "vocab_size=0 .*positive integer"),
        ({"max_position_embeddings": 0}, "max_position_embeddings=0 .*positive integer"),
        ({"hidden_dropout_prob": 1.0}, r"hidden_dropout_prob=1.0 .*\[0, 1\)"),
        ({"attention_probs_dropout_prob": -0.1}, r"attention_probs_dropout_prob=-0.1 .*\[0, 1\)"),
        ({"classifier_dropout": 1.5}, r"classifier_dropout=1.5 .*\[0, 1\)"),
        ({"layer_norm_eps": 0}, "layer_norm_eps=0 .*positive number"),
        ({"hidden_act": "swishy"}, "hidden_act='swishy' is not supported"),
        ({"is_decoder": True}, "SymBERT is an encoder"),
    ],
)
def test_invalid_values_raise_naming_value_and_allowed(overrides, message):
    with pytest.raises(ValueError, match=message):
        SymBertConfig(**overrides)


def test_unknown_preset():
    with pytest.raises(ValueError, match="Unknown SymBERT size preset 'huge'; allowed: tiny, mini, small, base"):
        SymBertConfig.from_preset("huge")


def test_round_trip(tmp_path):
    config = SymBertConfig.from_preset("mini", attention_type="mhe_mul", pairwise_init="identity")
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, SymBertConfig)
    without_path = lambda c: {k: v for k, v in c.to_dict().items() if k != "_name_or_path"}  # noqa: E731
    assert without_path(loaded) == without_path(config)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("attention_type", "bogus", "attention_type='bogus'"),
        ("hidden_dropout_prob", 2.0, "hidden_dropout_prob=2.0"),
        ("num_attention_heads", 5, "hidden_size=128 is not divisible by num_attention_heads=5"),
    ],
)
def test_bad_config_json_fails_on_load(tmp_path, field, value, message):
    SymBertConfig.from_preset("tiny").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(tmp_path)


def test_every_attention_type_accepted():
    for attention_type in ATTENTION_TYPES:
        assert SymBertConfig(attention_type=attention_type).attention_type == attention_type
    assert set(SIZE_PRESETS) >= {"tiny", "mini", "small", "base"}


ALLOWED_ATTENTION = "allowed: original, symmetric, pairwise, shared, mhe_add, mhe_mul"

INVALID = [
    ({"attention_type": "bogus"}, f"attention_type='bogus' is not supported; {ALLOWED_ATTENTION}"),
    ({"layer_norm_eps": -1}, "layer_norm_eps=-1 is invalid; it must be a finite positive number"),
    ({"layer_norm_eps": math.inf}, "layer_norm_eps=inf is invalid; it must be a finite positive number"),
    ({"initializer_range": math.nan}, "initializer_range=nan is invalid; it must be a finite positive number"),
    ({"num_attention_heads": 3}, "hidden_size=128 is not divisible by num_attention_heads=3"),
    ({"hidden_dropout_prob": 1.0}, r"hidden_dropout_prob=1.0 is invalid; it must be a probability in \[0, 1\)"),
    ({"attention_probs_dropout_prob": math.nan}, r"attention_probs_dropout_prob=nan .*probability in \[0, 1\)"),
    ({"classifier_dropout": math.inf}, r"classifier_dropout=inf .*probability in \[0, 1\)"),
    ({"sparse_prediction": "yes"}, "sparse_prediction='yes' is invalid; allowed: True, False"),
    ({"use_cache": 1}, "use_cache=1 is invalid; allowed: True, False"),
    ({"tie_word_embeddings": "true"}, "tie_word_embeddings='true' is invalid; allowed: True, False"),
    ({"vocab_size": True}, "vocab_size=True is invalid; it must be a positive integer"),
    ({"num_hidden_layers": 2.0}, "num_hidden_layers=2.0 is invalid; it must be a positive integer"),
    ({"pairwise_init": "zeros"}, "pairwise_init='zeros' is not supported; allowed: normal, identity"),
    ({"problem_type": "ranking"}, "problem_type.*ranking.*regression"),  # transformers 4 has its own message
    ({"pad_token_id": -1}, rf"pad_token_id=-1 is invalid; it must be None or a token id in \[0, {VOCAB_SIZE - 1}\]"),
    ({"pad_token_id": VOCAB_SIZE}, rf"pad_token_id={VOCAB_SIZE} is invalid; .*\[0, {VOCAB_SIZE - 1}\]"),
    ({"bos_token_id": VOCAB_SIZE + 5}, rf"bos_token_id={VOCAB_SIZE + 5} is invalid"),
    ({"eos_token_id": [2, VOCAB_SIZE]}, rf"eos_token_id=\[2, {VOCAB_SIZE}\] is invalid"),
    ({"sep_token_id": -3}, r"sep_token_id=-3 is invalid"),
    ({"mask_token_id": True}, r"mask_token_id=True is invalid"),
]


@pytest.mark.parametrize("overrides, message", INVALID)
def test_invalid_field_at_construction(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_defaults_and_special_ids_inside_the_vocabulary_are_valid(tmp_path):
    SymBertConfig().validate()  # transformers builds SymBertConfig() itself, e.g. for to_diff_dict
    config = tiny_config(pad_token_id=None, bos_token_id=2, eos_token_id=[3, VOCAB_SIZE - 1], sep_token_id=3)
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).eos_token_id == [3, VOCAB_SIZE - 1]


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlm")
    torch.manual_seed(0)
    SymBertForMaskedLM(tiny_config("symmetric")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    BertForMaskedLM(bert_config()).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("overrides, message", INVALID[:11])
def test_invalid_override_in_from_pretrained(mlm_folder, overrides, message):
    with pytest.raises(ValueError, match=message):
        SymBertForMaskedLM.from_pretrained(mlm_folder, **overrides)
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(mlm_folder, **overrides)


@pytest.mark.parametrize("overrides, message", INVALID[:2] + INVALID[8:9])
def test_invalid_override_in_from_bert(bert_folder, overrides, message):
    with pytest.raises(ValueError, match=message):
        SymBertForMaskedLM.from_bert(bert_folder, **overrides)


def test_config_changed_after_construction_is_not_saved(tmp_path):
    config = tiny_config()
    config.layer_norm_eps = -1
    with pytest.raises(ValueError, match="layer_norm_eps=-1 is invalid"):
        config.save_pretrained(tmp_path / "config")
    assert not (tmp_path / "config" / "config.json").exists()
    with pytest.raises(ValueError, match="layer_norm_eps=-1 is invalid"):
        SymBertForMaskedLM(config)  # nor is a model built from it


def test_model_with_a_config_changed_after_construction_writes_nothing(tmp_path):
    model = SymBertForMaskedLM(tiny_config())
    model.config.attention_type = "bogus"
    with pytest.raises(ValueError, match=f"attention_type='bogus' is not supported; {ALLOWED_ATTENTION}"):
        model.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model").exists()


def saved_copy(source, destination, **changes):
    """A copy of a saved model folder with config.json changed (a value of None removes the field)."""
    destination.mkdir()
    for file in source.iterdir():
        (destination / file.name).write_bytes(file.read_bytes())
    config = json.loads((destination / "config.json").read_text())
    for field, value in changes.items():
        if value is None:
            del config[field]
        else:
            config[field] = value
    (destination / "config.json").write_text(json.dumps(config))
    return destination


LOADERS = {
    "model": lambda folder: AutoModelForMaskedLM.from_pretrained(folder),
    "config": lambda folder: AutoConfig.from_pretrained(folder),
}


@pytest.mark.parametrize("loader", LOADERS)
def test_saved_config_without_attention_type_refuses_to_load(mlm_folder, tmp_path, loader):
    folder = saved_copy(mlm_folder, tmp_path / "tampered", attention_type=None)
    with pytest.raises(
        ValueError, match="attention_type is missing from the saved config.json; add it, one of: original"
    ):
        LOADERS[loader](folder)
    assert SymBertConfig().attention_type == "original"  # in Python the default stays


@pytest.mark.parametrize("loader", LOADERS)
def test_saved_config_with_pad_token_id_out_of_range_refuses_to_load(mlm_folder, tmp_path, loader):
    folder = saved_copy(mlm_folder, tmp_path / "tampered", pad_token_id=VOCAB_SIZE)
    with pytest.raises(ValueError, match=rf"pad_token_id={VOCAB_SIZE} is invalid; .*\[0, {VOCAB_SIZE - 1}\]"):
        LOADERS[loader](folder)


def test_attention_type_other_than_the_weights_refuses_to_load(mlm_folder, tmp_path):
    folder = saved_copy(mlm_folder, tmp_path / "tampered", attention_type="original")  # weights are symmetric
    with pytest.raises(
        ValueError,
        match=r"do not match attention_type='original'.*missing from the checkpoint: key.bias, key.weight; unexpected in it: none",
    ):
        SymBertForMaskedLM.from_pretrained(folder)


@pytest.mark.parametrize(
    "saved, claimed, message",
    [
        ("original", "symmetric", "missing from the checkpoint: none; unexpected in it: key.bias, key.weight"),
        (
            "pairwise",
            "shared",
            "missing from the checkpoint: scale_k, scale_q, scale_v, shared.bias, shared.weight; unexpected in it: pairwise, query.bias",
        ),
        ("mhe_add", "original", "unexpected in it: head_embeddings; of another shape: key.bias, key.weight, query"),
    ],
)
def test_attention_tensor_mismatch_names_the_tensors(tmp_path, saved, claimed, message):
    SymBertForMaskedLM(tiny_config(saved)).save_pretrained(tmp_path / "saved")
    folder = saved_copy(tmp_path / "saved", tmp_path / "tampered", attention_type=claimed)
    with pytest.raises(ValueError, match=message):
        SymBertForMaskedLM.from_pretrained(folder)


# A fresh interpreter in which `symbert` cannot be imported: only the code saved in the folder can load it.
REMOTE_CODE_LOADS = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class BlockProject(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "symbert" or name.startswith("symbert."):
                raise ModuleNotFoundError(name)

    sys.meta_path.insert(0, BlockProject())
    import transformers

    results = {}
    for folder, auto_name in json.loads(sys.argv[1]):
        try:
            model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True)
            results[folder] = "loaded " + type(model).__module__.split(".")[0]
        except ValueError as error:
            results[folder] = str(error)
    print(json.dumps(results))
    """
)


@pytest.mark.heavy
def test_remote_code_refuses_tampered_configs_and_still_starts_a_task_head(mlm_folder, tmp_path):
    mlm = "AutoModelForMaskedLM"
    cases = {
        "no attention type": (saved_copy(mlm_folder, tmp_path / "a", attention_type=None), mlm),
        "wrong attention type": (saved_copy(mlm_folder, tmp_path / "b", attention_type="original"), mlm),
        "pad out of range": (saved_copy(mlm_folder, tmp_path / "c", pad_token_id=-1), mlm),
        "bogus attention type": (saved_copy(mlm_folder, tmp_path / "d", attention_type="bogus"), mlm),
        "task head": (mlm_folder, "AutoModelForSequenceClassification"),
    }
    argument = json.dumps([(str(folder), auto_name) for folder, auto_name in cases.values()])
    environment = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    command = [sys.executable, "-c", REMOTE_CODE_LOADS, argument]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = {name: json.loads(result.stdout.splitlines()[-1])[str(folder)] for name, (folder, _) in cases.items()}
    assert outcome["no attention type"].startswith("attention_type is missing from the saved config.json")
    assert "do not match attention_type='original'" in outcome["wrong attention type"]
    assert "missing from the checkpoint: key.bias, key.weight" in outcome["wrong attention type"]
    assert outcome["pad out of range"].startswith("pad_token_id=-1 is invalid")
    assert outcome["bogus attention type"].startswith(f"attention_type='bogus' is not supported; {ALLOWED_ATTENTION}")
    assert outcome["task head"] == "loaded transformers_modules"


@pytest.mark.parametrize("trust_remote_code", [False, True])
def test_mlm_checkpoint_still_starts_a_task_head(mlm_folder, trust_remote_code):
    model, info = AutoModelForSequenceClassification.from_pretrained(
        mlm_folder, num_labels=3, trust_remote_code=trust_remote_code, output_loading_info=True
    )
    assert sorted(info["missing_keys"]) == [
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
        "classifier.bias",
        "classifier.weight",
    ]
    assert info["unexpected_keys"] and all(name.startswith("cls.") for name in info["unexpected_keys"])
    mlm = SymBertForMaskedLM.from_pretrained(mlm_folder)
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, mlm.bert.embeddings.word_embeddings.weight)
    assert model(padded_batch()[0]).logits.shape == (3, 3)


def test_tensors_of_another_shape_are_refused_unless_allowed(tmp_path):
    SymBertForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    shapes = r": \[2\] in the checkpoint, \[3\] in the model"  # transformers 4 names them only: read from the file
    with pytest.raises(  # RuntimeError, as transformers raises for BERT
        RuntimeError,
        match=rf"has tensors of another shape than the model: classifier.bias{shapes}.*ignore_mismatched_sizes=True",
    ):
        SymBertForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    model = SymBertForSequenceClassification.from_pretrained(tmp_path, num_labels=3, ignore_mismatched_sizes=True)
    assert model.classifier.out_features == 3


def test_from_bert_still_reports_new_tensors(bert_folder):
    model, new = SymBertForMaskedLM.from_bert(bert_folder, attention_type="pairwise")
    assert new == [f"bert.encoder.layer.{i}.attention.self.pairwise" for i in range(2)]


@pytest.mark.parametrize(
    "path",
    ["/nonexistent/model", "./no-such-model", "../no-such-model", "~/no-such-model-xyz", "a/b/c", "{tmp}/missing"],
)
def test_missing_local_path_is_named_not_sent_to_the_hub(path, tmp_path):
    path = path.format(tmp=tmp_path)
    with pytest.raises(ValueError, match=f"'{path}' does not exist: no such file or folder"):
        SymBertForMaskedLM.from_bert(path)
    with pytest.raises(ValueError, match=f"'{path}' does not exist"):
        SymBertForMaskedLM.from_pretrained(path)


@pytest.mark.parametrize(
    "command, argv",
    [
        ("onnx_export", ["{missing}", "{tmp}/out.onnx"]),
        ("symmetry", ["{missing}"]),
        ("symmetry", ["{missing}", "--output_dir", "{tmp}/out"]),
    ],
)
def test_commands_name_a_missing_folder(command, argv, tmp_path, capsys):
    import symbert.tools.onnx_export
    import symbert.tools.symmetry

    missing = str(tmp_path / "no-such-model")
    argv = [arg.format(missing=missing, tmp=tmp_path) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        getattr(symbert.tools, command).main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"error: '{missing}' does not exist: no such file or folder" in error
    assert not os.listdir(tmp_path)


def test_symmetry_refuses_a_saved_config_without_attention_type(mlm_folder, tmp_path, capsys):
    import symbert.tools.symmetry

    folder = saved_copy(mlm_folder, tmp_path / "tampered", attention_type=None)
    with pytest.raises(SystemExit) as exit_info:
        symbert.tools.symmetry.main([str(folder)])
    assert exit_info.value.code == 2
    assert f"error: {folder / 'config.json'} has no attention_type; allowed: original" in capsys.readouterr().err


def test_onnx_command_refuses_another_suffix(mlm_folder, tmp_path, capsys):
    import symbert.tools.onnx_export

    with pytest.raises(SystemExit) as exit_info:
        symbert.tools.onnx_export.main([str(mlm_folder), str(tmp_path / "model.txt")])
    assert exit_info.value.code == 2
    assert "error: output=" in capsys.readouterr().err and not os.listdir(tmp_path)
