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
"""SymBERT: BERT encoders with cheaper self-attention compatibility functions.

Everything outside the self-attention core is BERT (transformers' `modeling_bert.py`), with BERT's parameter names:
this file is BERT's layout (embeddings, layers, encoder, heads, the pre-trained model and its BERT export). The
self-attention variants and their registry are in `attention_symbert.py`, the checks around loading in
`loading_symbert.py`, the conversion `from_bert` makes in `conversion_symbert.py`.

`save_pretrained` copies this file into every saved model folder, with the files it imports relatively
(`attention_symbert.py`, `loading_symbert.py`, `conversion_symbert.py`, `configuration_symbert.py`: `BUNDLE_FILES`), so it may import only
torch/transformers and those flat siblings, never the `symbert` package.
"""

from pathlib import Path
from typing import Optional, Union

import torch
import transformers
from safetensors import SafetensorError
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import auto_docstring, logging

try:  # transformers >= 5
    from transformers.masking_utils import create_bidirectional_mask
except (
    ImportError
):  # transformers 4.x: the padding mask each attention implementation expects, as its encoders build it
    from transformers.modeling_attn_mask_utils import _prepare_4d_attention_mask, _prepare_4d_attention_mask_for_sdpa

    def create_bidirectional_mask(config, inputs_embeds, attention_mask):
        # trf-ignore: TRF051 (transformers 4.x fallback; 5.x builds the mask through masking_utils' mask interface)
        if attention_mask is None or config._attn_implementation == "flash_attention_2":
            return attention_mask
        # trf-ignore: TRF051 (transformers 4.x fallback; 5.x builds the mask through masking_utils' mask interface)
        if config._attn_implementation == "sdpa":
            return _prepare_4d_attention_mask_for_sdpa(attention_mask, inputs_embeds.dtype)
        return _prepare_4d_attention_mask(attention_mask, inputs_embeds.dtype)


from .attention_symbert import (
    ATTENTION_MARKER,
    LinearStartingAs,
    SymBertSelfAttention,
    _eager_attention_mask,
    attention_class,
    bert_self_attention_tensors,
    init,
)
from .configuration_symbert import SymBertConfig
from .conversion_symbert import convert_bert_attention, fit_from_bert_checkpoint, own_copy
from .loading_symbert import (
    TRANSFORMERS_V5,
    check_attention_tensors,
    file_not_folder_message,
    holds_part_of_the_model,
    integer_weights_message,
    mismatched_tensors,
    missing_local_path_message,
    model_skeleton,
    non_finite_weights,
    warn_if_other_code,
    weights_source,
)

logger = logging.get_logger(__name__)


