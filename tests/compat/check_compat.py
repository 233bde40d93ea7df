"""One side of the transformers compatibility matrix (run by `run_matrix.sh`, not by pytest).

    python tests/compat/check_compat.py save DIR          # with `symbert` installed: every head and variant
    python tests/compat/check_compat.py load DIR REPORT   # fresh process, `symbert` blocked: trust_remote_code=True

`save` writes DIR/<attention_type>/<auto class>/ (model folder + inputs.pt + expected.pt) with the transformers
installed here. Every parameter gets a random offset before saving, so a tensor that is re-initialised on load (zeros,
ones or fresh random values) shows up both in the outputs and in the tensor comparison. `load` loads each folder with
the Auto class named by its folder, compares the outputs and every tensor of model.safetensors with the loaded
model, checks that the MLM decoder is tied to the word embeddings (weight and bias) after loading and after
`resize_token_embeddings`, loads each folder's tokenizer and DIR/tokenizer/ (the WordPiece tokenizer pre-training
trains, `symbert.training.data.tokenizer.train_wordpiece`, saved next to a SymBERT model as pre-training saves it) with
AutoTokenizer and checks they give the ids the saving version gave and BERT's token_type_ids for sentence pairs (0 for
[CLS] A [SEP], 1 for B [SEP]; transformers 5.0 to 5.2 load a tokenizer next to a SymBERT config as TokenizersBackend,
which returns them only when its tokenizer_config.json names them in model_input_names), writes the details to REPORT
(JSON), prints one Markdown table row and exits 1 on failure.
Where this transformers still has the extractive `question-answering` pipeline (gone from 5.3), it also runs it on
each question-answering folder and checks that every answer is a span of the context.
"""

import importlib.abc
import json
import os
import sys

AUTO_CLASSES = (
    "AutoModel",
    "AutoModelForMaskedLM",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
    "AutoModelForMultipleChoice",
)
VOCAB_SIZE = 99
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"word{i}" for i in range(VOCAB_SIZE - 5)]
QA_CONTEXT = "word7 word8 word9 word10 word11"
# what the tokenizers must encode alike in every version: cased, accented, CJK, punctuation, unknown words, pairs
TOKENIZER_TEXTS = [
    "The old man walked slowly along the bank of the river.",
    "Héllo WORLD, naïve café 中文 ¿qué?",
    "",
    "word7 word8",
]
TOKENIZER_PAIRS = [["Who walked?", "The old man walked."], ["word1 word2", QA_CONTEXT]]


def tokenizer_ids(tokenizer):
    """The ids and token types (None where not returned) of TOKENIZER_TEXTS and TOKENIZER_PAIRS, and the special
    tokens' ids."""
    single, pairs = tokenizer(TOKENIZER_TEXTS), tokenizer(*zip(*TOKENIZER_PAIRS))
    return {
        "single": single["input_ids"],
        "pairs": pairs["input_ids"],
        "pair_token_types": pairs.get("token_type_ids"),
        "special": {name: getattr(tokenizer, f"{name}_token_id") for name in ("pad", "unk", "cls", "sep", "mask")},
    }


def bert_segments(ids):
    """Whether the pairs' token types are BERT's: 0 for [CLS] A [SEP], 1 for B [SEP] (all zeros is what a tokenizer
    that returns no token_type_ids gives the model)."""
    if ids["pair_token_types"] is None:
        return False
    sep = ids["special"]["sep"]
    return all(
        types == [0] * (pair.index(sep) + 1) + [1] * (len(pair) - pair.index(sep) - 1)
        for pair, types in zip(ids["pairs"], ids["pair_token_types"])
    )


def save_tokenizer(tokenizer, folder):
    assert bert_segments(tokenizer_ids(tokenizer)), "the saving version's tokenizer gives no BERT segments for pairs"
    tokenizer.save_pretrained(folder)
    with open(os.path.join(folder, "tokenizer_ids.json"), "w") as file:
        json.dump(tokenizer_ids(tokenizer), file)


class BlockProject(importlib.abc.MetaPathFinder):
    """Makes `import symbert` fail, so loading must use the code saved in the folder."""

    def find_spec(self, name, path=None, target=None):
        if name == "symbert" or name.startswith("symbert."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by check_compat.py load)")
        return None


