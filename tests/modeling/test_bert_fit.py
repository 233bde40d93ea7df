"""Each attention type's fit to BERT's self-attention (`fit_bert`, `fit_attention_to_bert`): exact on tiny random BERTs
built so that the type can represent their attention, and never worse than the copy `from_bert` makes."""

import json

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from helpers.assertions import assert_one_line
from helpers.tiny import tiny_config
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert.conversion_symbert import fit_attention_to_bert

HEADS, HIDDEN = 4, 128
D = HIDDEN // HEADS


def random_bert(seed=3, **overrides):
    """A tiny BertForMaskedLM (2 layers, 4 heads of 32) with weights wide enough for attention to be uneven."""
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=99,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        intermediate_size=256,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.2,
        **overrides,
    )
    return BertForMaskedLM(config).eval()


def sequences(count=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 30, (count,), generator=generator)
    return [torch.randint(5, 99, (1, int(n)), generator=generator) for n in lengths]


def set_attention(bert, layer, **tensors):
    attention = bert.bert.encoder.layer[layer].attention.self
    with torch.no_grad():
        for name, tensor in tensors.items():
            module, part = name.split("_")
            getattr(getattr(attention, module), part).copy_(tensor)


def copied(bert, tmp_path, attention_type, **config):
    bert.save_pretrained(tmp_path / "bert")
    model, _ = SymBertForMaskedLM.from_bert(
        tmp_path / "bert", attention_type=attention_type, calibration_texts=None, **config
    )
    return model.eval()


def representable(attention_type, bert):
    """Make every layer of `bert` one that `attention_type` can represent exactly."""
    generator = torch.Generator().manual_seed(7)
    for layer in range(2):
        attention = bert.bert.encoder.layer[layer].attention.self
        wq, bq = attention.query.weight.detach().clone(), attention.query.bias.detach().clone()
        wv, bv = attention.value.weight.detach().clone(), attention.value.bias.detach().clone()
        if attention_type == "symmetric":  # K = Q, biases included
            set_attention(bert, layer, key_weight=wq, key_bias=bq)
        elif attention_type == "pairwise":  # keys in the span of the queries: k_i = S_i·q_i per head
            s = torch.randn(HEADS, D, D, generator=generator) / D**0.5
            key = torch.einsum("nde,neh->ndh", s, wq.view(HEADS, D, HIDDEN)).reshape(HIDDEN, HIDDEN)
            set_attention(bert, layer, key_weight=key, key_bias=torch.randn(HIDDEN, generator=generator))
        elif attention_type == "shared":  # q = v ⊙ a, k = v ⊙ b (BERT's key bias any)
            a, b = 1 + torch.rand(HIDDEN, generator=generator), 1 + torch.rand(HIDDEN, generator=generator)
            set_attention(bert, layer, query_weight=wv * a[:, None], query_bias=bv * a, key_weight=wv * b[:, None])
        elif attention_type == "no_query":  # each head's query linear in its own channels
            r = torch.randn(HEADS, D, D, generator=generator) / D**0.5
            query = torch.block_diag(*r)  # [h, h]: head i's rows read head i's channels
            set_attention(bert, layer, query_weight=query, query_bias=torch.zeros(HIDDEN))
        elif attention_type == "mhe_add":  # one W̃ per Q/K/V, each head its own bias
            for name in ("query", "key", "value"):
                weight = getattr(attention, name).weight.detach()[:D].repeat(HEADS, 1)
                set_attention(bert, layer, **{f"{name}_weight": weight})
        elif attention_type == "gqa":  # heads of a group share their key and value
            for name in ("key", "value"):
                linear = getattr(attention, name)
                weight, bias = linear.weight.detach().view(2, 2, D, HIDDEN), linear.bias.detach().view(2, 2, D)
                weight, bias = weight[:, :1].expand(-1, 2, -1, -1), bias[:, :1].expand(-1, 2, -1)
                set_attention(bert, layer, **{f"{name}_weight": weight.reshape(HIDDEN, HIDDEN)})
                set_attention(bert, layer, **{f"{name}_bias": bias.reshape(HIDDEN)})
    return bert


