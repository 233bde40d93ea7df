"""The tokenizer pre-training trains and saves is one every supported transformers (4.54 to 5.x) loads: its
tokenizer_config.json names a class both know, and it round-trips with the same ids. (tests/compat/run_matrix.sh
loads it across versions.)"""

import gzip
import json
from itertools import islice

from tokenizers import Tokenizer
from transformers import AutoTokenizer

from symbert.training import data
from symbert.training.pretrain import DataArguments

# classes that transformers 4.x (as BertTokenizerFast, from tokenizer.json) and 5.x both have; 5.x's
# "TokenizersBackend" (what a plain PreTrainedTokenizerFast saves as) is unknown to 4.x
LOADABLE_EVERYWHERE = {"BertTokenizer", "BertTokenizerFast"}
TEXTS = ["The old man walked slowly along the bank of the river.", "Héllo WORLD, naïve café 中文 ¿qué?", "", "x" * 120]
PAIRS = [["Who walked?", "The old man walked."], ["A question", "and its context"]]


def test_pretraining_tokenizer_saves_as_a_class_every_version_loads(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(data.EMBEDDED_CORPUS, "rt", encoding="utf-8") as source, gzip.open(corpus, "wt") as target:
        target.writelines(islice(source, 2000))
    monkeypatch.setattr(data, "EMBEDDED_CORPUS", corpus)
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "cache"))
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
