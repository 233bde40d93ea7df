"""The shared-weight and multi-head-embedding types hand the attention kernel one key (and value) tensor where their
formulas have a copy per head, and act on the output channels after attention. These tests hold each rewritten
module to its formula as written in the papers (per-head Q, K, V, then softmax attention), computed here naively."""

from unittest import mock

import pytest
import torch

from helpers.tiny import padded_batch, tiny_config
from symbert import SymBertForMaskedLM
from symbert.modeling_symbert import SymBertSelfAttention, _check_index_range, _labelled_positions

REWRITTEN = ("shared", "mhe_add", "mhe_mul")
HEADS = 4  # more than one head per key/value head, so that grouping mistakes show


def formula_qkv(module, hidden_states):
    """Per-head Q, K, V [batch, heads, seq, d] exactly as the papers write them."""
    if module.attention_type == "shared":
        shared = module.shared(hidden_states)
        return tuple(module.split_heads(shared * scale) for scale in (module.scale_q, module.scale_k, module.scale_v))
    single = [linear(hidden_states).unsqueeze(1) for linear in (module.query, module.key, module.value)]
    embeddings = module.head_embeddings[:, None, :, None, :]  # [3, 1, heads, 1, d]
    if module.attention_type == "mhe_add":
        return tuple(x + e for x, e in zip(single, embeddings))
    return tuple(x * e for x, e in zip(single, embeddings))


def formula_forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
    """softmax(Q·Kᵀ/√d + mask)·V per head, concatenated: the reference the rewritten modules must equal."""
    query, key, value = formula_qkv(self, hidden_states)
    scores = query @ key.transpose(-1, -2) * self.scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.nn.functional.dropout(scores.softmax(-1), p=self.dropout.p, training=self.training)
    output = (weights @ value).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
    return output, weights


def model_for(attention_type, implementation, **overrides):
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config(attention_type, num_attention_heads=HEADS, **overrides))
    with torch.no_grad():  # embeddings away from their initial values, so that every term matters
        for name, parameter in model.named_parameters():
            if "head_embeddings" in name or "scale_" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.set_attn_implementation(implementation)
    return model


