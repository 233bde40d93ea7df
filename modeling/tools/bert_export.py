"""Export a saved SymBERT model as a plain BERT model that transformers loads without remote code.

    symbert-to-bert MODEL OUTPUT
    symbert-to-bert outputs/demo outputs/demo-bert

Every attention type builds Q, K and V linearly from the layer input, so its parameters fold into BERT's query, key
and value (`SymBertPreTrainedModel.to_bert`). OUTPUT gets the matching `Bert*` class (from the config's
`architectures`), `model_type` "bert", fp32 safetensors weights and the model's tokenizer; no `auto_map`, no code.
Before OUTPUT appears, the written folder is loaded back with plain transformers and compared with the SymBERT model on
a fixed padded batch, both evaluated in float64 so that the measure is of the weights, not of fp32's rounding; the
command prints the largest relative difference and refuses to write above 1e-5. OUTPUT appears only when complete. The export has BERT's parameter count: a variant's saving is a training-time saving.
"""

from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, PreTrainedModel

from .. import modeling_symbert
from ..cli import UserError, command_parser, run_command
from ..configuration_symbert import SymBertConfig
from ..modeling_symbert import BERT_CLASSES
from . import check_config_against_weights, check_output, checked_config, load_checked, written_folder

BOUND = 1e-5  # largest relative error ‖a - b‖ / ‖a‖ of an output tensor allowed
CHECK_BATCH = (4, 32)  # the fixed padded batch the export is measured on


def check_inputs(config, batch: int = CHECK_BATCH[0], length: int = CHECK_BATCH[1]) -> dict[str, torch.Tensor]:
    """A fixed batch of random ids (seed 0) with rows right-padded by 0, 3, 6, ... tokens and both token types; for
    multiple choice, 2 choices per example."""
    generator = torch.Generator().manual_seed(0)
    length = min(length, config.max_position_embeddings)
    input_ids = torch.randint(1, config.vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(batch):
        attention_mask[row, length - min(3 * row, length - 1) :] = 0
    token_type_ids = torch.zeros_like(input_ids)
    if config.type_vocab_size > 1:
        token_type_ids[:, length // 2 :] = 1
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    if config.architectures and config.architectures[0].endswith("ForMultipleChoice"):
        inputs = {name: tensor.view(batch // 2, 2, length) for name, tensor in inputs.items()}
    return inputs


def output_tensors(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every output of `model` on `inputs` (eval mode, hidden states included), by name; hidden states as
    hidden_states.0, hidden_states.1, ..."""
    with torch.no_grad():
        outputs = model.eval()(**inputs, output_hidden_states=True, return_dict=True)
    tensors = {}
    for name, value in outputs.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        elif isinstance(value, tuple):
            tensors.update({f"{name}.{i}": tensor for i, tensor in enumerate(value)})
    return tensors


def relative_difference(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    """The largest relative error ‖a - b‖ / ‖a‖ (Frobenius norms) over the output tensors; inf when the outputs
    differ in names or shapes. (Evaluated in fp32, a model is not that close to itself: a pairwise model with
    S ~ N(0, 1) at d = 64 differs from its own float64 outputs by about 1e-5; hence the command's float64 measure.)"""
    if reference.keys() != other.keys() or any(reference[k].shape != other[k].shape for k in reference):
        return float("inf")
    reference, other = ({k: t.double() for k, t in tensors.items()} for tensors in (reference, other))
    return max(((reference[k] - other[k]).norm() / reference[k].norm().clamp_min(1e-30)).item() for k in reference)


def load_symbert(model: str) -> PreTrainedModel:
    """The SymBERT model in `model` (folder or Hub id), of its config's class, in fp32 (the export is fp32 whatever
    the checkpoint's dtype: folded half-precision weights would not be exact); UserError naming what is wrong."""
    config = checked_config(model, "", (SymBertConfig,), ", not a SymBERT one (model_type 'symbert')")
    if getattr(config, "quantization_config", None):
        raise UserError(
            f"{model!r} is quantised ({config.quantization_config.get('quant_method', 'unknown method')}); "
            "export the unquantised model, then quantise the BERT."
        )
    name = (config.architectures or ["SymBertModel"])[0]
    if name not in BERT_CLASSES:
        raise UserError(f"{model!r} holds a {name!r}; the export supports {', '.join(BERT_CLASSES)}.")
    check_config_against_weights(model, config.to_dict())  # before building what the config asks for
    return load_checked(getattr(modeling_symbert, name), model).float()


TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.txt")


def export_to_bert(model: str, output: str | Path) -> float:
    """Write `model`'s BERT export to `output` (which must not exist or be an empty folder) and return the largest
    relative difference of the written folder's outputs from the SymBERT model's on `check_inputs`, both evaluated in
    float64."""
    output = check_output(output, "output", "new folder")
    symbert = load_symbert(model)
    try:
        bert = symbert.to_bert()
    except NotImplementedError as error:
        raise UserError(str(error)) from error
    has_tokenizer = any((Path(model) / name).is_file() for name in TOKENIZER_FILES) or not Path(model).exists()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=False)
    except Exception as error:  # whatever a damaged tokenizer file raises (JSON, tokenizers, sentencepiece)
        if has_tokenizer and Path(model).exists():
            reason = " ".join(str(error).split())[:200]
            raise UserError(
                f"{model!r} holds a tokenizer that cannot be read ({reason}); nothing was written."
            ) from None
        print(f"notice: {model!r} holds no tokenizer: the export is written without one.")
        tokenizer = None
    with written_folder(output, ".to-bert.tmp", "the export", "exporting") as staging:
        return _write_export(model, symbert, bert, tokenizer, staging)


def _write_export(model: str, symbert: PreTrainedModel, bert: PreTrainedModel, tokenizer, staging: Path) -> float:
    """The export written in `staging` (a killed export's is removed by the next), loaded back and measured."""
    bert.save_pretrained(staging, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(staging)
    inputs = check_inputs(symbert.config)
    saved = type(bert).from_pretrained(staging)  # what was written, read by plain transformers
    difference = relative_difference(output_tensors(symbert.double(), inputs), output_tensors(saved.double(), inputs))
    if not difference <= BOUND:
        raise UserError(
            f"The BERT export of {model!r} differs from it by {difference:.2e} (relative), above {BOUND:.0e}; "
            "nothing was written."
        )
    if leftovers := [p.name for p in staging.iterdir() if p.suffix == ".py"] + _auto_map(staging):
        raise RuntimeError(f"the export holds remote code: {leftovers}")  # a bug: BertConfig has no auto_map
    return difference


def _auto_map(folder: Path) -> list[str]:
    return [name for name in ("config.json", "tokenizer_config.json") if '"auto_map"' in _text(folder / name)]


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def run(argv: list[str]) -> float:
    parser = command_parser(__doc__)
    parser.add_argument("model", help="a saved SymBERT folder or Hub id")
    parser.add_argument("output", help="the folder to write (new or empty)")
    args = parser.parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # the weights' loading and writing bars, 4 times
    difference = export_to_bert(args.model, args.output)
    batch = "x".join(map(str, CHECK_BATCH))
    print(
        f"wrote {args.output}: plain BERT, no remote code; outputs vs the SymBERT model on a padded {batch} batch: "
        f"max relative difference {difference:.2e} in float64 (bound {BOUND:.0e})"
    )
    return difference


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


if __name__ == "__main__":
    main()