EXACT_TYPES = ["original", "symmetric_init", "symmetric", "pairwise", "shared", "no_query", "mhe_add", "gqa"]


@pytest.mark.parametrize("attention_type", EXACT_TYPES)
def test_the_fit_is_exact_where_the_type_can_represent_berts_attention(attention_type, tmp_path):
    bert = representable(attention_type, random_bert())
    config = {"num_key_value_heads": 2} if attention_type == "gqa" else {}
    model = copied(bert, tmp_path, attention_type, **config)
    rows = fit_attention_to_bert(model, bert, sequences())
    assert max(row["fit_error"] for row in rows) < 1e-5, rows  # (where the copy is exact too, either is kept)
    # and the whole model then gives BERT's logits
    input_ids = sequences(3, seed=5)[0]
    assert torch.allclose(model(input_ids).logits, bert(input_ids).logits, atol=1e-4)


@pytest.mark.parametrize("attention_type", list(ATTENTION_TYPES))
def test_the_fit_is_never_worse_than_the_copy_and_improves_where_the_copy_is_new(attention_type, tmp_path):
    bert = random_bert()
    model = copied(bert, tmp_path, attention_type, **({"num_key_value_heads": 2} if attention_type == "gqa" else {}))
    rows = fit_attention_to_bert(model, bert, sequences())
    for row in rows:
        assert min(row["copy_error"], row["fit_error"]) <= row["copy_error"]
    if attention_type in ("original", "symmetric_init"):
        assert all(row["copy_error"] < 1e-6 for row in rows)  # the copy is BERT
    elif attention_type != "gqa":  # the copy leaves new tensors random (or a Q·Kᵀ another form cannot hold): closer
        # (past layer 0 both run on the inputs the converted layers before leave, whose error they share)
        assert rows[0]["fit_error"] < 0.95 * rows[0]["copy_error"], rows
        assert all(row["kept"] == "fit" and row["fit_error"] < row["copy_error"] for row in rows), rows
    else:  # mean-pooled keys against the query-weighted pooling: at least as close
        assert all(row["fit_error"] <= row["copy_error"] * 1.05 for row in rows), rows


def test_a_fit_worse_than_the_copy_is_not_kept(tmp_path, monkeypatch):
    bert = random_bert()
    model = copied(bert, tmp_path, "original")
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    def spoiled_fit(self, bert_tensors, inputs):
        with torch.no_grad():
            self.query.weight.mul_(-1.0)
        return ["query.weight"]

    monkeypatch.setattr(type(model.bert.encoder.layer[0].attention.self), "fit_bert", spoiled_fit)
    rows = fit_attention_to_bert(model, bert, sequences())
    assert [row["kept"] for row in rows] == ["copy", "copy"] and all(r["fit_error"] > 0.01 for r in rows)
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


