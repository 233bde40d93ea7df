"""Export a saved SymBERT model to ONNX, with dynamic batch and sequence axes, and check it with onnxruntime.

    symbert-onnx MODEL_DIR OUTPUT.onnx [--head model|sequence-classification] [--dynamo]
    symbert-onnx outputs/demo demo.onnx

Uses torch's TorchScript-based exporter by default (about 2 s for a tiny model on CPU); `--dynamo` uses the
torch.export-based one (onnxscript), which is about ten times slower. After exporting, the ONNX model is run in
onnxruntime on a padded batch of a different size and length than the export example and compared with PyTorch.
"""

import warnings

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel

from ..cli import UserError, command_parser, missing_local_path, run_command
from ..files import atomic_write_path
from . import check_config_against_weights, check_output, created_parents, load_checked

HEADS = {"model": AutoModel, "sequence-classification": AutoModelForSequenceClassification}
OUTPUT_NAMES = {"model": ["last_hidden_state", "pooler_output"], "sequence-classification": ["logits"]}
INPUT_NAMES = ["input_ids", "attention_mask"]
TOLERANCE = 1e-4


def example_inputs(
    config: PretrainedConfig, batch: int, length: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids with the last rows right-padded, so the exported mask handling is exercised."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, config.vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch):
        attention_mask[row, length - row :] = 0
    return input_ids, attention_mask


class ByName(torch.nn.Module):
    """`model` called with input_ids and attention_mask by name. The TorchScript-based exporter passes every parameter
    of `forward` positionally, filled with its default; transformers 5's BertModel then gets use_cache twice (its
    config-defaults decorator adds it as a keyword)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).to_tuple()


def export_onnx(model: PreTrainedModel, path: str, output_names: list[str], dynamo: bool = False) -> None:
    """Write `model` (a SymBERT or BERT encoder or task head, in eval mode) to `path` with dynamic batch and sequence
    axes."""
    model.eval()
    input_ids, attention_mask = example_inputs(model.config, batch=2, length=8)
    with atomic_write_path(path) as tmp_path, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer and deprecation warnings about code paths the export does not take
        if dynamo:
            batch = torch.export.Dim("batch")
            sequence = torch.export.Dim("sequence", max=model.config.max_position_embeddings)
            axes = {0: batch, 1: sequence}
            torch.onnx.export(
                model,
                (),
                tmp_path,
                kwargs={"input_ids": input_ids, "attention_mask": attention_mask},
                input_names=INPUT_NAMES,
                output_names=output_names,
                dynamo=True,
                external_data=False,
                dynamic_shapes={"input_ids": axes, "attention_mask": axes},
            )
        else:
            axes = {0: "batch", 1: "sequence"}
            torch.onnx.export(
                ByName(model),
                (input_ids, attention_mask),
                tmp_path,
                input_names=INPUT_NAMES,
                output_names=output_names,
                dynamic_axes={name: axes for name in INPUT_NAMES},
                dynamo=False,
            )


def max_difference(model: PreTrainedModel, path: str, batch: int = 3, length: int = 13) -> float:
    """Largest absolute difference between onnxruntime and PyTorch outputs on a padded [batch, length] input."""
    import onnxruntime

    input_ids, attention_mask = example_inputs(model.config, batch, length, seed=1)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})
    with torch.no_grad():
        want = model.eval()(input_ids=input_ids, attention_mask=attention_mask).to_tuple()
    if len(got) != len(want):
        raise RuntimeError(f"the ONNX model has {len(got)} outputs, PyTorch {len(want)}")
    return max((torch.from_numpy(g) - w).abs().max().item() for g, w in zip(got, want))


def run(argv: list[str]) -> None:
    parser = command_parser(__doc__)
    parser.add_argument("model_dir", help="a saved SymBERT folder (or Hub id)")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument(
        "--head", choices=sorted(HEADS), default="model", help="what to export: the encoder or a task head"
    )
    parser.add_argument("--dynamo", action="store_true", help="use the torch.export-based exporter")
    args = parser.parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # the weights' loading bar: a refusal is one line on stderr
    if not args.output.endswith(".onnx"):
        raise UserError(f"output={args.output!r} must end with .onnx")
    output = check_output(args.output, "output", "file")
    if error := missing_local_path(args.model_dir):
        raise error

    try:  # SymBERT's classes are the installed ones: nothing from the folder is run
        config = AutoConfig.from_pretrained(args.model_dir, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise UserError(f"{args.model_dir!r} is not a SymBERT model folder ({' '.join(str(error).split())})") from None
    if config.model_type != "symbert":
        raise UserError(f"{args.model_dir!r} is a {config.model_type!r} model, not a SymBERT one")
    check_config_against_weights(args.model_dir, config.to_dict())  # before building what the config asks for
    model = load_checked(HEADS[args.head], args.model_dir)
    # exported and checked beside OUTPUT, which is replaced only by an export that passes: a failed one leaves it
    with created_parents(output.parent), atomic_write_path(output) as exported:
        export_onnx(model, str(exported), OUTPUT_NAMES[args.head], dynamo=args.dynamo)
        difference = max_difference(model, str(exported))
        if not difference <= TOLERANCE:  # NaN too
            raise UserError(
                f"the export differs from PyTorch by {difference:.2e} on a padded [3, 13] batch (allowed "
                f"{TOLERANCE:.0e}); {args.output} was not written."
            )
    print(f"wrote {args.output}; onnxruntime vs PyTorch on a [3, 13] padded batch: max abs diff {difference:.2e}")


def main(argv: list[str] | None = None) -> None:
    return run_command(run, argv)


if __name__ == "__main__":
    main()