def model_inputs(torch, auto_name):
    generator = torch.Generator().manual_seed(5)
    input_ids = torch.randint(1, VOCAB_SIZE, (4, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[3, 4:] = 0
    input_ids[attention_mask == 0] = 0
    if auto_name == "AutoModelForMultipleChoice":  # [batch, choices, seq]
        return {"input_ids": input_ids.view(2, 2, 9), "attention_mask": attention_mask.view(2, 2, 9)}
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def save(root):
    import torch
    import transformers

    import symbert

    os.makedirs(root)
    with open(os.path.join(root, "vocab.txt"), "w") as file:
        file.write("\n".join(VOCAB) + "\n")
    vocab_argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"  # renamed in 5.0
    # as symbert-pretrain saves a --tokenizer with the model: keeping model_input_names (token_type_ids included) in
    # its tokenizer_config.json, without which 5.0 to 5.2 load it next to a SymBERT config as TokenizersBackend,
    # which returns no token_type_ids
    tokenizer = transformers.BertTokenizerFast(
        **{vocab_argument: os.path.join(root, "vocab.txt")},
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    assert tokenizer("word7").input_ids == [2, VOCAB.index("word7"), 3], "the tokenizer did not read vocab.txt"
    import gzip
    from itertools import islice

    from symbert.training.data.corpus_files import EMBEDDED_CORPUS
    from symbert.training.data.tokenizer import train_wordpiece

    with gzip.open(EMBEDDED_CORPUS, "rt", encoding="utf-8") as corpus:
        trained = train_wordpiece(list(islice(corpus, 2000)), 1024)
    # saved as pre-training saves it: next to a SymBERT model (its config.json is what 5.0 to 5.2 look at)
    config = symbert.SymBertConfig.from_preset("tiny", vocab_size=len(trained), pad_token_id=trained.pad_token_id)
    symbert.SymBertForMaskedLM(config).save_pretrained(os.path.join(root, "tokenizer"))
    save_tokenizer(trained, os.path.join(root, "tokenizer"))
    with open(os.path.join(root, "attention_types.json"), "w") as file:  # the loading side cannot import symbert
        json.dump(list(symbert.ATTENTION_TYPES), file)
    for attention_type in symbert.ATTENTION_TYPES:
        for index, auto_name in enumerate(AUTO_CLASSES):
            torch.manual_seed(index)
            config = symbert.SymBertConfig.from_preset(
                "tiny",
                attention_type=attention_type,
                vocab_size=VOCAB_SIZE,
                max_position_embeddings=64,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                num_labels=3,
            )
            model = symbert.AUTO_CLASSES[getattr(transformers, auto_name)](config).eval()
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(0.05 * torch.randn_like(parameter))
            folder = os.path.join(root, attention_type, auto_name)
            model.save_pretrained(folder)
            save_tokenizer(tokenizer, folder)
            inputs = model_inputs(torch, auto_name)
            with torch.no_grad():
                expected = list(model(**inputs).to_tuple())
            torch.save(inputs, os.path.join(folder, "inputs.pt"))
            torch.save(expected, os.path.join(folder, "expected.pt"))
    with open(os.path.join(root, "saved_by.txt"), "w") as file:
        file.write(transformers.__version__)


def has_qa_pipeline():
    from transformers.pipelines import SUPPORTED_TASKS

    return "question-answering" in SUPPORTED_TASKS


def mlm_tied(model):
    head, embeddings = model.cls.predictions, model.get_input_embeddings()
    return head.decoder.weight is embeddings.weight and head.decoder.bias is head.bias


def check_tokenizer(transformers, folder):
    """Whether AutoTokenizer loads `folder`'s tokenizer and it gives the ids the saving version gave."""
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    except Exception as error:  # e.g. a tokenizer class this version does not know
        return {"tokenizer_loads": False, "tokenizer_error": f"{type(error).__name__}: {error}"[:300]}
    with open(os.path.join(folder, "tokenizer_ids.json")) as file:
        expected = json.load(file)
    got = tokenizer_ids(tokenizer)
    return {
        "tokenizer_loads": True,
        "tokenizer_class": type(tokenizer).__name__,
        "tokenizer_ids_identical": got == expected,
        "tokenizer_pair_segments": bert_segments(got),  # BERT's token_type_ids for pairs, not none (all zeros)
    }


def check_folder(torch, transformers, load_file, folder, auto_name):
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        outputs = list(model(**torch.load(os.path.join(folder, "inputs.pt"))).to_tuple())
    expected = torch.load(os.path.join(folder, "expected.pt"))
    saved = load_file(os.path.join(folder, "model.safetensors"))
    state = model.state_dict()
    result = {
        "class": type(model).__name__,
        "remote_code": type(model).__module__.startswith("transformers_modules"),
        "outputs_identical": len(outputs) == len(expected) and all(map(torch.equal, outputs, expected)),
        "max_abs_diff": max((got - want).abs().max().item() for got, want in zip(outputs, expected)),
        "changed_on_load": [name for name, tensor in saved.items() if not torch.equal(state[name], tensor)],
        "not_in_file": [name for name in state if name not in saved and not name.startswith("cls.predictions.decoder")],
        **check_tokenizer(transformers, folder),
    }
    if auto_name == "AutoModelForQuestionAnswering" and has_qa_pipeline():
        answers = transformers.pipeline("question-answering", model=folder, trust_remote_code=True, device="cpu")(
            question="word1 word2", context=QA_CONTEXT, top_k=3
        )
        result["qa_pipeline"] = len(answers) == 3 and all(
            a["answer"] and a["answer"] == QA_CONTEXT[a["start"] : a["end"]] and 0 < a["score"] <= 1 for a in answers
        )
    if auto_name == "AutoModelForMaskedLM":
        result["tied_after_load"] = mlm_tied(model)
        model.resize_token_embeddings(VOCAB_SIZE + 7)
        with torch.no_grad():  # (5.2 leaves the decoder's out_features attribute stale, for BERT too: check the logits)
            logits = model(**torch.load(os.path.join(folder, "inputs.pt"))).logits
        result["tied_after_resize"] = mlm_tied(model) and logits.shape[-1] == VOCAB_SIZE + 7
    result["ok"] = (
        result["remote_code"]
        and result["outputs_identical"]
        and not result["changed_on_load"]
        and not result["not_in_file"]
        and result.get("tied_after_load", True)
        and result.get("tied_after_resize", True)
        and result.get("qa_pipeline", True)
        and result.get("tokenizer_ids_identical", False)
        and result.get("tokenizer_pair_segments", False)
    )
    return result


def load(root, report_path):
    sys.meta_path.insert(0, BlockProject())
    import torch
    import transformers
    from safetensors.torch import load_file

    with open(os.path.join(root, "attention_types.json")) as file:
        attention_types = json.load(file)
    results = {
        f"{attention_type}/{auto_name}": check_folder(
            torch, transformers, load_file, os.path.join(root, attention_type, auto_name), auto_name
        )
        for attention_type in attention_types
        for auto_name in AUTO_CLASSES
    }
    trained = check_tokenizer(transformers, os.path.join(root, "tokenizer"))
    results["tokenizer"] = {
        **trained,
        "ok": trained.get("tokenizer_ids_identical", False) and trained.get("tokenizer_pair_segments", False),
    }
    assert not any(m == "symbert" or m.startswith("symbert.") for m in sys.modules), "the project was imported"
    with open(os.path.join(root, "saved_by.txt")) as file:
        saved_by = file.read()
    report = {"saved_by": saved_by, "loaded_by": transformers.__version__, "torch": torch.__version__, "cases": results}
    with open(report_path + ".tmp", "w") as file:
        json.dump(report, file, indent=1)
    os.replace(report_path + ".tmp", report_path)

    def count(key):
        cases = [r for r in results.values() if key in r]
        return f"{sum(bool(r[key]) for r in cases)}/{len(cases)}"

    changed = sum(len(r.get("changed_on_load", [])) + len(r.get("not_in_file", [])) for r in results.values())
    max_diff = max(r["max_abs_diff"] for r in results.values() if "max_abs_diff" in r)
    ok = all(r["ok"] for r in results.values())
    print(
        f"| {saved_by} | {transformers.__version__} | {count('remote_code')} | {count('outputs_identical')} "
        f"({max_diff:.1e}) | {changed} | {count('tied_after_load')} | {count('tied_after_resize')} | "
        f"{count('qa_pipeline') if has_qa_pipeline() else 'removed'} | {count('tokenizer_ids_identical')} | "
        f"{count('tokenizer_pair_segments')} | "
        f"{'pass' if ok else 'FAIL'} |"
    )
    return ok


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command == "save" and len(sys.argv) == 3:
        save(sys.argv[2])
    elif command == "load" and len(sys.argv) == 4:
        sys.exit(0 if load(sys.argv[2], sys.argv[3]) else 1)
    else:
        sys.exit(f"usage: {sys.argv[0]} save DIR | load DIR REPORT.json (got {sys.argv[1:]})")
