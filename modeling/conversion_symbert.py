# Copyright 2018 The Google AI Language Team Authors and The HuggingFace Inc. team; 2026 the SymBERT authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The conversion behind SymBERT's `from_bert`: BERT's attention tensors handed to the types that convert them, the
calibration text and its sequences, and each layer's attention fitted to BERT's on the inputs that layer sees (the
per-type fits are the attention classes' `fit_bert`).

This file is copied into every saved model folder (it is imported by `modeling_symbert.py`, whose `from_bert` every
model class carries), so it may import only torch/transformers and its flat siblings, never the `symbert` package.
"""

import copy
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from transformers.utils import logging

from .attention_symbert import ATTENTION_MARKER, SymBertSelfAttention
from .loading_symbert import checkpoint_files, non_finite_weights

logger = logging.get_logger(__name__)


def convert_bert_attention(model, bert_name_or_path, subfolder, new_parameters, bert_state=None):
    """Let each self-attention module set its new tensors from BERT's (`bert_state`, BERT's tensors already read,
    else read from the checkpoint); the sorted names of those it converted."""
    modules = {name: m for name, m in model.named_modules() if isinstance(m, SymBertSelfAttention)}
    converts = any(type(m).from_bert_tensors is not SymBertSelfAttention.from_bert_tensors for m in modules.values())
    if not converts or not any(ATTENTION_MARKER in name for name in new_parameters):
        return []
    if bert_state is None:
        bert_state = _checkpoint_attention_state(bert_name_or_path, subfolder)
    bert_tensors = _bert_attention_tensors(bert_state)
    converted = []
    for name, module in modules.items():
        layer = int(name.split("encoder.layer.")[1].split(".")[0])
        converted += [f"{name}.{tensor}" for tensor in module.from_bert_tensors(bert_tensors.get(layer, {}))]
    return sorted(converted)


def _checkpoint_attention_state(name_or_path, subfolder=""):
    """{name: tensor} of the self-attention tensors of a (possibly sharded) checkpoint, safetensors or
    pytorch_model.bin (read as tensors only), as from_pretrained found it (nothing is downloaded here)."""
    state = {}
    for file in checkpoint_files(name_or_path, {"subfolder": subfolder}):
        if str(file).endswith(".safetensors"):
            with safe_open(file, framework="pt") as weights:
                state.update({name: weights.get_tensor(name) for name in weights.keys() if ATTENTION_MARKER in name})
        else:
            state.update(torch.load(file, map_location="cpu", weights_only=True, mmap=True))
    return state


def _bert_attention_tensors(state):
    """{layer: {"key.weight": tensor, ...}}: the self-attention tensors of BERT's checkpoint tensors `state`."""
    tensors = {}
    for name, tensor in state.items():
        if ATTENTION_MARKER in name and "encoder.layer." in name:
            layer = int(name.split("encoder.layer.")[1].split(".")[0])
            tensors.setdefault(layer, {})[name.split(ATTENTION_MARKER)[1]] = tensor
    return tensors


def own_copy(state):
    """Tensors of its own for each model made from BERT's `state`: from_pretrained may keep the tensors it is given
    as the model's parameters, which a fit changes in place."""
    return {name: tensor.clone() for name, tensor in state.items()}


def embedded_calibration_texts(count=256):
    """`count` lines of the installed symbert package's embedded text, taken in turn from its two domains so that any
    slice of them holds both: lines spread evenly over the corpus of nine 19th-century books, and over a sample of
    US State of the Union addresses of 1790-2021 (public domain; training/corpus/calibration_general.txt.gz). None
    where this code runs without the package (a model folder's copy of this file, loaded as remote code). Found by
    importlib, not imported: this file imports only torch, transformers and its own folder."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("symbert.training")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "corpus"
    domains = []
    for name in ("english_prose.txt.gz", "calibration_general.txt.gz"):
        if not (folder / name).is_file():
            return None
        with gzip.open(folder / name, "rt", encoding="utf-8") as file:
            domains.append([line.strip() for line in file if len(line.split()) >= 8])
    wanted = (count - count // 2, count // 2)
    spread = [lines[:: max(1, len(lines) // share)][:share] for lines, share in zip(domains, wanted)]
    mixed = [line for pair in zip(*spread) for line in pair]
    return mixed + spread[0][len(spread[1]) :] + spread[1][len(spread[0]) :]


# The calibration tokens a fit reads at most: its memory grows with them (every layer's inputs are kept, and each fit
# works on the tokens' matrix in float64), so more calibration text is not read. The embedded text gives about 22,000.
MAX_CALIBRATION_TOKENS = 32768
# A text is cut to this many characters per token of max_length before it is tokenised: tokenising costs memory for
# every character however few tokens truncation keeps (a 50 MB line took gigabytes), and text averages 4 to 6.
CHARACTERS_PER_TOKEN = 64


def calibration_sequences(tokenizer, texts, max_length=128, max_tokens=None):
    """Each non-empty text as one unpadded sequence of token ids [1, length], truncated to `max_length` tokens (cut to
    `CHARACTERS_PER_TOKEN` characters a token before it is tokenised), in order until they hold `max_tokens` tokens
    (default `MAX_CALIBRATION_TOKENS`): the texts past that are not read."""
    max_tokens = MAX_CALIBRATION_TOKENS if max_tokens is None else max_tokens
    texts = [text for text in texts if isinstance(text, str) and text.strip()]
    if not texts:
        raise ValueError("The calibration text is empty: give at least one non-empty text.")
    sequences, count = [], 0
    for text in texts:
        ids = tokenizer(text[: max_length * CHARACTERS_PER_TOKEN], truncation=True, max_length=max_length)["input_ids"]
        if sequences and count + len(ids) > max_tokens:
            break
        sequences.append(torch.tensor([ids]))
        count += len(ids)
    return sequences


def layer_inputs(bert_model, sequences):
    """Per layer, the inputs the model's layer sees on each sequence: [layer][sequence] -> [1, length, hidden]."""
    encoder_owner = getattr(bert_model, "bert", bert_model)
    inputs = [[] for _ in encoder_owner.encoder.layer]
    with torch.no_grad():
        for input_ids in sequences:
            hidden = encoder_owner(input_ids.to(encoder_owner.device), output_hidden_states=True).hidden_states
            for index in range(len(inputs)):
                inputs[index].append(hidden[index])
    return inputs


