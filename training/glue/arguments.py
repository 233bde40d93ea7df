"""symbert-glue's own arguments (the Trainer's are transformers' TrainingArguments), with the paper's protocol
(training/glue/results.py) as their defaults: what the command line parses and the suite and the sweep read."""

from dataclasses import dataclass, field

from .data import TASKS, hub_datasets
from .results import PAPER_MAX_LENGTH, PAPER_SEEDS, PAPER_TASKS


@dataclass
class GlueArguments:
    _argument_group_name = "GLUE arguments"

    model: str | None = field(default=None, metadata={"help": "model folder or Hub id to fine-tune"})
    revision: str | None = field(default=None, metadata={"help": "Hub revision of --model"})
    tasks: str = field(default=",".join(PAPER_TASKS), metadata={"help": f"comma-separated: {', '.join(TASKS)}"})
    seeds: str = field(default=",".join(map(str, PAPER_SEEDS)), metadata={"help": "comma-separated integers"})
    data_dir: str | None = field(
        default=None,
        metadata={"help": f"local GLUE data (TSV files or save_to_disk folders); default: the Hub's {hub_datasets()}"},
    )
    max_length: int = field(default=PAPER_MAX_LENGTH, metadata={"help": "tokens per example (truncated beyond)"})
    pretraining_dirs: list[str] | None = field(
        default=None, metadata={"help": "pre-training output folders: score their checkpoint-N folders (the sweep)"}
    )
    steps: str | None = field(
        default=None, metadata={"help": "sweep steps, comma-separated; default: every checkpoint"}
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "load a model whose classes are neither transformers' nor SymBERT's (it runs code from the model's "
            "folder or repository); SymBERT and BERT models never need it"
        },
    )
    skip_malformed_rows: bool = field(
        default=False,
        metadata={
            "help": "drop TSV rows with the wrong number of fields (with a notice naming their lines) instead of "
            "refusing the file; the official QQP train.tsv holds a few, which nyu-mll/glue drops"
        },
    )
