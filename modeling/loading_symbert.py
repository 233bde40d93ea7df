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
"""The checks around SymBERT's `from_pretrained` and `from_bert`: checkpoints of another attention type, tensors of
another shape, integer weights, paths that are files or do not exist, a saved folder whose code differs from the
running code; and BERT's attention tensors for the types that convert them.

This file is copied into every saved model folder (it is imported by `modeling_symbert.py`), so it may import only
torch/transformers and `attention_symbert.py`, never the `symbert` package.
"""

import copy
import json
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from transformers.utils import logging

from .attention_symbert import ATTENTION_MARKER, ATTENTION_TYPES, SymBertSelfAttention

logger = logging.get_logger(__name__)

TRANSFORMERS_V5 = int(transformers.__version__.split(".")[0]) >= 5

# The model code that save_pretrained copies next to the weights (transformers follows the relative imports), and
# that a release ships: the model, what it imports, and its configuration.
BUNDLE_FILES = ("modeling_symbert.py", "attention_symbert.py", "loading_symbert.py", "configuration_symbert.py")


def convert_bert_attention(model, bert_name_or_path, subfolder, new_parameters):
    """Let each self-attention module set its new tensors from BERT's (read from the checkpoint's safetensors);
    the sorted names of those it converted."""
    modules = {name: m for name, m in model.named_modules() if isinstance(m, SymBertSelfAttention)}
    converts = any(type(m).from_bert_tensors is not SymBertSelfAttention.from_bert_tensors for m in modules.values())
    if not converts or not any(ATTENTION_MARKER in name for name in new_parameters):
        return []
    bert_tensors = _bert_attention_tensors(bert_name_or_path, subfolder)
    converted = []
    for name, module in modules.items():
        layer = int(name.split("encoder.layer.")[1].split(".")[0])
        converted += [f"{name}.{tensor}" for tensor in module.from_bert_tensors(bert_tensors.get(layer, {}))]
    return sorted(converted)


def _bert_attention_tensors(name_or_path, subfolder=""):
    """{layer: {"key.weight": tensor, ...}}: the self-attention tensors of a (possibly sharded) checkpoint, safetensors
    or pytorch_model.bin (read as tensors only), as from_pretrained found it (nothing is downloaded here)."""
    tensors = {}
    for file in _checkpoint_files(name_or_path, {"subfolder": subfolder}):
        if str(file).endswith(".safetensors"):
            with safe_open(file, framework="pt") as weights:
                state = {name: weights.get_tensor(name) for name in weights.keys() if ATTENTION_MARKER in name}
        else:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        for name, tensor in state.items():
            if ATTENTION_MARKER in name and "encoder.layer." in name:
                layer = int(name.split("encoder.layer.")[1].split(".")[0])
                tensors.setdefault(layer, {})[name.split(ATTENTION_MARKER)[1]] = tensor
    return tensors


def mismatched_tensors(loading_info, model=None, name_or_path=None, kwargs=None):
    """Sorted (name, checkpoint shape, model shape) of the reshaped tensors. transformers 4 gives only the names: the
    shapes are then read from the model and the checkpoint's headers where they can be (else None)."""
    items = sorted(
        (item, None, None) if isinstance(item, str) else tuple(item) for item in loading_info["mismatched_keys"]
    )
    if model is None or all(saved is not None for _, saved, _ in items):
        return items
    state = model.state_dict()
    saved = {name: shape for name, (_, shape) in _checkpoint_tensors(name_or_path, kwargs or {}).items()}
    filled = []
    for name, *_ in items:
        stored = next((saved[key] for key in _checkpoint_names(name, model.base_model_prefix) if key in saved), None)
        wanted = tuple(state[name].shape) if name in state and stored is not None else None
        filled.append((name, stored, wanted))
    return filled


def _checkpoint_names(name, prefix):
    """The names a model tensor `name` may have in a checkpoint: its own, and with or without the base model prefix."""
    if name.startswith(f"{prefix}."):
        return [name, name[len(prefix) + 1 :]]
    return [name, f"{prefix}.{name}"]


