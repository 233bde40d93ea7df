"""The tokenizer of a pre-training run: a named one (a folder or a Hub id), checked for what masked-language-model
pre-training needs, or for the embedded corpus the shipped WordPiece tokenizer (one trained and cached at another
vocabulary size)."""

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from datasets import load_dataset
from filelock import FileLock
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerBase

from ...cli import UserError, missing_local_path
from ...tools import written_folder
from . import corpus_files
from .corpus_files import uses_embedded_corpus
from .options import DataArguments

DEFAULT_TOKENIZER = "bert-base-uncased"


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def cache_dir() -> Path:
    return Path(os.environ.get("SYMBERT_CACHE", Path.home() / ".cache" / "symbert"))


def fresh_pipeline(tokenizer: PreTrainedTokenizerBase) -> Tokenizer:
    """A copy of a fast tokenizer's own pipeline as freshly loaded: without the truncation and padding its last call
    set (truncation=True sets them on the tokenizer itself)."""
    pipeline = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    pipeline.no_truncation()
    pipeline.no_padding()
    return pipeline


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """What decides the ids a tokenizer gives: its whole pipeline (vocabulary, normalizer, pre-tokenizer, special
    tokens' post-processor) for a fast tokenizer, else its vocabulary; the same before and after it tokenises."""
    if getattr(tokenizer, "is_fast", False):
        # as freshly loaded: without the truncation and padding its last call set (truncation=True sets them), so
        # the fingerprint is the one a fresh tokenizer gave before, and checkpoints saved then still compare equal
        description = fresh_pipeline(tokenizer).to_str()
    else:
        description = json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(description.encode("utf-8")).hexdigest()[:16]


def token_ids_function(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[str]], list[list[int]]]:
    """texts -> their token ids with the special tokens, as `tokenizer(texts, add_special_tokens=True)` gives them.
    A fast tokenizer's own pipeline is called directly, without transformers' conversion of each text's encoding
    into a dict (a sixth of a stream's reading time, profiled), on a copy set as that call sets it: no truncation
    or padding, special tokens split as the tokenizer's `split_special_tokens` says."""
    if not getattr(tokenizer, "is_fast", False):
        return lambda texts: tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]
    pipeline = fresh_pipeline(tokenizer)
    pipeline.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))

    def token_ids(texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in pipeline.encode_batch(texts, add_special_tokens=True)]

    return token_ids


# BERT's inputs, token_type_ids included. Saved in tokenizer_config.json ("model_input_names"), so that a tokenizer
# saved next to a SymBERT config.json returns token_type_ids under every supported transformers: 5.0 to 5.2 load such
# a tokenizer as TokenizersBackend (the config's model_type, symbert, maps to no tokenizer class of its own), whose
# default model_input_names lack token_type_ids, so sentence pairs would get all-zero segments silently.
BERT_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")


