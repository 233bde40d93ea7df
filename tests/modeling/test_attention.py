"""The attention variants against their defining properties, as the papers define them (README's variants table)."""

import logging

import pytest
import torch
from transformers.utils import logging as transformers_logging

from helpers.tiny import padded_batch, tiny_config
from symbert import SymBertForMaskedLM, SymBertForSequenceClassification
from symbert.attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES
from symbert.modeling_symbert import TRANSFORMERS_V5


def model_for(attention_type, implementation="eager", seed=0, model_class=SymBertForMaskedLM, **overrides):
    torch.manual_seed(seed)
    model = model_class(tiny_config(attention_type, **overrides)).eval()
    model.set_attn_implementation(implementation)
    return model


def pre_softmax_scores(attention, hidden_states):
    query, key, _ = attention.project(hidden_states)
    return query @ key.transpose(-1, -2) * attention.scaling


def test_each_variant_builds_its_own_module(attention_type):
    model = model_for(attention_type)
    for layer in model.bert.encoder.layer:
        assert type(layer.attention.self) is SYMBERT_SELF_ATTENTION_CLASSES[attention_type]


def test_eager_and_sdpa_agree_with_padding(attention_type):
    input_ids, attention_mask = padded_batch()
    model = model_for(attention_type)
    eager = model(input_ids, attention_mask=attention_mask).logits
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"
    sdpa = model(input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    torch.testing.assert_close(sdpa[real], eager[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_more_padding_leaves_real_tokens_unchanged(attention_type, implementation):
    input_ids, attention_mask = padded_batch()
    model = model_for(attention_type, implementation)
    logits = model(input_ids, attention_mask=attention_mask).logits
    extra = 7
    longer_ids = torch.cat([input_ids, torch.zeros(input_ids.shape[0], extra, dtype=torch.long)], dim=1)
    longer_mask = torch.cat([attention_mask, torch.zeros(attention_mask.shape[0], extra, dtype=torch.long)], dim=1)
    longer_logits = model(longer_ids, attention_mask=longer_mask).logits
    real = attention_mask.bool()
    torch.testing.assert_close(longer_logits[:, : input_ids.shape[1]][real], logits[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "attention_type, symmetric", [("original", False), ("symmetric", True), ("shared", True), ("pairwise", False)]
)
def test_score_symmetry(attention_type, symmetric):
    model = model_for(attention_type)
    hidden_states = torch.randn(2, 9, model.config.hidden_size)
    for layer in model.bert.encoder.layer:
        scores = pre_softmax_scores(layer.attention.self, hidden_states)
        gap = (scores - scores.transpose(-1, -2)).abs().max().item()
        if symmetric:
            assert gap < 1e-5
        else:
            assert gap > 1e-2


def test_pairwise_with_identity_equals_symmetric():
    input_ids, attention_mask = padded_batch()
    pairwise = model_for("pairwise", pairwise_init="identity")
    for layer in pairwise.bert.encoder.layer:
        assert torch.equal(layer.attention.self.pairwise, torch.eye(64).expand(2, 64, 64))
    symmetric = model_for("symmetric")
    missing, unexpected = symmetric.load_state_dict(pairwise.state_dict(), strict=False)
    assert missing == [] and all(name.endswith(".pairwise") for name in unexpected)
    torch.testing.assert_close(
        pairwise(input_ids, attention_mask=attention_mask).logits,
        symmetric(input_ids, attention_mask=attention_mask).logits,
        atol=1e-6,
        rtol=0,
    )


def test_pairwise_scores_are_q_s_qt():
    attention = model_for("pairwise").bert.encoder.layer[0].attention.self
    hidden_states = torch.randn(2, 5, 128)
    q = attention.query(hidden_states).view(2, 5, 2, 64).transpose(1, 2)
    expected = torch.einsum("bhid,hde,bhje->bhij", q, attention.pairwise, q) / 8.0
    torch.testing.assert_close(pre_softmax_scores(attention, hidden_states), expected, atol=1e-4, rtol=1e-5)


def test_mhe_add_output_does_not_depend_on_key_embeddings():
    input_ids, attention_mask = padded_batch()
    model = model_for("mhe_add")
    before = model(input_ids, attention_mask=attention_mask).logits
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            layer.attention.self.head_embeddings[1].normal_(0, 3.0)  # e^K: a shift shared by all keys of a head
    after = model(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    with torch.no_grad():
        model.bert.encoder.layer[0].attention.self.head_embeddings[0].normal_(0, 3.0)  # e^Q does matter
    assert (model(input_ids, attention_mask=attention_mask).logits - before).abs().max() > 1e-3


def test_mhe_mul_with_unit_embeddings_gives_identical_heads():
    attention = model_for("mhe_mul").bert.encoder.layer[0].attention.self
    with torch.no_grad():
        attention.head_embeddings.fill_(1.0)
    output, weights = attention(torch.randn(2, 6, 128), attention_mask=None)
    heads = output.view(2, 6, 2, 64)
    torch.testing.assert_close(heads[:, :, 0], heads[:, :, 1], atol=0, rtol=0)
    torch.testing.assert_close(weights[:, 0], weights[:, 1], atol=0, rtol=0)


def test_shared_projection_and_scales():
    attention = model_for("shared").bert.encoder.layer[0].attention.self
    for scale in (attention.scale_q, attention.scale_k, attention.scale_v):
        assert torch.equal(scale, torch.ones(128))
    hidden_states = torch.randn(1, 4, 128)
    before, _ = attention(hidden_states)
    with torch.no_grad():
        attention.scale_v.mul_(2.0)
    after, _ = attention(hidden_states)
    torch.testing.assert_close(after, 2.0 * before)  # V = U⊙δ_v: the attention output is linear in δ_v


def test_new_parameters_initialised_as_specified():
    mul = model_for("mhe_mul", seed=1).bert.encoder.layer[0].attention.self.head_embeddings
    add = model_for("mhe_add", seed=1).bert.encoder.layer[0].attention.self.head_embeddings
    assert abs(mul.mean().item() - 1.0) < 0.01 and abs(mul.std().item() - 0.02) < 0.005
    assert abs(add.mean().item()) < 0.01 and abs(add.std().item() - 0.02) < 0.005
    pairwise = model_for("pairwise", seed=1).bert.encoder.layer[0].attention.self.pairwise
    assert abs(pairwise.mean().item()) < 0.05 and abs(pairwise.std().item() - 1.0) < 0.05


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_output_attentions_and_hidden_states(attention_type, implementation):
    input_ids, attention_mask = padded_batch()
    model = model_for(attention_type, implementation)
    outputs = model(input_ids, attention_mask=attention_mask, output_attentions=True, output_hidden_states=True)
    assert len(outputs.attentions) == 2 and outputs.attentions[0].shape == (3, 2, 11, 11)
    assert len(outputs.hidden_states) == 3
    probabilities = outputs.attentions[0]
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(3, 2, 11))
    assert probabilities[2, :, :, attention_mask[2] == 0].abs().max() == 0  # no weight on padding
    as_tuple = model(input_ids, attention_mask=attention_mask, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], outputs.logits, atol=1e-5, rtol=0)


def test_output_attentions_under_sdpa_are_the_eager_weights(attention_type):
    input_ids, attention_mask = padded_batch()
    eager = model_for(attention_type, "eager", model_class=SymBertForSequenceClassification)
    sdpa = model_for(attention_type, "sdpa", model_class=SymBertForSequenceClassification)
    assert sdpa.config._attn_implementation == "sdpa"
    plain = sdpa(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    with_attentions = sdpa(input_ids, attention_mask=attention_mask, output_attentions=True, output_hidden_states=True)
    assert sdpa.config._attn_implementation == "sdpa"  # the fallback is for that call only
    torch.testing.assert_close(with_attentions.hidden_states[-1], plain.hidden_states[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(with_attentions.logits, plain.logits, atol=1e-5, rtol=0)
    expected = eager(input_ids, attention_mask=attention_mask, output_attentions=True).attentions
    assert len(with_attentions.attentions) == len(expected) == 2
    for got, want in zip(with_attentions.attentions, expected):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_output_attentions_under_sdpa_warns_once(caplog):
    transformers_logging.warning_once.cache_clear()  # an earlier test may have had the warning already
    model = model_for("pairwise", "sdpa")
    input_ids = torch.tensor([[1, 2, 3]])
    with caplog.at_level(logging.WARNING):
        model(input_ids, output_attentions=True)
        model(input_ids, output_attentions=True)
        model(input_ids)
    assert caplog.text.count("attn_implementation='sdpa' does not return attention weights") == 1


def test_set_attn_implementation_switches_the_kernel():
    """transformers decides from the source text whether a model may switch; SymBERT always may."""
    model = model_for("original", "sdpa")
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    weights = model.bert.encoder.layer[0].attention.self(torch.randn(1, 4, 128))[1]
    assert weights.shape == (1, 2, 4, 4)


def test_gqa_shares_each_key_value_head_within_its_group():
    model = model_for("gqa", num_attention_heads=4, num_key_value_heads=2)
    attention = model.bert.encoder.layer[0].attention.self
    assert attention.key.weight.shape == (64, 128) and attention.num_key_value_groups == 2
    hidden_states = torch.randn(2, 5, 128)
    query, key, value = attention.project(hidden_states)
    assert query.shape == (2, 4, 5, 32) and key.shape == value.shape == (2, 2, 5, 32)
    _, weights = attention(hidden_states, output_attentions=True)
    for head in range(4):
        expected = (query[:, head] @ key[:, head // 2].transpose(-1, -2) * attention.scaling).softmax(-1)
        torch.testing.assert_close(weights[:, head], expected)


@pytest.mark.parametrize("padded", [False, True])
def test_gqa_passes_fewer_key_value_heads_to_sdpa(monkeypatch, padded):
    """The kernel gets the one key/value head of multi-query attention itself (no copy per head, no enable_gqa,
    which masked CUDA kernels do not take): the query heads stacked along the sequence, padded or not; a padding mask
    as one row, broadcast over the stacked rows (no copy per head either)."""
    model = model_for("gqa", "sdpa", num_key_value_heads=1)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, *args, **kwargs):
        mask = kwargs.get("attn_mask")
        calls.append((query.shape[1:3], key.shape[1], kwargs.get("enable_gqa", False), getattr(mask, "shape", None)))
        return sdpa(query, key, value, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    model(torch.tensor([[1, 2, 3, 4]]), attention_mask=torch.tensor([[1, 1, 1, 0]]) if padded else None)
    heads = model.config.num_attention_heads
    mask_shape = (1, 1, 1, 4) if padded else None
    assert calls == [((1, 4 * heads), 1, False, mask_shape)] * model.config.num_hidden_layers


@pytest.mark.parametrize("attention_type", ["original", "gqa", "mhe_add"])
def test_a_padding_mask_as_one_row_gives_what_a_row_per_token_gives(attention_type):
    """SymBertModel passes a 2D padding mask to the kernels as one broadcast row: the same outputs as the same mask
    given with a row per query token (a 4D mask is passed as it is), and as the eager implementation's."""
    input_ids, attention_mask = padded_batch()
    model = model_for(attention_type, "sdpa", num_key_value_heads=1 if attention_type == "gqa" else None)
    one_row = model(input_ids, attention_mask=attention_mask).logits
    if TRANSFORMERS_V5:  # transformers 4's mask helpers take [batch, sequence] masks only
        length = input_ids.shape[1]
        rows = attention_mask[:, None, None, :].bool().expand(-1, 1, length, length)
        torch.testing.assert_close(model(input_ids, attention_mask=rows).logits, one_row, atol=1e-6, rtol=0)
    model.set_attn_implementation("eager")
    real = attention_mask.bool()
    torch.testing.assert_close(
        model(input_ids, attention_mask=attention_mask).logits[real], one_row[real], atol=1e-5, rtol=0
    )


def test_num_key_value_heads_is_checked():
    for bad in (0, 3, -2, 1.0):
        with pytest.raises(
            ValueError,
            match=f"num_key_value_heads={bad!r} is invalid; it must be None or a positive divisor of num_attention_heads=2",
        ):
            tiny_config("gqa", num_key_value_heads=bad)
    assert model_for("gqa").bert.encoder.layer[0].attention.self.num_key_value_groups == 2  # default: 1 of 2 heads


SCORE_SCALE_CASES = [(kind, {}) for kind in SYMBERT_SELF_ATTENTION_CLASSES] + [
    ("pairwise", {"pairwise_init": "identity"}),
    ("no_query", {"no_query_scaling": "standard"}),
]


@pytest.mark.parametrize("heads", [8, 2], ids=["d=16", "d=64"])
@pytest.mark.parametrize(("attention_type", "setting"), SCORE_SCALE_CASES, ids=lambda case: str(case or ""))
def test_initial_score_moments_are_each_types_formula(attention_type, setting, heads):
    """Each class's initial_score_moments against the scores its module computes at initialisation, on LayerNorm'd
    inputs: the variance of a score between two tokens within 12%, a token's mean score with itself within 10% (or
    near 0 where the formula says 0)."""
    config = tiny_config(attention_type, num_hidden_layers=1, num_attention_heads=heads, initializer_range=0.05)
    config.update(setting)
    expected = SYMBERT_SELF_ATTENTION_CLASSES[attention_type].initial_score_moments(config)
    others, selves = [], []
    for seed in range(32):
        torch.manual_seed(seed)
        attention = SymBertForMaskedLM(config).bert.encoder.layer[0].attention.self
        inputs = torch.nn.functional.layer_norm(torch.randn(4, 32, config.hidden_size), (config.hidden_size,))
        with torch.no_grad():
            query, key, _ = attention.project(inputs)
            key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # gqa, mhe: the kernel's sharing
            scores = query @ key.transpose(-1, -2) * attention.scaling
        same_token = torch.eye(32, dtype=torch.bool)
        others.append(scores[..., ~same_token].flatten())
        selves.append(scores[..., same_token].flatten())
    others, selves = torch.cat(others), torch.cat(selves)
    assert others.var().item() == pytest.approx(expected["variance"], rel=0.12)
    spread = expected["variance"] ** 0.5
    assert abs(others.mean().item() - expected["mean"]) < 0.05 * spread
    if expected["self_mean"]:
        assert selves.mean().item() == pytest.approx(expected["self_mean"], rel=0.1)
    else:
        assert abs(selves.mean().item()) < 0.2 * spread
