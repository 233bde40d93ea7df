"""The tokenizer pre-training trains and saves is one every supported transformers (4.54 to 5.x) loads: its
tokenizer_config.json names a class both know, it round-trips with the same ids, and sentence pairs get BERT's
token_type_ids under every version. (tests/compat/run_matrix.sh loads it across versions.)"""

import gzip
import hashlib
import json
from itertools import islice

import pytest
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from helpers.tiny import tiny_config
from symbert import SymBertForMaskedLM
from symbert.training.arguments import DataArguments
from symbert.training.data import corpus_files
from symbert.training.data import loading as data

# classes that transformers 4.x (as BertTokenizerFast, from tokenizer.json) and 5.x both have; 5.x's
# "TokenizersBackend" (what a plain PreTrainedTokenizerFast saves as) is unknown to 4.x
LOADABLE_EVERYWHERE = {"BertTokenizer", "BertTokenizerFast"}
TEXTS = ["The old man walked slowly along the bank of the river.", "Héllo WORLD, naïve café 中文 ¿qué?", "", "x" * 120]
PAIRS = [["Who walked?", "The old man walked."], ["A question", "and its context"]]
BERT_INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
# How transformers 5.0 to 5.2 load a tokenizer saved next to a SymBERT config.json: their AutoTokenizer loads a
# folder whose tokenizer_config.json names another class than the one its model_type maps to (symbert maps to none)
# as TokenizersBackend, whose default model_input_names lack token_type_ids. 4.x has no such class; its generic
# PreTrainedTokenizerFast returns them.
GENERIC_TOKENIZER = getattr(transformers, "TokenizersBackend", transformers.PreTrainedTokenizerFast)


@pytest.fixture
def small_corpus(tmp_path, monkeypatch):
    """The embedded corpus's first 2000 lines as the embedded corpus, and a private tokenizer cache."""
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus_files.EMBEDDED_CORPUS, "rt", encoding="utf-8") as source, gzip.open(corpus, "wt") as target:
        target.writelines(islice(source, 2000))
    monkeypatch.setattr(corpus_files, "EMBEDDED_CORPUS", corpus)
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "cache"))


def test_pretraining_tokenizer_saves_as_a_class_every_version_loads(tmp_path, small_corpus):
    tokenizer = data.load_tokenizer(DataArguments(tokenizer_vocab_size=600))  # the embedded corpus: trained, cached
    folder = tmp_path / "model"
    tokenizer.save_pretrained(folder)  # as the Trainer saves the processing class with the model

    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] in LOADABLE_EVERYWHERE
    assert config["do_lower_case"] is True

    loaded = AutoTokenizer.from_pretrained(folder)
    assert loaded(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    pairs_loaded, pairs = loaded(*zip(*PAIRS)), tokenizer(*zip(*PAIRS))
    assert pairs_loaded["input_ids"] == pairs["input_ids"]
    assert pairs_loaded["token_type_ids"] == pairs["token_type_ids"]
    assert {0, 1} == set(pairs["token_type_ids"][0])  # segments as BERT's
    special = ("pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id", "mask_token_id")
    assert [getattr(loaded, name) for name in special] == [0, 1, 2, 3, 4] == [getattr(tokenizer, n) for n in special]
    assert len(loaded) == len(tokenizer) == 600

    # the same ids as the trained WordPiece pipeline itself (tokenizer.json), which earlier runs saved on its own
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [encoding.ids for encoding in backend.encode_batch(TEXTS)] == tokenizer(TEXTS)["input_ids"]
    assert tokenizer("Walked ALONG")["input_ids"] == tokenizer("walked along")["input_ids"]  # uncased

    # the cache hands back the same tokenizer
    again = data.load_tokenizer(DataArguments(tokenizer_vocab_size=600))
    assert type(again) is type(loaded) and again(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]


def bert_segments(tokenizer, pairs):
    """BERT's token_type_ids of each pair: 0 for [CLS] A [SEP], 1 for B [SEP]."""
    lengths = [[len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in pair] for pair in pairs]
    return [[0] * (a + 2) + [1] * (b + 1) for a, b in lengths]


def bert_vocab_tokenizer(folder):
    """A BertTokenizerFast from a vocab.txt, saved to `folder` as a --tokenizer folder is (no model_input_names)."""
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "walked", "?"]))
    vocab_argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"  # renamed in 5.0
    transformers.BertTokenizerFast(**{vocab_argument: str(folder / "vocab.txt")}).save_pretrained(folder)
    assert "model_input_names" not in json.loads((folder / "tokenizer_config.json").read_text())
    return folder