def keep_token_type_ids(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """`tokenizer`, set to save its model_input_names in tokenizer_config.json when they include token_type_ids
    (BERT's do), so that every transformers that loads the saved folder returns token_type_ids for sentence pairs."""
    if "token_type_ids" in tokenizer.model_input_names:
        tokenizer.init_kwargs["model_input_names"] = list(tokenizer.model_input_names)
    return tokenizer


def train_wordpiece(texts: Iterable[str], vocab_size: int) -> BertTokenizerFast:
    """An uncased BERT-style WordPiece tokenizer trained on `texts` (an iterable of strings), as a BertTokenizerFast:
    saved, its tokenizer_config.json names `BertTokenizer`, which transformers 4.x (as BertTokenizerFast) and 5.x both
    load from its tokenizer.json. (A plain PreTrainedTokenizerFast saves as `TokenizersBackend` under 5.x, a class
    4.x does not know.) It gives the ids BERT's pipeline gives, and token_type_ids as bert-base-uncased does, under
    every supported transformers (BERT_INPUT_NAMES)."""
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    backend.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return BertTokenizerFast(
        tokenizer_object=backend,
        do_lower_case=True,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
        model_input_names=list(BERT_INPUT_NAMES),
    )


def corpus_tokenizer(data_args: DataArguments) -> PreTrainedTokenizerBase:
    """The named tokenizer; for the embedded corpus (and no name given), the shipped one (or one trained on it and
    cached, at another vocabulary size)."""
    if data_args.tokenizer is None and uses_embedded_corpus(data_args):
        return keep_token_type_ids(cached_wordpiece(data_args.tokenizer_vocab_size))  # caches from before the pin too
    name = data_args.tokenizer or DEFAULT_TOKENIZER
    if missing := missing_local_path(name):
        raise missing
    if Path(name).is_dir() and not any((Path(name) / file).is_file() for file in TOKENIZER_FILES):
        held = sorted(path.name for path in Path(name).iterdir())
        raise UserError(
            f"Tokenizer folder {name!r} holds no vocabulary: none of {', '.join(TOKENIZER_FILES)} is in it (it holds "
            f"{', '.join(held[:10]) + (', ...' if len(held) > 10 else '') if held else 'nothing'}); pass --tokenizer "
            "with a folder written by a tokenizer's save_pretrained, or a Hub id such as bert-base-uncased."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except OSError as error:
        raise UserError(
            f"Tokenizer {name!r} is neither a local tokenizer folder nor on the Hub or in the local Hugging Face "
            f"cache ({error.__class__.__name__}); pass --tokenizer PATH to a saved tokenizer."
        ) from error
    except ValueError as error:  # e.g. a truncated tokenizer.json
        raise UserError(f"Tokenizer {name!r} cannot be read: {error.__class__.__name__}: {error}") from error
    return keep_token_type_ids(checked_tokenizer(tokenizer, name))


# The files from which AutoTokenizer builds a tokenizer's vocabulary (fast, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


MLM_SPECIAL_TOKENS = ("cls_token", "sep_token", "mask_token", "pad_token")  # BERT's [CLS] [SEP] [MASK] [PAD]


def checked_tokenizer(tokenizer: PreTrainedTokenizerBase, name: str) -> PreTrainedTokenizerBase:
    """`tokenizer`, if masked-language-model pre-training can use it: a vocabulary, and the special tokens that wrap
    each text ([CLS] ... [SEP]), replace masked tokens ([MASK]) and pad batches ([PAD]), each in the vocabulary."""
    if len(tokenizer) == 0:
        raise UserError(
            f"Tokenizer {name!r} has no vocabulary (0 tokens); pass --tokenizer with a trained tokenizer, e.g. "
            "bert-base-uncased."
        )
    missing = []
    for role in MLM_SPECIAL_TOKENS:
        token = getattr(tokenizer, role)
        token_id = None if token is None else tokenizer.convert_tokens_to_ids(token)
        if token_id is None or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
            missing.append(role if token is None else f"{role} {token!r} (not in the vocabulary)")
    if missing:
        raise UserError(
            f"Tokenizer {name!r} ({len(tokenizer)} tokens) lacks {', '.join(missing)}: masked-language-model "
            "pre-training needs all of cls_token, sep_token, mask_token and pad_token (BERT's [CLS] [SEP] [MASK] "
            "[PAD]); pass --tokenizer with a BERT-style tokenizer."
        )
    return tokenizer


# The embedded corpus's WordPiece tokenizer at the default vocabulary size, trained once and shipped: tokenizers'
# WordPiece trainer breaks ties between equally frequent pairs in no fixed order, so two trainings on the same text
# differ (a few hundred tokens of 8,192), and with them the main job's figures.
SHIPPED_WORDPIECE = Path(__file__).parent.parent / "corpus" / "wordpiece-8192"


SHIPPED_WORDPIECE_SIZE = 8192


def cached_wordpiece(vocab_size: int) -> PreTrainedTokenizerBase:
    """The WordPiece tokenizer of the embedded corpus: the shipped one at its vocabulary size; at another size, one
    trained on the corpus, from the cache, (re)trained and cached if missing or unreadable (not reproducible across
    trainings, see SHIPPED_WORDPIECE). The folder appears whole (written under a temporary name, then renamed); the
    lock makes parallel runs on one machine train it once."""
    if vocab_size == SHIPPED_WORDPIECE_SIZE:
        return AutoTokenizer.from_pretrained(SHIPPED_WORDPIECE, trust_remote_code=False)
    digest = hashlib.sha256(corpus_files.EMBEDDED_CORPUS.read_bytes()).hexdigest()[:16]
    # "-bert": saved as BertTokenizer; older caches (no suffix) saved under 5.x name a class 4.x lacks
    folder = cache_dir() / "tokenizers" / f"wordpiece-{vocab_size}-{digest}-bert"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{folder}.lock"):
            if folder.exists():
                try:
                    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
                except Exception as error:  # truncated JSON, missing files, a vocabulary tokenizers rejects, ...
                    print(
                        f"The cached tokenizer {folder} is unreadable ({error.__class__.__name__}); training it again."
                    )
            texts = load_dataset("text", data_files=str(corpus_files.EMBEDDED_CORPUS), split="train")["text"]
            with written_folder(folder, ".tmp", "the tokenizer cache", "training", existing="replace") as staging:
                train_wordpiece(texts, vocab_size).save_pretrained(staging)
    except OSError as error:
        raise UserError(
            f"Cannot write the tokenizer cache {folder} ({error.__class__.__name__}: {error}); set SYMBERT_CACHE to a "
            "writable folder."
        ) from error
    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
