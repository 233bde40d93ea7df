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
"""SymBERT configuration: BERT's configuration plus the choice of self-attention variant.

This file is copied next to `modeling_symbert.py` into every saved model folder (with `attention_symbert.py`, whose
registry of attention types it checks against), so it may import only torch/transformers and that flat sibling,
never the `symbert` package.
"""

import math
import numbers

from transformers.activations import ACT2FN

try:  # transformers >= 5
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as PreTrainedConfig

# A live view of the registry: types registered later are in it. attention_symbert imports neither this file nor
# modeling_symbert, so there is no import cycle (which transformers 4.x's remote-code loader would follow forever).
from .attention_symbert import ATTENTION_TYPES

PAIRWISE_INITS = ("normal", "identity")
NO_QUERY_SCALINGS = ("paper", "standard")
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")

# (layers, heads, hidden, FFN). tiny and mini are Google's BERT-Tiny/Mini shapes; small and base are the paper's.
SIZE_PRESETS = {
    "tiny": dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=128, intermediate_size=512),
    "mini": dict(num_hidden_layers=4, num_attention_heads=4, hidden_size=256, intermediate_size=1024),
    "small": dict(num_hidden_layers=4, num_attention_heads=8, hidden_size=512, intermediate_size=2048),
    "base": dict(num_hidden_layers=12, num_attention_heads=12, hidden_size=768, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, num_attention_heads=16, hidden_size=1024, intermediate_size=4096),
}

# Written into every config.json so that any Auto class can load any saved head with trust_remote_code=True
# (e.g. AutoModelForSequenceClassification on a pre-trained MLM checkpoint).
AUTO_MAP = {
    "AutoConfig": "configuration_symbert.SymBertConfig",
    "AutoModel": "modeling_symbert.SymBertModel",
    "AutoModelForMaskedLM": "modeling_symbert.SymBertForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_symbert.SymBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_symbert.SymBertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_symbert.SymBertForQuestionAnswering",
    "AutoModelForMultipleChoice": "modeling_symbert.SymBertForMultipleChoice",
}