def attention_error(module, bert_attention, inputs, bert_inputs=None):
    """‖module(x) − BERT's self-attention(x_BERT)‖ / ‖BERT's‖ over every token of `inputs` (one layer's sequences),
    x_BERT the inputs BERT's layer sees on the same sequences (`bert_inputs`; default: `inputs`)."""
    difference = reference = 0.0
    with torch.no_grad():
        for hidden, bert_hidden in zip(inputs, bert_inputs or inputs):
            expected = bert_attention(bert_hidden)[0].double()
            difference += (module(hidden)[0].double() - expected).pow(2).sum().item()
            reference += expected.pow(2).sum().item()
    return (difference / max(reference, 1e-300)) ** 0.5


def shrunk_error(module, bert_attention, inputs, bert_inputs):
    """(α, error): the scale α in [0, 1] of the module's output closest to BERT's self-attention output in least
    squares (Σ⟨o, t⟩ / Σ⟨o, o⟩ over the tokens), and the relative error of α·o. A fit that holds little of BERT's
    attention gets α < 1: less of an output that is mostly its error, as the copy's near-zero one is (shrinkage
    chosen on held-out text, the regularisation that keeps a poor fit from doing worse than the copy elsewhere)."""
    cross = own = reference = 0.0
    with torch.no_grad():
        for hidden, bert_hidden in zip(inputs, bert_inputs):
            expected = bert_attention(bert_hidden)[0].double()
            produced = module(hidden)[0].double()
            cross += (produced * expected).sum().item()
            own += produced.pow(2).sum().item()
            reference += expected.pow(2).sum().item()
    scale = min(1.0, max(0.0, cross / own)) if own > 0 else 1.0
    squared = scale**2 * own - 2 * scale * cross + reference
    return scale, (max(squared, 0.0) / max(reference, 1e-300)) ** 0.5


