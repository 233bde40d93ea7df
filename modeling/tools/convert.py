"""Convert a pretrained BERT into a SymBERT variant that keeps what BERT's attention does.

    symbert-convert BERT_FOLDER_OR_HUB_ID OUTPUT --attention_type T [--calibration_files FILE ...]
    symbert-convert models/all-MiniLM-L6-v2 outputs/minilm-pairwise --attention_type pairwise

`SymBert*.from_bert` copies BERT's tensors of the same name and shape, then fits each layer's attention to BERT's on
the inputs that layer sees on calibration text (each attention class's `fit_bert`), keeping a layer's fit only where
it is closer to BERT than the copy, its output at the least-squares scale α ≤ 1 that brings it closest (without that
scale with --output_scale false). Calibration text: one text per non-empty line of --calibration_files, or lines of
the embedded calibration text (books and speeches, in turn); a line given twice (a file named twice) is read once,
and the last --held_out texts are kept out of the fit. The fit reads at most the first 32,768 calibration tokens
(its memory grows with them), each text truncated to 128 tokens. Printed: per layer, the relative error of the
attention output against BERT's on held-out text, copied and fitted; and end to end, the mean cosine of the
mean-pooled last hidden states (a sentence embedding) to BERT's on the held-out texts, copied and fitted. OUTPUT (a
self-contained SymBERT folder: weights, code, BERT's tokenizer, conversion.json with these figures and BERT's
licence, and BERT's sentence-transformers configuration where it has one) appears only when complete.
"""

import contextlib
import json
import logging
import os
import shutil
import stat
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
from transformers.utils import logging as transformers_logging

from .. import conversion_symbert, modeling_symbert
from ..attention_symbert import ATTENTION_TYPES, SymBertSelfAttention, attention_class
from ..cli import UserError, command_parser, run_command
from ..conversion_symbert import calibration_sequences, embedded_calibration_texts, own_copy
from ..files import model_card_license, sentence_transformers_files
from ..loading_symbert import checkpoint_files
from . import (
    READ_ERRORS,
    check_config_against_weights,
    check_output,
    checked_config,
    first_non_finite,
    unreadable,
    weights_files,
    written_folder,
)
from .conversion_record import ConversionRecord, HeldOutCosines, LayerFit

# from the embedded text of two domains, in turn: 256 to fit on (a quarter of them to choose fit or copy), 64 held out
DEFAULT_TEXTS = 320
HEAD_CLASSES = {
    "BertForMaskedLM": "SymBertForMaskedLM",
    "BertForPreTraining": "SymBertForMaskedLM",
    "BertForSequenceClassification": "SymBertForSequenceClassification",
}


