"""transformers' loading conventions for every registered attention type, with BERT as the reference where it is cheap:
a checkpoint holding none of the model's tensors (transformers' `test_can_init_all_missing_weights` and
`test_model_weights_reload_no_missing_tied_weights`, tests/test_modeling_common.py of the transformers repository)
loads with every weight initialised and reported missing, while a real checkpoint of another attention type is still
refused; a classifier of another size raises transformers' RuntimeError; a folder whose code differs from the code
that loads it is named in one warning; integer weights, a path to a file, inputs_embeds of a wider dtype than the
model's, and labels of another shape or outside their range are refused with messages naming them."""

import copy
import logging
import os
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    PreTrainedModel,
    set_seed,
)
from transformers.pytorch_utils import id_tensor_storage

import symbert
import symbert.modeling_symbert as modeling
from helpers.tiny import VOCAB_SIZE, bert_config, padded_batch, tiny_config
from symbert import (
    SymBertForMaskedLM,
    SymBertForMultipleChoice,
    SymBertForQuestionAnswering,
    SymBertForSequenceClassification,
    SymBertForTokenClassification,
    SymBertModel,
)
from symbert.modeling_symbert import TRANSFORMERS_V5, _check_class_labels

HEADS = [
    SymBertModel,
    SymBertForMaskedLM,
    SymBertForSequenceClassification,
    SymBertForTokenClassification,
    SymBertForQuestionAnswering,
    SymBertForMultipleChoice,
]


def cases(attention_type):
    """(model class, config) of every SymBERT head of `attention_type`, and BERT's MLM and bare encoder."""
    config = tiny_config(attention_type, num_labels=3)
    return [(head, config) for head in HEADS] + [(BertForMaskedLM, bert_config()), (BertModel, bert_config())]


@pytest.fixture
def seeded_weight_init(monkeypatch):
    """As transformers' test: every `_initialize_weights` call starts from the same seed, so that a model built by
    __init__ and one initialised by from_pretrained draw the same random weights."""
    original = PreTrainedModel._initialize_weights

    def seeded(*args, **kwargs):
        set_seed(42)
        return original(*args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "_initialize_weights", seeded)


def assert_tied(model):
    if hasattr(model, "cls"):  # the MLM decoder stays tied to the word embeddings, its bias to the head's bias
        assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
        assert model.cls.predictions.decoder.bias is model.cls.predictions.bias


def assert_initialised_as_new(model):
    """Every tensor on a real device and finite; LayerNorms, biases and the MLM head's bias as `_init_weights` sets
    them (the random ones are compared with a model built by __init__ where the seeds allow)."""
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert [name for name, tensor in tensors.items() if tensor.device.type == "meta"] == []
    assert [name for name, tensor in tensors.items() if not torch.isfinite(tensor.float()).all()] == []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.LayerNorm):
            assert torch.equal(module.weight, torch.ones_like(module.weight)), name
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
    assert_tied(model)


def test_can_init_all_missing_weights(attention_type, seeded_weight_init):
    """transformers' test_can_init_all_missing_weights: `from_pretrained(None, config=..., state_dict={})` loads,
    every weight initialised by `_init_weights` exactly as __init__ does and reported missing."""
    for model_class, config in cases(attention_type):
        from_init = model_class(copy.deepcopy(config))
        model, info = model_class.from_pretrained(
            None, config=copy.deepcopy(config), state_dict={}, output_loading_info=True
        )
        assert_initialised_as_new(model)
        state, expected = model.state_dict(), from_init.state_dict()
        assert sorted(state) == sorted(expected), model_class.__name__
        assert [name for name in expected if not torch.equal(state[name], expected[name])] == [], model_class.__name__
        assert set(info["missing_keys"]) == set(state), model_class.__name__  # all of them, as BERT
        assert not info["unexpected_keys"] and not info["mismatched_keys"]


