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
"""SymBERT's self-attention variants: the forward they share, one class per `attention_type`, and their registry.

Each variant is one small module that builds a (query, key, value) triple; the shared forward hands it to
transformers' attention interface, so eager, sdpa and flash attention work for every variant. Next to its
parameters each class states its initialisation, cost, score form, BERT form and model-card facts (with its papers).

This file is copied into every saved model folder (it is imported by `modeling_symbert.py` and
`configuration_symbert.py`), so it may import only torch/transformers, never the `symbert` package nor its siblings.
"""

from typing import Optional

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

try:  # transformers >= 5: these helpers skip tensors already loaded from a checkpoint
    from transformers import initialization as init
except ImportError:  # transformers 4.x: torch's initialisers, plus the copy_ that transformers 5 adds
    from types import SimpleNamespace

    init = SimpleNamespace(**vars(torch.nn.init), copy_=torch.Tensor.copy_)

logger = logging.get_logger(__name__)

ATTENTION_MARKER = ".attention.self."  # in the name of every self-attention tensor: encoder.layer.N.attention.self.*


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


def grouped_sdpa_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """sdpa where a key/value head is shared by a group of query heads: the group's query heads are stacked along the
    sequence (token-major: query row t·r + j is token t of the group's head j), so every sdpa kernel, masked or not,
    sees as many query heads as key/value heads. No copy of each key/value head per query head (transformers'
    repeat_kv, whose gradients are then summed back) and no `enable_gqa`, which masked CUDA kernels do not take
    (torch < 2.5 has none). With one key/value head (multi-query) the stacking is a view."""
    batch, heads, seq_len, head_size = query.shape
    key_value_heads = key.shape[1]
    groups = heads // key_value_heads
    query = query.transpose(1, 2).reshape(batch, seq_len, key_value_heads, groups, head_size)
    query = query.transpose(1, 2).reshape(batch, key_value_heads, seq_len * groups, head_size)
    # a mask with a row per query token (a 4D mask given as such; SymBertModel passes a padding mask as one row,
    # broadcast): one row per stacked row
    if attention_mask is not None and attention_mask.shape[-2] > 1:
        attention_mask = attention_mask.repeat_interleave(groups, dim=-2)
    attn_output = nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    attn_output = attn_output.view(batch, key_value_heads, seq_len, groups, -1).transpose(1, 2)
    return attn_output.reshape(batch, seq_len, heads, -1), None


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
    # True on BERT's own self-attention, the type the benchmarks' ratios are taken to; read off the class's own body,
    # so a subclass of it (gqa, symmetric_init) is not BERT.
    is_bert_reference = False
    # True where the type should train in less memory than BERT's self-attention (the benchmarks' memory target).
    saves_attention_memory = False
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
    def initial_score_moments(cls, config):
        """(mean, variance) at initialisation of one score between two different tokens, and the mean of a token's
        score with itself: for layer inputs of independent unit-variance entries (LayerNorm's output), weights
        N(0, σ²) with σ = `initializer_range` and zero biases. BERT's: the query and key are independent
        N(0, hσ²) channels, d products scaled by 1/√d, so the variance is h²σ⁴ and both means are 0."""
        return {"mean": 0.0, "variance": (config.hidden_size * config.initializer_range**2) ** 2, "self_mean": 0.0}

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

    def fit_bert(self, bert, inputs):
        """Fit this module's parameters to BERT's self-attention of the same layer, so that it computes what BERT's
        does on the layer inputs seen in calibration text. `bert`: BERT's "query.weight", ..., "value.bias" of the
        layer in float64; `inputs`: the layer's inputs at the calibration tokens [tokens, hidden], float64 (padding
        left out). Fits are closed form in the metric of `inputs` (a score is matched over every pair of calibration
        tokens; a key's bias is left out, since it adds the same to every score of a query, which softmax ignores).
        A type without a fit raises NotImplementedError naming it."""
        raise NotImplementedError(
            f"attention_type={self.attention_type!r} ({type(self).__name__}) has no fit to BERT's attention: it does "
            "not define fit_bert."
        )

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

    def _stacks_query_groups(self, attention_mask):
        # grouped_sdpa_attention_forward needs one mask for every head (as SymBertModel builds it, or none)
        return self.num_key_value_groups > 1 and (attention_mask is None or attention_mask.shape[1] == 1)

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
        elif self.config._attn_implementation == "sdpa" and self._stacks_query_groups(attention_mask):
            attention_interface = grouped_sdpa_attention_forward
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
    is_bert_reference = True
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

    def fit_bert(self, bert, inputs):
        # BERT's own form: a copy
        for name in ("query", "key", "value"):
            _set_linear(getattr(self, name), _projection(bert, name))
        return ["query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias"]

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

    def fit_bert(self, bert, inputs):
        # BERT's query; a key/value head shared by a group takes the group's best key (scores over the calibration
        # tokens: the queries' metric) and the mean of its values
        _set_linear(self.query, _projection(bert, "query"))
        groups = self.num_key_value_groups
        key, value = (_projection(bert, name).unflatten(1, (-1, self.attention_head_size)) for name in ("key", "value"))
        if groups > 1:
            augmented = _augmented(inputs)
            queries = augmented @ _projection(bert, "query")  # [tokens, heads·d]
            heads = queries.unflatten(1, (-1, self.attention_head_size)).transpose(0, 1)  # [heads, tokens, d]
            query_metric = heads.transpose(1, 2) @ heads  # H_i = Q_iᵀQ_i [heads, d, d]
            key = key.transpose(0, 1).unflatten(0, (-1, groups))  # [kv heads, group, h+1, d]
            query_metric = query_metric.unflatten(0, (-1, groups))
            # argmin Σ_i ||Q_i (K_g − K_i)ᵀ||²: B_g = (Σ_i B_i H_i)(Σ_i H_i)⁻¹
            pooled = torch.linalg.solve(
                (query_metric.sum(1)).transpose(1, 2), (key @ query_metric).sum(1).transpose(1, 2)
            )
            key = pooled.transpose(1, 2).transpose(0, 1)  # [h+1, kv heads, d]
            value = value.unflatten(1, (-1, groups)).mean(2)
        _set_linear(self.key, key.flatten(1))
        _set_linear(self.value, value.flatten(1))
        return ["query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias"]


