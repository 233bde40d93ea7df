"""Print the parameter count of every attention variant at every size (the paper's Table 2, extended)."""

import argparse

import torch

from .configuration_symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig
from .modeling_symbert import SymBertForMaskedLM


def count_parameters(size, attention_type):
    """SymBertForMaskedLM's parameter count (tied decoder counted once), built on the meta device: no memory used."""
    with torch.device("meta"):
        return SymBertForMaskedLM(SymBertConfig.from_preset(size, attention_type=attention_type)).num_parameters()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="tiny,mini,small,base", help=f"comma-separated, from {', '.join(SIZE_PRESETS)}")
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")
    for size in sizes:
        if size not in SIZE_PRESETS:
            parser.error(f"unknown size {size!r}; allowed: {', '.join(SIZE_PRESETS)}")

    counts = {(size, kind): count_parameters(size, kind) for size in sizes for kind in ATTENTION_TYPES}
    print("SymBertForMaskedLM parameters (vocab 30522, 512 positions; change vs original in brackets)\n")
    print("| attention_type | " + " | ".join(sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for kind in ATTENTION_TYPES:
        cells = []
        for size in sizes:
            count, reference = counts[size, kind], counts[size, "original"]
            change = "" if kind == "original" else f" ({100 * (count - reference) / reference:+.1f}%)"
            cells.append(f"{count:,}{change}")
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
