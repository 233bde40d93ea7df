"""One class holds everything about an attention type: a type defined and registered here, and nowhere else, is
picked up by the config, pre-training, the parameter table, the symmetry analysis, the benchmark's FLOPs and the
model cards. Every registered class's parameter formula matches its module."""

import json
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import symbert
from helpers.corpora import run_args
from helpers.tiny import tiny_config
from symbert import SymBertConfig, SymBertForMaskedLM, SymBertSelfAttention, register_attention, unregister_attention
from symbert.attention_symbert import SymBertOriginalSelfAttention
from symbert.hub_cards import release, staging
from symbert.tools.parameter_table import main as parameter_table
from symbert.tools.symmetry import analyse, symmetric_share
from symbert.training.arguments import parse_arguments
from symbert.training.pretrain import SymBertPretrainingTrainer, pretrain

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import throughput_timing  # noqa: E402

NAME = "kv_tied"
BIBTEX = "@misc{doe-2026-tied,\n  title  = {Tied Keys and Values},\n  author = {Doe, Jane},\n  year   = {2026}\n}"


class KeyValueTiedSelfAttention(SymBertSelfAttention):
    """V is K scaled by a learned gain: two h×h projections."""

    no_weight_decay = ("gain",)
    formula = "Head i scores `[Q]_i [K]_iᵀ / √d` and mixes its keys `[K]_i ⊙ γ` (V is K, scaled by a learned gain γ)."
    open_choices = ("The gain γ starts at 2.",)
    papers = {"doe": BIBTEX}
    score_forms = SymBertOriginalSelfAttention.score_forms  # M_i = [W_q]_iᵀ [W_k]_i, as BERT's

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.gain = nn.Parameter(torch.empty(self.all_head_size))

    def project(self, hidden_states):
        key = self.key(hidden_states)
        return self.split_heads(self.query(hidden_states)), self.split_heads(key), self.split_heads(key * self.gain)

    def init_weights(self):
        nn.init.constant_(self.gain, 2.0)

    @classmethod
    def qkv_parameters(cls, config):
        return 2 * (config.hidden_size**2 + config.hidden_size) + config.hidden_size

    @classmethod
    def projection_macs(cls, config):
        return 2 * config.hidden_size**2


@pytest.fixture
def registered():
    register_attention(NAME, KeyValueTiedSelfAttention)
    yield KeyValueTiedSelfAttention
    unregister_attention(NAME)
    assert NAME not in symbert.ATTENTION_TYPES


def test_config_and_model_pick_up_a_registered_type(registered):
    assert list(symbert.ATTENTION_TYPES)[-1] == NAME
    model = SymBertForMaskedLM(tiny_config(NAME))
    attention = model.bert.encoder.layer[0].attention.self
    assert type(attention) is registered and torch.equal(attention.gain, torch.full((128,), 2.0))  # its own init
    assert sum(p.numel() for p in attention.parameters()) == registered.qkv_parameters(model.config)
    trainer = SymBertPretrainingTrainer.__new__(SymBertPretrainingTrainer)  # the method reads no Trainer state
    decayed = set(trainer.get_decay_parameter_names(model))
    assert "bert.encoder.layer.0.attention.self.key.weight" in decayed
    assert not any(name.endswith(".gain") for name in decayed)


def test_a_type_without_a_bert_form_cannot_be_exported_and_says_so(registered):
    with pytest.raises(NotImplementedError, match=f"attention_type='{NAME}' .KeyValueTiedSelfAttention. has no BERT"):
        SymBertForMaskedLM(tiny_config(NAME)).to_bert()


def test_unregistered_type_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match=f"attention_type='{NAME}' is not supported; allowed: original, .*gqa"):
        SymBertConfig(attention_type=NAME)
    with pytest.raises(ValueError, match=f"attention type '{NAME}' is not supported"):
        parse_arguments(["--recipe", "cpu-demo", "--output_dir", tempfile.gettempdir(), "--attention_type", NAME])


def test_pretraining_runs_a_registered_type(registered, corpus, tmp_path):
    output = tmp_path / "run"
    args = parse_arguments(run_args(corpus, output, "--attention_type", NAME, "--max_steps", "2", "--save_steps", "2"))
    log_history = pretrain(*args).log_history
    assert any("eval_loss" in entry for entry in log_history)
    assert json.loads((output / "config.json").read_text())["attention_type"] == NAME
    gains = load_file(output / "model.safetensors")["bert.encoder.layer.0.attention.self.gain"]
    assert gains.shape == (128,) and not torch.equal(gains, torch.full((128,), 2.0))  # trained


def test_parameter_table_symmetry_and_flops_ask_the_class(registered, tmp_path, capsys):
    parameter_table(["--sizes", "tiny"])
    rows = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    with torch.device("meta"):
        count = SymBertForMaskedLM(SymBertConfig.from_preset("tiny", attention_type=NAME)).num_parameters()
    assert f"| {count:,} (" in rows[NAME]

    torch.manual_seed(0)
    model = symbert.SymBertModel(tiny_config(NAME))
    model.save_pretrained(tmp_path)
    shares, attention_type = analyse(str(tmp_path))
    attention = model.encoder.layer[1].attention.self
    form = attention.query.weight[64:].T.double() @ attention.key.weight[64:].double()  # head 1
    assert attention_type == NAME and shares[1, 1].item() == pytest.approx(symmetric_share(form).item(), rel=1e-5)

    h, f, vocab, seq = 128, 512, 99, 16
    per_layer = 2 * h * h + 2 * seq * h + h * h + 2 * h * f
    assert throughput_timing.training_flops_per_token(tiny_config(NAME), seq) == 6 * (2 * per_layer + h * h + h * vocab)


def test_staged_card_states_the_class_facts(registered, tmp_path, capsys):
    args = release.parse_arguments(["--tiny_random", "--namespace", "someone", "--output_dir", str(tmp_path / "out")])
    stages = staging.stage_tiny_random(args, tmp_path / "work")
    (stage,) = [s for s in stages if s.repo_id.endswith(f"-{NAME}")]  # no bert_projections: no `bert` branch
    assert (
        f"attention_type='{NAME}' has no BERT form (its class defines no bert_projections)" in capsys.readouterr().err
    )
    card = (stage.folder / "README.md").read_text()
    assert "## Use it as plain BERT" not in card and 'revision="bert"' not in card
    assert registered.formula in card and registered.open_choices[0] in card and BIBTEX in card
    assert "@inproceedings{courtois" not in card  # only its own paper
