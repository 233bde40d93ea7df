"""`symmetric` through `pairwise`: a pairwise SymBERT (e.g. a transferred one) made into symmetric by keeping, per
head, the positive semi-definite part of the symmetric part of its S, the closest form Q = K can hold. Measures
whether going through pairwise first gives symmetric's transfer a better start than symbert-convert's own fit.

    python benchmarks/real/through_pairwise.py PAIRWISE OUTPUT
    python benchmarks/real/through_pairwise.py outputs/transfer-round8/transfer-pairwise outputs/through-pairwise

Head i of pairwise scores q·S_i·q'ᵀ. With (S_i + S_iᵀ)/2 = U·Λ·Uᵀ and M = U·max(Λ, 0)^½, the symmetric head with query
weight Mᵀ·W_i and bias Mᵀ·b_i scores q·M·Mᵀ·q'ᵀ: exact where S_i is symmetric positive semi-definite. Everything
else is copied. Prints, per layer, the share of ||S_i||² that this part keeps. OUTPUT (a SymBertModel folder with
the source's tokenizer) appears only when complete; an existing OUTPUT is kept.
"""

import argparse
from pathlib import Path

import torch
from untrained import write_model  # benchmarks/real/untrained.py

from symbert import SymBertConfig, SymBertModel
from symbert.cli import UserError, run_command
from symbert.tools import checked_config


def symmetric_queries(weight, bias, pairwise):
    """The symmetric heads' query weight and bias for pairwise heads of query (`weight`, `bias`) and S `pairwise`
    [heads, d, d], and each head's share of ||S||² kept."""
    heads, size = pairwise.shape[0], pairwise.shape[1]
    weight, bias = weight.double().unflatten(0, (heads, size)), bias.double().unflatten(0, (heads, size))
    values, vectors = torch.linalg.eigh((pairwise.double() + pairwise.double().transpose(1, 2)) / 2)
    roots = vectors * values.clamp(min=0).sqrt().unsqueeze(1)  # M_i = U_i·max(Λ_i, 0)^½
    kept = values.clamp(min=0).square().sum(1) / pairwise.double().square().sum((1, 2))
    return (roots.transpose(1, 2) @ weight).flatten(0, 1), (roots.transpose(1, 2) @ bias.unsqueeze(2)).flatten(), kept


def through_pairwise(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairwise", type=Path, help="a SymBERT folder of attention_type pairwise")
    parser.add_argument("output", type=Path, help="the symmetric folder to write")
    args = parser.parse_args(argv)
    config = checked_config(str(args.pairwise), "", (SymBertConfig,), ", not a SymBERT one")
    if config.attention_type != "pairwise":
        raise UserError(f"{str(args.pairwise)!r} holds attention_type {config.attention_type!r}; pairwise is needed.")
    if (args.output / "config.json").is_file():
        print(f"{args.output} exists: kept")
        return
    try:
        source = SymBertModel.from_pretrained(args.pairwise).float().eval()
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load {str(args.pairwise)!r}: {' '.join(str(error).split())}") from error
    state = source.state_dict()
    config.attention_type = "symmetric"
    model = SymBertModel(config).eval()
    converted = {name: state[name] for name in model.state_dict()}
    for index in range(config.num_hidden_layers):
        prefix = f"encoder.layer.{index}.attention.self."
        weight, bias, kept = symmetric_queries(
            state[prefix + "query.weight"], state[prefix + "query.bias"], state[prefix + "pairwise"]
        )
        converted[prefix + "query.weight"], converted[prefix + "query.bias"] = weight.float(), bias.float()
        print(f"layer {index}: share of ||S||² kept per head {', '.join(f'{share:.2f}' for share in kept)}")
    model.load_state_dict(converted)
    write_model(model, args.pairwise, args.output, "the symmetric model")
    print(f"symmetric through pairwise: {args.output}")


def main(argv=None):
    run_command(through_pairwise, argv)


if __name__ == "__main__":
    main()
