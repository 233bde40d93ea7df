"""The initial score scale of every attention type, from each class's `initial_score_moments`: a Markdown table of
the standard deviation of a score between two tokens at initialisation (and, where the key is the query, a token's
mean score with itself), at the shapes the studies and recipes use. No training: the numbers are the formulas
(tests/modeling/test_attention.py checks each against the scores its module computes).

A second table measures what softmax makes of those scores at initialisation: each type's first attention layer,
freshly initialised (seed 0), on LayerNorm'd Gaussian inputs of the shape's block length, gives per query the
effective number of keys it attends to (the exponential of its weights' entropy; all of them for uniform weights)
and the weight it puts on its own token.

    python benchmarks/score_scale.py
"""

import copy

import torch
from report import markdown_table  # benchmarks/report.py

from symbert import BERT_ATTENTION_TYPE, SymBertConfig, SymBertModel
from symbert.attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES
from symbert.cli import command_parser, run_command
from symbert.configuration_symbert import NO_QUERY_SCALINGS, PAIRWISE_INITS

# (column title, size preset, config overrides): cpu-demo's shape, the same model with the paper's head size, and the
# paper's small and base models with BERT's initialisation
SHAPES = (
    ("cpu-demo: h 128, d 16, σ 0.06", "tiny", {"num_attention_heads": 8, "initializer_range": 0.06}),
    ("cpu-demo at d 64: h 128, 2 heads, σ 0.06", "tiny", {"num_attention_heads": 2, "initializer_range": 0.06}),
    ("paper-small: h 512, d 64, σ 0.02", "small", {}),
    ("paper-base: h 768, d 64, σ 0.02", "base", {}),
)
# each shape's block length (the recipes' max_seq_length) and how many blocks the measured table averages over
BLOCKS = ((32, 64), (32, 64), (512, 1), (512, 1))
# the config's choices of how a type starts or scales its scores: a type gets a row for each other value of those it
# reads, i.e. those that change its initial_score_moments
SCORE_CHOICES = {"pairwise_init": PAIRWISE_INITS, "no_query_scaling": NO_QUERY_SCALINGS}


def type_settings(attention_type: str) -> list[dict]:
    """The type's default settings ({}), then each other value of a SCORE_CHOICES field that changes its scores."""
    moments = SYMBERT_SELF_ATTENTION_CLASSES[attention_type].initial_score_moments
    default = SymBertConfig(attention_type=attention_type)
    settings = [{}]
    for name, values in SCORE_CHOICES.items():
        for value in values:
            if value != getattr(default, name) and moments(
                SymBertConfig(attention_type=attention_type, **{name: value})
            ) != moments(default):
                settings.append({name: value})
    return settings


def settings() -> list[tuple[str, str, dict]]:
    """(row name, attention type, config settings) for every type and the settings that change its scores."""
    return [
        (f"`{attention_type}`" + "".join(f", {key}={value}" for key, value in setting.items()), attention_type, setting)
        for attention_type in SYMBERT_SELF_ATTENTION_CLASSES
        for setting in type_settings(attention_type)
    ]


def shape_configs(attention_type: str, setting: dict) -> list[SymBertConfig]:
    """The type's config at each of SHAPES."""
    return [
        SymBertConfig.from_preset(size, attention_type=attention_type, **overrides, **setting)
        for _, size, overrides in SHAPES
    ]


def rows() -> list[tuple[str, list[dict]]]:
    return [
        (name, [SYMBERT_SELF_ATTENTION_CLASSES[kind].initial_score_moments(c) for c in shape_configs(kind, setting)])
        for name, kind, setting in settings()
    ]


@torch.no_grad()
def attention_at_init(config: SymBertConfig, tokens: int, blocks: int) -> dict:
    """The first layer's attention weights at initialisation on LayerNorm'd N(0, 1) inputs: per query, the effective
    number of keys (exp of the entropy) and the weight on its own token, each averaged over queries and heads."""
    torch.manual_seed(0)
    # one layer, and a small vocabulary and feed-forward: they do not touch the attention and cost most of the time
    config = copy.deepcopy(config)
    config.num_hidden_layers, config.vocab_size, config.intermediate_size = 1, 8, 8
    config.max_position_embeddings = tokens
    attention = SymBertModel(config).encoder.layer[0].attention.self
    inputs = torch.nn.functional.layer_norm(torch.randn(blocks, tokens, config.hidden_size), (config.hidden_size,))
    query, key, _ = attention.project(inputs)
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # gqa and mhe share key heads
    weights = (query @ key.transpose(-1, -2) * attention.scaling).softmax(-1)
    entropy = -torch.special.xlogy(weights, weights).sum(-1)
    return {
        "effective_keys": entropy.exp().mean().item(),
        "self_weight": weights.diagonal(dim1=-2, dim2=-1).mean().item(),
    }


def measured_rows() -> list[tuple[str, list[dict]]]:
    return [
        (name, [attention_at_init(c, *block) for c, block in zip(shape_configs(kind, setting), BLOCKS)])
        for name, kind, setting in settings()
    ]


def cell(moments: dict, reference: dict) -> str:
    spread = moments["variance"] ** 0.5
    text = f"{spread:.3g} ({spread / reference['variance'] ** 0.5:.2g}×)"
    return text + (f"; self {moments['self_mean']:.3g}" if moments["self_mean"] else "")


def print_table(argv: list[str]) -> None:
    command_parser(__doc__.split("\n\n")[0]).parse_args(argv)  # no options: --help, and a one-line error for any
    table = rows()
    reference = next(moments for name, moments in table if name == f"`{BERT_ATTENTION_TYPE}`")
    shape_rows = [[name, *(cell(m, r) for m, r in zip(moments, reference))] for name, moments in table]
    print(markdown_table(["type", *(title for title, _, _ in SHAPES)], shape_rows))
    print()
    titles = [f"{title.split(':')[0]}, {tokens} tokens" for (title, _, _), (tokens, _) in zip(SHAPES, BLOCKS)]
    print("Attention at initialisation, measured: effective keys per query of the block; weight on its own token")
    print()
    measured = [[name, *(f"{m['effective_keys']:.1f}; self {m['self_weight']:.2f}" for m in cells)]
                for name, cells in measured_rows()]  # fmt: skip
    print(markdown_table(["type", *titles], measured))


def main(argv: list[str] | None = None) -> None:
    run_command(print_table, argv)


if __name__ == "__main__":
    main()
