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

Everything outside the self-attention core is BERT (transformers' `modeling_bert.py`), with BERT's parameter names.
Each attention variant is one small module that builds a (query, key, value) triple; the shared forward hands it to
transformers' attention interface, so eager, sdpa and flash attention work for every variant.

This file is copied into every saved model folder (with `configuration_symbert.py`), so it may import only
torch/transformers and its flat sibling, never the `symbert` package.
"""

import copy
import json
import sys
from pathlib import Path
from typing import Optional, Union

import torch
import transformers
from safetensors import SafetensorError, safe_open
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
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import auto_docstring, logging

try:  # transformers >= 5: these helpers skip tensors already loaded from a checkpoint
    from transformers import initialization as init
except ImportError:  # transformers 4.x: torch's initialisers, plus the copy_ that transformers 5 adds
    from types import SimpleNamespace

    init = SimpleNamespace(**vars(torch.nn.init), copy_=torch.Tensor.copy_)

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


from .configuration_symbert import SymBertConfig

logger = logging.get_logger(__name__)

TRANSFORMERS_V5 = int(transformers.__version__.split(".")[0]) >= 5
ATTENTION_MARKER = ".attention.self."


class SymBertEmbeddings(nn.Module):
    """BERT's word + position + token-type embeddings, with a clear error on out-of-range inputs."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
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
            _check_index_range("input_ids", input_ids, self.word_embeddings.num_embeddings, "vocab_size")
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


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """softmax(q·kᵀ·scaling + mask)·v, returning the probabilities too (for `output_attentions`). A key/value head
    shared by a group of query heads (grouped-query attention) meets the whole group in one product, the group's
    heads stacked as rows, instead of being copied for each head."""
    batch, heads, seq_len, head_size = query.shape
    key_value_heads, key_len = key.shape[1], key.shape[2]
    grouped_query = query.reshape(batch, key_value_heads, -1, head_size)  # a group's heads are consecutive
    attn_weights = torch.matmul(grouped_query, key.transpose(2, 3)).view(batch, heads, seq_len, key_len) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights.view(batch, key_value_heads, -1, key_len), value)
    attn_output = attn_output.view(batch, heads, seq_len, -1).transpose(1, 2).contiguous()
    return attn_output, attn_weights


def _attention_function(implementation):
    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):  # transformers >= 5
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    return ALL_ATTENTION_FUNCTIONS.get(implementation, eager_attention_forward)  # 4.x registers no "eager"


def _eager_attention_mask(attention_mask, dtype):
    """The additive padding mask of `eager_attention_forward`: [batch, 1, 1, seq], 0 on tokens and the dtype's
    minimum on padding (as BERT's eager mask). A 4D mask is used as given."""
    if attention_mask is None or attention_mask.dim() == 4:
        return attention_mask
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class SymBertSelfAttention(nn.Module):
    """The forward every attention type shares, and what the rest of the project asks of a type.

    A subclass defines its parameters and `project`, which maps hidden states [batch, seq, hidden] to per-head query
    [batch, heads, seq, head_size] and key, value [batch, key_value_heads, seq, head_size] (fewer key/value heads than
    query heads is grouped-query attention: the attention interface shares each key/value head within its group, and
    `num_key_value_groups` says how many query heads share one). What acts on each output channel after attention
    (a per-channel scale or shift of the values) can go to `finish_output` instead, so that the kernel gets one
    tensor where the formula has a copy per head. Next to them it states its initialisation, the parameters without weight decay, its cost (parameters, FLOPs), its
    score form for the symmetry analysis and its model-card facts; `register_attention` makes it an `attention_type`.
    """

    attention_type = None  # set by register_attention
    num_key_value_groups = 1  # query heads per key/value head; read by the sdpa interface
    # Names of this module's own parameters that take no weight decay (besides biases, as for every module).
    no_weight_decay = ()
    # True when every head's score form is symmetric whatever the weights; the symmetry analysis then reports 1.
    symmetric_by_construction = False
    # Training tokens/s relative to BERT that the base size should reach (the type's FLOP saving); None: no target.
    train_speed_target = None
    # Weight decay the type's paper trains it with, over its baseline's; pre-training applies it with
    # --paper_weight_decay true.
    paper_weight_decay_factor = 1.0
    # Settings of its config fields under which the type trains differently enough to study on their own (e.g. an
    # initialisation): benchmarks/convergence.py runs each as a row of its own, besides the default settings.
    study_variants = ()
    # Model-card facts: the compatibility function in words (Markdown), what the paper leaves open as fixed here
    # (implementation_choices fills in a config's settings), and the papers as citation key -> BibTeX.
    formula = ""
    open_choices = ()
    papers = {}

    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.config = config
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = config.hidden_size
        self.scaling = self.attention_head_size**-0.5 * self.score_scale(config)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.is_causal = False  # read by the sdpa and flash interfaces
        self.layer_idx = layer_idx

    @classmethod
    def score_scale(cls, config):
        """The scores' scale relative to BERT's 1/√d."""
        return 1.0

    @classmethod
    def implementation_choices(cls, config):
        """open_choices as `config` sets them, for its model card."""
        return list(cls.open_choices)

    def split_heads(self, x):
        return x.view(*x.shape[:-1], -1, self.attention_head_size).transpose(1, 2)

    def project(self, hidden_states):
        raise NotImplementedError

    def finish_output(self, attn_output):
        """What the type does to the concatenated head outputs [batch, seq, hidden] after attention; none by default."""
        return attn_output

    def init_weights(self):
        """Initialise the parameters that are not BERT's (Linear layers are initialised as BERT's by the model)."""

    def from_bert_tensors(self, bert_tensors):
        """Set parameters that BERT has under another shape from BERT's tensors of this layer (name -> tensor, e.g.
        "key.weight"); returns the names set. By default none: such tensors are initialised as for a new model."""
        return []

    def bert_projections(self):
        """BERT's query, key and value of this layer ("query.weight", "query.bias", ...; all heads, BERT's shapes), in
        float64, that give this module's output at this type's score scale (`bert_self_attention_tensors` folds the
        scale into the query). A type whose Q, K and V are not linear in the layer input has no such form."""
        raise NotImplementedError(
            f"attention_type={self.attention_type!r} ({type(self).__name__}) has no BERT form: it does not define "
            "bert_projections, so the model cannot be exported as BERT."
        )

    @classmethod
    def qkv_parameters(cls, config):
        """Parameters of one layer's module (its query, key and value side), as a formula."""
        raise NotImplementedError

    @classmethod
    def projection_macs(cls, config):
        """Multiply-accumulates per token of the projections that build Q, K and V."""
        raise NotImplementedError

    @classmethod
    def forward_flops_per_token(cls, config, seq_len):
        """Matrix-product FLOPs of one token through this module's forward: the projections, then q·kᵀ and p·v over
        `seq_len` keys in every query head."""
        return 2 * (cls.projection_macs(config) + 2 * seq_len * config.hidden_size)

    @classmethod
    def score_forms(cls, weights, num_heads):
        """Each head's bilinear score form M_i [heads, ·, ·] (x·M_i·yᵀ, biases aside) from one layer's saved tensors
        (name -> tensor, e.g. "query.weight"); None when the type has no such analysis."""
        return None

    # trf-ignore: TRF045 (the flag picks the eager function, the only one that returns weights, under any backend)
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        query, key, value = self.project(hidden_states)
        attention_interface = _attention_function(self.config._attn_implementation)
        if output_attentions and attention_interface is not eager_attention_forward:
            # fused kernels do not return the weights; SymBertModel then passes the eager (additive) mask
            logger.warning_once(
                f"attn_implementation={self.config._attn_implementation!r} does not return attention weights: "
                "calls with output_attentions=True compute attention with the eager implementation."
            )
            attention_interface = eager_attention_forward
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout.p if self.training else 0.0,
            scaling=self.scaling,
            is_causal=False,
            **kwargs,
        )
        attn_output = attn_output.reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.finish_output(attn_output), attn_weights