def test_model_weights_reload_no_missing_tied_weights(attention_type, tmp_path):
    """transformers' test_model_weights_reload_no_missing_tied_weights: a checkpoint holding none of the model's
    tensors (one unrelated integer tensor) loads with every parameter and persistent buffer reported missing, no
    more (tied copies aside), and initialised anew."""
    for model_class, config in cases(attention_type):
        folder = tmp_path / model_class.__name__
        model_class(config).save_pretrained(folder)
        placeholder = {"tensor": torch.tensor([1, 2])}
        save_file(placeholder, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        model, info = model_class.from_pretrained(folder, output_loading_info=True)

        params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        missing = set(info["missing_keys"])
        extra_missing = missing - set(params)
        storages = {}
        for name, tensor in model.state_dict().items():
            storages.setdefault(id_tensor_storage(tensor), []).append(name)
        for group in (names for names in storages.values() if len(names) > 1):
            if set(group) - extra_missing:  # a tied copy is reported with the tensor it shares
                extra_missing -= set(group)
        assert extra_missing == set(), model_class.__name__
        persistent = set(model.state_dict())
        nonpersistent = {name for name, _ in model.named_buffers() if name not in persistent}
        assert set(params) - missing - nonpersistent == set(), model_class.__name__
        assert [name.rpartition(".")[2] for name in info["unexpected_keys"]] == ["tensor"]  # 4.x adds the prefix
        assert_initialised_as_new(model)


def other_attention_type(attention_type):
    """A type whose attention tensors differ from `attention_type`'s by name or shape."""
    return "original" if attention_type == "symmetric" else "symmetric"


def test_checkpoint_of_another_attention_type_is_still_refused(attention_type, tmp_path):
    other = other_attention_type(attention_type)
    saved = SymBertForMaskedLM(tiny_config(attention_type))
    saved.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"The weights of '{tmp_path}' do not match attention_type='{other}'"):
        SymBertForMaskedLM.from_pretrained(tmp_path, attention_type=other)
    with pytest.raises(
        ValueError,
        match=f"The weights of the state_dict passed to from_pretrained do not match attention_type='{other}'",
    ):
        SymBertForMaskedLM.from_pretrained(None, config=tiny_config(other), state_dict=saved.state_dict())
    # only its attention tensors, none of the rest: nothing of the model is there, so it loads as new (tensors of
    # the same name and another shape still need ignore_mismatched_sizes=True, as in transformers)
    attention_only = {name: t for name, t in saved.state_dict().items() if modeling.ATTENTION_MARKER in name}
    model, info = SymBertForMaskedLM.from_pretrained(
        None,
        config=tiny_config(other),
        state_dict=attention_only,
        ignore_mismatched_sizes=True,
        output_loading_info=True,
    )
    outside = {name for name in model.state_dict() if modeling.ATTENTION_MARKER not in name}
    assert outside <= set(info["missing_keys"])
    assert_tied(model)