def fit_attention_to_bert(model, bert_model, sequences, held_out_share=0.25, output_scale=True):
    """Fit each self-attention module of `model` (made from `bert_model` by `from_bert`: same sizes) to the BERT layer
    it replaces, layer by layer, with the module's `fit_bert`, twice: on the inputs BERT's layer sees on `sequences`
    (unpadded [1, length] token-id tensors), and on those the partly converted model's layer sees (its earlier layers
    converted: the errors they leave are then part of what the fit corrects). The last `held_out_share` of the
    sequences is held out: on it each candidate (the copy, the two fits) runs on the converted model's own inputs and
    is compared with BERT's self-attention on BERT's inputs (a fit's output at its least-squares scale α ≤ 1,
    `shrunk_error`), and the closest is kept (never worse than the copy); a kept fit's α goes into the attention output
    projection that follows (`attention.output.dense.weight`). `output_scale=False` compares and keeps each fit at
    α = 1, BERT's output projection unchanged: the staged transfer starts there (symbert-transfer). Returns one row per
    layer: layer, copy_error, fit_error (the better fit's), kept ("fit" or "copy"), inputs ("bert" or "own": which fit),
    output_scale (its α), fitted (the tensors the kept fit set).
    """
    held_out_count = max(1, int(len(sequences) * held_out_share)) if len(sequences) > 1 else 0
    fitting, held_out = sequences[: len(sequences) - held_out_count], sequences[len(sequences) - held_out_count :]
    held_out = held_out or fitting
    bert_layers = getattr(bert_model, "bert", bert_model).encoder.layer
    output_layers = getattr(model, "bert", model).encoder.layer
    modules = [layer.attention.self for layer in output_layers]
    bert_fit_inputs, bert_held_out = layer_inputs(bert_model, fitting), layer_inputs(bert_model, held_out)
    training = model.training
    model.eval()
    bert_model.eval()
    rows = []
    own_fit_inputs, own_held_out = bert_fit_inputs[0], bert_held_out[0]  # the embeddings are BERT's
    for index, (module, bert_layer) in enumerate(zip(modules, bert_layers)):
        bert_attention = bert_layer.attention.self
        tensors = {name: tensor.detach().double() for name, tensor in bert_attention.state_dict().items()}
        if index:  # the partly converted model's inputs: its converted layer `index - 1` on the inputs it saw
            with torch.no_grad():
                own_fit_inputs, own_held_out = (
                    [output_layers[index - 1](hidden)[0] for hidden in inputs]
                    for inputs in (own_fit_inputs, own_held_out)
                )
        copy_error = attention_error(module, bert_attention, own_held_out, bert_held_out[index])
        candidates = {"copy": (copy.deepcopy(module.state_dict()), copy_error, [])}
        for inputs_name, fit_inputs in (("bert", bert_fit_inputs[index]), ("own", own_fit_inputs)):
            if inputs_name == "own" and index == 0:  # the embeddings are BERT's: the same fit
                continue
            module.load_state_dict(candidates["copy"][0])
            fitted = module.fit_bert(tensors, torch.cat([hidden[0] for hidden in fit_inputs]).double())
            if output_scale:
                scale, error = shrunk_error(module, bert_attention, own_held_out, bert_held_out[index])
            else:
                scale, error = 1.0, attention_error(module, bert_attention, own_held_out, bert_held_out[index])
            candidates[inputs_name] = (copy.deepcopy(module.state_dict()), error, fitted, scale)
        best = min(candidates, key=lambda name: (candidates[name][1], name != "copy"))
        fits = {name: value for name, value in candidates.items() if name != "copy"}
        best_fit = min(fits, key=lambda name: fits[name][1])
        module.load_state_dict(candidates[best][0])
        scale = 1.0 if best == "copy" else candidates[best][3]
        if scale != 1.0:  # α·o: the attention output projection that follows takes the scale
            with torch.no_grad():
                output_layers[index].attention.output.dense.weight.mul_(scale)
        rows.append(
            {
                "layer": index,
                "copy_error": copy_error,
                "fit_error": fits[best_fit][1],
                "kept": "copy" if best == "copy" else "fit",
                "inputs": best_fit,
                "output_scale": fits[best_fit][3],
                "fitted": candidates[best][2],
            }
        )
    model.train(training)
    return rows


def fit_from_bert_checkpoint(
    model, bert_name_or_path, subfolder, calibration_texts, bert_state=None, output_scale=True
):
    """`fit_attention_to_bert` for `from_bert`: BERT's encoder and tokenizer loaded from its checkpoint (the encoder
    made from `bert_state`, BERT's tensors already read, where given), `calibration_texts` a list of texts or
    "embedded" (the installed package's corpus). Returns its rows, or None where "embedded" cannot be had (no corpus,
    or a checkpoint without a tokenizer): the model then stays the copy, with a warning."""
    texts = embedded_calibration_texts() if calibration_texts == "embedded" else calibration_texts
    if texts is None:
        logger.warning("from_bert: the embedded corpus is not installed here; the attention is copied, not fitted.")
        return None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(bert_name_or_path, subfolder=subfolder)
        vocabulary = tokenizer.get_vocab()
        # transformers 5 makes an empty BertTokenizer (its special tokens only) for a folder without tokenizer files
        if len(vocabulary) <= len(set(tokenizer.all_special_tokens)):
            raise ValueError("it holds no tokenizer files")
        if max(vocabulary.values()) >= model.config.vocab_size:
            raise ValueError(
                f"its tokenizer's ids reach {max(vocabulary.values())}, past the model's vocab_size "
                f"{model.config.vocab_size}"
            )
    except (OSError, ValueError, TypeError) as error:
        if calibration_texts == "embedded":
            logger.warning(
                f"from_bert: {bert_name_or_path} has no tokenizer to read the calibration text with ({error}); the "
                "attention is copied, not fitted."
            )
            return None
        raise ValueError(f"{bert_name_or_path} has no tokenizer to read calibration_texts with: {error}") from error
    if bert_state is None:
        bert_model = transformers.AutoModel.from_pretrained(bert_name_or_path, subfolder=subfolder)
    else:  # the class AutoModel picks, given the tensors (transformers 5 takes them only without a path)
        config = transformers.AutoConfig.from_pretrained(bert_name_or_path, subfolder=subfolder)
        bert_class = transformers.MODEL_MAPPING[type(config)]
        bert_model = bert_class.from_pretrained(None, config=config, state_dict=own_copy(bert_state))
    if bad := non_finite_weights(bert_model):  # the fits' eigendecompositions would fail on them
        raise ValueError(
            f"{bert_name_or_path} holds NaN or infinite weights ({', '.join(bad[:3])}): its attention cannot be fitted."
        )
    max_length = min(128, model.config.max_position_embeddings)
    sequences = calibration_sequences(tokenizer, texts, max_length)
    return fit_attention_to_bert(model, bert_model, sequences, output_scale=output_scale)
