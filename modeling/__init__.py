"""SymBERT: BERT encoders with symmetric, pairwise, shared-weight and multi-head-embedding self-attention.

Importing this package registers the SymBERT classes with transformers' Auto classes, so that
`AutoModelForMaskedLM.from_pretrained(folder)` works without `trust_remote_code`; and marks them for
`register_for_auto_class`, so that `save_pretrained` writes the model code next to the weights.
"""

# isort: off
from . import interrupt  # noqa: F401  (first: a Ctrl-C while the rest imports is one line, exit status 130)

# isort: on
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import modeling_symbert
from .attention_symbert import (
    ATTENTION_TYPES,
    SymBertSelfAttention,
    attention_class,
    register_attention,
    unregister_attention,
)
from .configuration_symbert import PAIRWISE_INITS, SIZE_PRESETS, SymBertConfig
from .modeling_symbert import (
    SymBertForMaskedLM,
    SymBertForMultipleChoice,
    SymBertForQuestionAnswering,
    SymBertForSequenceClassification,
    SymBertForTokenClassification,
    SymBertModel,
    SymBertPreTrainedModel,  # noqa: F401  (exported through modeling_symbert.__all__)
)

# The config's default: BERT's own self-attention, the type every other is compared with and a plain BERT's type
BERT_ATTENTION_TYPE = SymBertConfig().attention_type

AUTO_CLASSES = {
    AutoModel: SymBertModel,
    AutoModelForMaskedLM: SymBertForMaskedLM,
    AutoModelForSequenceClassification: SymBertForSequenceClassification,
    AutoModelForTokenClassification: SymBertForTokenClassification,
    AutoModelForQuestionAnswering: SymBertForQuestionAnswering,
    AutoModelForMultipleChoice: SymBertForMultipleChoice,
}

AutoConfig.register(SymBertConfig.model_type, SymBertConfig, exist_ok=True)
SymBertConfig.register_for_auto_class()
for auto_class, model_class in AUTO_CLASSES.items():
    auto_class.register(SymBertConfig, model_class, exist_ok=True)
    model_class.register_for_auto_class(auto_class.__name__)

__all__ = [  # the model classes as modeling_symbert.py lists them, and what configures and extends them
    *modeling_symbert.__all__,
    "ATTENTION_TYPES",
    "BERT_ATTENTION_TYPE",
    "PAIRWISE_INITS",
    "SIZE_PRESETS",
    "SymBertConfig",
    "SymBertSelfAttention",
    "attention_class",
    "register_attention",
    "unregister_attention",
]
