"""The ablation of the fit's output scale: `symbert-transfer` (the same arguments) with each layer's fit compared
with the copy and kept at α = 1, as the conversion did before the output scale (modeling/conversion_symbert.py,
`shrunk_error`). Everything else, the stages included, is the command's own.

    python benchmarks/real/transfer_without_output_scale.py BERT OUTPUT --attention_type symmetric --steps 543 \
        --train_files DATA/general_english/train.txt --seed 2
"""

import sys

from symbert import conversion_symbert
from symbert.training import transfer


def unscaled(module, bert_attention, inputs, bert_inputs):
    """`shrunk_error` at α = 1: the fit's own error."""
    return 1.0, conversion_symbert.attention_error(module, bert_attention, inputs, bert_inputs)


if __name__ == "__main__":
    conversion_symbert.shrunk_error = unscaled
    transfer.main(sys.argv[1:])