def test_a_type_without_a_fit_says_so(tmp_path):
    model = SymBertForMaskedLM(tiny_config("original"))
    base = type(model.bert.encoder.layer[0].attention.self).__mro__[-3]  # SymBertSelfAttention
    with pytest.raises(NotImplementedError, match="has no fit to BERT's attention"):
        base.fit_bert(model.bert.encoder.layer[0].attention.self, {}, torch.zeros(2, 128))


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A tiny random BertModel with a WordPiece tokenizer of its vocabulary, saved as a BERT folder (read only)."""
    from transformers import AutoTokenizer, BertModel

    from helpers.corpora import tiny_sentences, train_tokenizer

    tmp_path = tmp_path_factory.mktemp("bert-folder")
    tokenizer_folder = train_tokenizer(tmp_path / "tokenizer", tiny_sentences(200), vocab_size=99)
    bert = random_bert()
    folder = tmp_path / "bert"
    BertModel(bert.config, add_pooling_layer=False).eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_folder).save_pretrained(folder)
    return folder


def test_symbert_convert_writes_a_fitted_folder_closer_to_bert_than_the_copy(bert_folder, tmp_path, capsys):
    from transformers import AutoModel

    from helpers.corpora import tiny_sentences
    from symbert.tools import convert
    from symbert.tools.conversion_record import ConversionRecord

    texts = tmp_path / "calibration.txt"
    texts.write_text("\n".join(tiny_sentences(60, seed=1)) + "\n")
    output = tmp_path / "pairwise"
    argv = [str(bert_folder), str(output), "--attention_type", "pairwise", "--calibration_files", str(texts)]
    report = convert.convert([*argv, "--held_out", "16"])
    printed = capsys.readouterr().out
    assert "copy" in printed and f"Written: {output}" in printed
    cosine = report.held_out_mean_cosine
    assert cosine.fit > cosine.copy and report.layers_fitted == len(report.layers)
    saved = json.loads((output / "conversion.json").read_text())
    assert saved["held_out_mean_cosine"] == {"copy": cosine.copy, "fit": cosine.fit}
    assert saved["fit_texts"] == 44 and saved["held_out_texts"] == 16 and ConversionRecord.read(output) == report
    # a self-contained folder: loads in a fresh process with the folder's own code, and gives the converted outputs
    reloaded = AutoModel.from_pretrained(output, trust_remote_code=True).eval()
    assert type(reloaded).__name__ == "SymBertModel" and reloaded.config.attention_type == "pairwise"
    bert = AutoModel.from_pretrained(bert_folder).eval()
    ids = torch.tensor([[2, 10, 20, 30, 3]])
    agreement = torch.nn.functional.cosine_similarity(
        reloaded(ids).last_hidden_state.mean(1), bert(ids).last_hidden_state.mean(1)
    )
    assert agreement.item() > cosine.copy - 0.2  # the fitted model, not a fresh one


@pytest.mark.parametrize(
    "make, argv, message",
    [
        (None, ["--attention_type", "nonsense"], "--attention_type 'nonsense' is unknown; allowed: original,"),
        (None, ["--attention_type", "pairwise", "--held_out", "0"], "--held_out=0 must be at least 1."),
        ("empty", ["--attention_type", "pairwise", "--calibration_files", "{TEXT}"], "has 0 non-empty line(s)"),
        ("binary", ["--attention_type", "pairwise", "--calibration_files", "{TEXT}"], "cannot read it as UTF-8 text"),
        ("missing", ["--attention_type", "pairwise", "--calibration_files", "{TEXT}"], "cannot read it as UTF-8"),
        ("not_bert", ["--attention_type", "pairwise"], "is a 'symbert' model, not a BERT (model_type 'bert')."),
        ("output", ["--attention_type", "pairwise"], "exists and is not an empty folder; choose a new path."),
    ],
)
def test_symbert_convert_refuses_bad_input_in_one_line(make, argv, message, bert_folder, tmp_path, capsys):
    from symbert.tools import convert

    text, source, output = tmp_path / "calibration.txt", bert_folder, tmp_path / "out"
    if make == "empty":
        text.write_text("\n  \n")
    elif make == "binary":
        text.write_bytes(b"\xff\xfe\x00bad")
    elif make == "not_bert":
        source = tmp_path / "symbert"
        SymBertForMaskedLM(tiny_config("original")).save_pretrained(source)
    elif make == "output":
        output.mkdir()
        (output / "keep.txt").write_text("mine")
    argv = [str(source), str(output), *(a.replace("{TEXT}", str(text)) for a in argv)]
    capsys.readouterr()  # the setup's own output
    assert_one_line(convert.main, argv, message, capsys)
    if make == "output":
        assert sorted(p.name for p in output.iterdir()) == ["keep.txt"]
    else:
        assert not output.exists()


def test_a_type_without_a_fit_cannot_be_converted(bert_folder, tmp_path, capsys, monkeypatch):
    from symbert.attention_symbert import SymBertSelfAttention, SymBertSymmetricSelfAttention
    from symbert.tools import convert

    monkeypatch.setattr(SymBertSymmetricSelfAttention, "fit_bert", SymBertSelfAttention.fit_bert)
    argv = [str(bert_folder), str(tmp_path / "out"), "--attention_type", "symmetric"]
    assert_one_line(convert.main, argv, "--attention_type 'symmetric' has no fit to BERT's attention", capsys)


def test_a_fit_is_taken_at_its_least_squares_scale_on_held_out_text():
    """shrunk_error: α = Σ⟨o, t⟩ / Σ⟨o, o⟩ clipped to [0, 1], and the relative error of α·o, by hand."""
    from symbert.conversion_symbert import shrunk_error

    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(1, 5, 4, generator=generator) for _ in range(3)]
    noise = [torch.randn(1, 5, 4, generator=generator) for _ in range(3)]

    def bert_attention(hidden):
        return (2 * hidden,)

    noisy = {id(x): 2 * x + 3 * n for x, n in zip(inputs, noise)}

    def module(hidden):
        return (noisy[id(hidden)],)

    scale, error = shrunk_error(module, bert_attention, inputs, inputs)
    o = torch.cat([noisy[id(x)] for x in inputs]).double()
    t = torch.cat([2 * x for x in inputs]).double()
    expected = ((o * t).sum() / (o * o).sum()).item()
    assert 0 < expected < 1 and scale == pytest.approx(expected)
    assert error == pytest.approx(((scale * o - t).norm() / t.norm()).item())
    assert error < ((o - t).norm() / t.norm()).item()  # shrinking a noisy fit brings it closer
    exact_scale, exact_error = shrunk_error(bert_attention, bert_attention, inputs, inputs)
    assert exact_scale == pytest.approx(1.0) and exact_error < 1e-7


@pytest.mark.heavy  # two conversions with their fits
def test_without_the_output_scale_each_fit_keeps_bert_s_output_projection(bert_folder):
    """from_bert(output_scale=False), symbert-transfer's start: each fit compared with the copy and kept at α = 1, so
    the attention output projection after it stays BERT's, where the default scale moves it for a kept fit."""
    from transformers import BertModel

    from helpers.corpora import tiny_sentences
    from symbert import SymBertModel

    bert = BertModel.from_pretrained(bert_folder)
    texts = tiny_sentences(40, seed=5)

    def output_projections(model):
        return [layer.attention.output.dense.weight for layer in model.encoder.layer]

    scaled, _ = SymBertModel.from_bert(bert_folder, calibration_texts=texts, attention_type="symmetric")
    unscaled, _ = SymBertModel.from_bert(
        bert_folder, calibration_texts=texts, attention_type="symmetric", output_scale=False
    )
    assert [row["kept"] for row in unscaled.bert_fit_report] == ["fit"] * len(unscaled.encoder.layer)
    assert [row["output_scale"] for row in unscaled.bert_fit_report] == [1.0] * len(unscaled.encoder.layer)
    assert all(torch.equal(a, b) for a, b in zip(output_projections(unscaled), output_projections(bert)))
    kept_scales = [row["output_scale"] for row in scaled.bert_fit_report if row["kept"] == "fit"]
    assert kept_scales and all(0 <= scale < 1 for scale in kept_scales)
    assert not all(torch.equal(a, b) for a, b in zip(output_projections(scaled), output_projections(bert)))
    # layer 0's fit is the same in both (its inputs are BERT's embeddings): at α = 1 its error is the fit's own
    assert unscaled.bert_fit_report[0]["fit_error"] > scaled.bert_fit_report[0]["fit_error"]