class SymBertEmbeddings(nn.Module):
    """BERT's word + position + token-type embeddings, with a clear error on out-of-range inputs."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.vocab_padding = config.padded_vocab_size - config.vocab_size  # rows no id reaches
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # trf-ignore: TRF058 (nn.Buffer needs torch >= 2.5; the project supports torch >= 2.4)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )
        # trf-ignore: TRF058 (nn.Buffer needs torch >= 2.5; the project supports torch >= 2.4)
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False
        )

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        seq_length = input_shape[1]
        max_positions = self.position_embeddings.num_embeddings
        if seq_length > max_positions:
            raise ValueError(
                f"Sequence length {seq_length} exceeds max_position_embeddings={max_positions}; "
                f"truncate inputs to at most {max_positions} tokens."
            )
        if not torch.compiler.is_compiling():  # data-dependent checks would break a compiled graph
            vocab_size = self.word_embeddings.num_embeddings - self.vocab_padding
            _check_index_range("input_ids", input_ids, vocab_size, "vocab_size")
            _check_index_range(
                "token_type_ids", token_type_ids, self.token_type_embeddings.num_embeddings, "type_vocab_size"
            )
            _check_index_range("position_ids", position_ids, max_positions, "max_position_embeddings")

        if position_ids is None:
            position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(input_shape)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


def _check_index_range(name, ids, size, config_field):
    if ids is None or ids.numel() == 0:
        return
    if ids.device.type != "cpu":
        # On an accelerator, reading the ids' range back would stall every forward until the device is done: the
        # device checks them itself and fails at its next synchronisation (the message cannot name the bad id).
        in_range = ((ids >= 0) & (ids < size)).all()
        torch._assert_async(in_range, f"{name} contains ids outside [0, {size - 1}] ({config_field}={size}).")
        return
    low, high = (value.item() for value in torch.aminmax(ids))
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contains {bad}, outside [0, {size - 1}] ({config_field}={size}).")


class SymBertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class SymBertAttention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.self = attention_class(config.attention_type)(config, layer_idx=layer_idx)
        self.output = SymBertSelfOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, **kwargs
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        attention_output, attn_weights = self.self(hidden_states, attention_mask, **kwargs)
        return self.output(attention_output, hidden_states), attn_weights


class SymBertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = (
            ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class SymBertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class SymBertLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.attention = SymBertAttention(config, layer_idx=layer_idx)
        self.intermediate = SymBertIntermediate(config)
        self.output = SymBertOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, **kwargs
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        attention_output, attn_weights = self.attention(hidden_states, attention_mask, **kwargs)
        layer_output = self.output(self.intermediate(attention_output), attention_output)
        return layer_output, attn_weights


class SymBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([SymBertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])

    # trf-ignore: TRF045 (flag threading kept: the file also runs under transformers 4.54-4.57, without capture_outputs)
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        **kwargs,
    ) -> BaseModelOutput:
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer_module in self.layer:
            # hidden_states positional: gradient checkpointing only tracks positional inputs
            hidden_states, attn_weights = layer_module(
                hidden_states, attention_mask, output_attentions=output_attentions, **kwargs
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
        return BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )


class SymBertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


class SymBertPredictionHeadTransform(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class SymBertLMPredictionHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transform = SymBertPredictionHeadTransform(config)
        # The decoder weight is tied to the word embeddings; the output-only bias is tied to `bias`.
        self.decoder = nn.Linear(config.hidden_size, config.padded_vocab_size, bias=True)
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        self.vocab_padding = config.padded_vocab_size - config.vocab_size  # last rows, never predicted

    def _tie_weights(self):  # called by transformers 4.x's tie_weights; 5.x ties the bias through _tied_weights_keys
        self.decoder.bias = self.bias

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.transform(hidden_states)
        if not self.vocab_padding:
            return self.decoder(hidden_states)
        # -inf logits on the padding rows, added with the bias inside the product: softmax gives them 0
        bias = self.decoder.bias
        bias = torch.cat([bias[: -self.vocab_padding], bias.new_full((self.vocab_padding,), float("-inf"))])
        return nn.functional.linear(hidden_states, self.decoder.weight, bias)


# trf-ignore: TRF026 (the wrapper gives BERT's weight names cls.predictions.*, so BERT checkpoints load as they are)
class SymBertOnlyMLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = SymBertLMPredictionHead(config)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.predictions(sequence_output)


# trf-ignore: TRF013 (base class: each model calls post_init once its modules exist; its __init__ only validates)
@auto_docstring
class SymBertPreTrainedModel(PreTrainedModel):
    config_class = SymBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SymBertEmbeddings", "SymBertLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True  # transformers 5
    _supports_flash_attn_2 = True  # transformers 4
    _supports_attention_backend = True
    # Only the MLM head's loss takes the Trainer's `num_items_in_batch`; the task heads average per batch.
    accepts_loss_kwargs = False

    @torch.no_grad()
    def _init_weights(self, module):
        """BERT's initialisation, plus each attention type's for its own parameters."""
        super()._init_weights(module)  # Linear, Embedding, LayerNorm as BERT
        if isinstance(module, SymBertLMPredictionHead):
            init.zeros_(module.bias)
        elif isinstance(module, SymBertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)
        elif isinstance(module, SymBertSelfAttention):
            module.init_weights()
        if isinstance(module, LinearStartingAs):
            init.copy_(module.weight, module.source[0].weight)
            init.copy_(module.bias, module.source[0].bias)

    @classmethod
    def _can_set_attn_implementation(cls):
        # Every variant dispatches through the attention interface. transformers guesses this from the source text,
        # whose expected spelling differs between 4.x and 5.x; without it, 4.x's set_attn_implementation does nothing.
        return True

    def __init__(self, config, *inputs, **kwargs):
        config.validate()  # the config may have been changed after construction
        super().__init__(config, *inputs, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.config.validate()  # before anything is written
        return super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' `from_pretrained`, refusing a checkpoint whose attention tensors are not those of its
        config's `attention_type` (transformers would initialise them anew and only log it), tensors of another
        shape unless `ignore_mismatched_sizes=True` (RuntimeError, as transformers), integer weights, and a path to a
        file instead of a folder. A checkpoint holding none of the model's tensors (or `state_dict={}`) loads as in
        transformers: every weight initialised and reported missing. Task heads may still start from another head's
        checkpoint."""
        return cls._load_checked(pretrained_model_name_or_path, args, kwargs, same_attention=True)

    @classmethod
    def _load_checked(cls, name_or_path, args, kwargs, same_attention):
        if name_or_path is not None:
            if message := missing_local_path_message(name_or_path) or file_not_folder_message(name_or_path):
                raise ValueError(message)
            warn_if_other_code(name_or_path, kwargs.get("subfolder"))
        if kwargs.get("state_dict") is not None:  # before transformers 5 takes their dtype for the model's
            if message := integer_weights_message(name_or_path, kwargs, model_skeleton(cls, name_or_path, kwargs)):
                raise ValueError(message)
        return_loading_info = kwargs.pop("output_loading_info", False)
        allow_new_shapes = kwargs.pop("ignore_mismatched_sizes", False)
        try:  # mismatched sizes are allowed here so that an attention mismatch is reported as one
            model, loading_info = super().from_pretrained(
                name_or_path, *args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
            )
        except SafetensorError as error:
            # safetensors' message does not say which file it could not read
            folder = Path(name_or_path, kwargs.get("subfolder") or "")
            files = sorted(str(f) for f in folder.glob("*.safetensors")) if folder.is_dir() else []
            where = ", ".join(files) or f"the *.safetensors weights of {name_or_path!r}"
            raise OSError(f"Cannot read {where}: the file is truncated or corrupt ({error}).") from error
        except RuntimeError as error:  # transformers 4 fails to copy integer tensors into the parameters
            if message := integer_weights_message(name_or_path, kwargs, model_skeleton(cls, name_or_path, kwargs)):
                raise ValueError(message) from error
            raise
        if message := integer_weights_message(name_or_path, kwargs, model):  # transformers 5 casts them
            raise ValueError(message)
        if bad := non_finite_weights(model):  # reported as transformers reports weights it did not load as saved
            shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            logger.warning(
                f"Some weights of {cls.__name__} loaded from {weights_source(name_or_path)} hold NaN or infinite "
                f"values: {shown}. Its outputs will not be finite: load a checkpoint saved before it diverged."
            )
        if same_attention and holds_part_of_the_model(model, loading_info):
            check_attention_tensors(model.config.attention_type, loading_info, weights_source(name_or_path))
        if loading_info["mismatched_keys"] and not allow_new_shapes:
            shapes = "; ".join(
                f"{name}: {list(saved)} in the checkpoint, {list(wanted)} in the model" if saved else name
                for name, saved, wanted in mismatched_tensors(loading_info, model, name_or_path, kwargs)
            )
            # RuntimeError: what transformers itself raises for tensors of another shape (4.x and 5.x)
            source = weights_source(name_or_path)
            raise RuntimeError(
                f"{source[0].upper()}{source[1:]} has tensors of another shape than the model: {shapes}. Fix the "
                "config, or pass ignore_mismatched_sizes=True to initialise them anew."
            )
        return (model, loading_info) if return_loading_info else model

    @classmethod
    def from_bert(cls, bert_name_or_path, calibration_texts="embedded", output_scale=True, **kwargs):
        """Start any SymBERT variant from a BERT checkpoint (Hub id or folder), keeping what BERT's attention does.

        Every tensor present in both with the same name and shape is copied; an attention type may convert BERT's
        tensors of another shape (`gqa` mean-pools each group's key and value heads). Then, with `calibration_texts` (a
        list of texts, or "embedded": lines of the installed package's corpus), each layer's attention is fitted to
        BERT's on the inputs that layer sees on those texts (its class's `fit_bert`: closed form, e.g. `pairwise` keeps
        Q and fits S by least squares), and kept where it is closer to BERT than the copy; the rows of that comparison
        are in `model.bert_fit_report`. A kept fit's output is taken at its least-squares scale α ≤ 1, which goes into
        the attention output projection; `output_scale=False` keeps α = 1. `None`, or a checkpoint without a tokenizer
        for "embedded", leaves the copy, whose new tensors (the pairwise S, the δ scales, MHE's h→d projections) are
        initialised as for a new model. `kwargs` go to `from_pretrained` and to the config, e.g.
        `attention_type="pairwise"`; a `state_dict` there is BERT's tensors already read (its config and tokenizer are
        still read from `bert_name_or_path`), so that a conversion that makes several models reads BERT's weights once.

        Returns `(model, new_parameters)`: the sorted names of the tensors that were neither taken nor fitted from
        BERT; the names of the converted and fitted ones are logged and kept in `model.converted_from_bert`.
        """
        subfolder = kwargs.get("subfolder") or ""
        bert_state = kwargs.pop("state_dict", None)
        kwargs.update(ignore_mismatched_sizes=True, output_loading_info=True)
        if bert_state is None:
            model, loading_info = cls._load_checked(bert_name_or_path, (), kwargs, same_attention=False)
        else:  # transformers 5 takes a state_dict only without a path: the config is read as from_pretrained would
            config, kwargs = cls.config_class.from_pretrained(bert_name_or_path, return_unused_kwargs=True, **kwargs)
            kwargs.update(config=config, state_dict=own_copy(bert_state))
            model, loading_info = cls._load_checked(None, (), kwargs, same_attention=False)
        new_parameters = set(loading_info["missing_keys"]) | {name for name, *_ in mismatched_tensors(loading_info)}
        new_parameters = {name for name in new_parameters if name in dict(model.named_parameters())}
        converted = set(convert_bert_attention(model, bert_name_or_path, subfolder, new_parameters, bert_state))
        model.bert_fit_report = None
        if calibration_texts is not None:
            model.bert_fit_report = fit_from_bert_checkpoint(
                model, bert_name_or_path, subfolder, calibration_texts, bert_state, output_scale
            )
            prefix = "bert." if hasattr(model, "bert") else ""
            for row in model.bert_fit_report or []:
                module = f"{prefix}encoder.layer.{row['layer']}.attention.self"
                converted |= {f"{module}.{name}" for name in row["fitted"]} & new_parameters
        new_parameters = sorted(new_parameters - converted)
        model.converted_from_bert = converted = sorted(converted)
        logger.warning(
            f"Initialised {cls.__name__} ({model.config.attention_type}) from {bert_name_or_path}; "
            f"{len(converted)} tensors are converted from BERT's: {converted}; "
            f"{len(new_parameters)} tensors are new: {new_parameters}"
        )
        return model, new_parameters

    def to_bert(self):
        """This model as the matching transformers BERT class (`SymBertForMaskedLM` -> `BertForMaskedLM`, ...), with
        the same outputs: every attention type builds Q, K and V linearly from the layer input, so its parameters fold
        into BERT's query, key and value (each type's `bert_projections`); all other tensors are BERT's already. The
        BERT has BERT's parameter count: a variant's saving is a training-time saving. It runs with plain transformers
        (no remote code), on this model's device and dtype, in its train/eval mode; NotImplementedError for an
        attention type without a BERT form, ValueError for a quantised model."""
        bert_class = next(
            (getattr(transformers, BERT_CLASSES[c.__name__]) for c in type(self).__mro__ if c.__name__ in BERT_CLASSES),
            None,
        )
        if bert_class is None:
            raise NotImplementedError(f"{type(self).__name__} has no BERT class to export to.")
        if getattr(self, "hf_quantizer", None) is not None or any(not p.is_floating_point() for p in self.parameters()):
            raise ValueError(
                f"Cannot export a quantised {type(self).__name__} as BERT: load it without quantisation first."
            )
        attention = {name: m for name, m in self.named_modules() if isinstance(m, SymBertSelfAttention)}
        state = {name: t for name, t in self.state_dict().items() if ATTENTION_MARKER not in name}
        for name in state.keys() & VOCABULARY_TENSORS:  # BERT has no padded vocabulary: its vocab_size rows
            state[name] = state[name][: self.config.vocab_size]
        for module_name, module in attention.items():
            for name, tensor in bert_self_attention_tensors(module).items():
                state[f"{module_name}.{name}"] = tensor
        config, kwargs = bert_config(self.config), {}
        if bert_class is transformers.BertModel:
            kwargs["add_pooling_layer"] = self.pooler is not None
        if bert_class is transformers.BertForQuestionAnswering:
            config.num_labels = 2  # BERT's QA head has num_labels outputs (start, end); SymBERT's always has 2
        bert = bert_class(config, **kwargs).to(device=self.device, dtype=self.dtype)
        bert.load_state_dict(state, strict=True)
        return bert.train(self.training)


