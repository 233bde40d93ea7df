"""The initial score scale of every attention type, from each class's `initial_score_moments`: a Markdown table of
the standard deviation of a score between two tokens at initialisation (and, where the key is the query, a token's
mean score with itself), at the shapes the studies and recipes use. No training: the numbers are the formulas
(tests/modeling/test_attention.py checks each against the scores its module computes).

    python benchmarks/score_scale.py
"""

from symbert import SymBertConfig
from symbert.attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES
from symbert.cli import command_parser, run_command

# (column title, size preset, config overrides): cpu-demo's shape, the same model with the paper's head size, and the
# paper's small and base models with BERT's initialisation
SHAPES = (
    ("cpu-demo: h 128, d 16, σ 0.06", "tiny", {"num_attention_heads": 8, "initializer_range": 0.06}),
    ("cpu-demo at d 64: h 128, 2 heads, σ 0.06", "tiny", {"num_attention_heads": 2, "initializer_range": 0.06}),
    ("paper-small: h 512, d 64, σ 0.02", "small", {}),
    ("paper-base: h 768, d 64, σ 0.02", "base", {}),
)
SETTINGS = {"pairwise": ({}, {"pairwise_init": "identity"}), "no_query": ({}, {"no_query_scaling": "standard"})}


def rows() -> list[tuple[str, list[dict]]]:
    table = []
    for attention_type, attention in SYMBERT_SELF_ATTENTION_CLASSES.items():
        for setting in SETTINGS.get(attention_type, ({},)):
            name = f"`{attention_type}`" + "".join(f", {key}={value}" for key, value in setting.items())
            configs = [
                SymBertConfig.from_preset(size, attention_type=attention_type, **overrides, **setting)
                for _, size, overrides in SHAPES
            ]
            table.append((name, [attention.initial_score_moments(config) for config in configs]))
    return table


def cell(moments: dict, reference: dict) -> str:
    spread = moments["variance"] ** 0.5
    text = f"{spread:.3g} ({spread / reference['variance'] ** 0.5:.2g}×)"
    return text + (f"; self {moments['self_mean']:.3g}" if moments["self_mean"] else "")


def print_table(argv: list[str]) -> None:
    command_parser(__doc__.split("\n\n")[0]).parse_args(argv)  # no options: --help, and a one-line error for any
    table = rows()
    reference = next(moments for name, moments in table if name == "`original`")
    print("| type | " + " | ".join(title for title, _, _ in SHAPES) + " |")
    print("|---|" + "---:|" * len(SHAPES))
    for name, moments in table:
        print(f"| {name} | " + " | ".join(cell(m, r) for m, r in zip(moments, reference)) + " |")


def main(argv: list[str] | None = None) -> None:
    run_command(print_table, argv)


if __name__ == "__main__":
    main()