# trf-ignore: TRF052 (attention_type -> variant, not backend: each class dispatches through ALL_ATTENTION_FUNCTIONS)
SYMBERT_SELF_ATTENTION_CLASSES = {}  # attention_type -> class: the one list of attention types
ATTENTION_TYPES = SYMBERT_SELF_ATTENTION_CLASSES.keys()  # a live view: types registered later are in it


def register_attention(name, attention_class):
    """Make `attention_class` (a `SymBertSelfAttention` subclass) the self-attention of `attention_type=name`: the
    config, the models, pre-training, the benchmarks, the symmetry analysis, the parameter table and the model cards
    all find it here. Returns the class, so it also works as a decorator via `functools.partial`."""
    if not (isinstance(attention_class, type) and issubclass(attention_class, SymBertSelfAttention)):
        raise ValueError(
            f"register_attention({name!r}, {attention_class!r}): the class must subclass SymBertSelfAttention."
        )
    if name in SYMBERT_SELF_ATTENTION_CLASSES and SYMBERT_SELF_ATTENTION_CLASSES[name] is not attention_class:
        raise ValueError(
            f"attention_type {name!r} is already registered ({SYMBERT_SELF_ATTENTION_CLASSES[name].__name__})."
        )
    attention_class.attention_type = name
    SYMBERT_SELF_ATTENTION_CLASSES[name] = attention_class
    return attention_class


def unregister_attention(name):
    """Undo `register_attention(name, ...)`."""
    SYMBERT_SELF_ATTENTION_CLASSES.pop(name)


def attention_class(attention_type):
    """The registered class of `attention_type`; ValueError naming the registered types otherwise."""
    if attention_type not in SYMBERT_SELF_ATTENTION_CLASSES:
        raise ValueError(
            f"attention_type={attention_type!r} is not supported; allowed: {', '.join(SYMBERT_SELF_ATTENTION_CLASSES)}."
        )
    return SYMBERT_SELF_ATTENTION_CLASSES[attention_type]


DEVLIN_2019 = """@inproceedings{devlin-etal-2019-bert,
  title     = {{BERT}: Pre-training of Deep Bidirectional Transformers for Language Understanding},
  author    = {Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, Kristina},
  booktitle = {Proceedings of NAACL-HLT 2019},
  year      = {2019},
  pages     = {4171--4186},
  doi       = {10.18653/v1/N19-1423}
}"""
COURTOIS_2024 = """@inproceedings{courtois-etal-2024-symmetric,
  title     = {Symmetric Dot-Product Attention for Efficient Training of {BERT} Language Models},
  author    = {Courtois, Martin and Ostendorff, Malte and Hennig, Leonhard and Rehm, Georg},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2024},
  year      = {2024},
  pages     = {8002--8011},
  doi       = {10.18653/v1/2024.findings-acl.476}
}"""
KOWSHER_2025 = """@inproceedings{kowsher-etal-2025-self,
  title     = {Does Self-Attention Need Separate Weights in Transformers?},
  author    = {Kowsher, Md and Prottasha, Nusrat Jahan and Yu, Chun-Nam and Garibay, Ozlem and Yousefi, Niloofar},
  booktitle = {Proceedings of NAACL 2025 (Volume 3: Industry Track)},
  year      = {2025},
  pages     = {535--543},
  doi       = {10.18653/v1/2025.naacl-industry.44}
}"""
XUE_2023 = """@inproceedings{xue-aletras-2023-pit,
  title     = {Pit One Against Many: Leveraging Attention-head Embeddings for Parameter-efficient Multi-head Attention},
  author    = {Xue, Huiyin and Aletras, Nikolaos},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2023},
  year      = {2023},
  pages     = {10355--10373},
  doi       = {10.18653/v1/2023.findings-emnlp.695}
}"""
SAPONATI_2025 = """@article{saponati-etal-2025-underlying,
  title   = {The underlying structures of self-attention: symmetry, directionality, and emergent dynamics in Transformer training},
  author  = {Saponati, Matteo and Sager, Pascal and Aceituno, Pau Vilimelis and Stadelmann, Thilo and Grewe, Benjamin},
  journal = {arXiv preprint arXiv:2502.10927},
  year    = {2025},
  doi     = {10.48550/arXiv.2502.10927}
}"""
KARBEVSKI_2025 = """@article{karbevski-mijoski-2025-key,
  title   = {Key and Value Weights Are Probably All You Need: On the Necessity of the Query, Key, Value weight Triplet in Self-Attention Transformers},
  author  = {Karbevski, Marko and Mijoski, Antonij},
  journal = {arXiv preprint arXiv:2510.23912},
  year    = {2025},
  doi     = {10.48550/arXiv.2510.23912}
}"""
AINSLIE_2023 = """@inproceedings{ainslie-etal-2023-gqa,
  title     = {{GQA}: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints},
  author    = {Ainslie, Joshua and Lee-Thorp, James and de Jong, Michiel and Zemlyanskiy, Yury and Lebr{\\'o}n, Federico and Sanghai, Sumit},
  booktitle = {Proceedings of EMNLP 2023},
  year      = {2023},
  pages     = {4895--4901},
  doi       = {10.18653/v1/2023.emnlp-main.298}
}"""


