"""How symmetric is each attention head's learned score form? For any BERT or SymBERT checkpoint.

    symbert-symmetry MODEL_DIR_OR_HUB_ID [--output_dir DIR]
    symbert-symmetry outputs/demo

Head i of a layer scores tokens x, y with a bilinear form x·M_i·yᵀ (biases aside). Its symmetry is the share of M_i's
energy in its symmetric part, ||(M_i + M_iᵀ)/2||_F² / ||M_i||_F²: 1 for a symmetric form, 0 for an antisymmetric
one, about 0.5 for a random matrix. Each attention type's class says what M_i is (`score_forms`), e.g. for original
(and BERT) M_i = [W_q]_iᵀ [W_k]_i, an h×h matrix; types symmetric by construction (symmetric, shared) are reported
as 1.

Prints a Markdown table (layers × heads) and writes symmetry.csv and the heat map symmetry.png to --output_dir
(default: the model folder).
"""

import csv
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES, SymBertSelfAttention
from ..cli import UserError, command_parser, missing_local_path, run_command
from ..files import write_atomically
from ..json_files import load_json
from . import READ_ERRORS, check_config_against_weights, check_output, created_parents, unreadable, weights_files


def supported() -> list[str]:
    """The attention types whose score forms the analysis knows (asked of each registered class)."""
    return [
        name
        for name, cls in SYMBERT_SELF_ATTENTION_CLASSES.items()
        if cls.symmetric_by_construction or cls.score_forms is not SymBertSelfAttention.score_forms
    ]


def symmetric_share(matrix: torch.Tensor) -> torch.Tensor:
    """||(M + Mᵀ)/2||_F² / ||M||_F² for a square matrix (or a stack of them, over the last two dimensions)."""
    symmetric = (matrix + matrix.transpose(-1, -2)) / 2
    return symmetric.square().sum((-1, -2)) / matrix.square().sum((-1, -2))


def score_forms(weights: dict[str, torch.Tensor], num_heads: int, attention_type: str) -> torch.Tensor | None:
    """The per-head matrices M_i [heads, ·, ·] of one layer, from its self-attention tensors (name → tensor)."""
    return SYMBERT_SELF_ATTENTION_CLASSES[attention_type].score_forms(weights, num_heads)


def checkpoint_folder(model: str) -> Path:
    """A local folder holding config.json and the weights of `model` (a folder, or a Hub id to download)."""
    folder = Path(model)
    if not folder.is_dir():
        if error := missing_local_path(model):
            raise error
        if folder.exists():
            raise UserError(f"{model!r} is a file; pass a saved BERT or SymBERT model folder or a Hub id")
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(model, allow_patterns=["config.json", "*.safetensors", "pytorch_model*.bin"]))
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} has no config.json; pass a saved BERT or SymBERT model folder")
    return folder


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's *.safetensors files, or else of its pytorch_model*.bin files. A file that cannot
    be read (cut short by an interrupted save or download, or not a weights file at all) is a UserError naming it."""
    files = weights_files(folder)
    if not files:
        raise UserError(f"{folder} has no *.safetensors or pytorch_model*.bin weights")
    load = load_file if files[0].suffix == ".safetensors" else partial(torch.load, weights_only=True)
    state = {}
    for file in files:
        try:
            state.update(load(file))
        except READ_ERRORS as error:
            raise unreadable(file, error) from None
    return state


def read_config(path: Path) -> dict:
    """config.json as a dict; a file that is not a JSON object is a UserError naming it."""
    try:
        config = load_json(path)
    except ValueError as error:  # not UTF-8, not JSON, a key given twice
        raise UserError(f"{path} is not valid JSON ({error}); save or download the model again.") from None
    if not isinstance(config, dict):
        raise UserError(f"{path} holds a JSON {type(config).__name__}, not a model configuration (a JSON object).")
    return config


def analyse(model: str) -> tuple[torch.Tensor, str]:
    """A [layers, heads] tensor of symmetric shares, and the checkpoint's attention type."""
    folder = checkpoint_folder(model)
    config = read_config(folder / "config.json")
    model_type = config.get("model_type")
    if model_type not in ("bert", "symbert"):
        raise UserError(f"model_type={model_type!r} is not supported; allowed: bert, symbert")
    if model_type == "symbert" and "attention_type" not in config:
        raise UserError(f"{folder / 'config.json'} has no attention_type; allowed: {', '.join(supported())}")
    attention_type = config["attention_type"] if model_type == "symbert" else "original"
    if attention_type not in supported():
        raise UserError(f"attention_type={attention_type!r} is not supported; allowed: {', '.join(supported())}")
    for key in ("num_hidden_layers", "num_attention_heads"):
        if type(config.get(key)) is not int or config[key] < 1:
            raise UserError(f"{folder / 'config.json'}: {key}={config.get(key)!r}; allowed: a positive integer")
    check_config_against_weights(folder, config)  # the table is layers × heads: of the weights, not just the config
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    if SYMBERT_SELF_ATTENTION_CLASSES[attention_type].symmetric_by_construction:
        return torch.ones(layers, heads), attention_type

    state = read_weights(folder)
    shares = torch.empty(layers, heads)
    for layer in range(layers):
        marker = f"encoder.layer.{layer}.attention.self."
        weights = {name.split(marker, 1)[1]: tensor.double() for name, tensor in state.items() if marker in name}
        if not weights:
            raise UserError(f"no tensors named '...{marker}*' in {model!r}: not a BERT-style checkpoint")
        shares[layer] = symmetric_share(score_forms(weights, heads, attention_type)).float()
    return shares, attention_type