def same_projection_score_moments(config):
    """Initial score moments where the key is the query's projection (symmetric; shared, symmetric_init and pairwise
    with S = I at initialisation): a score between two tokens sums d products of channels that share one weight column,
    σ⁴(h² + (d + 1)h); a token's score with itself is |q|²/√d, whose mean √d·hσ² is not 0: each token starts
    attending to itself more than to the others."""
    hidden, variance = config.hidden_size, config.initializer_range**2
    head_size = hidden // config.num_attention_heads
    return {
        "mean": 0.0,
        "variance": variance**2 * (hidden**2 + (head_size + 1) * hidden),
        "self_mean": head_size**0.5 * hidden * variance,
    }


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

    @classmethod
    def initial_score_moments(cls, config):
        return same_projection_score_moments(config)

    def bert_projections(self):
        query = _float64(self.query)
        return _projection_tensors(query, query, _float64(self.value))

    def fit_bert(self, bert, inputs):
        # Q = K makes each head's score form C·Cᵀ: positive semi-definite, rank d. In the calibration metric G (scores
        # x̄·M·ȳᵀ over the tokens' x̄ = [x, 1]) the best such form is the top-d positive eigenpairs of the symmetric
        # part of G^½·M·G^½ (its antisymmetric part is orthogonal to every symmetric form), mapped back by G^-½.
        root, inverse_root = _metric_roots(_augmented(inputs))
        columns = []
        for form in _score_forms(bert, self.num_attention_heads, self.attention_head_size):
            # the key bias's column is free (softmax ignores a query's constant): take the query bias's row, the
            # choice that makes the form most symmetric (exact where BERT's key is its query)
            form[:, -1] = form[-1, :]
            whitened = root @ form @ root
            values, vectors = torch.linalg.eigh((whitened + whitened.T) / 2)
            top = values.argsort(descending=True)[: self.attention_head_size]
            columns.append(inverse_root @ (vectors[:, top] * values[top].clamp(min=0).sqrt()))
        _set_linear(self.query, torch.cat(columns, 1))
        _set_linear(self.value, _projection(bert, "value"))
        return ["query.weight", "query.bias", "value.weight", "value.bias"]

    @classmethod
    def qkv_parameters(cls, config):
        return 2 * (config.hidden_size**2 + config.hidden_size)

    @classmethod
    def projection_macs(cls, config):
        return 2 * config.hidden_size**2