def run(model, reference, **kwargs):
    input_ids, attention_mask = padded_batch(batch=3, length=11)
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    if reference:  # the naive formula needs the additive mask, which the eager implementation builds
        model.set_attn_implementation("eager")
        with mock.patch.object(SymBertSelfAttention, "forward", formula_forward):
            return model(input_ids, attention_mask=attention_mask, labels=labels, **kwargs), attention_mask
    return model(input_ids, attention_mask=attention_mask, labels=labels, **kwargs), attention_mask


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("attention_type", REWRITTEN)
def test_outputs_and_gradients_equal_the_formula(attention_type, implementation):
    model = model_for(attention_type, implementation)
    outputs = {}
    for reference in (False, True):
        model.zero_grad()
        output, mask = run(model, reference)
        output.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        outputs[reference] = output.logits[mask.bool()].detach(), output.loss.detach(), grads
    (logits, loss, grads), (formula_logits, formula_loss, formula_grads) = outputs[False], outputs[True]
    torch.testing.assert_close(logits, formula_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(loss, formula_loss, atol=1e-5, rtol=0)
    assert grads.keys() <= formula_grads.keys()
    for name, formula_grad in formula_grads.items():
        grad = grads.get(name, torch.zeros_like(formula_grad))
        torch.testing.assert_close(grad, formula_grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attention_type", REWRITTEN)
def test_output_attentions_equal_the_formula(attention_type):
    model = model_for(attention_type, "sdpa").eval()
    with torch.no_grad():
        (output, _), (formula, _) = (
            run(model, False, output_attentions=True),
            run(model, True, output_attentions=True),
        )
    for weights, formula_weights in zip(output.attentions, formula.attentions, strict=True):
        torch.testing.assert_close(weights, formula_weights, atol=1e-6, rtol=0)


@pytest.mark.parametrize("attention_type", REWRITTEN)
def test_training_with_attention_dropout_draws_the_same_masks_as_the_formula(attention_type):
    """Dropout on the attention weights: mhe_add keeps its value embedding in the kernel then (A_i no longer sums to
    one), and every type still equals its formula under the same random masks."""
    model = model_for(attention_type, "eager", attention_probs_dropout_prob=0.3).train()
    losses = []
    for reference in (False, True):
        torch.manual_seed(1)
        losses.append(run(model, reference)[0].loss.detach())
    torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention_type", ["gqa", "mhe_add", "mhe_mul"])
def test_stacked_query_groups_equal_sdpa_with_repeated_key_value_heads(attention_type):
    """grouped_sdpa_attention_forward (a group's query heads stacked along the sequence) gives transformers' sdpa
    interface's outputs and gradients (each key/value head repeated per query head), with padding, in fp32."""
    model = model_for(attention_type, "sdpa", num_key_value_heads=2 if attention_type == "gqa" else None)
    assert model.bert.encoder.layer[0].attention.self.num_key_value_groups > 1
    results = []
    for stacked in (True, False):
        model.zero_grad()
        with mock.patch.object(SymBertSelfAttention, "_stacks_query_groups", lambda self, mask: stacked):
            output, mask = run(model, False)
        output.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((output.logits[mask.bool()].detach(), output.loss.detach(), grads))
    (logits, loss, grads), (reference_logits, reference_loss, reference_grads) = results
    torch.testing.assert_close(logits, reference_logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss, reference_loss, atol=1e-6, rtol=1e-6)
    assert grads.keys() == reference_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference_grads[name], atol=1e-6, rtol=1e-5, msg=name)


def test_mhe_add_key_embedding_gets_a_zero_gradient_and_the_kernel_one_key_head():
    model = model_for("mhe_add", "sdpa")
    attention = model.bert.encoder.layer[0].attention.self
    query, key, value = attention.project(torch.randn(2, 5, model.config.hidden_size))
    assert query.shape[1] == HEADS and key.shape[1] == 1 and value.shape[1] == 1
    assert attention.num_key_value_groups == HEADS
    run(model, False)[0].loss.backward()
    assert torch.count_nonzero(attention.head_embeddings.grad[1]) == 0
    assert torch.count_nonzero(attention.head_embeddings.grad[0]) > 0


def test_kernel_gets_one_key_and_value_head_for_mhe_mul():
    model = model_for("mhe_mul", "sdpa")
    _, key, value = model.bert.encoder.layer[0].attention.self.project(torch.randn(2, 5, model.config.hidden_size))
    assert key.shape[1] == value.shape[1] == 1


def test_shared_key_is_u_itself_and_value_is_scaled_before_attention():
    model = model_for("shared", "sdpa")
    attention = model.bert.encoder.layer[0].attention.self
    hidden_states = torch.randn(2, 5, model.config.hidden_size)
    _, key, value = attention.project(hidden_states)
    u = attention.split_heads(attention.shared(hidden_states))
    torch.testing.assert_close(key, u, rtol=0, atol=0)
    torch.testing.assert_close(value, attention.split_heads(attention.shared(hidden_states) * attention.scale_v))
    assert type(attention).finish_output is SymBertSelfAttention.finish_output  # nothing after attention


def saved_activation_bytes(model):
    """Bytes of the tensors autograd saves for one training step's backward, parameters left out."""
    parameters = {p.untyped_storage().data_ptr() for p in (*model.parameters(), *model.buffers())}
    saved = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in parameters:
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run(model, False)
    return sum(saved.values())


def test_shared_saves_at_most_u_more_than_original():
    """shared saves U (for δ_q⊙δ_k's and δ_v's gradients) where original saves none of its projections; scaling
    the output after attention instead would also save the attention output, one more [tokens, hidden] per layer."""
    original, shared = (model_for(kind, "sdpa", attention_probs_dropout_prob=0.1) for kind in ("original", "shared"))
    original.train(), shared.train()
    tokens, config = 3 * 11, shared.config
    u_and_scale_product = config.num_hidden_layers * (tokens + 1) * config.hidden_size * 4  # U and δ_q⊙δ_k, fp32
    assert saved_activation_bytes(shared) - saved_activation_bytes(original) == u_and_scale_product


def test_saved_tensor_names_and_shapes_are_unchanged():
    """Checkpoints saved before the rewrite load as they are: the modules keep their tensors."""
    d = 128 // HEADS
    expected = {
        "shared": {
            "shared.weight": (128, 128),
            "shared.bias": (128,),
            "scale_q": (128,),
            "scale_k": (128,),
            "scale_v": (128,),
        },
        "mhe_add": {
            "query.weight": (d, 128),
            "query.bias": (d,),
            "key.weight": (d, 128),
            "key.bias": (d,),
            "value.weight": (d, 128),
            "value.bias": (d,),
            "head_embeddings": (3, HEADS, d),
        },
    }
    expected["mhe_mul"] = expected["mhe_add"]
    for attention_type, tensors in expected.items():
        module = model_for(attention_type, "eager").bert.encoder.layer[0].attention.self
        assert {name: tuple(t.shape) for name, t in module.state_dict().items()} == tensors


def test_static_sparse_prediction_gives_the_same_loss_and_fixed_shapes():
    torch.manual_seed(0)
    dynamic = SymBertForMaskedLM(tiny_config("original", sparse_prediction=True)).eval()
    static = SymBertForMaskedLM(tiny_config("original", sparse_prediction=True, max_predictions_per_seq=4)).eval()
    static.load_state_dict(dynamic.state_dict())
    input_ids, attention_mask = padded_batch(batch=3, length=11)
    for masked in ([(0, 1), (2, 3)], [(0, 1), (0, 5), (1, 2), (1, 7), (2, 0), (2, 4), (2, 6)]):
        labels = torch.full_like(input_ids, -100)
        for row, column in masked:
            labels[row, column] = input_ids[row, column]
        expected = dynamic(input_ids, attention_mask=attention_mask, labels=labels)
        output = static(input_ids, attention_mask=attention_mask, labels=labels)
        assert expected.logits.shape[0] == len(masked) and output.logits.shape[0] == 3 * 4
        torch.testing.assert_close(output.loss, expected.loss, atol=1e-6, rtol=0)
        torch.testing.assert_close(output.logits[: len(masked)], expected.logits, atol=1e-6, rtol=0)


def test_static_sparse_prediction_refuses_more_labels_than_it_predicts():
    hidden_states = torch.randn(2, 5, 8)
    labels = torch.arange(10).view(2, 5)  # every position labelled
    with pytest.raises(ValueError, match=r"mark 10 positions, more than the 4 .*max_predictions_per_seq=2"):
        _labelled_positions(hidden_states, labels, 2)
    states, kept = _labelled_positions(hidden_states, labels.masked_fill(labels % 3 != 0, -100), 2)
    assert states.shape == (4, 8) and kept.tolist() == [0, 3, 6, 9]


def test_id_range_check_reads_nothing_back_from_an_accelerator(monkeypatch):
    """Off the CPU the range check is a device-side assert: no .item(), so no wait for the device (the meta device
    stands in for a GPU here)."""

    def no_host_sync(self):
        raise AssertionError("the range check synchronised with the device")

    monkeypatch.setattr(torch.Tensor, "item", no_host_sync)
    with mock.patch.object(torch, "_assert_async", wraps=torch._assert_async) as device_assert:
        _check_index_range("input_ids", torch.zeros(2, 3, dtype=torch.long, device="meta"), 99, "vocab_size")
    (condition, message), _ = device_assert.call_args
    assert condition.device.type == "meta" and message == "input_ids contains ids outside [0, 98] (vocab_size=99)."
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"input_ids contains 99, outside \[0, 98\]"):
        _check_index_range("input_ids", torch.tensor([[1, 99]]), 99, "vocab_size")