def markdown_table(shares: torch.Tensor) -> str:
    header = "| layer | " + " | ".join(f"head {h}" for h in range(shares.shape[1])) + " | mean |"
    rule = "|---:|" + "---:|" * (shares.shape[1] + 1)
    rows = [
        f"| {layer} | " + " | ".join(f"{v:.3f}" for v in row.tolist()) + f" | {row.mean().item():.3f} |"
        for layer, row in enumerate(shares)
    ]
    return "\n".join([header, rule, *rows])


def write_outputs(shares: torch.Tensor, title: str, output_dir: Path) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path, png_path = output_dir / "symmetry.csv", output_dir / "symmetry.png"
    with created_parents(output_dir):
        write_files(shares, title, csv_path, png_path, plt)
    return csv_path, png_path


def write_files(shares: torch.Tensor, title: str, csv_path: Path, png_path: Path, plt) -> None:
    cells = [(layer, head, value) for layer, row in enumerate(shares.tolist()) for head, value in enumerate(row)]

    def write_csv(file):
        writer = csv.writer(file)
        writer.writerow(["layer", "head", "symmetric_share"])
        writer.writerows((layer, head, f"{value:.6f}") for layer, head, value in cells)

    write_atomically(csv_path, write_csv)

    figure, axes = plt.subplots(figsize=(max(4.5, 1.5 + 0.6 * shares.shape[1]), max(3.0, 1.2 + 0.45 * shares.shape[0])))
    image = axes.imshow(shares.numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
    for layer, head, value in cells:
        axes.text(
            head, layer, f"{value:.2f}", ha="center", va="center", fontsize=7, color="white" if value < 0.6 else "black"
        )
    axes.set_xticks(range(shares.shape[1]))
    axes.set_yticks(range(shares.shape[0]))
    axes.set_xlabel("head")
    axes.set_ylabel("layer")
    axes.set_title(title, fontsize=9)
    figure.colorbar(image, ax=axes, label="symmetric share")
    figure.tight_layout()
    write_atomically(png_path, lambda file: figure.savefig(file, format="png", dpi=120), binary=True)
    plt.close(figure)


def run(argv: list[str]) -> None:
    parser = command_parser(__doc__)
    parser.add_argument("model", help="a saved BERT or SymBERT folder, or a Hub id")
    parser.add_argument("--output_dir", help="where to write symmetry.csv and symmetry.png (default: the model folder)")
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir or args.model)
    if not args.output_dir and not output_dir.is_dir():
        if error := missing_local_path(args.model):
            raise error
        raise UserError(f"pass --output_dir for the Hub model {args.model!r}")
    if args.output_dir:  # the model folder itself (the default) is the user's, link or not
        check_output(output_dir, "--output_dir", "folder")
    for name in ("symmetry.csv", "symmetry.png"):  # replaced when they are files
        check_output(output_dir / name, "output", "file")

    shares, attention_type = analyse(args.model)
    note = (
        " (symmetric by construction)"
        if SYMBERT_SELF_ATTENTION_CLASSES[attention_type].symmetric_by_construction
        else ""
    )
    print(f"{args.model}: attention_type={attention_type}{note}; symmetric share of each head's score form\n")
    print(markdown_table(shares))
    csv_path, png_path = write_outputs(shares, f"{Path(args.model).name}: attention_type={attention_type}", output_dir)
    print(f"\nwrote {csv_path} and {png_path}")


def main(argv: list[str] | None = None) -> None:
    return run_command(run, argv)


if __name__ == "__main__":
    main()