class SymBertPairwiseSelfAttention(SymBertSymmetricSelfAttention):
    """Courtois et al.: score Q·S·Qᵀ with a learned, unconstrained d×d matrix S per head.
    S is folded into the query, (Q·S, Q, V), so fused attention kernels apply.

    The paper's released code (github.com/mcrts/ACL2024-SymmetricAttentionBert, plpi/src/plpi/models/bert/
    modeling_bert.py) creates S as `nn.Parameter(torch.randn(heads, d, d))`: i.i.d. N(0, 1), not scaled by d or
    `initializer_range`, no bias, unconstrained, left alone by BERT's `_init_weights`, with weight decay; it scores
    (Q·S)·Qᵀ/√d with K = Q including the bias. `pairwise_init="normal"` (the default) is that initialisation and
    scale; `"identity"` (this project's, not the paper's) starts the type equal to `symmetric`. N(0, 1) makes the
    initial scores' variance σ⁴(d·h² + 2h), about d times BERT's h²σ⁴ (`initial_score_moments`): BERT-base's
    pairwise attention starts sharp (a score's standard deviation 2.5 against BERT's 0.31)."""

    symmetric_by_construction = False
    train_speed_target = 1.05
    study_variants = ({"pairwise_init": "identity"},)  # the two start d·h/(h + d + 1) times apart in score variance
    formula = (
        "Head i scores `[Q]_i S_i [Q]_iᵀ / √d` with a learned, unconstrained d×d matrix S_i per head and layer (K is "
        "Q, as in `symmetric`, but S_i makes the score asymmetric); values `[V]_i` as in BERT. 2h² + 2h + h²/n "
        "attention parameters per layer."
    )
    open_choices = (
        "S_i is unconstrained (not symmetric), one per head and layer.",
        "S_i is initialised {pairwise_init}; the paper's text leaves this open, its released code draws S_i i.i.d. "
        "from N(0, 1) (`torch.randn`, not rescaled afterwards) and scores (Q·S_i)·Qᵀ/√d.",
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

    @classmethod
    def initial_score_moments(cls, config):
        if config.pairwise_init == "identity":
            return same_projection_score_moments(config)
        # Σ_ab q_a S_ab q'_b: d² terms of variance (hσ²)² (d·h² σ⁴ after the 1/√d), plus the weight columns q and q'
        # share; S's zero mean takes away a token's preference for itself
        hidden, variance = config.hidden_size, config.initializer_range**2
        head_size = hidden // config.num_attention_heads
        return {"mean": 0.0, "variance": variance**2 * (head_size * hidden**2 + 2 * hidden), "self_mean": 0.0}

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

    def fit_bert(self, bert, inputs):
        # keep BERT's Q and fit each S_i so that Q_i·S_i·Q_iᵀ matches Q_i·K_iᵀ over the calibration tokens, up to a
        # constant per query (the key side centred): S_i = K̂_iᵀQ̂_i(Q̂_iᵀQ̂_i)⁻¹ with ^ centred over the tokens, exact
        # when BERT's keys lie in the span of its queries
        augmented = _augmented(inputs)
        queries = (augmented @ _projection(bert, "query")).unflatten(1, (-1, self.attention_head_size)).transpose(0, 1)
        keys = (augmented @ _projection(bert, "key")).unflatten(1, (-1, self.attention_head_size)).transpose(0, 1)
        queries, keys = _centred(queries), _centred(keys)  # [heads, tokens, d]
        gram = queries.transpose(1, 2) @ queries
        pairwise = torch.linalg.lstsq(gram, queries.transpose(1, 2) @ keys).solution.transpose(1, 2)
        _set_linear(self.query, _projection(bert, "query"))
        _set_linear(self.value, _projection(bert, "value"))
        with torch.no_grad():
            self.pairwise.copy_(pairwise)
        return ["query.weight", "query.bias", "pairwise", "value.weight", "value.bias"]

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
    saves_attention_memory = True
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

    @classmethod
    def initial_score_moments(cls, config):
        return same_projection_score_moments(config)  # δ_q = δ_k = 1: the key is the query

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

    def fit_bert(self, bert, inputs):
        # the one projection U is BERT's value projection (δ_v = 1: the values exact); each head's score form
        # U_i·diag(δ_q ⊙ δ_k)·U_iᵀ is then linear in δ = δ_q ⊙ δ_k: least squares over the calibration token pairs,
        # up to a constant per query (the key side centred, ^): ((UᵀU) ∘ (ÛᵀÛ))·δ_i = diag(UᵀQ_i·K̂_iᵀÛ)
        augmented, value = _augmented(inputs), _projection(bert, "value")
        d = self.attention_head_size
        shared = (augmented @ value).unflatten(1, (-1, d)).transpose(0, 1)  # [heads, tokens, d]
        queries = (augmented @ _projection(bert, "query")).unflatten(1, (-1, d)).transpose(0, 1)
        keys = _centred((augmented @ _projection(bert, "key")).unflatten(1, (-1, d)).transpose(0, 1))
        centred = _centred(shared)
        gram = (shared.transpose(1, 2) @ shared) * (centred.transpose(1, 2) @ centred)
        target = ((shared.transpose(1, 2) @ queries) * (centred.transpose(1, 2) @ keys)).sum(2)
        scale = torch.linalg.lstsq(gram, target.unsqueeze(2)).solution.flatten()
        _set_linear(self.shared, value)
        with torch.no_grad():
            self.scale_q.copy_(scale)
            self.scale_k.fill_(1.0)
            self.scale_v.fill_(1.0)
        return ["shared.weight", "shared.bias", "scale_q", "scale_k", "scale_v"]

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
    saves_attention_memory = True
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
        """q̃, k̃, ṽ as one head each, [batch, seq, 1, d], and the embeddings e^Q, e^K, e^V as [1, 1, heads, d] in
        their dtype (under bf16 autocast an fp32 embedding would make an fp32 [batch, seq, heads, d]). Token-major,
        as `split_heads` leaves a projection: the sdpa path stacks a query's heads per token without a copy."""
        projections = tuple(linear(hidden_states).unsqueeze(2) for linear in (self.query, self.key, self.value))
        embeddings = self.head_embeddings.to(projections[0].dtype)[:, None, None, :, :]
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

    def shared_projections(self, bert, inputs):
        """(q̃, k̃ projections [h+1, d] from the best rank-d fit of the heads' mean score form in the calibration
        metric, ṽ's [h+1, d] as the mean of the heads' value projections), the calibration tokens x̄ = [x, 1]."""
        augmented = _augmented(inputs)
        root, inverse_root = _metric_roots(augmented)
        d = self.attention_head_size
        mean_form = _score_forms(bert, self.num_attention_heads, d).mean(0)
        left, singular, right = torch.linalg.svd(root @ mean_form @ root)
        query = inverse_root @ (left[:, :d] * singular[:d].sqrt())
        key = inverse_root @ (right[:d].T * singular[:d].sqrt())
        value = _projection(bert, "value").unflatten(1, (-1, d)).mean(1)
        return query, key, value, augmented

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
        query = (query + query_embedding).transpose(1, 2)
        if self.value_embedding_in_kernel:
            return query, key.transpose(1, 2).expand_as(query), (value + value_embedding).transpose(1, 2)
        return query, key.transpose(1, 2), value.transpose(1, 2)

    def finish_output(self, attn_output):
        if self.value_embedding_in_kernel:
            return attn_output
        return attn_output + self.head_embeddings[2].to(attn_output.dtype).flatten()  # head-major, as the output

    def init_weights(self):
        init.normal_(self.head_embeddings, mean=0.0, std=self.config.initializer_range)

    @classmethod
    def initial_score_moments(cls, config):
        # q̃ + e^Q against k̃: e^Q ~ N(0, σ²) adds σ² to the query's hσ²; e^K shifts each query's scores by one
        # constant, which softmax removes, so the scores that count are the kernel's (q̃ + e^Q)·k̃
        hidden, variance = config.hidden_size, config.initializer_range**2
        return {"mean": 0.0, "variance": hidden * (hidden + 1) * variance**2, "self_mean": 0.0}

    def fit_bert(self, bert, inputs):
        # q̃, k̃ from the heads' mean score form; e_i^Q so that e_i^Q·k̃ takes what is left of head i's scores (a term per
        # key: least squares over the keys of the queries' mean residual); ṽ the heads' mean value, e_i^V the rest of
        # head i's mean value; e^K changes no score (softmax ignores a query's constant): zero
        query, key, value, augmented = self.shared_projections(bert, inputs)
        d = self.attention_head_size
        keys = augmented @ key
        mean_token = augmented.mean(0)
        residual = _score_forms(bert, self.num_attention_heads, d) - query @ key.T  # [heads, h+1, h+1]
        per_key = (augmented @ (residual.transpose(1, 2) @ mean_token).T).T  # [heads, tokens]
        query_embedding = torch.linalg.lstsq(keys.T @ keys, keys.T @ per_key.T).solution.T  # [heads, d]
        head_values = _projection(bert, "value").unflatten(1, (-1, d)).transpose(0, 1)  # [heads, h+1, d]
        value_embedding = mean_token @ (head_values - value)  # [heads, d]
        for linear, projection in zip((self.query, self.key, self.value), (query, key, value)):
            _set_linear(linear, projection)
        with torch.no_grad():
            self.head_embeddings.copy_(
                torch.stack([query_embedding, torch.zeros_like(query_embedding), value_embedding])
            )
        return ["query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias", "head_embeddings"]

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
        query = query * (query_embedding * key_embedding)
        return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)

    def finish_output(self, attn_output):
        return attn_output * self.head_embeddings[2].to(attn_output.dtype).flatten()

    def init_weights(self):
        init.normal_(self.head_embeddings, mean=1.0, std=self.config.initializer_range)

    def fit_bert(self, bert, inputs):
        # q̃, k̃ from the heads' mean score form; head i's form q̃·diag(e_i^Q ⊙ e_i^K)·k̃ᵀ is linear in e_i^Q ⊙ e_i^K:
        # least squares over the calibration token pairs (e^K = 1); ṽ the heads' mean value, e_i^V its per-channel
        # least-squares gain to head i's value
        query, key, value, augmented = self.shared_projections(bert, inputs)
        d = self.attention_head_size
        queries, keys, values = augmented @ query, _centred(augmented @ key), augmented @ value
        bert_queries = (augmented @ _projection(bert, "query")).unflatten(1, (-1, d)).transpose(0, 1)
        bert_keys = _centred((augmented @ _projection(bert, "key")).unflatten(1, (-1, d)).transpose(0, 1))
        gram = (queries.T @ queries) * (keys.T @ keys)  # the key side centred: up to a constant per query
        target = ((queries.T @ bert_queries) * (keys.T @ bert_keys)).sum(2)  # diag(Q̃ᵀQ_i·K_iᵀK̃) [heads, d]
        query_embedding = torch.linalg.lstsq(gram, target.T).solution.T
        bert_values = (augmented @ _projection(bert, "value")).unflatten(1, (-1, d)).transpose(0, 1)
        value_embedding = (bert_values * values).sum(1) / (values * values).sum(0).clamp(min=1e-30)
        for linear, projection in zip((self.query, self.key, self.value), (query, key, value)):
            _set_linear(linear, projection)
        with torch.no_grad():
            self.head_embeddings.copy_(
                torch.stack([query_embedding, torch.ones_like(query_embedding), value_embedding])
            )
        return ["query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias", "head_embeddings"]

    @classmethod
    def initial_score_moments(cls, config):
        # q̃⊙e^Q against k̃⊙e^K with e ~ N(1, σ²): each factor's second moment 1 + σ²
        hidden, variance = config.hidden_size, config.initializer_range**2
        return {"mean": 0.0, "variance": (hidden * variance * (1 + variance)) ** 2, "self_mean": 0.0}

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

    @classmethod
    def initial_score_moments(cls, config):
        return same_projection_score_moments(config)


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

    @classmethod
    def initial_score_moments(cls, config):
        # the query is the input itself (unit variance), so one factor σ² fewer than the other types: c²·hσ²
        return {
            "mean": 0.0,
            "variance": cls.score_scale(config) ** 2 * config.hidden_size * config.initializer_range**2,
            "self_mean": 0.0,
        }

    def project(self, hidden_states):
        return (
            self.split_heads(hidden_states),
            self.split_heads(self.key(hidden_states)),
            self.split_heads(self.value(hidden_states)),
        )

    def fit_bert(self, bert, inputs):
        # head i's query is its own d input channels X_i: regress BERT's query on them, Q_i ≈ X_i·R_i (least squares),
        # so that Q_i·K_iᵀ ≈ X_i·(K_i·R_iᵀ)ᵀ: the key projection B_i·R_iᵀ, over this type's score scale; exact when
        # BERT's query of a head is linear in that head's channels
        d, augmented = self.attention_head_size, _augmented(inputs)
        channels = inputs.unflatten(1, (-1, d)).transpose(0, 1)  # [heads, tokens, d]
        queries = (augmented @ _projection(bert, "query")).unflatten(1, (-1, d)).transpose(0, 1)
        regression = torch.linalg.lstsq(channels.transpose(1, 2) @ channels, channels.transpose(1, 2) @ queries)
        key = _projection(bert, "key").unflatten(1, (-1, d)).transpose(0, 1)  # [heads, h+1, d]
        key = key @ regression.solution.transpose(1, 2) / self.score_scale(self.config)  # B_i·R_iᵀ
        _set_linear(self.key, key.transpose(0, 1).flatten(1))
        _set_linear(self.value, _projection(bert, "value"))
        return ["key.weight", "key.bias", "value.weight", "value.bias"]

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