@pytest.mark.parametrize("source", ["trained", "--tokenizer"])
def test_pairs_get_token_type_ids_in_every_version(tmp_path, small_corpus, source):
    """Pre-training's tokenizer (the trained WordPiece, or a --tokenizer folder), saved with the model as the Trainer
    saves it, gives BERT's token_type_ids 0…0 1…1 for sentence pairs however it is loaded: by AutoTokenizer, and as the
    generic class transformers 5.0 to 5.2 load it as (its tokenizer_config.json keeps model_input_names)."""
    tokenizer_argument = None if source == "trained" else str(bert_vocab_tokenizer(tmp_path / "vocab-tokenizer"))
    tokenizer = data.load_tokenizer(DataArguments(tokenizer=tokenizer_argument, tokenizer_vocab_size=600))
    folder = tmp_path / "model"
    SymBertForMaskedLM(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_input_names"] == BERT_INPUT_NAMES

    expected = bert_segments(tokenizer, PAIRS)
    assert {0, 1} == set(expected[0])
    assert tokenizer(*zip(*PAIRS))["token_type_ids"] == expected
    for loaded in (
        AutoTokenizer.from_pretrained(folder, trust_remote_code=True),
        GENERIC_TOKENIZER.from_pretrained(folder),
    ):
        assert loaded.model_input_names == BERT_INPUT_NAMES, type(loaded).__name__
        pairs = loaded(*zip(*PAIRS))
        assert pairs["token_type_ids"] == expected, type(loaded).__name__
        assert pairs["input_ids"] == tokenizer(*zip(*PAIRS))["input_ids"]
        loaded.save_pretrained(tmp_path / "saved-again")  # e.g. by a fine-tuning Trainer: the names stay
        config = json.loads((tmp_path / "saved-again" / "tokenizer_config.json").read_text())
        assert config["model_input_names"] == BERT_INPUT_NAMES


def test_the_tokenizer_fingerprint_is_the_same_before_and_after_it_tokenises(tmp_path):
    # a resumed run compares the fingerprint a checkpoint saved: tokenising with truncation must not change it
    from symbert.training.data.tokenizer import tokenizer_fingerprint

    folder = bert_vocab_tokenizer(tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    before = tokenizer_fingerprint(tokenizer)
    tokenizer(TEXTS[0] * 20, truncation=True, max_length=16, padding="max_length")
    assert tokenizer_fingerprint(tokenizer) == before
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(folder)) == before
    # a freshly loaded tokenizer's is the one earlier versions saved in checkpoints and prepared folders
    fresh = AutoTokenizer.from_pretrained(folder).backend_tokenizer.to_str()
    assert before == hashlib.sha256(fresh.encode("utf-8")).hexdigest()[:16]


@pytest.mark.parametrize("split_special_tokens", [False, True])
def test_block_token_ids_are_the_tokenizer_call_s_whatever_its_last_call_set(tmp_path, split_special_tokens):
    # the blocks call the fast tokenizer's own pipeline; it must give what tokenizer(texts) gives, also after a call
    # that left truncation and padding set on that pipeline, and for text that spells a special token
    from symbert.training.data.tokenizer import token_ids_function

    folder = bert_vocab_tokenizer(tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder, split_special_tokens=split_special_tokens)
    tokenizer(TEXTS[0] * 20, truncation=True, max_length=16, padding="max_length")
    texts = [*TEXTS, "a [MASK] between [SEP] words", TEXTS[0] * 40]
    expected = tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]
    assert token_ids_function(tokenizer)(texts) == expected
    assert len(expected[-1]) > 16 and expected[0][0] == tokenizer.cls_token_id
    assert (tokenizer.mask_token_id in expected[-2]) is not split_special_tokens
