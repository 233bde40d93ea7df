"""Print the parameter count of every attention variant at every size (the paper's Table 2, extended), as a
Markdown table. Models are built on the meta device: no memory used, no download.

    symbert-params
    symbert-params --sizes small,base
"""

import torch

from ..attention_symbert import ATTENTION_TYPES
from ..cli import UserError, command_parser, run_command
from ..configuration_symbert import SIZE_PRESETS, SymBertConfig
from ..modeling_symbert import SymBertForMaskedLM


def count_parameters(size: str, attention_type: str) -> int:
    """SymBertForMaskedLM's parameter count (tied decoder counted once), built on the meta device: no memory used."""
    with torch.device("meta"):
        return SymBertForMaskedLM(SymBertConfig.from_preset(size, attention_type=attention_type)).num_parameters()


def run(argv: list[str]) -> None:
    parser = command_parser(__doc__)
    parser.add_argument(
        "--sizes", default="tiny,mini,small,base", help=f"comma-separated, from {', '.join(SIZE_PRESETS)}"
    )
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")
    for size in sizes:
        if size not in SIZE_PRESETS:
            raise UserError(f"unknown size {size!r} in --sizes; allowed: {', '.join(SIZE_PRESETS)}")

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


def main(argv: list[str] | None = None) -> None:
    return run_command(run, argv)


if __name__ == "__main__":
    main()
