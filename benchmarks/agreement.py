"""How close saved SymBERT models are to the BERT they came from: held-out sentence-embedding cosine and each layer's
attention error, e.g. along a distillation (its checkpoints) against the conversion it started from.

    python benchmarks/agreement.py --bert ~/.cache/symbert-real/all-MiniLM-L6-v2 \
        --models /tmp/minilm-pairwise outputs/distil/checkpoint-100 outputs/distil --output benchmarks/results/x/agreement

Held-out text: the same lines of the embedded corpus that symbert-convert and benchmarks/conversion.py hold out.
Per model: the mean cosine of mean-pooled last hidden states to BERT's, and per layer the relative error of its
attention output against BERT's on the inputs BERT's layer sees (each layer alone). Writes OUTPUT.md and OUTPUT.json.
"""

import shlex
import sys
from pathlib import Path

from report import Stopwatch, domain_texts, header, markdown_table, write_report  # benchmarks/report.py

from symbert import SymBertConfig, SymBertModel
from symbert.cli import UserError, command_parser, run_command
from symbert.conversion_symbert import attention_error, calibration_sequences, layer_inputs
from symbert.tools import checked_config
from symbert.tools.convert import calibration_texts, load_bert, mean_cosine


def measure(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--bert", required=True)
    parser.add_argument("--models", nargs="+", required=True, help="SymBERT folders (e.g. checkpoints)")
    parser.add_argument("--held_out", type=int, default=64)
    parser.add_argument(
        "--domains", nargs="+", default=[], metavar="NAME=FILE", help="texts of other domains, each a cosine column"
    )
    parser.add_argument("--output", required=True, help="results path without suffix")
    args = parser.parse_args(argv)
    for folder in args.models:  # before anything is loaded: a bad folder is refused at once
        checked_config(folder, "--models", (SymBertConfig,), ", not a SymBERT one")
    stopwatch = Stopwatch()
    _, held_out_texts = calibration_texts(None, args.held_out)
    config, bert, tokenizer = load_bert(args.bert)
    length = min(128, config.max_position_embeddings)
    held_out = calibration_sequences(tokenizer, held_out_texts, length)
    domains = {
        name: calibration_sequences(tokenizer, lines, length) for name, lines in domain_texts(args.domains).items()
    }
    inputs = layer_inputs(bert, held_out)
    rows = []
    for folder in args.models:
        try:
            model = SymBertModel.from_pretrained(folder).float().eval()
        except (OSError, ValueError) as error:
            raise UserError(f"--models {folder!r}: cannot load it as a SymBERT model ({error}).") from error
        errors = [
            attention_error(layer.attention.self, bert_layer.attention.self, inputs[index])
            for index, (layer, bert_layer) in enumerate(zip(model.encoder.layer, bert.encoder.layer))
        ]
        name = str(folder).replace(str(Path.home()), "~")
        rows.append({"model": name, "attention_type": model.config.attention_type,
                     "mean_cosine": mean_cosine(model, bert, held_out), "layer_errors": errors,
                     "domains": {name: mean_cosine(model, bert, texts) for name, texts in domains.items()}})  # fmt: skip
        print(f"{name}: mean cosine {rows[-1]['mean_cosine']:.4f}", flush=True)
    command = shlex.join(["python", "benchmarks/agreement.py", *argv]).replace(str(Path.home()), "~")
    facts = stopwatch.facts(command)
    table = markdown_table(
        ["model", "type", "mean cosine", *(f"{name}: cosine" for name in domains),
         *(f"layer {i}" for i in range(config.num_hidden_layers))],
        [[f"`{r['model']}`", f"`{r['attention_type']}`", f"{r['mean_cosine']:.4f}",
          *(f"{c:.4f}" for c in r["domains"].values()), *(f"{e:.3f}" for e in r["layer_errors"])]
         for r in rows],
        ["---", "---", *["---:"] * (1 + len(domains) + config.num_hidden_layers)],
    )  # fmt: skip
    report = "\n\n".join(
        [
            "# Agreement with BERT",
            header(facts),
            f"BERT: {args.bert.replace(str(Path.home()), '~')}. {len(held_out)} held-out lines of the embedded "
            "calibration text (books and State of the Union addresses), and the first 200 lines of each --domains "
            "file. Mean cosine of mean-pooled last hidden states to BERT's; per layer, the relative error of the "
            "attention output against BERT's on BERT's inputs to that layer.",
            table,
        ]
    )
    write_report(args.output, report, {**facts, "rows": rows})
    print(report)


def main(argv=None):
    run_command(measure, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
