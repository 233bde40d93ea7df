"""symbert-symmetry: the symmetric share of each head's score form, against values computed by hand."""

import csv

import pytest
import torch
from transformers import BertConfig, BertModel

import symbert
from helpers.tiny import tiny_config
from symbert.tools.symmetry import analyse, main, symmetric_share

# Head forms with known shares ||(M + Mᵀ)/2||² / ||M||²: symmetric 1, antisymmetric 0, and [[1, 2], [0, 1]]:
# symmetric part [[1, 1], [1, 1]] (energy 4) over energy 1 + 4 + 1 = 6, so 2/3.
SYMMETRIC = torch.tensor([[2.0, -1.0], [-1.0, 3.0]])
ANTISYMMETRIC = torch.tensor([[0.0, 1.5], [-1.5, 0.0]])
TWO_THIRDS = torch.tensor([[1.0, 2.0], [0.0, 1.0]])


def test_symmetric_share_by_hand():
    assert symmetric_share(SYMMETRIC).item() == pytest.approx(1.0)
    assert symmetric_share(ANTISYMMETRIC).item() == pytest.approx(0.0)
    assert symmetric_share(TWO_THIRDS).item() == pytest.approx(2 / 3)


def bert_with_heads(tmp_path, forms):
    """A transformers BertModel (hidden 4, 2 heads of d=2) whose layer-0 heads have the score forms M_i = W_q,iᵀ W_k,i
    given as 2×2 blocks on the head's own two input channels."""
    config = BertConfig(vocab_size=20, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    model = BertModel(config)
    attention = model.encoder.layer[0].attention.self
    with torch.no_grad():
        attention.query.weight.zero_()
        attention.key.weight.zero_()
        for head, form in enumerate(forms):
            rows = cols = slice(2 * head, 2 * head + 2)
            attention.query.weight[rows, cols] = torch.eye(2)  # W_q,i selects the head's channels, so M_i = W_k,i there
            attention.key.weight[rows, cols] = form
    model.save_pretrained(tmp_path)
    return tmp_path


def test_bert_checkpoint_heads(tmp_path):
    folder = bert_with_heads(tmp_path, [ANTISYMMETRIC, TWO_THIRDS])
    shares, attention_type = analyse(str(folder))
    assert attention_type == "original"
    assert shares.flatten().tolist() == pytest.approx([0.0, 2 / 3], abs=1e-6)


def test_pairwise_reports_the_share_of_s(tmp_path):
    model = symbert.SymBertModel(tiny_config("pairwise", hidden_size=4, num_attention_heads=2))
    with torch.no_grad():
        model.encoder.layer[0].attention.self.pairwise.copy_(torch.stack([SYMMETRIC, TWO_THIRDS]))
        model.encoder.layer[1].attention.self.pairwise.copy_(torch.stack([ANTISYMMETRIC, SYMMETRIC]))
    model.save_pretrained(tmp_path)
    shares, _ = analyse(str(tmp_path))
    assert shares.flatten().tolist() == pytest.approx([1.0, 2 / 3, 0.0, 1.0], abs=1e-6)


def test_original_symbert_matches_direct_computation(tmp_path):
    torch.manual_seed(0)
    model = symbert.SymBertForMaskedLM(tiny_config("original"))
    model.save_pretrained(tmp_path)
    shares, _ = analyse(str(tmp_path))
    d = model.config.hidden_size // model.config.num_attention_heads
    for layer, block in enumerate(model.bert.encoder.layer):
        for head in range(model.config.num_attention_heads):
            rows = slice(head * d, (head + 1) * d)
            form = block.attention.self.query.weight[rows].T.double() @ block.attention.self.key.weight[rows].double()
            symmetric = (form + form.T) / 2
            assert shares[layer, head].item() == pytest.approx(
                (symmetric.norm() ** 2 / form.norm() ** 2).item(), rel=1e-5
            )
    assert 0.4 < shares.mean().item() < 0.6  # random W_q, W_k: about half the energy is symmetric


@pytest.mark.parametrize("attention_type", ["symmetric", "shared"])
def test_symmetric_by_construction(tmp_path, attention_type):
    symbert.SymBertModel(tiny_config(attention_type)).save_pretrained(tmp_path)
    shares, reported_type = analyse(str(tmp_path))
    assert reported_type == attention_type
    assert torch.equal(shares, torch.ones(2, 2))


@pytest.mark.parametrize("attention_type", ["mhe_add", "mhe_mul"])
def test_multi_head_embedding_forms(tmp_path, attention_type):
    torch.manual_seed(0)
    model = symbert.SymBertModel(tiny_config(attention_type))
    model.save_pretrained(tmp_path)
    shares, _ = analyse(str(tmp_path))
    attention = model.encoder.layer[1].attention.self
    query, key, embeddings = (
        t.detach().double() for t in (attention.query.weight, attention.key.weight, attention.head_embeddings)
    )
    for head in range(2):
        scales = embeddings[0, head] * embeddings[1, head] if attention_type == "mhe_mul" else torch.ones(len(key))
        form = query.T @ (scales[:, None] * key)  # q̃ ⊙ e^Q · (k̃ ⊙ e^K)ᵀ = x W̃_qᵀ diag(e^Q ⊙ e^K) W̃_k yᵀ
        assert shares[1, head].item() == pytest.approx(symmetric_share(form).item(), rel=1e-5)


def test_command_writes_table_csv_and_heat_map(tmp_path, capsys):
    folder = bert_with_heads(tmp_path / "bert", [SYMMETRIC, ANTISYMMETRIC])
    main([str(folder), "--output_dir", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "| 0 | 1.000 | 0.000 | 0.500 |" in printed
    with open(tmp_path / "out" / "symmetry.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(r["layer"], r["head"], float(r["symmetric_share"])) for r in rows] == [("0", "0", 1.0), ("0", "1", 0.0)]
    assert (tmp_path / "out" / "symmetry.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        analyse(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match="model_type='gpt2' is not supported"):
        analyse(str(tmp_path))


def refused(monkeypatch, capsys, argv):
    """The one line `symbert-symmetry argv` prints for a user error (exit status 2, no traceback)."""
    monkeypatch.setattr("sys.argv", ["symbert-symmetry"])
    monkeypatch.delenv("SYMBERT_DEBUG", raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("symbert-symmetry: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("keep", [0.5, 0.001, 0.0])
def test_truncated_safetensors_is_named(tmp_path, monkeypatch, capsys, keep):
    """model.safetensors cut short (an interrupted save or download): one line naming the file, nothing written;
    before, safetensors' SafetensorError ("incomplete metadata, file not fully covered") named no file."""
    model = tmp_path / "model"
    symbert.SymBertModel(tiny_config("original")).save_pretrained(model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    err = refused(monkeypatch, capsys, [str(model), "--output_dir", str(tmp_path / "out")])
    assert err.startswith(f"symbert-symmetry: error: {weights}: its weights cannot be read (Error while deserializing")
    assert err.endswith("); the file is truncated or corrupt: save or download the model again.\n")
    assert not (tmp_path / "out").exists()


def test_truncated_pytorch_bin_is_named(tmp_path, monkeypatch, capsys):
    """A pytorch_model.bin (what older checkpoints hold, read when there is no *.safetensors) cut short."""
    model = tmp_path / "bert"
    bert = BertModel(BertConfig(vocab_size=20, hidden_size=4, num_hidden_layers=1, num_attention_heads=2))
    bert.config.save_pretrained(model)
    weights = model / "pytorch_model.bin"
    torch.save(bert.state_dict(), weights)
    weights.write_bytes(weights.read_bytes()[:100])
    err = refused(monkeypatch, capsys, [str(model), "--output_dir", str(tmp_path / "out")])
    assert err.startswith(f"symbert-symmetry: error: {weights}: its weights cannot be read (")
    assert "truncated or corrupt" in err and not (tmp_path / "out").exists()


def test_corrupt_config_is_named(tmp_path, monkeypatch, capsys):
    symbert.SymBertModel(tiny_config("original")).save_pretrained(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(config.read_text()[:40])
    err = refused(monkeypatch, capsys, [str(tmp_path)])
    assert err.startswith(f"symbert-symmetry: error: {config} is not valid JSON (")
    config.write_text('{"model_type": "bert", "num_hidden_layers": "2", "num_attention_heads": 2}')
    err = refused(monkeypatch, capsys, [str(tmp_path)])
    assert err == f"symbert-symmetry: error: {config}: num_hidden_layers='2'; allowed: a positive integer\n"
    assert not (tmp_path / "symmetry.csv").exists()
