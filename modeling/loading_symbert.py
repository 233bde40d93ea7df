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
running code. The conversion `from_bert` then makes is in `conversion_symbert.py`.

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

from .attention_symbert import ATTENTION_MARKER, ATTENTION_TYPES

logger = logging.get_logger(__name__)

TRANSFORMERS_V5 = int(transformers.__version__.split(".")[0]) >= 5

# The model code that save_pretrained copies next to the weights (transformers follows the relative imports), and
# that a release ships: the model, what it imports, and its configuration.
BUNDLE_FILES = (
    "modeling_symbert.py",
    "attention_symbert.py",
    "loading_symbert.py",
    "conversion_symbert.py",
    "configuration_symbert.py",
)


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


def checkpoint_files(name_or_path, kwargs):
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
    for file in checkpoint_files(name_or_path, kwargs):
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


def non_finite_weights(model):
    """The names of `model`'s floating-point parameters and buffers that hold a NaN or an infinity (meta tensors,
    which hold no values, are skipped)."""
    return [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not tensor.is_meta and not torch.isfinite(tensor).all()
    ]
