"""The data path's command-line options (symbert-pretrain's and symbert-prepare-data's data arguments), here so that
the data modules read them without importing the command line."""

from dataclasses import dataclass, field


@dataclass
class DataArguments:
    """The texts trained on, their tokenizer, blocks and masking."""

    _argument_group_name = "Data arguments"

    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset id; default: the embedded corpus"})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name"})
    dataset_split: str = field(default="train", metadata={"help": "split of --dataset_name to train on"})
    train_files: list[str] | None = field(default=None, metadata={"help": "local .txt, .jsonl/.json or .parquet files"})
    text_column: str = field(default="text", metadata={"help": "column of the texts (.jsonl/.json/.parquet, Hub data)"})
    skip_records_without_text: bool = field(
        default=False,
        metadata={
            "help": "skip the records that have no text_column field (or null there), and say how many; without it "
            "such a record is an error naming its file and line"
        },
    )
    streaming: bool = field(default=False, metadata={"help": "stream the dataset instead of downloading it whole"})
    tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "tokenizer name or path; default: bert-base-uncased, or for the embedded corpus a WordPiece "
            "tokenizer trained on it"
        },
    )
    tokenizer_vocab_size: int = field(
        default=8192, metadata={"help": "vocabulary of the tokenizer trained on the corpus"}
    )
    max_seq_length: int = field(default=512, metadata={"help": "tokens per block"})
    eval_blocks: int = field(
        default=200, metadata={"help": "held-out blocks for the eval loss (the paper's recipes: 10,000)"}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "share of tokens masked, in (0, 1)"})
    blocks_dir: str | None = field(
        default=None,
        metadata={
            "help": "train from a folder of symbert-prepare-data (tokenised once, memory-mapped) instead of texts: "
            "its tokenizer, blocks and held-out blocks"
        },
    )
    num_proc: int | None = field(
        default=None,
        metadata={"help": "processes that tokenise: symbert-prepare-data's shards, and a corpus read into memory"},
    )