VOCABULARY_TENSORS = {  # a row per word (of the padded vocabulary)
    "bert.embeddings.word_embeddings.weight",
    "embeddings.word_embeddings.weight",
    "cls.predictions.bias",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
}

BERT_CLASSES = {  # each SymBERT class -> the transformers class of its export
    "SymBertModel": "BertModel",
    "SymBertForMaskedLM": "BertForMaskedLM",
    "SymBertForSequenceClassification": "BertForSequenceClassification",
    "SymBertForTokenClassification": "BertForTokenClassification",
    "SymBertForMultipleChoice": "BertForMultipleChoice",
    "SymBertForQuestionAnswering": "BertForQuestionAnswering",
}


def bert_config(config):
    """A `BertConfig` with `config`'s settings, less SymBERT's own fields (the attention type and its settings, the
    sparse MLM prediction, `auto_map`): what plain transformers needs to build the export."""
    fields = config.to_dict()
    symbert_only = set(SymBertConfig().to_dict()) - set(transformers.BertConfig().to_dict())
    for name in symbert_only | {"model_type", "architectures", "transformers_version"}:
        fields.pop(name, None)
    return transformers.BertConfig(**fields)


def _check_tensor(name, value, layout):
    """`value` must be a tensor with one dimension per name in `layout`. Shapes only: nothing reads the values."""
    expected = f"[{', '.join(layout)}]"
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {expected}, not a {type(value).__name__}.")
    if value.dim() != len(layout):
        raise ValueError(f"{name} has shape {list(value.shape)}; expected {expected}.")