def weights_source(name_or_path):
    return "the state_dict passed to from_pretrained" if name_or_path is None else repr(str(name_or_path))


def holds_part_of_the_model(model, loading_info):
    """Whether the checkpoint gave the model any tensor outside self-attention. One that gave none (transformers'
    `state_dict={}`, or a file of unrelated tensors) is not a checkpoint of another attention type: it loads as in
    transformers, every weight initialised and reported missing."""
    absent = set(loading_info["missing_keys"]) | {name for name, *_ in mismatched_tensors(loading_info)}
    return any(name not in absent for name in model.state_dict() if ATTENTION_MARKER not in name)


def check_attention_tensors(attention_type, loading_info, source):
    """A checkpoint of another attention type loads with its attention tensors missing, unexpected or reshaped."""

    def attention_tensors(names):
        return ", ".join(sorted({name.split(ATTENTION_MARKER)[1] for name in names if ATTENTION_MARKER in name}))

    missing = attention_tensors(loading_info["missing_keys"])
    unexpected = attention_tensors(loading_info["unexpected_keys"])
    reshaped = attention_tensors(name for name, *_ in mismatched_tensors(loading_info))
    if missing or unexpected or reshaped:
        raise ValueError(
            f"The weights of {source} do not match attention_type={attention_type!r} of its config: in every "
            f"layer's encoder.layer.N{ATTENTION_MARKER}*, missing from the checkpoint: {missing or 'none'}; "
            f"unexpected in it: {unexpected or 'none'}; of another shape: {reshaped or 'none'}. Set attention_type "
            "to the type the weights were trained with (one of: "
            f"{', '.join(ATTENTION_TYPES)}); to start a variant from BERT weights, use from_bert."
        )


# safetensors' dtype codes of the tensors that cannot be weights of a floating-point model
INTEGER_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
}


def _checkpoint_files(name_or_path, kwargs):
    """The local weights files that `from_pretrained(name_or_path, **kwargs)` reads: in a folder, or of a Hub
    repository already in the cache (nothing is downloaded); [] when there are none."""
    from transformers.utils import cached_file

    if name_or_path is None:
        return []
    variant, use_safetensors = kwargs.get("variant"), kwargs.get("use_safetensors")
    options = {key: kwargs[key] for key in ("cache_dir", "revision", "token") if kwargs.get(key) is not None}

    def local(name):
        if variant:  # model.safetensors -> model.{variant}.safetensors, as transformers names them
            stem, extension = name.split(".", 1)
            name = f"{stem}.{variant}.{extension}"
        try:
            return cached_file(
                str(name_or_path),
                name,
                subfolder=kwargs.get("subfolder") or "",
                local_files_only=True,
                _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
                **options,
            )
        except Exception:  # not a folder nor a cached repository: nothing to read
            return None

    names = []
    if use_safetensors is not False:
        names += ["model.safetensors", "model.safetensors.index.json"]
    if use_safetensors is not True:
        names += ["pytorch_model.bin", "pytorch_model.bin.index.json"]
    for name in names:
        if (path := local(name)) is None:
            continue
        if not name.endswith(".index.json"):
            return [path]
        shards = sorted(set(json.loads(Path(path).read_text())["weight_map"].values()))
        return [file for file in (local(shard) for shard in shards) if file is not None]
    return []


def _checkpoint_tensors(name_or_path, kwargs):
    """{name: (dtype, shape)} of the checkpoint's tensors (the `state_dict` argument's, else the files' headers),
    dtype as a string ("int8", "F32"); {} when they cannot be read without loading."""
    if kwargs.get("state_dict") is not None:
        return {
            name: (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))
            for name, tensor in kwargs["state_dict"].items()
            if isinstance(tensor, torch.Tensor)
        }
    tensors = {}
    for file in _checkpoint_files(name_or_path, kwargs):
        try:
            if str(file).endswith(".safetensors"):
                with safe_open(file, framework="pt") as weights:
                    for name in weights.keys():
                        header = weights.get_slice(name)
                        dtype = header.get_dtype()
                        tensors[name] = (INTEGER_DTYPES.get(dtype, dtype), tuple(header.get_shape()))
            else:  # on the meta device: only dtypes and shapes are read
                state = torch.load(file, map_location="meta", weights_only=True, mmap=True)
                tensors.update(
                    {name: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in state.items()}
                )
        except Exception:  # unreadable: transformers reports it when it loads the file
            return {}
    return tensors