def parse_command_line(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("bert", help="a BERT folder or Hub id (config.json, weights, tokenizer)")
    parser.add_argument("output", help="the SymBERT folder to write (must not exist, or be empty)")
    parser.add_argument("--attention_type", required=True, help=f"one of {', '.join(ATTENTION_TYPES)}")
    parser.add_argument(
        "--calibration_files",
        nargs="+",
        default=None,
        help=f"text files, one text per line (a line given twice is read once); the fit reads at most its first "
        f"{conversion_symbert.MAX_CALIBRATION_TOKENS:,} tokens, each text truncated to 128 tokens; default: the embedded "
        "text",
    )
    parser.add_argument("--held_out", type=int, default=64, help="texts kept out of the fit, for the agreement")
    parser.add_argument(
        "--output_scale",
        choices=["true", "false"],
        default="true",
        help="true: a kept fit's output at its least-squares scale α ≤ 1 (what keeps a poor fit at or above the copy "
        "on text the calibration did not see); false: at α = 1, BERT's output projection unchanged (symbert-transfer's "
        "start)",
    )
    args = parser.parse_args(argv)
    if args.attention_type not in ATTENTION_TYPES:
        raise UserError(f"--attention_type {args.attention_type!r} is unknown; allowed: {', '.join(ATTENTION_TYPES)}.")
    if attention_class(args.attention_type).fit_bert is SymBertSelfAttention.fit_bert:
        raise UserError(f"--attention_type {args.attention_type!r} has no fit to BERT's attention (no fit_bert).")
    if args.held_out < 1:
        raise UserError(f"--held_out={args.held_out} must be at least 1.")
    check_output(args.output, "output", "new folder")  # before anything is read: a path under a file, a link
    return args


def calibration_texts(files, held_out):
    """(texts to fit on, held-out texts): the files' non-empty lines, or the embedded calibration text."""
    if files is None:
        texts = embedded_calibration_texts(DEFAULT_TEXTS)
        if texts is None:
            raise UserError(
                "The embedded calibration text is missing from this installation: give --calibration_files."
            )
    else:
        texts = [line for name in files for line in text_lines(name)]
        unique = list(dict.fromkeys(texts))
        if len(unique) < len(texts):
            print(
                f"notice: {len(texts) - len(unique)} calibration line(s) given more than once (a file named twice, or "
                "a repeated line) are read once, so that no held-out text is also fitted on."
            )
        texts = unique
    if len(texts) < held_out + 2:
        raise UserError(
            f"The calibration text has {len(texts)} non-empty line(s); it needs at least {held_out + 2} "
            f"(--held_out {held_out} held out, at least 2 to fit on)."
        )
    return texts[:-held_out], texts[-held_out:]


def text_lines(name):
    """The non-empty lines of the text file `name`, stripped; a named pipe (opened without waiting), a device such as
    /dev/zero or a folder is refused before anything is read, as is text that is not UTF-8."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise UserError(f"--calibration_files {name!r}: cannot read it as UTF-8 text ({error.strerror}).") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UserError(
            f"--calibration_files {name!r} is not a regular file (a named pipe, a device or a folder); give text files."
        )
    try:
        with open(descriptor, encoding="utf-8") as file:
            return [line.strip() for line in file if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--calibration_files {name!r}: cannot read it as UTF-8 text ({error}).") from None


def load_bert(name):
    """BERT's config, encoder and tokenizer; UserError for anything that is not a BERT with a tokenizer."""
    config, bert, tokenizer, _ = read_bert(name)
    return config, bert, tokenizer


def read_bert(name):
    """`load_bert`, with BERT's tensors as read ({name: tensor}; None for a Hub id, which its loader reads): a
    local folder's weights are read once, and the encoder and every model converted from it are made from them."""
    model_type, code = declared_type_and_code(name)  # a missing folder: (None, None), named below
    if model_type not in (None, "bert"):
        raise UserError(f"{name!r} is a {model_type!r} model, not a BERT (model_type 'bert').")
    if code:
        raise UserError(
            f"{name!r} names code of its own ({code}); a folder's code is never run here: give a BERT folder "
            "(config.json's model_type 'bert')."
        )
    config = checked_config(name, "", (BertConfig,), ", not a BERT (model_type 'bert')")
    if (positions := getattr(config, "position_embedding_type", "absolute")) != "absolute":
        # transformers 4 gives such a BERT a distance embedding per layer, which no SymBERT type holds
        raise UserError(
            f"{name!r} has position_embedding_type {positions!r}: a SymBERT model has absolute position embeddings "
            "only ('absolute'), so it could not compute what this BERT does."
        )
    state = checked_weights(name)  # readable, of the config's sizes and finite; its card's metadata readable
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
        with quiet_loading():  # a classifier's or MLM head's tensors, not the encoder's: not reported
            if state is None:
                bert = AutoModel.from_pretrained(name, trust_remote_code=False)
            else:  # the class AutoModel picks for a BERT (transformers 5 takes a state_dict only without a path)
                bert = BertModel.from_pretrained(None, config=config, state_dict=own_copy(state))
            bert = bert.float().eval()
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load {name!r} as a BERT with its tokenizer: {' '.join(str(error).split())}") from error
    vocabulary = tokenizer.get_vocab()
    if len(vocabulary) <= len(set(tokenizer.all_special_tokens)):
        raise UserError(f"{name!r} holds no tokenizer files: the calibration text cannot be read.")
    if max(vocabulary.values()) >= config.vocab_size:
        raise UserError(
            f"{name!r}: its tokenizer's ids reach {max(vocabulary.values())}, past its model's vocab_size "
            f"{config.vocab_size}; the tokenizer is another model's: give the folder the model was trained with."
        )
    return config, bert, tokenizer, state


def checked_weights(name):
    """A local BERT folder's tensors as from_pretrained would load them, read once, after what `check_model_folder`
    checks of them: config.json against the weights' headers, every floating-point tensor finite (the first one that
    is not named), the card's metadata readable. None for a Hub id (its loader reads and checks it)."""
    folder = Path(name)
    if not folder.is_dir():
        return None
    check_config_against_weights(folder, json.loads((folder / "config.json").read_text(encoding="utf-8")))
    read = {}
    for file in weights_files(folder):
        try:
            if file.suffix == ".safetensors":
                tensors = load_file(file)
            else:
                tensors = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except READ_ERRORS as error:
            raise unreadable(file, error) from None
        if found := first_non_finite(tensors.items()):
            raise UserError(
                f"{file}: the tensor {found} holds NaN or infinite values; BERT {name!r} must have finite weights: "
                "give the checkpoint before it diverged, or download the model again."
            )
        read[file.resolve()] = tensors
    model_card_license(folder)
    # the files from_pretrained loads, of those checked (a folder may hold other weights files besides)
    return {name: t for file in checkpoint_files(name, {}) for name, t in read[Path(file).resolve()].items()}


def declared_type_and_code(name) -> tuple[str | None, str | None]:
    """A local model folder's config.json model_type and what it names of its own code (its auto_map), read as
    plain JSON (AutoConfig would ask to run that code); (None, None) where there is no such file to read."""
    path = Path(name) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return None, None  # AutoConfig names what is wrong with it
    if not isinstance(config, dict):
        return None, None
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    auto_map = config.get("auto_map")
    if not auto_map:
        return model_type, None
    classes = auto_map.values() if isinstance(auto_map, dict) else auto_map
    return model_type, f"auto_map: {', '.join(sorted(map(str, classes)))}"


@contextlib.contextmanager
def quiet_loading():
    """transformers' load reports and from_bert's notice silenced, and no progress bars."""
    loggers = [logging.getLogger("transformers"), logging.getLogger(modeling_symbert.__name__)]
    levels = [logger.level for logger in loggers]
    bars = transformers_logging.is_progress_bar_enabled()
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if bars:
            transformers_logging.enable_progress_bar()


def sentence_embeddings(model, sequences):
    """Mean-pooled last hidden states, one row per sequence."""
    encoder = getattr(model, "bert", model)
    with torch.no_grad():
        return torch.cat([encoder(input_ids).last_hidden_state.mean(1) for input_ids in sequences])


def embedding_cosine(embeddings, reference_embeddings) -> float:
    """The mean cosine of each row to its reference's, each clamped to [-1, 1]: equal rows can round to 1 + 1e-7,
    which no record would take for a cosine."""
    return torch.nn.functional.cosine_similarity(embeddings, reference_embeddings).clamp(-1.0, 1.0).mean().item()


def mean_cosine(model, reference, sequences):
    return embedding_cosine(sentence_embeddings(model, sequences), sentence_embeddings(reference, sequences))


def copy_and_fit(bert_name, symbert_class, attention_type, fit_texts, bert_state=None, output_scale=True):
    """(the copy, the fit, the fit's new parameters), in eval mode: `symbert_class` made from the BERT `bert_name` by
    copying its tensors of the same name and shape alone, and then with each layer's attention fitted to BERT's on
    `fit_texts` (kept where it beats the copy); both from `bert_state` (BERT's tensors as `read_bert` read them)
    where given; `output_scale` as `from_bert` takes it. symbert-convert and benchmarks/conversion.py measure the
    two."""
    weights = {} if bert_state is None else {"state_dict": bert_state}
    with quiet_loading():  # the tensors BERT lacks or the type adds are expected here: the report says them
        copied, _ = symbert_class.from_bert(bert_name, calibration_texts=None, attention_type=attention_type, **weights)
        fitted, new_parameters = symbert_class.from_bert(
            bert_name, calibration_texts=fit_texts, output_scale=output_scale, attention_type=attention_type, **weights
        )
    return copied.eval(), fitted.eval(), new_parameters


def convert(argv):
    args = parse_command_line(argv)
    fit_texts, held_out_texts = calibration_texts(args.calibration_files, args.held_out)
    config, bert, tokenizer, state = read_bert(args.bert)
    bert_license = model_card_license(args.bert)  # before the fit: a card that cannot be read is refused at once
    carried = sentence_transformers_files(args.bert)  # checked before the fit: a bad modules.json is refused at once
    length = min(128, config.max_position_embeddings)
    if (used := len(calibration_sequences(tokenizer, fit_texts, length))) < len(fit_texts):
        print(
            f"notice: the fit reads the first {used} of the {len(fit_texts)} calibration texts: it reads "
            f"{conversion_symbert.MAX_CALIBRATION_TOKENS:,} tokens at most (its memory grows with them)."
        )
        fit_texts = fit_texts[:used]
    class_name = next((HEAD_CLASSES[a] for a in config.architectures or [] if a in HEAD_CLASSES), "SymBertModel")
    symbert_class = getattr(modeling_symbert, class_name)
    copied, fitted, new_parameters = copy_and_fit(
        args.bert, symbert_class, args.attention_type, fit_texts, state, output_scale=args.output_scale == "true"
    )
    held_out = calibration_sequences(tokenizer, held_out_texts, length)
    report = ConversionRecord(
        # a Hub id as given; a local folder by its name only: the folder may be published, a home layout must not be
        bert=Path(args.bert).name if Path(args.bert).exists() else args.bert,
        bert_license=bert_license,
        attention_type=args.attention_type,
        calibration=[Path(f).name for f in args.calibration_files]
        if args.calibration_files
        else "the embedded calibration text (lines of nine 19th-century books and of US State of the Union addresses)",
        fit_texts=len(fit_texts),
        held_out_texts=len(held_out),
        layers=tuple(LayerFit(**row) for row in fitted.bert_fit_report),
        held_out_mean_cosine=HeldOutCosines(
            copy=mean_cosine(copied, bert, held_out), fit=mean_cosine(fitted, bert, held_out)
        ),
        new_parameters=new_parameters,
    )
    print(f"{args.attention_type} from {args.bert}: attention output against BERT's (relative error, held-out text)")
    print("  layer    copy     fit   kept  output scale α  (the fit on the inputs of)")
    for row in report.layers:
        print(
            f"  {row.layer:5d} {row.copy_error:7.4f} {row.fit_error:7.4f}   {row.kept:4}  "
            f"{row.output_scale:14.3f}  ({'BERT' if row.inputs == 'bert' else 'the converted model'})"
        )
    cosine = report.held_out_mean_cosine
    print(
        f"Held-out sentence embeddings (mean-pooled), mean cosine to BERT's over {len(held_out)} texts: "
        f"copy {cosine.copy:.4f}, fit {cosine.fit:.4f}"
    )
    write_folder(fitted, tokenizer, report, Path(args.output), carried)
    print(f"Written: {args.output}")
    return report


def write_folder(model, tokenizer, report, output, carried):
    """OUTPUT with the model, the tokenizer, conversion.json and the `carried` files ({name: file}: BERT's
    sentence-transformers configuration, so that it loads there as BERT does), moved into place when complete."""
    with written_folder(output, ".convert.tmp", "the converted model", "converting") as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        report.write(staging)
        for name, source in carried.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staging / name)


def main(argv=None):
    run_command(convert, argv)


if __name__ == "__main__":
    main()