class SymBertOriginalSelfAttention(SymBertSelfAttention):
    """BERT: Q, K, V = X·W + b with three h×h projections."""

    train_speed_target = 1.00
    formula = (
        "BERT's own self-attention: Q, K, V = X·W + b with three h×h projections; head i scores "
        "`[Q]_i [K]_iᵀ / √d` and mixes the values `[V]_i`."
    )
    open_choices = ("Identical to BERT's self-attention; the only choices are the training recipe's.",)
    papers = {"devlin": DEVLIN_2019, "courtois": COURTOIS_2024}  # its training and GLUE protocol are Courtois et al.'s

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        key_value_heads = self.key_value_heads(config)
        self.num_key_value_groups = self.num_attention_heads // key_value_heads
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, key_value_heads * self.attention_head_size)
        self.value = nn.Linear(config.hidden_size, key_value_heads * self.attention_head_size)

    @classmethod
    def key_value_heads(cls, config):
        return config.num_attention_heads

    def project(self, hidden_states):
        return (
            self.split_heads(self.query(hidden_states)),
            self.split_heads(self.key(hidden_states)),
            self.split_heads(self.value(hidden_states)),
        )

    def bert_projections(self):
        # a key/value head shared by a group of query heads is repeated for each head of its group
        key, value = (
            [
                t.unflatten(0, (-1, self.attention_head_size))
                .repeat_interleave(self.num_key_value_groups, 0)
                .flatten(0, 1)
                for t in _float64(linear)
            ]
            for linear in (self.key, self.value)
        )
        return _projection_tensors(_float64(self.query), key, value)

    @classmethod
    def qkv_parameters(cls, config):
        h, kv_size = config.hidden_size, cls.key_value_heads(config) * config.hidden_size // config.num_attention_heads
        return h * h + h + 2 * (h * kv_size + kv_size)

    @classmethod
    def projection_macs(cls, config):
        h, kv_size = config.hidden_size, cls.key_value_heads(config) * config.hidden_size // config.num_attention_heads
        return h * h + 2 * h * kv_size

    @classmethod
    def score_forms(cls, weights, num_heads):
        # M_i = [W_q]_iᵀ [W_k]_g(i), key/value head g(i) = i // group size
        query = weights["query.weight"].unflatten(0, (num_heads, -1))  # [heads, d, h]
        key = weights["key.weight"].unflatten(0, (-1, query.shape[1]))  # [key/value heads, d, h]
        key = key.repeat_interleave(num_heads // key.shape[0], dim=0)
        return query.transpose(1, 2) @ key  # [heads, h, d] @ [heads, d, h]


class SymBertGroupedQuerySelfAttention(SymBertOriginalSelfAttention):
    """Ainslie et al.: BERT's projections, but `num_key_value_heads` key/value heads, each shared by a group of
    query heads (one: multi-query attention; `num_attention_heads`: BERT)."""

    formula = (
        "BERT's projections, except that K and V have g = `num_key_value_heads` heads (h×(g·d) projections) and each "
        "serves a group of n/g query heads: head i scores `[Q]_i [K]_{⌊i·g/n⌋}ᵀ / √d` and mixes `[V]_{⌊i·g/n⌋}`. "
        "h² + h + 2(h·d·g + d·g) attention parameters per layer; g = 1 is multi-query attention, g = n is BERT."
    )
    open_choices = (
        "Without `num_key_value_heads` in the config, g is the largest divisor of n not above n/4 (at least 1).",
        "Started from BERT (`from_bert`), each key and value head is the mean of its group's BERT heads, as in the "
        "paper's uptraining; no further uptraining is done by `from_bert` itself.",
    )
    papers = {"ainslie": AINSLIE_2023}

    @classmethod
    def key_value_heads(cls, config):
        # CODEPATH: gqa configs that set num_key_value_heads (any saved by `symbert-pretrain --config_overrides`)
        # take it; those without it (from_preset, the parameter table) take the default.
        if config.num_key_value_heads is not None:
            return config.num_key_value_heads
        heads = config.num_attention_heads
        return max(g for g in range(1, max(1, heads // 4) + 1) if heads % g == 0)

    def from_bert_tensors(self, bert_tensors):
        """Mean-pool each group's BERT key and value heads into one head (the paper's conversion)."""
        converted = []
        for name in ("key.weight", "key.bias", "value.weight", "value.bias"):
            parameter, tensor = self.get_parameter(name), bert_tensors.get(name)
            if tensor is None or tensor.shape == parameter.shape:
                continue  # missing, or loaded as it is (a group of one head)
            # BERT's [n·d, ...] rows as [g, n/g, d, ...]: heads of one group are consecutive
            groups = tensor.unflatten(0, (-1, self.num_key_value_groups, self.attention_head_size))
            with torch.no_grad():
                parameter.copy_(groups.mean(1).flatten(0, 1))
            converted.append(name)
        return converted


class SymBertSymmetricSelfAttention(SymBertSelfAttention):
    """Courtois et al.: K is Q (same weight and bias), so each head's score matrix Q·Qᵀ is symmetric."""

    symmetric_by_construction = True
    train_speed_target = 1.06
    formula = (
        "Head i scores `[Q]_i [Q]_iᵀ / √d`: the key projection *is* the query projection (weight and bias), so every "
        "head's score matrix is symmetric; values `[V]_i` as in BERT. No `key` tensor: 2h² + 2h attention parameters "
        "per layer instead of 3h² + 3h."
    )
    open_choices = ("K is Q including the bias, as in the official code of Courtois et al. (2024).",)
    papers = {"courtois": COURTOIS_2024}

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

    def project(self, hidden_states):
        query = self.split_heads(self.query(hidden_states))
        return query, query, self.split_heads(self.value(hidden_states))

    def bert_projections(self):
        query = _float64(self.query)
        return _projection_tensors(query, query, _float64(self.value))

    @classmethod
    def qkv_parameters(cls, config):
        return 2 * (config.hidden_size**2 + config.hidden_size)

    @classmethod
    def projection_macs(cls, config):
        return 2 * config.hidden_size**2


class SymBertPairwiseSelfAttention(SymBertSymmetricSelfAttention):
    """Courtois et al.: score Q·S·Qᵀ with a learned, unconstrained d×d matrix S per head.
    S is folded into the query, (Q·S, Q, V), so fused attention kernels apply."""

    symmetric_by_construction = False
    train_speed_target = 1.05
    study_variants = ({"pairwise_init": "identity"},)  # at small head sizes N(0, 1) and the identity differ widely
    formula = (
        "Head i scores `[Q]_i S_i [Q]_iᵀ / √d` with a learned, unconstrained d×d matrix S_i per head and layer (K is "
        "Q, as in `symmetric`, but S_i makes the score asymmetric); values `[V]_i` as in BERT. 2h² + 2h + h²/n "
        "attention parameters per layer."
    )
    open_choices = (
        "S_i is unconstrained (not symmetric), one per head and layer.",
        "S_i is initialised {pairwise_init}; the paper's text leaves this open, its own runs used i.i.d. N(0, 1).",
    )

    @classmethod
    def implementation_choices(cls, config):
        # CODEPATH: model cards of pairwise models: "normal" (the default) or "identity", as their config sets it
        init = "i.i.d. N(0, 1)" if config.pairwise_init == "normal" else "to the identity"
        return [choice.format(pairwise_init=init) for choice in cls.open_choices]

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        head_size = self.attention_head_size
        self.pairwise = nn.Parameter(torch.empty(self.num_attention_heads, head_size, head_size))

    def project(self, hidden_states):
        query = self.split_heads(self.query(hidden_states))
        return torch.matmul(query, self.pairwise), query, self.split_heads(self.value(hidden_states))

    def bert_projections(self):
        # head i's query q_i·S_i = x·(S_iᵀ W_i)ᵀ + b_i·S_i: S folds into the query side, the key is Q as in symmetric
        weight, bias = _float64(self.query)
        pairwise = self.pairwise.detach().double()
        heads = (self.num_attention_heads, self.attention_head_size)
        query = (
            torch.einsum("nde,ndh->neh", pairwise, weight.unflatten(0, heads)).flatten(0, 1),
            torch.einsum("nde,nd->ne", pairwise, bias.unflatten(0, heads)).flatten(),
        )
        return _projection_tensors(query, (weight, bias), _float64(self.value))

    def init_weights(self):
        # CODEPATH: new pairwise models take "normal" (the paper's N(0, 1), the default) unless the config sets
        # "identity" to start equal to symmetric; a loaded checkpoint takes neither, its S comes from the weights.
        if self.config.pairwise_init == "identity":
            eye = torch.eye(self.attention_head_size, dtype=self.pairwise.dtype, device=self.pairwise.device)
            init.copy_(self.pairwise, eye.expand_as(self.pairwise))
        else:  # the paper's N(0, 1): initial attention sharper than BERT's
            init.normal_(self.pairwise, mean=0.0, std=1.0)

    @classmethod
    def qkv_parameters(cls, config):
        head_size = config.hidden_size // config.num_attention_heads
        return super().qkv_parameters(config) + config.num_attention_heads * head_size**2

    @classmethod
    def projection_macs(cls, config):
        head_size = config.hidden_size // config.num_attention_heads
        return super().projection_macs(config) + config.num_attention_heads * head_size**2  # Q·S per head

    @classmethod
    def score_forms(cls, weights, num_heads):
        return weights["pairwise"]  # the learned S_i


class SymBertSharedSelfAttention(SymBertSelfAttention):
    """Kowsher et al.: one projection U = X·W_s + b_s; Q, K, V are U scaled by learned diagonals δ_q, δ_k, δ_v."""

    no_weight_decay = ("scale_q", "scale_k", "scale_v")  # multiplicative gains, like LayerNorm weights
    symmetric_by_construction = True  # U·diag(δ_q ⊙ δ_k)·Uᵀ
    train_speed_target = 1.12
    formula = (
        "One projection U = X·W_s + b_s gives Q = U⊙δ_q, K = U⊙δ_k, V = U⊙δ_v with learned vectors δ ∈ ℝ^h (diagonal "
        "matrices); heads are split as in BERT and score `[Q]_i [K]_iᵀ / √d`. h² + 4h attention parameters per layer."
    )
    open_choices = (
        "The bias b_s is shared like W_s; δ_q, δ_k, δ_v start at ones and get no weight decay (multiplicative gains, "
        "like LayerNorm weights); the paper does not say.",
    )
    papers = {"kowsher": KOWSHER_2025}

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.shared = nn.Linear(config.hidden_size, self.all_head_size)
        self.scale_q = nn.Parameter(torch.empty(self.all_head_size))
        self.scale_k = nn.Parameter(torch.empty(self.all_head_size))
        self.scale_v = nn.Parameter(torch.empty(self.all_head_size))

    def project(self, hidden_states):
        # (U⊙δ_q)·(U⊙δ_k)ᵀ = (U⊙δ_q⊙δ_k)·Uᵀ: the kernel reads U itself as the key, and one product fewer is made.
        # δ_v stays on the value (A·(U⊙δ_v) = (A·U)⊙δ_v, but after attention the product would save its input, the
        # attention output, for δ_v's gradient: one more [tokens, h] per layer than here, where it saves U, which the
        # query's product saves already).
        shared = self.shared(hidden_states)
        # in the activations' dtype: under bf16 autocast an fp32 scale would make fp32 queries and values
        query = shared * (self.scale_q * self.scale_k).to(shared.dtype)
        value = shared * self.scale_v.to(shared.dtype)
        return self.split_heads(query), self.split_heads(shared), self.split_heads(value)

    def init_weights(self):
        for scale in (self.scale_q, self.scale_k, self.scale_v):
            init.ones_(scale)

    def bert_projections(self):
        # W_{q,k,v} = diag(δ) W_s, biases δ ⊙ b_s
        shared = _float64(self.shared)
        return _projection_tensors(
            *(
                [t * scale.detach().double().view(-1, *[1] * (t.dim() - 1)) for t in shared]
                for scale in (self.scale_q, self.scale_k, self.scale_v)
            )
        )

    @classmethod
    def qkv_parameters(cls, config):
        return config.hidden_size**2 + 4 * config.hidden_size

    @classmethod
    def projection_macs(cls, config):
        return config.hidden_size**2


class SymBertMultiHeadEmbeddingSelfAttention(SymBertSelfAttention):
    """Xue & Aletras: single-head projections q̃, k̃, ṽ (h→d) shared by all heads; head i combines them with its own
    embeddings e_i^Q, e_i^K, e_i^V (`head_embeddings[0|1|2, i]`). Subclasses choose the combination, and rewrite it
    exactly so that the attention kernel gets one key head and, where exact, one value head (multi-query attention)
    instead of a copy of k̃ and ṽ per head."""

    train_speed_target = 1.15
    papers = {"xue": XUE_2023}

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.query = nn.Linear(config.hidden_size, self.attention_head_size)
        self.key = nn.Linear(config.hidden_size, self.attention_head_size)
        self.value = nn.Linear(config.hidden_size, self.attention_head_size)
        self.head_embeddings = nn.Parameter(torch.empty(3, self.num_attention_heads, self.attention_head_size))

    @property
    def num_key_value_groups(self):
        return self.num_attention_heads  # one key/value head serves every query head

    def single_heads(self, hidden_states):
        """q̃, k̃, ṽ as one head each, [batch, 1, seq, d], and the embeddings e^Q, e^K, e^V as [1, heads, 1, d] in
        their dtype (under bf16 autocast an fp32 embedding would make an fp32 [batch, heads, seq, d])."""
        projections = tuple(linear(hidden_states).unsqueeze(1) for linear in (self.query, self.key, self.value))
        embeddings = self.head_embeddings.to(projections[0].dtype)[:, None, :, None, :]
        return projections, embeddings

    def bert_projections(self):
        """Head i's query, key and value: the single-head projection combined with e_i (`combine_with_embedding`)."""
        embeddings = self.head_embeddings.detach().double()  # [3, heads, d]
        return _projection_tensors(
            *(
                self.combine_with_embedding(*_float64(linear), embedding)
                for linear, embedding in zip((self.query, self.key, self.value), embeddings)
            )
        )

    @staticmethod
    def combine_with_embedding(weight, bias, embedding):
        """Every head's (weight [heads·d, h], bias [heads·d]) from a single-head projection (weight [d, h], bias [d])
        and the heads' embeddings [heads, d]."""
        raise NotImplementedError

    @classmethod
    def qkv_parameters(cls, config):
        h, n = config.hidden_size, config.num_attention_heads
        d = h // n
        return 3 * (h * d + d) + 3 * n * d

    @classmethod
    def projection_macs(cls, config):
        return 3 * config.hidden_size * (config.hidden_size // config.num_attention_heads)

    @classmethod
    def score_forms(cls, weights, num_heads):
        query, key = weights["query.weight"], weights["key.weight"]  # single-head [d, h]
        return (query.T @ key).expand(num_heads, -1, -1)  # the head embeddings only add linear terms


class SymBertMHEAddSelfAttention(SymBertMultiHeadEmbeddingSelfAttention):
    """MHE-ADD. The key embedding adds (q̃ + e_i^Q)·e_i^K to every score of a query row, a constant that softmax
    removes: the kernel gets the one key head k̃, and e^K keeps its tensor (for the paper's parameter count) with a
    gradient of exactly zero. The value embedding leaves the kernel too, A_i·(ṽ + e_i^V) = A_i·ṽ + e_i^V, wherever
    each row of A_i sums to one, i.e. unless attention dropout is training."""

    formula = (
        "Single-head projections q̃, k̃, ṽ = X·W + b (W of shape h×d) shared by all heads; head i uses q̃ + e_i^Q, "
        "k̃ + e_i^K and ṽ + e_i^V with learned head embeddings e ∈ ℝ^d. 3hd + 3d + 3nd attention parameters per layer."
    )
    open_choices = (
        "The head embeddings act on the d-wide projection outputs, the only placement that gives the paper's 3nd "
        "parameters over a single head; they start at N(0, 0.02²).",
        "e^K only adds a per-query constant to the scores, which softmax removes: it is kept for the paper's "
        "parameter count, but has no effect on the outputs and its gradient is zero.",
    )

    @property
    def value_embedding_in_kernel(self):
        return self.training and self.dropout.p > 0  # dropped attention weights no longer sum to one

    @property
    def num_key_value_groups(self):
        return 1 if self.value_embedding_in_kernel else self.num_attention_heads

    def project(self, hidden_states):
        (query, key, value), (query_embedding, _, value_embedding) = self.single_heads(hidden_states)
        query = query + query_embedding
        if self.value_embedding_in_kernel:
            return query, key.expand_as(query), value + value_embedding
        return query, key, value

    def finish_output(self, attn_output):
        if self.value_embedding_in_kernel:
            return attn_output
        return attn_output + self.head_embeddings[2].to(attn_output.dtype).flatten()  # head-major, as the output

    def init_weights(self):
        init.normal_(self.head_embeddings, mean=0.0, std=self.config.initializer_range)

    @staticmethod
    def combine_with_embedding(weight, bias, embedding):
        # x·W̃ᵀ + b̃ + e_i: the weight is shared, the embedding is head i's bias (exact for e^K and e^V too)
        return weight.repeat(len(embedding), 1), (bias + embedding).flatten()


class SymBertMHEMulSelfAttention(SymBertMultiHeadEmbeddingSelfAttention):
    """MHE-MUL. Head i scores (q̃⊙e_i^Q)·(k̃⊙e_i^K) = (q̃⊙e_i^Q⊙e_i^K)·k̃ and outputs A_i·(ṽ⊙e_i^V) = (A_i·ṽ)⊙e_i^V:
    the kernel gets the one key head k̃ and value head ṽ, the query scaled per head, and e^V scales the output."""

    no_weight_decay = ("head_embeddings",)  # multiplicative gains around 1
    formula = (
        "Single-head projections q̃, k̃, ṽ = X·W + b (W of shape h×d) shared by all heads; head i uses q̃⊙e_i^Q, "
        "k̃⊙e_i^K and ṽ⊙e_i^V with learned head embeddings e ∈ ℝ^d. 3hd + 3d + 3nd attention parameters per layer."
    )
    open_choices = (
        "The head embeddings act on the d-wide projection outputs, the only placement that gives the paper's 3nd "
        "parameters over a single head; they start at 1 + N(0, 0.02²) and get no weight decay.",
    )

    def project(self, hidden_states):
        (query, key, value), (query_embedding, key_embedding, _) = self.single_heads(hidden_states)
        return query * (query_embedding * key_embedding), key, value

    def finish_output(self, attn_output):
        return attn_output * self.head_embeddings[2].to(attn_output.dtype).flatten()

    def init_weights(self):
        init.normal_(self.head_embeddings, mean=1.0, std=self.config.initializer_range)

    @staticmethod
    def combine_with_embedding(weight, bias, embedding):
        # (x·W̃ᵀ + b̃) ⊙ e_i = x·(diag(e_i) W̃)ᵀ + e_i ⊙ b̃
        return (embedding[:, :, None] * weight).flatten(0, 1), (embedding * bias).flatten()

    @classmethod
    def score_forms(cls, weights, num_heads):
        # W̃_qᵀ diag(e_i^Q ⊙ e_i^K) W̃_k
        scales = weights["head_embeddings"][0] * weights["head_embeddings"][1]  # [heads, d]
        return weights["query.weight"].T @ (scales[:, :, None] * weights["key.weight"])


class SymBertSymmetricInitSelfAttention(SymBertOriginalSelfAttention):
    """Saponati et al.: BERT's attention, with the key projection initialised equal to the query projection, so that
    every head's query-key product W_qᵀW_k starts symmetric (and positive semi-definite); both train freely after."""

    formula = (
        "BERT's self-attention (Q, K, V = X·W + b, three h×h projections, 3h² + 3h attention parameters per layer), "
        "initialised with the key projection equal to the query projection: head i's score form [W_q]_iᵀ[W_k]_i "
        "starts symmetric. After initialisation query and key are separate parameters and train freely."
    )
    open_choices = (
        "The key's weight and bias are copies of the query's after BERT's initialisation (N(0, σ²) weights with σ = "
        "`initializer_range`, zero biases). Saponati et al.'s code copies the key weight into the query, leaves the "
        "biases apart and keeps PyTorch's default Linear initialisation for the attention; which way the copy goes "
        "makes no difference to the symmetry.",
        "Only a new model is initialised so: a model loaded from a checkpoint (or `from_bert`) keeps its key.",
    )
    papers = {"saponati": SAPONATI_2025, "devlin": DEVLIN_2019}

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.key = LinearStartingAs(self.query)  # same place among the children: initialised after the query


class LinearStartingAs(nn.Linear):
    """A Linear layer whose initialisation copies another's (of the same shape), already initialised: the model's
    `_init_weights` does the copy here, since transformers 5 initialises only modules that hold parameters."""

    def __init__(self, source):
        super().__init__(source.in_features, source.out_features)
        self.source = [source]  # in a list: not a submodule, so its parameters are not registered twice


class SymBertNoQuerySelfAttention(SymBertSelfAttention):
    """Karbevski & Mijoski: no query projection (W_q is the identity): head i's query is its d channels of the
    hidden state, so each head's scores are linear in one learned matrix, [W_k]_i; keys and values as in BERT."""

    train_speed_target = 1.06  # the FLOPs of `symmetric`: two h×h projections
    paper_weight_decay_factor = 0.03125 / 0.1  # the paper's reduced models: weight decay 2⁻⁵ where the baseline had 0.1
    formula = (
        "No query projection: head i scores `[X]_i [K]_iᵀ · c` with K = X·W_k + b_k, where [X]_i is head i's d "
        "channels of the layer's input (W_q is the identity, so the scores are linear in the learned weights); "
        "values `[V]_i` as in BERT. c is 1/(2√d), the paper's adjusted scaling, or BERT's 1/√d "
        "(`no_query_scaling`). 2h² + 2h attention parameters per layer, a quarter fewer than BERT's Q, K, V and "
        "output."
    )
    open_choices = (
        "The query is the layer's input itself (BERT's post-LayerNorm hidden state), without a bias; the paper's "
        "theory assumes no normalisation and its experiments train pre-LayerNorm GPT models (decoder-only), where "
        "the query is the LayerNorm's output. No encoder was trained in the paper.",
        "Scores are scaled by {no_query_scaling}; the paper's reduced models use half BERT's scale, 1/(2√d).",
        "The paper trains its reduced models with weight decay 0.03125 where the baseline has 0.1: "
        "`symbert-pretrain --paper_weight_decay true` multiplies the recipe's weight decay by 0.3125 for this type.",
        "`from_bert` keeps BERT's key and value and drops its query, which this type cannot represent.",
    )
    papers = {"karbevski": KARBEVSKI_2025}

    def __init__(self, config, layer_idx=None):
        super().__init__(config, layer_idx)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

    @classmethod
    def implementation_choices(cls, config):
        # CODEPATH: model cards of no_query models: "paper" (the default) or "standard", as their config sets it
        scaling = "1/(2√d)" if config.no_query_scaling == "paper" else "BERT's 1/√d"
        return [choice.format(no_query_scaling=scaling) for choice in cls.open_choices]

    @classmethod
    def score_scale(cls, config):
        # CODEPATH: no_query models take "paper" (1/(2√d), the default) unless the config sets "standard" (1/√d);
        # a loaded checkpoint takes the setting saved in its config.json.
        return 0.5 if config.no_query_scaling == "paper" else 1.0

    def project(self, hidden_states):
        return (
            self.split_heads(hidden_states),
            self.split_heads(self.key(hidden_states)),
            self.split_heads(self.value(hidden_states)),
        )

    def bert_projections(self):
        key, value = _float64(self.key), _float64(self.value)
        identity = torch.eye(self.all_head_size, dtype=torch.float64, device=key[0].device)
        return _projection_tensors((identity, torch.zeros_like(key[1])), key, value)

    # two h×h projections with biases, as `symmetric`: the same formulas
    qkv_parameters = SymBertSymmetricSelfAttention.__dict__["qkv_parameters"]
    projection_macs = SymBertSymmetricSelfAttention.__dict__["projection_macs"]

    @classmethod
    def score_forms(cls, weights, num_heads):
        # M_i = E_iᵀ[W_k]_i: head i's query selects its d channels (E_i [d, h]), so M_i is [W_k]_i in those rows
        key = weights["key.weight"].unflatten(0, (num_heads, -1))  # [heads, d, h]
        head_size, hidden = key.shape[1:]
        forms = key.new_zeros(num_heads, hidden, hidden)
        for head in range(num_heads):
            forms[head, head * head_size : (head + 1) * head_size] = key[head]
        return forms


def _float64(linear):
    return linear.weight.detach().double(), linear.bias.detach().double()


def _projection_tensors(query, key, value):
    """{"query.weight": ..., "query.bias": ..., "key.weight": ...} from (weight, bias) pairs."""
    return {
        f"{name}.{part}": tensor
        for name, pair in zip(("query", "key", "value"), (query, key, value))
        for part, tensor in zip(("weight", "bias"), pair)
    }


def bert_self_attention_tensors(module):
    """BERT's self-attention tensors ("query.weight", ...) that compute `module`'s output exactly: its
    `bert_projections` with the type's score scale folded into the query (BERT scores at 1/√d), in the module's dtype."""
    tensors = module.bert_projections()
    scale = module.score_scale(module.config)
    tensors["query.weight"], tensors["query.bias"] = tensors["query.weight"] * scale, tensors["query.bias"] * scale
    dtype = next(module.parameters()).dtype
    return {name: tensor.to(dtype) for name, tensor in tensors.items()}


register_attention("original", SymBertOriginalSelfAttention)
register_attention("symmetric", SymBertSymmetricSelfAttention)
register_attention("pairwise", SymBertPairwiseSelfAttention)
register_attention("shared", SymBertSharedSelfAttention)
register_attention("mhe_add", SymBertMHEAddSelfAttention)
register_attention("mhe_mul", SymBertMHEMulSelfAttention)
register_attention("gqa", SymBertGroupedQuerySelfAttention)
register_attention("symmetric_init", SymBertSymmetricInitSelfAttention)
register_attention("no_query", SymBertNoQuerySelfAttention)


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
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def _tie_weights(self):  # called by transformers 4.x's tie_weights; 5.x ties the bias through _tied_weights_keys
        self.decoder.bias = self.bias

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))


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
            _warn_if_other_code(name_or_path, kwargs.get("subfolder"))
        if kwargs.get("state_dict") is not None:  # before transformers 5 takes their dtype for the model's
            if message := _integer_weights_message(name_or_path, kwargs, _model_skeleton(cls, name_or_path, kwargs)):
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
            if message := _integer_weights_message(name_or_path, kwargs, _model_skeleton(cls, name_or_path, kwargs)):
                raise ValueError(message) from error
            raise
        if message := _integer_weights_message(name_or_path, kwargs, model):  # transformers 5 casts them
            raise ValueError(message)
        if same_attention and _holds_part_of_the_model(model, loading_info):
            _check_attention_tensors(model.config.attention_type, loading_info, _weights_source(name_or_path))
        if loading_info["mismatched_keys"] and not allow_new_shapes:
            shapes = "; ".join(
                f"{name}: {list(saved)} in the checkpoint, {list(wanted)} in the model" if saved else name
                for name, saved, wanted in _mismatched(loading_info, model, name_or_path, kwargs)
            )
            # RuntimeError: what transformers itself raises for tensors of another shape (4.x and 5.x)
            source = _weights_source(name_or_path)
            raise RuntimeError(
                f"{source[0].upper()}{source[1:]} has tensors of another shape than the model: {shapes}. Fix the "
                "config, or pass ignore_mismatched_sizes=True to initialise them anew."
            )
        return (model, loading_info) if return_loading_info else model

    @classmethod
    def from_bert(cls, bert_name_or_path, **kwargs):
        """Start any SymBERT variant from a BERT checkpoint (Hub id or folder).

        Every tensor present in both with the same name and shape is copied; an attention type may convert BERT's
        tensors of another shape (`gqa` mean-pools each group's key and value heads); the others (e.g. the pairwise
        S, the δ scales, or MHE's h→d projections) are initialised as for a new model. `kwargs` go to
        `from_pretrained` and to the config, e.g. `attention_type="pairwise"`.

        Returns `(model, new_parameters)`: the sorted names of the tensors that were not taken from BERT; the names
        of the converted ones are logged and kept in `model.converted_from_bert`.
        """
        subfolder = kwargs.get("subfolder") or ""
        kwargs.update(ignore_mismatched_sizes=True, output_loading_info=True)
        model, loading_info = cls._load_checked(bert_name_or_path, (), kwargs, same_attention=False)
        new_parameters = set(loading_info["missing_keys"]) | {name for name, *_ in _mismatched(loading_info)}
        new_parameters = {name for name in new_parameters if name in dict(model.named_parameters())}
        converted = _convert_bert_attention(model, bert_name_or_path, subfolder, new_parameters)
        new_parameters = sorted(new_parameters - set(converted))
        model.converted_from_bert = converted
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


def _convert_bert_attention(model, bert_name_or_path, subfolder, new_parameters):
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
    """{layer: {"key.weight": tensor, ...}}: the self-attention tensors of a (possibly sharded) safetensors checkpoint."""
    from transformers.utils import cached_file

    def checkpoint_file(name, required=True):
        return cached_file(name_or_path, name, subfolder=subfolder, _raise_exceptions_for_missing_entries=required)

    index = checkpoint_file("model.safetensors.index.json", required=False)
    shards = sorted(set(json.loads(Path(index).read_text())["weight_map"].values())) if index else ["model.safetensors"]
    tensors = {}
    for shard in shards:
        with safe_open(checkpoint_file(shard), framework="pt") as file:
            for name in file.keys():
                if ATTENTION_MARKER in name and "encoder.layer." in name:
                    layer = int(name.split("encoder.layer.")[1].split(".")[0])
                    tensors.setdefault(layer, {})[name.split(ATTENTION_MARKER)[1]] = file.get_tensor(name)
    return tensors


def _mismatched(loading_info, model=None, name_or_path=None, kwargs=None):
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


def _weights_source(name_or_path):
    return "the state_dict passed to from_pretrained" if name_or_path is None else repr(str(name_or_path))


def _holds_part_of_the_model(model, loading_info):
    """Whether the checkpoint gave the model any tensor outside self-attention. One that gave none (transformers'
    `state_dict={}`, or a file of unrelated tensors) is not a checkpoint of another attention type: it loads as in
    transformers, every weight initialised and reported missing."""
    absent = set(loading_info["missing_keys"]) | {name for name, *_ in _mismatched(loading_info)}
    return any(name not in absent for name in model.state_dict() if ATTENTION_MARKER not in name)


def _check_attention_tensors(attention_type, loading_info, source):
    """A checkpoint of another attention type loads with its attention tensors missing, unexpected or reshaped."""

    def attention_tensors(names):
        return ", ".join(sorted({name.split(ATTENTION_MARKER)[1] for name in names if ATTENTION_MARKER in name}))

    missing = attention_tensors(loading_info["missing_keys"])
    unexpected = attention_tensors(loading_info["unexpected_keys"])
    reshaped = attention_tensors(name for name, *_ in _mismatched(loading_info))
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


def _model_skeleton(cls, name_or_path, kwargs):
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


def _integer_weights_message(name_or_path, kwargs, model):
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
        f"The weights of {_weights_source(name_or_path)} include integer tensors: {shown}. The model's weights are "
        "floating point (float32, float16 or bfloat16): save the checkpoint in one of those dtypes, or load a "
        "quantised checkpoint with its quantization_config."
    )


def _warn_if_other_code(name_or_path, subfolder):
    """Log one warning when the folder's modeling_symbert.py or configuration_symbert.py differ from the code that
    is loading it: after `import symbert`, transformers' Auto classes map model_type 'symbert' to the installed
    classes (under transformers 5 even with trust_remote_code=True), so the folder's own code does not run."""
    folder = Path(name_or_path, subfolder or "").expanduser()
    if not folder.is_dir():
        return
    running = {
        "modeling_symbert.py": Path(__file__),
        "configuration_symbert.py": Path(sys.modules[SymBertConfig.__module__].__file__),
    }
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
        whose = "the installed symbert package" if package == "symbert" else f"the module {__name__}"
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
            attention_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask
            )
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
            # (benchmarks/results/throughput-cuda.md).
            logits, targets = _rows_to_score(
                prediction_scores.view(-1, self.config.vocab_size), labels.view(-1).to(prediction_scores.device)
            )
            loss = fixed_cross_entropy(logits, targets, kwargs.get("num_items_in_batch"))
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
    if torch.promote_types(inputs_embeds.dtype, dtype) != dtype and not _autocast_enabled(inputs_embeds.device.type):
        raise ValueError(
            f"inputs_embeds has dtype {inputs_embeds.dtype}, the model {dtype}: pass inputs_embeds.to({dtype}), "
            "or run the model under torch.autocast."
        )


def _autocast_enabled(device_type):
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


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
    "ATTENTION_TYPES",
    "SYMBERT_SELF_ATTENTION_CLASSES",
    "SymBertSelfAttention",
    "attention_class",
    "register_attention",
    "unregister_attention",
    "SymBertForMaskedLM",
    "SymBertForMultipleChoice",
    "SymBertForQuestionAnswering",
    "SymBertForSequenceClassification",
    "SymBertForTokenClassification",
    "SymBertModel",
    "SymBertPreTrainedModel",
]