def _projection(bert, name, key_bias=True):
    """BERT's `name` projection of one layer as one matrix [h+1, out] on x̄ = [x, 1] (weight rows, then the bias); with
    key_bias=False a zero bias (a key's bias only adds a constant to each query's scores)."""
    weight, bias = bert[f"{name}.weight"], bert[f"{name}.bias"]
    return torch.cat([weight.T, (bias if key_bias else torch.zeros_like(bias))[None]], 0)


def _score_forms(bert, heads, head_size):
    """Each head's score form M_i = A_i·B_iᵀ [heads, h+1, h+1] on x̄ = [x, 1], the key's bias left out."""
    query = _projection(bert, "query").unflatten(1, (heads, head_size)).transpose(0, 1)
    key = _projection(bert, "key", key_bias=False).unflatten(1, (heads, head_size)).transpose(0, 1)
    return query @ key.transpose(1, 2)


def _centred(tokens):
    """`tokens` [..., tokens, channels] less their mean over the tokens."""
    return tokens - tokens.mean(-2, keepdim=True)


def _augmented(inputs):
    return torch.cat([inputs, inputs.new_ones(len(inputs), 1)], 1)


def _metric_roots(augmented):
    """G^½ and G^-½ of the calibration tokens' second moment G = x̄ᵀx̄/N, plus a ridge of 10⁻⁶ of its mean eigenvalue:
    directions the calibration tokens barely span (a token never seen, LayerNorm's zero-sum direction) keep a small
    weight, so a fit that can be exact everywhere is, rather than zero there."""
    values, vectors = torch.linalg.eigh(augmented.T @ augmented / len(augmented))
    values = values.clamp(min=0) + 1e-6 * values.clamp(min=0).mean()
    return (vectors * values.sqrt()) @ vectors.T, (vectors * values.rsqrt()) @ vectors.T


def _set_linear(linear, projection):
    """Set `linear` to the projection [h+1, out] (weight rows, then the bias), in the layer's dtype."""
    with torch.no_grad():
        linear.weight.copy_(projection[:-1].T)
        linear.bias.copy_(projection[-1])


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