def _check_input_shapes(config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids):
    """Clear errors for malformed inputs, from their shapes only (no host sync, no graph break under compile)."""
    if input_ids is not None:
        _check_tensor("input_ids", input_ids, ("batch", "sequence"))
        name, shape = "input_ids", tuple(input_ids.shape)
    else:
        _check_tensor("inputs_embeds", inputs_embeds, ("batch", "sequence", f"hidden_size={config.hidden_size}"))
        if inputs_embeds.shape[-1] != config.hidden_size:
            raise ValueError(
                f"inputs_embeds has shape {list(inputs_embeds.shape)}; expected [batch, sequence, {config.hidden_size}]."
            )
        name, shape = "inputs_embeds", tuple(inputs_embeds.shape[:2])
    if 0 in shape:
        raise ValueError(f"{name} has shape {list(shape)}: an empty batch or sequence; pass at least one token.")
    batch, length = shape
    allowed = {
        "attention_mask": [(batch, length)],
        "token_type_ids": [(batch, length)],
        "position_ids": [(batch, length), (1, length)],  # [1, sequence]: the same positions for every row
    }
    others = {"attention_mask": attention_mask, "token_type_ids": token_type_ids, "position_ids": position_ids}
    for other, value in others.items():
        if value is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"{other} must be a torch.Tensor of the shape of {name} {list(shape)}, not a {type(value).__name__}."
            )
        if other == "attention_mask" and value.dim() == 4 and TRANSFORMERS_V5:  # [batch, 1 or heads, seq, seq]
            if value.shape[0] == batch and value.shape[2] == length and value.shape[3] == length:
                continue
        elif tuple(value.shape) in allowed[other]:
            continue
        raise ValueError(
            f"{other} has shape {list(value.shape)}, {name} {list(shape)}; {other} must have the same "
            f"[batch, sequence] shape{' (or [1, sequence])' if other == 'position_ids' else ''}."
        )