def test_classifier_of_another_size_raises_transformers_runtime_error(attention_type, tmp_path):
    SymBertForSequenceClassification(tiny_config(attention_type, num_labels=3)).save_pretrained(tmp_path / "symbert")
    BertForSequenceClassification(bert_config(num_labels=3)).save_pretrained(tmp_path / "bert")
    with pytest.raises(RuntimeError):  # the reference: what transformers raises (4.x and 5.x)
        BertForSequenceClassification.from_pretrained(tmp_path / "bert", num_labels=5)
    with pytest.raises(RuntimeError) as refused:
        SymBertForSequenceClassification.from_pretrained(tmp_path / "symbert", num_labels=5)
    assert not isinstance(refused.value, ValueError)
    assert str(refused.value) == (
        f"'{tmp_path / 'symbert'}' has tensors of another shape than the model: classifier.bias: [3] in the "
        "checkpoint, [5] in the model; classifier.weight: [3, 128] in the checkpoint, [5, 128] in the model. Fix the "
        "config, or pass ignore_mismatched_sizes=True to initialise them anew."
    )
    model, info = SymBertForSequenceClassification.from_pretrained(
        tmp_path / "symbert", num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert model.classifier.out_features == 5
    assert sorted(name for name, *_ in modeling.mismatched_tensors(info)) == ["classifier.bias", "classifier.weight"]


# ---------------------------------------------------------------- a folder whose code differs from the running code


def code_warnings(caplog):
    return [record for record in caplog.records if "from the code that loads it" in record.getMessage()]


def test_folder_with_other_code_is_named_in_one_warning(tmp_path, caplog):
    folder = tmp_path  # a name of its own: transformers 4 names the folder's remote-code module after it
    SymBertForMaskedLM(tiny_config()).save_pretrained(folder)
    with caplog.at_level(logging.WARNING):
        AutoModelForMaskedLM.from_pretrained(folder)
        SymBertForMaskedLM.from_pretrained(folder)
    assert code_warnings(caplog) == []  # the same files: no warning

    with open(folder / "modeling_symbert.py", "a") as file:
        file.write("# edited after saving\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model = AutoModelForMaskedLM.from_pretrained(folder)
    assert type(model) is SymBertForMaskedLM
    (record,) = code_warnings(caplog)
    assert record.levelno == logging.WARNING and record.name == "symbert.loading_symbert"
    message = record.getMessage()
    assert message.startswith(f"{folder}: its modeling_symbert.py differs from the code that loads it.")
    assert f"The code of the installed symbert package runs ({modeling.__file__}), not the folder's" in message
    assert "configuration_symbert.py" not in message

    # with trust_remote_code=True, transformers 5 still runs the installed code (4.x runs the folder's: no warning)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)
    installed = type(model).__module__ == "symbert.modeling_symbert"
    assert installed == TRANSFORMERS_V5
    assert len(code_warnings(caplog)) == (1 if installed else 0)

    with open(folder / "configuration_symbert.py", "a") as file:
        file.write("# edited after saving\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SymBertForMaskedLM.from_pretrained(folder)
    (record,) = code_warnings(caplog)
    assert "its modeling_symbert.py and configuration_symbert.py differ from the code" in record.getMessage()
    assert str(symbert.configuration_symbert.__file__) in record.getMessage()


# ---------------------------------------------------------------- small refusals


def integer_copy(folder, names=None, dtype=torch.int8):
    """Rewrite the folder's weights with the named tensors (all when None) as integers."""
    path = folder / "model.safetensors"
    weights = load_file(path)
    weights = {k: (v * 10).to(dtype) if names is None or k in names else v for k, v in weights.items()}
    save_file(weights, path, metadata={"format": "pt"})
    return weights


def test_integer_weights_are_refused(attention_type, tmp_path):
    SymBertForMaskedLM(tiny_config(attention_type)).save_pretrained(tmp_path)
    weights = integer_copy(tmp_path)
    with pytest.raises(
        ValueError,
        match=rf"The weights of '{tmp_path}' include integer tensors: bert.embeddings.LayerNorm.bias \(int8\), .* and "
        rf"{len(weights) - 5} more. The model's weights are floating point",
    ):
        SymBertForMaskedLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"state_dict passed to from_pretrained include integer tensors"):
        SymBertForMaskedLM.from_pretrained(None, config=tiny_config(attention_type), state_dict=weights)


def test_one_integer_tensor_is_named_and_unrelated_integer_tensors_load(tmp_path):
    SymBertForMaskedLM(tiny_config("pairwise")).save_pretrained(tmp_path / "one")
    integer_copy(tmp_path / "one", names={"bert.encoder.layer.1.attention.self.pairwise"}, dtype=torch.int32)
    message = r"integer tensors: bert.encoder.layer.1.attention.self.pairwise \(int32\)\. The model's"
    with pytest.raises(ValueError, match=message):
        SymBertForMaskedLM.from_pretrained(tmp_path / "one")

    # a .bin checkpoint is read too
    folder = tmp_path / "bin"
    SymBertForMaskedLM(tiny_config("pairwise")).save_pretrained(folder)
    weights = integer_copy(folder, names={"bert.embeddings.word_embeddings.weight"}, dtype=torch.int16)
    torch.save(weights, folder / "pytorch_model.bin")
    os.remove(folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"integer tensors: bert.embeddings.word_embeddings.weight \(int16\)\."):
        SymBertForMaskedLM.from_pretrained(folder)

    # integer tensors that are no weights of the model (old BERT checkpoints saved position_ids) are not refused
    folder = tmp_path / "position_ids"
    SymBertForMaskedLM(tiny_config("pairwise")).save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    weights["bert.embeddings.position_ids"] = torch.arange(64)[None]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    model = SymBertForMaskedLM.from_pretrained(folder)
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, weights["bert.embeddings.word_embeddings.weight"])


@pytest.mark.parametrize("file_name", ["config.json", "model.safetensors"])
def test_path_to_a_file_is_named_as_one(tmp_path, file_name):
    SymBertForMaskedLM(tiny_config()).save_pretrained(tmp_path)
    path = str(tmp_path / file_name)
    message = (
        f"'{path}' is a file, not a folder: from_pretrained takes the folder that holds config.json and the weights "
        f"('{tmp_path}'), or a Hub repository id."
    )
    for load in (SymBertForMaskedLM.from_pretrained, SymBertForMaskedLM.from_bert):
        with pytest.raises(ValueError) as refused:
            load(path)
        assert str(refused.value) == message


def test_inputs_embeds_wider_than_the_model_are_refused():
    model = SymBertModel(tiny_config()).to(torch.bfloat16)
    embeds = torch.randn(2, 5, 128)
    with pytest.raises(
        ValueError, match=r"inputs_embeds has dtype torch.float32, the model torch.bfloat16: pass inputs_embeds.to"
    ):
        model(inputs_embeds=embeds)
    with pytest.raises(ValueError, match=r"inputs_embeds has dtype torch.int64; it must be floating point"):
        model(inputs_embeds=embeds.long())
    assert model(inputs_embeds=embeds.bfloat16()).last_hidden_state.dtype == torch.bfloat16
    # narrower inputs into a float32 model are promoted by the addition and run as before
    assert SymBertModel(tiny_config())(inputs_embeds=embeds.bfloat16()).last_hidden_state.dtype == torch.float32
    # BERT does not cast them either: torch's own error
    with pytest.raises(RuntimeError):
        BertModel(bert_config()).to(torch.bfloat16)(inputs_embeds=embeds)


# ---------------------------------------------------------------- labels

IDS, MASK = padded_batch(batch=3, length=6)


def label_cases():
    """(model class, config overrides, inputs, labels, message) of malformed labels for each head with a loss."""
    tokens = torch.zeros(3, 6, dtype=torch.long)
    choices = dict(input_ids=IDS[:2, None].expand(2, 2, 6), attention_mask=MASK[:2, None].expand(2, 2, 6))
    allowed_3 = r"allowed: \[0, 2\] \(num_labels=3\) or -100 \(ignored by the loss\)"
    return {
        "sequence: class id too large": (
            SymBertForSequenceClassification, {}, {}, torch.tensor([0, 3, 1]), rf"labels contains 3; {allowed_3}"
        ),
        "sequence: negative class id": (
            SymBertForSequenceClassification, {}, {}, torch.tensor([0, -1, 1]), rf"labels contains -1; {allowed_3}"
        ),
        "sequence: one label per token": (
            SymBertForSequenceClassification, {}, {}, tokens, r"labels has shape \[3, 6\]; expected \[batch\] = \[3\]"
        ),
        "sequence: float ids": (
            SymBertForSequenceClassification,
            {"problem_type": "single_label_classification"},
            {},
            torch.tensor([0.0, 1.0, 2.0]),
            r"labels has dtype torch.float32; expected integer class ids \(torch.long\)",
        ),
        "sequence: regression shape": (
            SymBertForSequenceClassification,
            {"num_labels": 1},
            {},
            torch.zeros(3, 2),
            r"labels has shape \[3, 2\]; regression expects \[batch\] = \[3\]",
        ),
        "sequence: multi-label shape": (
            SymBertForSequenceClassification,
            {"problem_type": "multi_label_classification"},
            {},
            torch.zeros(3),
            r"labels has shape \[3\]; multi-label classification expects \[batch, num_labels\] = \[3, 3\]",
        ),
        "token: class id too large": (
            SymBertForTokenClassification, {}, {}, tokens.index_fill(1, torch.tensor([2]), 7), rf"labels contains 7; {allowed_3}"
        ),
        "token: shorter labels": (
            SymBertForTokenClassification,
            {},
            {},
            tokens[:, :5],
            r"labels has shape \[3, 5\]; expected \[batch, sequence\] = \[3, 6\]",
        ),
        "mlm: id outside the vocabulary": (
            SymBertForMaskedLM,
            {},
            {},
            tokens.index_fill(1, torch.tensor([4]), VOCAB_SIZE),
            rf"labels contains {VOCAB_SIZE}; allowed: \[0, {VOCAB_SIZE - 1}\] \(vocab_size={VOCAB_SIZE}\) or -100",
        ),
        "mlm sparse: negative id": (
            SymBertForMaskedLM,
            {"sparse_prediction": True},
            {},
            tokens.index_fill(1, torch.tensor([1]), -5),
            rf"labels contains -5; allowed: \[0, {VOCAB_SIZE - 1}\]",
        ),
        "mlm: flat labels": (
            SymBertForMaskedLM, {}, {}, tokens.view(-1), r"labels has shape \[18\]; expected \[batch, sequence\] = \[3, 6\]"
        ),
        "choice: choice out of range": (
            SymBertForMultipleChoice,
            {},
            choices,
            torch.tensor([0, 2]),
            r"labels contains 2; allowed: \[0, 1\] \(num_choices=2\) or -100",
        ),
        "choice: labels per choice": (
            SymBertForMultipleChoice, {}, choices, torch.zeros(2, 2, dtype=torch.long), r"labels has shape \[2, 2\]; expected \[batch\] = \[2\]"
        ),
        "choice: list": (
            SymBertForMultipleChoice, {}, choices, [0, 1], r"labels must be a torch.Tensor of shape \[batch\] = \[2\], not a list"
        ),
    }  # fmt: skip


@pytest.mark.parametrize("case", label_cases())
def test_malformed_labels_are_named_before_torch_fails(case):
    model_class, overrides, inputs, labels, message = label_cases()[case]
    model = model_class(tiny_config("shared", **{"num_labels": 3, **overrides}))
    inputs = inputs or {"input_ids": IDS, "attention_mask": MASK}
    with pytest.raises(ValueError, match=message):
        model(**inputs, labels=labels)


def test_ignored_and_valid_labels_still_give_berts_loss():
    model = SymBertForTokenClassification(tiny_config(num_labels=3)).eval()
    labels = torch.tensor([[0, 1, 2, -100, -100, -100]] * 3)
    output = model(IDS, attention_mask=MASK, labels=labels)
    expected = torch.nn.functional.cross_entropy(output.logits.view(-1, 3), labels.view(-1))
    torch.testing.assert_close(output.loss, expected)
    sequence = SymBertForSequenceClassification(tiny_config(num_labels=3))
    assert torch.isfinite(sequence(IDS, attention_mask=MASK, labels=torch.tensor([[2], [0], [1]])).loss)  # [batch, 1]


def test_label_check_reads_nothing_back_from_an_accelerator(monkeypatch):
    """Off the CPU the value check is a device-side assert: no .item() nor bool(), so no wait for the device (the
    meta device stands in for a GPU here)."""

    def no_host_sync(self):
        raise AssertionError("the label check synchronised with the device")

    monkeypatch.setattr(torch.Tensor, "item", no_host_sync)
    monkeypatch.setattr(torch.Tensor, "__bool__", no_host_sync)
    labels = torch.zeros(2, 3, dtype=torch.long, device="meta")
    with mock.patch.object(torch, "_assert_async", wraps=torch._assert_async) as device_assert:
        _check_class_labels(labels, (2, 3), "[batch, sequence]", 5, "num_labels")
    (condition, message), _ = device_assert.call_args
    assert condition.device.type == "meta"
    assert message == "labels contains class ids outside [0, 4] (num_labels=5) or -100 (ignored by the loss)."


@pytest.mark.parametrize("model_class", [SymBertForSequenceClassification, SymBertForTokenClassification])
def test_label_checks_do_not_break_a_compiled_graph(model_class):
    torch._dynamo.reset()
    model = model_class(tiny_config("original", num_labels=3, problem_type="single_label_classification"))
    labels = torch.tensor([0, 2, 1]) if model_class is SymBertForSequenceClassification else IDS % 3
    explanation = torch._dynamo.explain(model)(IDS, attention_mask=MASK, labels=labels)
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_weights_file_is_named(tmp_path, damage):
    SymBertForMaskedLM(tiny_config()).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        weights.write_bytes(b"not a safetensors file")
    with pytest.raises(OSError, match=rf"Cannot read {weights}: the file is truncated or corrupt"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)
    with pytest.raises(OSError, match=rf"Cannot read {weights}"):
        AutoModelForMaskedLM.from_pretrained(tmp_path, trust_remote_code=True)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("loader", ["from_pretrained", "AutoModelForMaskedLM", "from_bert"])
def test_non_finite_weights_load_with_one_warning_naming_the_tensor(tmp_path, caplog, value, loader):
    """A NaN or infinite weight loaded without a word: one warning names it, as transformers reports weights it did
    not load as saved (a finite folder gives none)."""
    SymBertForMaskedLM(tiny_config()).save_pretrained(tmp_path / "finite")
    BertForMaskedLM(bert_config()).save_pretrained(tmp_path / "bert")
    folder = tmp_path / ("bert" if loader == "from_bert" else "finite")
    load = {
        "from_pretrained": SymBertForMaskedLM.from_pretrained,
        "AutoModelForMaskedLM": AutoModelForMaskedLM.from_pretrained,
        "from_bert": lambda path: SymBertForMaskedLM.from_bert(path, calibration_texts=None),
    }[loader]

    def warnings():
        return [r for r in caplog.records if "hold NaN or infinite values" in r.getMessage()]

    with caplog.at_level(logging.WARNING):
        load(folder)
    assert warnings() == []
    weights = load_file(folder / "model.safetensors")
    name = next(n for n in weights if n.endswith("encoder.layer.1.attention.self.query.weight"))
    weights[name][3, 5] = value
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load(folder)
    (record,) = warnings()
    message = record.getMessage()
    assert record.levelno == logging.WARNING and "\n" not in message
    assert "bert.encoder.layer.1.attention.self.query.weight" in message and str(folder) in message


def test_fitting_to_a_bert_with_a_nan_weight_is_a_value_error_naming_it(tmp_path, corpus):
    """The fit's eigendecomposition failed in LAPACK on a NaN weight."""
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    BertForMaskedLM(bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["bert.encoder.layer.0.attention.self.key.weight"][0, 0] = float("nan")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"holds NaN or infinite weights \(.*encoder.layer.0.attention.self.key"):
        SymBertForMaskedLM.from_bert(tmp_path, attention_type="symmetric", calibration_texts=["the river"] * 4)