# trf-ignore: TRF057 (hand-written docstring: transformers 4.x's auto_docstring refuses configuration classes)
class SymBertConfig(PreTrainedConfig):  # trf-ignore: TRF010 (no @strict: transformers 4.x configs are not dataclasses)
    r"""
    Configuration of a SymBERT model: every [`BertConfig`] field with BERT's defaults (bert-base-uncased), plus

    attention_type (`str`, defaults to `"original"`):
        The self-attention compatibility function: a type registered in `attention_symbert` (`ATTENTION_TYPES`; each
        is one `SymBertSelfAttention` subclass, whose docstring says what it computes).
    num_key_value_heads (`int`, *optional*):
        Key/value heads of the types that share them between groups of query heads (`gqa`); a divisor of
        `num_attention_heads` (1: multi-query attention). `None`: the type's default.
    pairwise_init (`str`, defaults to `"normal"`):
        Initialisation of the pairwise matrices S: `normal` (i.i.d. N(0, 1), as in the paper) or `identity`
        (then `pairwise` starts out equal to `symmetric`).
    no_query_scaling (`str`, defaults to `"paper"`):
        Score scaling of `no_query` attention: `paper` (1/(2√d), Karbevski & Mijoski's adjusted scaling, half of
        BERT's) or `standard` (BERT's 1/√d).
    sparse_prediction (`bool`, defaults to `False`):
        For `SymBertForMaskedLM` called with `labels`: compute the MLM head only at the labelled positions, so
        `logits` is [n_labelled, vocab_size] instead of [batch, seq, vocab_size]. The loss is the same; pre-training
        is faster (the decoder over the vocabulary is most of a small model's step). Without labels, full logits.
    max_predictions_per_seq (`int`, *optional*):
        With `sparse_prediction`: run the MLM head on exactly batch × `max_predictions_per_seq` positions (the
        labelled ones, padded with ignored ones), so that a compiled training step sees the same shapes in every
        batch. The loss is the same; a batch with more labelled positions is refused (the pre-training collator caps
        each batch at this many). `None`: exactly the labelled positions, whose number varies from batch to batch.
    pad_vocab_size_multiple (`int`, *optional*):
        Round the word embeddings and the MLM decoder up to a multiple of this many rows (`padded_vocab_size`), for
        models trained from scratch: GPU matrix-product kernels need aligned sizes (BERT's 30,522 rows run the MLM
        decoder on slower kernels). The padding rows are never predicted (their logits are -inf inside the model,
        and `logits` has `vocab_size` columns) and ids past `vocab_size` are refused. `None`: no padding, as every
        model converted from BERT.

    Use [`SymBertConfig.from_preset`] for the named sizes in `SIZE_PRESETS`.
    """

    model_type = "symbert"

    def __init__(
        self,
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        pad_token_id=0,
        use_cache=True,
        classifier_dropout=None,
        is_decoder=False,
        add_cross_attention=False,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        attention_type="original",
        num_key_value_heads=None,
        pairwise_init="normal",
        no_query_scaling="paper",
        sparse_prediction=False,
        max_predictions_per_seq=None,
        pad_vocab_size_multiple=None,
        **kwargs,
    ):
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(
            pad_token_id=pad_token_id, is_decoder=is_decoder, add_cross_attention=add_cross_attention, **kwargs
        )
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.tie_word_embeddings = tie_word_embeddings
        self.attention_type = attention_type
        self.num_key_value_heads = num_key_value_heads
        self.pairwise_init = pairwise_init
        self.no_query_scaling = no_query_scaling
        self.sparse_prediction = sparse_prediction
        self.max_predictions_per_seq = max_predictions_per_seq
        self.pad_vocab_size_multiple = pad_vocab_size_multiple
        self.validate()

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the word embeddings and the MLM decoder: `vocab_size` rounded up to `pad_vocab_size_multiple`."""
        multiple = self.pad_vocab_size_multiple or 1
        return -(-self.vocab_size // multiple) * multiple

    @classmethod
    def from_preset(cls, size: str, **overrides) -> "SymBertConfig":
        """A config of the named size (`tiny`, `mini`, `small`, `base`, `large`); `overrides` set any other field."""
        if size not in SIZE_PRESETS:
            raise ValueError(f"Unknown SymBERT size preset {size!r}; allowed: {', '.join(SIZE_PRESETS)}.")
        return cls(**{**SIZE_PRESETS[size], **overrides})

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """Load a saved config.json (with `from_pretrained` overrides in `kwargs`), checking the result.

        A saved SymBERT config must name its attention type: without it the weights would load into `original`
        modules. A BERT config (as read by `from_bert`) has none and gets the default, or the one in `kwargs`."""
        if config_dict.get("model_type") == cls.model_type and "attention_type" not in {**config_dict, **kwargs}:
            raise ValueError(
                "attention_type is missing from the saved config.json; add it, one of: "
                f"{', '.join(ATTENTION_TYPES)} (the type the weights were trained with)."
            )
        loaded = super().from_dict(config_dict, **kwargs)
        # from_pretrained's overrides are set after __init__, so check the final config here
        (loaded[0] if isinstance(loaded, tuple) else loaded).validate()
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.validate()  # before anything is written: a config changed after construction may be invalid
        return super().save_pretrained(save_directory, *args, **kwargs)

    def validate(self):
        """Raise ValueError naming the first invalid field, its value and what is allowed.

        Runs at construction, on `from_pretrained` overrides, on load and before saving. transformers 5 also calls
        it from `save_pretrained` (its strict-dataclass hook); its own checks of the common fields run as well."""
        enums = {
            "attention_type": ATTENTION_TYPES,
            "pairwise_init": PAIRWISE_INITS,
            "no_query_scaling": NO_QUERY_SCALINGS,
            "problem_type": PROBLEM_TYPES,
        }
        for name, allowed in enums.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not supported; allowed: {', '.join(map(str, allowed))}.")
        if isinstance(self.hidden_act, str) and self.hidden_act not in ACT2FN:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not supported; allowed: {', '.join(sorted(ACT2FN))}.")
        for name in ("sparse_prediction", "use_cache", "tie_word_embeddings", "is_decoder", "add_cross_attention"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{name}={value!r} is invalid; allowed: True, False.")
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not _is_number(value, numbers.Integral) or value <= 0:
                raise ValueError(f"{name}={value!r} is invalid; it must be a positive integer.")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}; "
                "hidden_size must be a multiple of the number of heads."
            )
        kv_heads = self.num_key_value_heads
        if kv_heads is not None and (
            not _is_number(kv_heads, numbers.Integral) or kv_heads <= 0 or self.num_attention_heads % kv_heads
        ):
            raise ValueError(
                f"num_key_value_heads={kv_heads!r} is invalid; it must be None or a positive divisor of "
                f"num_attention_heads={self.num_attention_heads}."
            )
        for name in ("max_predictions_per_seq", "pad_vocab_size_multiple"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value, numbers.Integral) or value <= 0):
                raise ValueError(f"{name}={value!r} is invalid; it must be None or a positive integer.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is None and name == "classifier_dropout":
                continue
            if not _is_number(value) or not 0 <= value < 1:  # also refuses nan
                raise ValueError(f"{name}={value!r} is invalid; it must be a probability in [0, 1).")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not _is_number(value) or not 0 < value < math.inf:  # also refuses nan
                raise ValueError(f"{name}={value!r} is invalid; it must be a finite positive number.")
        for name, value in vars(self).items():
            if name.endswith("_token_id") and value is not None:
                ids = value if isinstance(value, (list, tuple)) else [value]  # eos_token_id may be a list
                if not all(_is_number(i, numbers.Integral) and 0 <= i < self.vocab_size for i in ids):
                    raise ValueError(
                        f"{name}={value!r} is invalid; it must be None or a token id in [0, {self.vocab_size - 1}] "
                        f"(vocab_size={self.vocab_size})."
                    )
        if self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"is_decoder={self.is_decoder!r}, add_cross_attention={self.add_cross_attention!r}: SymBERT is an "
                "encoder; both must be False."
            )
        if hasattr(super(), "validate"):  # transformers >= 5: the checks of the common fields
            super().validate()


def _is_number(value, kind=numbers.Real):
    return isinstance(value, kind) and not isinstance(value, bool)


__all__ = ["NO_QUERY_SCALINGS", "PAIRWISE_INITS", "SIZE_PRESETS", "SymBertConfig"]