def _resolve_output_flags(config, output_attentions, output_hidden_states, return_dict):
    output_attentions = output_attentions if output_attentions is not None else config.output_attentions
    output_hidden_states = output_hidden_states if output_hidden_states is not None else config.output_hidden_states
    return_dict = return_dict if return_dict is not None else config.return_dict
    return output_attentions, output_hidden_states, return_dict


@auto_docstring(
    custom_intro="""
    The bare SymBERT encoder, with BERT's optional pooler (tanh dense on the first token).
    """
)
class SymBertModel(SymBertPreTrainedModel):
    def __init__(self, config, add_pooling_layer=True):
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Whether to add BERT's pooler (tanh dense on the first token's hidden state).
        """
        super().__init__(config)
        self.config = config
        self.embeddings = SymBertEmbeddings(config)
        self.encoder = SymBertEncoder(config)
        self.pooler = SymBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, BaseModelOutputWithPooling]:
        output_attentions, output_hidden_states, return_dict = _resolve_output_flags(
            self.config, output_attentions, output_hidden_states, return_dict
        )
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds.")
        _check_input_shapes(self.config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
        _check_inputs_embeds_dtype(inputs_embeds, self.embeddings.LayerNorm.weight.dtype)

        embedding_output = self.embeddings(
            input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
        )
        if output_attentions:  # every attention implementation then runs the eager function (see SymBertSelfAttention)
            attention_mask = _eager_attention_mask(attention_mask, embedding_output.dtype)
        else:
            padding_mask = attention_mask is not None and attention_mask.dim() == 2
            attention_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask
            )
            if padding_mask and isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4:
                # a padding mask's rows are all alike: one row, broadcast, is all a kernel needs (and grouped heads,
                # which stack a group's queries as rows, then repeat no row per head of the group)
                attention_mask = attention_mask[:, :, :1, :]
        encoder_outputs = self.encoder(
            embedding_output,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        outputs = BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=encoder_outputs.hidden_states,
            attentions=encoder_outputs.attentions,
        )
        return outputs if return_dict else outputs.to_tuple()


@auto_docstring(
    custom_intro="""
    SymBERT with BERT's MLM head; the decoder is tied to the word embeddings.
    """
)
class SymBertForMaskedLM(SymBertPreTrainedModel):
    if TRANSFORMERS_V5:
        _tied_weights_keys = {
            "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias",
        }
    else:
        _tied_weights_keys = ["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"]

    accepts_loss_kwargs = True

    def __init__(self, config):
        super().__init__(config)
        self.bert = SymBertModel(config, add_pooling_layer=False)
        self.cls = SymBertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, MaskedLMOutput]:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token ids for the masked positions, -100 elsewhere (ignored by the loss).
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state
        if labels is not None:
            _check_class_labels(
                labels, sequence_output.shape[:2], "[batch, sequence]", self.config.vocab_size, "vocab_size"
            )
        # CODEPATH: pre-training with the recipes in training/recipes/ (sparse_prediction=true); any call without
        # labels, and every checkpoint saved with the default False, take the full-logits path.
        if labels is not None and self.config.sparse_prediction:
            # only the labelled positions: the decoder over the vocabulary is the costliest part of a small model
            sequence_output, labels = _labelled_positions(sequence_output, labels, self.config.max_predictions_per_seq)
        prediction_scores = self.cls(sequence_output)
        loss = None
        if labels is not None:
            # With the Trainer's num_items_in_batch it averages over all masked tokens of the accumulated, all-device
            # batch, not per micro-batch. Unlike `self.loss_function` it takes the logits in their own dtype, as BERT
            # does: that function's fp32 copy of bf16 logits cost ~1 GB and 2-5% of a training step on an H200
            # (benchmarks/results/throughput-cuda/h200.md).
            logits, targets = _rows_to_score(
                prediction_scores.flatten(0, -2), labels.view(-1).to(prediction_scores.device)
            )
            loss = fixed_cross_entropy(logits, targets, kwargs.get("num_items_in_batch"))
        if self.cls.predictions.vocab_padding:  # the padded vocabulary's rows are no tokens: vocab_size columns
            prediction_scores = prediction_scores[..., : -self.cls.predictions.vocab_padding]
        output = MaskedLMOutput(
            loss=loss, logits=prediction_scores, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict else output.to_tuple()


def _labelled_positions(hidden_states, labels, max_predictions_per_seq):
    """The hidden states [n, hidden] and labels [n] of the labelled positions (label != -100). With
    `max_predictions_per_seq`, n is batch × that number whatever the labels: the labelled positions first, then
    ignored ones, so that every batch has the same shapes (a compiled step does not recompile)."""
    batch = labels.shape[0]
    labels = labels.reshape(-1).to(hidden_states.device)
    hidden_states = hidden_states.reshape(-1, hidden_states.shape[-1])
    labelled = labels != -100
    if max_predictions_per_seq is None:
        return hidden_states[labelled], labels[labelled]
    predicted = min(batch * max_predictions_per_seq, labels.numel())
    if not torch.compiler.is_compiling():  # a compiled step relies on the collator's cap
        _check_prediction_count(labelled, predicted, max_predictions_per_seq)
    positions = torch.argsort(labelled.to(torch.int8), descending=True, stable=True)[:predicted]
    return hidden_states[positions], labels[positions]


def _rows_to_score(logits, labels):
    """The rows of `logits` [n, vocab] and `labels` [n] that the loss reads. The same loss and gradients either way:
    ignored rows (label -100) add nothing to either. In eager mode on a CPU only the labelled rows go through the
    log-softmax over the vocabulary, which at every position costs a sixth of a small model's training step there.
    Elsewhere all rows do: selecting them has a data-dependent shape, i.e. a host sync on an accelerator and a graph
    break under torch.compile."""
    if logits.device.type != "cpu" or torch.compiler.is_compiling():
        return logits, labels
    labelled = labels != -100
    return logits[labelled], labels[labelled]


def _check_prediction_count(labelled, predicted, max_predictions_per_seq):
    limit = f"the {predicted} positions predicted per batch (batch × max_predictions_per_seq={max_predictions_per_seq})"
    advice = "raise max_predictions_per_seq or mask fewer tokens"
    if labelled.device.type != "cpu":  # no host sync on an accelerator, as for the input ids
        torch._assert_async(labelled.sum() <= predicted, f"The labels mark more positions than {limit}; {advice}.")
    elif (count := int(labelled.sum())) > predicted:
        raise ValueError(f"The labels mark {count} positions, more than {limit}; {advice}.")


def _check_inputs_embeds_dtype(inputs_embeds, dtype):
    """BERT adds inputs_embeds to the model's own embeddings and normalises the sum with the model's LayerNorm: wider
    inputs (float32 into a bfloat16 model) make a float32 sum that the bfloat16 LayerNorm refuses with torch's
    "mixed dtype" error (or that leaves the encoder in another dtype). BERT does not cast them, so neither does this:
    it names both dtypes. Narrower inputs (bfloat16 into a float32 model) are promoted to the model's dtype by the
    addition and run as before; under autocast the check is left to torch (CUDA's autocast runs the LayerNorm in
    float32). From dtypes only: no host sync, no graph break."""
    if inputs_embeds is None or inputs_embeds.dtype == dtype:
        return
    if not inputs_embeds.is_floating_point():
        raise ValueError(
            f"inputs_embeds has dtype {inputs_embeds.dtype}; it must be floating point, the model's {dtype}."
        )
    if torch.promote_types(inputs_embeds.dtype, dtype) != dtype and not torch.is_autocast_enabled(
        inputs_embeds.device.type
    ):
        raise ValueError(
            f"inputs_embeds has dtype {inputs_embeds.dtype}, the model {dtype}: pass inputs_embeds.to({dtype}), "
            "or run the model under torch.autocast."
        )


def _check_class_labels(labels, shape, layout, num_classes, size_name):
    """`labels` must be integer class ids of `shape` ([batch] or [batch, sequence], named by `layout`), each in
    [0, num_classes) or -100 (ignored by the loss), so that a bad label is named before torch's cross-entropy fails
    on it (on an accelerator, with a device-side assert that names no value). The shape and dtype come from metadata;
    the values are read back only on the CPU (elsewhere the device checks them itself and fails at its next
    synchronisation, as for the input ids) and not at all under torch.compile (a data-dependent check would break
    the graph)."""
    expected = f"{layout} = {list(shape)}"
    if not isinstance(labels, torch.Tensor):
        raise ValueError(f"labels must be a torch.Tensor of shape {expected}, not a {type(labels).__name__}.")
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(f"labels has shape {list(labels.shape)}; expected {expected}.")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels has dtype {labels.dtype}; expected integer class ids (torch.long).")
    if labels.numel() == 0 or torch.compiler.is_compiling():
        return
    allowed = f"[0, {num_classes - 1}] ({size_name}={num_classes}) or -100 (ignored by the loss)"
    valid = ((labels >= 0) & (labels < num_classes)) | (labels == -100)
    if labels.device.type != "cpu":
        torch._assert_async(valid.all(), f"labels contains class ids outside {allowed}.")
    elif not bool(valid.all()):
        raise ValueError(f"labels contains {labels[~valid][0].item()}; allowed: {allowed}.")


def _check_sequence_labels(labels, logits, problem_type):
    """The labels of SymBertForSequenceClassification for its problem type: one class id per row (single-label),
    one value per row (regression), or one value per row and label (multi-label)."""
    batch, num_labels = logits.shape
    if problem_type == "single_label_classification":
        if isinstance(labels, torch.Tensor) and tuple(labels.shape) == (batch, 1):
            labels = labels[:, 0]  # flattened by the loss, as in BERT
        _check_class_labels(labels, (batch,), "[batch]", num_labels, "num_labels")
    elif problem_type == "regression" and tuple(labels.shape) not in ((batch,), (batch, 1)):
        raise ValueError(f"labels has shape {list(labels.shape)}; regression expects [batch] = [{batch}].")
    elif problem_type == "multi_label_classification" and tuple(labels.shape) != (batch, num_labels):
        raise ValueError(
            f"labels has shape {list(labels.shape)}; multi-label classification expects [batch, num_labels] = "
            f"[{batch}, {num_labels}]."
        )


def _classifier_dropout(config):
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


@auto_docstring(
    custom_intro="""
    Pooled-output classifier: single-label (cross-entropy), multi-label (BCE) or, with `num_labels=1`, regression
    (MSE, as for STS-B). The kind follows `config.problem_type`, or is inferred from `num_labels` and the labels.
    """
)
class SymBertForSequenceClassification(SymBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = SymBertModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, SequenceClassifierOutput]:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))

        loss = None
        if labels is not None:
            if self.config.problem_type is None:
                if self.num_labels == 1:
                    self.config.problem_type = "regression"
                elif labels.dtype in (torch.long, torch.int):
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"
            _check_sequence_labels(labels, logits, self.config.problem_type)
            if self.config.problem_type == "regression":
                loss = MSELoss()(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            elif self.config.problem_type == "single_label_classification":
                loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
            else:
                loss = BCEWithLogitsLoss()(logits, labels.to(logits.dtype))
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict else output.to_tuple()


@auto_docstring(
    custom_intro="""
    Scores each of the `num_choices` inputs [batch, num_choices, seq] with one logit; softmax over choices.
    """
)
class SymBertForMultipleChoice(SymBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.bert = SymBertModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, MultipleChoiceModelOutput]:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if input_ids is not None:
            _check_tensor("input_ids", input_ids, ("batch", "choices", "sequence"))
        elif inputs_embeds is not None:
            _check_tensor("inputs_embeds", inputs_embeds, ("batch", "choices", "sequence", "hidden_size"))
        num_choices = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]

        def flatten(x):
            return None if x is None else x.reshape(-1, *x.shape[2:])

        outputs = self.bert(
            flatten(input_ids),
            attention_mask=flatten(attention_mask),
            token_type_ids=flatten(token_type_ids),
            position_ids=flatten(position_ids),
            inputs_embeds=flatten(inputs_embeds),
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        reshaped_logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)
        loss = None
        if labels is not None:
            _check_class_labels(labels, reshaped_logits.shape[:1], "[batch]", num_choices, "num_choices")
            loss = CrossEntropyLoss()(reshaped_logits, labels)
        output = MultipleChoiceModelOutput(
            loss=loss, logits=reshaped_logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict else output.to_tuple()


@auto_docstring(
    custom_intro="""
    SymBERT with a linear classifier over every token's hidden state (e.g. for named-entity recognition).
    """
)
class SymBertForTokenClassification(SymBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = SymBertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, TokenClassifierOutput]:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            One class id per token, -100 for tokens to ignore.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            _check_class_labels(labels, logits.shape[:2], "[batch, sequence]", self.num_labels, "num_labels")
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict else output.to_tuple()


@auto_docstring(
    custom_intro="""
    Extractive QA: a start and an end logit per token (always 2 outputs, whatever `num_labels` says).
    """
)
class SymBertForQuestionAnswering(SymBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.bert = SymBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    # trf-ignore: TRF045 (output_* and return_dict kept: the file also runs under transformers 4.54-4.57)
    @auto_docstring
    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        start_positions: Optional[torch.Tensor] = None,
        end_positions: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        **kwargs,
    ) -> Union[tuple, QuestionAnsweringModelOutput]:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.unbind(-1))

        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the sequence are clamped to an ignored index, as in BERT.
            ignored_index = start_logits.size(1)
            start_positions = start_positions.view(-1).clamp(0, ignored_index)
            end_positions = end_positions.view(-1).clamp(0, ignored_index)
            loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
            loss = (loss_fct(start_logits, start_positions) + loss_fct(end_logits, end_positions)) / 2
        output = QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


__all__ = [
    "SymBertForMaskedLM",
    "SymBertForMultipleChoice",
    "SymBertForQuestionAnswering",
    "SymBertForSequenceClassification",
    "SymBertForTokenClassification",
    "SymBertModel",
    "SymBertPreTrainedModel",
]
