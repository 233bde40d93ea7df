"""The "from scratch" baseline of the transfer study: an attention type in its teacher's shape, with its teacher's
tokenizer, at random initialisation (no pre-training, no teacher), for symbert-glue to fine-tune beside the
transferred models. What a transfer's score owes to the teacher is its gap to this one.

    python benchmarks/real/untrained.py BERT OUTPUT --attention_type T [--seed 0]
    python benchmarks/real/untrained.py ~/.cache/symbert-real/all-MiniLM-L6-v2 outputs/untrained-shared \
        --attention_type shared

OUTPUT (a SymBertModel folder: config, weights, code, the teacher's tokenizer) appears only when complete; an
existing OUTPUT is kept as it is, so that a study's rerun skips it.
"""

import argparse
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer

from symbert import ATTENTION_TYPES, SymBertConfig, SymBertModel
from symbert.cli import UserError, run_command
from symbert.tools import written_folder

# the teacher's shape: what makes the untrained model the transferred one's twin
SHAPE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "type_vocab_size", "hidden_act", "layer_norm_eps", "pad_token_id")  # fmt: skip


def untrained(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bert", type=Path, help="the teacher's folder (config.json, tokenizer)")
    parser.add_argument("output", type=Path, help="the folder to write")
    parser.add_argument("--attention_type", required=True, choices=ATTENTION_TYPES)
    parser.add_argument("--seed", type=int, default=0, help="of the initialisation")
    args = parser.parse_args(argv)
    if (args.output / "config.json").is_file():
        print(f"{args.output} exists: kept")
        return
    try:
        teacher = AutoConfig.from_pretrained(args.bert)
    except (OSError, ValueError) as error:
        raise UserError(f"Cannot read the teacher's config in {str(args.bert)!r}: {' '.join(str(error).split())}")
    config = SymBertConfig(attention_type=args.attention_type, **{name: getattr(teacher, name) for name in SHAPE})
    torch.manual_seed(args.seed)
    model = SymBertModel(config).eval()
    write_model(model, args.bert, args.output, "the untrained model")
    print(f"{args.attention_type}, untrained, in {args.bert.name}'s shape: {args.output}")


def write_model(model, tokenizer_source: Path, output: Path, what: str) -> None:
    """OUTPUT: `model` with the tokenizer of `tokenizer_source`, under its name only when complete."""
    with written_folder(output, ".tmp", what, "writing") as staging:
        model.save_pretrained(staging)
        AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(staging)


def main(argv=None):
    run_command(untrained, argv)


if __name__ == "__main__":
    main()
