"""How close each attention type comes to a pretrained BERT right after conversion: `from_bert`'s copy against its fit.

    python benchmarks/real/fetch.py && python benchmarks/conversion.py --bert ~/.cache/symbert-real/all-MiniLM-L6-v2

For every registered type with a fit (or --types): the BERT converted by `from_bert` with `calibration_texts=None`
(the copy: same-named tensors, the rest new) and with calibration text (each layer fitted to BERT's on the inputs it
sees, the fit kept where closer), measured against BERT in the same run: per layer the relative error of the attention
output on held-out text, and the mean cosine of mean-pooled sentence embeddings on held-out texts. Calibration: lines
of the embedded corpus (the same split as `symbert-convert`). Writes OUTPUT.md and OUTPUT.json with the command, the
machine, the load and the wall time.
"""

import shlex
import sys
from pathlib import Path

from report import Stopwatch, domain_texts, header, markdown_table, write_report  # benchmarks/report.py

from symbert import ATTENTION_TYPES, attention_class
from symbert.attention_symbert import SymBertSelfAttention
from symbert.cli import UserError, command_parser, run_command
from symbert.conversion_symbert import calibration_sequences
from symbert.tools.convert import calibration_texts, copy_and_fit, load_bert, mean_cosine


def measure(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--bert", required=True, help="the BERT folder (e.g. benchmarks/real/fetch.py's MiniLM)")
    parser.add_argument("--types", nargs="+", default=None, choices=list(ATTENTION_TYPES))
    parser.add_argument("--held_out", type=int, default=64)
    parser.add_argument(
        "--domains",
        nargs="+",
        default=[],
        metavar="NAME=FILE",
        help="texts of other domains (one a line) the calibration never saw, each measured as the held-out lines are",
    )
    parser.add_argument("--output", default="benchmarks/results/conversion/conversion")
    args = parser.parse_args(argv)
    types = [
        t for t in (args.types or ATTENTION_TYPES) if attention_class(t).fit_bert is not SymBertSelfAttention.fit_bert
    ]
    if not types:
        raise UserError("None of --types has a fit to BERT's attention.")
    stopwatch = Stopwatch()
    fit_texts, held_out_texts = calibration_texts(None, args.held_out)
    config, bert, tokenizer = load_bert(args.bert)
    length = min(128, config.max_position_embeddings)
    held_out = calibration_sequences(tokenizer, held_out_texts, length)
    domains = {
        name: calibration_sequences(tokenizer, lines, length) for name, lines in domain_texts(args.domains).items()
    }
    from symbert import SymBertModel

    rows = []
    for kind in types:
        copied, fitted, _ = copy_and_fit(args.bert, SymBertModel, kind, fit_texts)
        layers = fitted.bert_fit_report
        rows.append(
            {
                "attention_type": kind,
                "copy_cosine": mean_cosine(copied, bert, held_out),
                "fit_cosine": mean_cosine(fitted, bert, held_out),
                "copy_errors": [row["copy_error"] for row in layers],
                "fit_errors": [row["fit_error"] for row in layers],
                "kept": [row["kept"] for row in layers],
                "inputs": [row["inputs"] for row in layers],
                "domains": {
                    name: {
                        "copy": mean_cosine(copied, bert, texts),
                        "fit": mean_cosine(fitted, bert, texts),
                    }
                    for name, texts in domains.items()
                },
            }
        )
        print(f"{kind}: cosine copy {rows[-1]['copy_cosine']:.4f}, fit {rows[-1]['fit_cosine']:.4f}", flush=True)
    command = shlex.join(["python", "benchmarks/conversion.py", *argv]).replace(str(Path.home()), "~")
    write(args, stopwatch.facts(command), config, rows, len(fit_texts), len(held_out))


def write(args, facts, config, rows, fit_count, held_out_count):
    layers = config.num_hidden_layers
    table = markdown_table(
        [
            "type",
            "mean cosine, copy",
            "mean cosine, fit",
            *(f"{name}: copy / fit" for name in rows[0]["domains"]),
            *(f"layer {i} copy / fit" for i in range(layers)),
        ],
        [
            [
                f"`{r['attention_type']}`",
                f"{r['copy_cosine']:.4f}",
                f"{r['fit_cosine']:.4f}",
                *(
                    f"{d['copy']:.4f} / {d['fit']:.4f}{'' if d['fit'] >= d['copy'] else ' (below the copy)'}"
                    for d in r["domains"].values()
                ),
                *(
                    f"{c:.3f} / {f:.3f}{' (copy kept)' if k == 'copy' else ' (own inputs)' if i == 'own' else ''}"
                    for c, f, k, i in zip(r["copy_errors"], r["fit_errors"], r["kept"], r["inputs"])
                ),
            ]
            for r in rows
        ],
    )
    report = "\n\n".join(
        [
            "# Conversion from a pretrained BERT: the copy against the fit",
            header(facts),
            f"BERT: {config.num_hidden_layers} layers × {config.hidden_size}, {config.num_attention_heads} heads "
            f"({args.bert.replace(str(Path.home()), '~')}). Calibration: {fit_count} lines of the embedded calibration "
            "text, books and State of the Union addresses in turn (a quarter of them held out to choose, per layer, "
            f"the copy or the fit on BERT's inputs or on the converted model's own); {held_out_count} other lines held "
            "out for the figures. Mean cosine: of mean-pooled last hidden states to BERT's, over the held-out lines "
            "(1 = BERT's own), and over the first 200 lines of each other domain (--domains), which the calibration "
            "never saw. Layers: relative error ‖attention output − BERT's‖ / ‖BERT's‖ on held-out text, each "
            "candidate given the inputs the converted layers before it produce, copy / fit.",
            table,
        ]
    )
    write_report(args.output, report, {**facts, "rows": rows})
    print(report)


def main(argv=None):
    run_command(measure, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