def model_skeleton(cls, name_or_path, kwargs):
    """The model `cls` on the meta device (no memory, no initialisation cost), from the config `from_pretrained`
    would use; None when that config cannot be read without downloading."""
    config = kwargs.get("config")
    try:
        if not isinstance(config, transformers.PretrainedConfig):
            options = {key: kwargs[key] for key in ("cache_dir", "revision", "token", "subfolder") if kwargs.get(key)}
            config = cls.config_class.from_pretrained(name_or_path, local_files_only=True, **options)
        with torch.device("meta"):
            return cls(copy.deepcopy(config))  # the caller's config stays as it was
    except Exception:
        return None


def integer_weights_message(name_or_path, kwargs, model):
    """A message naming the checkpoint's integer (or bool) tensors that would fill floating-point weights of `model`
    (transformers 5 casts them, so the logits are useless; transformers 4 fails while copying them); None when
    there are none. Quantised checkpoints (a quantization_config) and GGUF files are loaded by transformers'
    quantizers and dequantisation, so they are left to them."""
    if model is None or kwargs.get("gguf_file") or kwargs.get("load_in_8bit") or kwargs.get("load_in_4bit"):
        return None
    if kwargs.get("quantization_config") is not None or getattr(model.config, "quantization_config", None):
        return None
    weights = {name for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
    integer = []
    for name, (dtype, _) in _checkpoint_tensors(name_or_path, kwargs).items():
        if dtype in INTEGER_DTYPES.values() and any(
            n in weights for n in _checkpoint_names(name, model.base_model_prefix)
        ):
            integer.append(f"{name} ({dtype})")
    if not integer:
        return None
    shown = ", ".join(sorted(integer)[:5]) + (f" and {len(integer) - 5} more" if len(integer) > 5 else "")
    return (
        f"The weights of {weights_source(name_or_path)} include integer tensors: {shown}. The model's weights are "
        "floating point (float32, float16 or bfloat16): save the checkpoint in one of those dtypes, or load a "
        "quantised checkpoint with its quantization_config."
    )


def warn_if_other_code(name_or_path, subfolder):
    """Log one warning when the folder's copies of the bundle's files (`BUNDLE_FILES`) differ from the code that is
    loading it: after `import symbert`, transformers' Auto classes map model_type 'symbert' to the installed classes
    (under transformers 5 even with trust_remote_code=True), so the folder's own code does not run."""
    folder = Path(name_or_path, subfolder or "").expanduser()
    if not folder.is_dir():
        return
    running = {name: Path(__file__).with_name(name) for name in BUNDLE_FILES}  # the running bundle's flat siblings
    differing = []
    for name, code in running.items():
        saved = folder / name
        try:
            if saved.is_file() and saved.read_bytes() != code.read_bytes():
                differing.append(name)
        except OSError:  # an unreadable file is not compared
            continue
    if differing:
        package = __name__.rpartition(".")[0]
        whose = "the installed symbert package" if package == "symbert" else f"the module {package}.modeling_symbert"
        paths = ", ".join(str(running[name]) for name in differing)
        if TRANSFORMERS_V5:
            why = "transformers' Auto classes map model_type 'symbert' to its classes, even with trust_remote_code=True"
            remedy = "load it in a process that does not import symbert"
        else:
            why = "transformers' Auto classes map model_type 'symbert' to its classes unless trust_remote_code=True"
            remedy = "load it with an Auto class and trust_remote_code=True"
        logger.warning(
            f"{folder}: its {' and '.join(differing)} differ{'s' if len(differing) == 1 else ''} from the code that "
            f"loads it. The code of {whose} runs ({paths}), not the folder's: once `symbert` is imported, {why}. To "
            f"run the folder's code, {remedy}."
        )


def file_not_folder_message(path):
    """A message for a path to an existing file (e.g. a config.json): from_pretrained takes the folder holding it."""
    candidate = Path(str(path)).expanduser()
    if candidate.is_file():
        return (
            f"{str(path)!r} is a file, not a folder: from_pretrained takes the folder that holds config.json and "
            f"the weights ({str(candidate.parent)!r}), or a Hub repository id."
        )
    return None


def missing_local_path_message(path):
    """A message for a path that looks local (absolute, ./, ../, ~, more than one '/', a trailing '/' or '\\', or
    an existing parent folder) but does not exist; None when it exists or may be a Hub repository id ("owner/name").
    Checked before asking the Hub, so that a typo in a folder name is reported as a missing folder."""
    text = str(path)
    candidate = Path(text).expanduser()
    if candidate.exists():
        return None
    looks_local = (
        candidate.is_absolute()
        or text.startswith((".", "~"))
        or text.count("/") > 1
        or text.endswith("/")
        or "\\" in text
        or (str(candidate.parent) not in (".", "") and candidate.parent.is_dir())
    )
    if looks_local:
        return f"{text!r} does not exist: no such file or folder (and it is not a Hub repository id)."
    return None


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


def non_finite_weights(model):
    """The names of `model`'s floating-point parameters and buffers that hold a NaN or an infinity (meta tensors,
    which hold no values, are skipped)."""
    return [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not tensor.is_meta and not torch.isfinite(tensor).all()
    ]


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


def fit_attention_to_bert(model, bert_model, sequences, held_out_share=0.25):
    """Fit each self-attention module of `model` (made from `bert_model` by `from_bert`: same sizes) to the BERT layer
    it replaces, layer by layer, with the module's `fit_bert`, twice: on the inputs BERT's layer sees on `sequences`
    (unpadded [1, length] token-id tensors), and on those the partly converted model's layer sees (its earlier layers
    converted: the errors they leave are then part of what the fit corrects). The last `held_out_share` of the
    sequences is held out: on it each candidate (the copy, the two fits) runs on the converted model's own inputs and
    is compared with BERT's self-attention on BERT's inputs (a fit's output at its least-squares scale α ≤ 1,
    `shrunk_error`), and the closest is kept (never worse than the copy); a kept fit's α goes into the attention
    output projection that follows (`attention.output.dense.weight`). Returns one row per layer: layer, copy_error,
    fit_error (the better fit's), kept ("fit" or "copy"), inputs ("bert" or "own": which fit), output_scale (its α),
    fitted (the tensors the kept fit set)."""
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
            scale, error = shrunk_error(module, bert_attention, own_held_out, bert_held_out[index])
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


def fit_from_bert_checkpoint(model, bert_name_or_path, subfolder, calibration_texts):
    """`fit_attention_to_bert` for `from_bert`: BERT's encoder and tokenizer loaded from its checkpoint, `calibration_texts`
    a list of texts or "embedded" (the installed package's corpus). Returns its rows, or None where "embedded" cannot
    be had (no corpus, or a checkpoint without a tokenizer): the model then stays the copy, with a warning."""
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
    bert_model = transformers.AutoModel.from_pretrained(bert_name_or_path, subfolder=subfolder)
    if bad := non_finite_weights(bert_model):  # the fits' eigendecompositions would fail on them
        raise ValueError(
            f"{bert_name_or_path} holds NaN or infinite weights ({', '.join(bad[:3])}): its attention cannot be fitted."
        )
    max_length = min(128, model.config.max_position_embeddings)
    return fit_attention_to_bert(model, bert_model, calibration_sequences(tokenizer, texts, max_length))
