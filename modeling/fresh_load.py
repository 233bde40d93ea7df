"""Load saved model folders as a user without this project would, and report on them as JSON.

    python fresh_load.py FOLDER [FOLDER ...] [--auto_class NAME ...] [--texts JSON | --inputs FILE]
                         [--outputs FILE] [--fill_mask JSON]

This file is a script first: it runs in a fresh interpreter in which `import symbert` fails, so each folder loads
from its own code with `trust_remote_code=True`. It imports nothing of this project (only the standard library,
torch and transformers), so it runs from any path. Pre-training's fill-mask example, the release validation and the
tests all load folders through `load_in_fresh_process`, which runs it.

Each folder's report: the loaded class and its module, the weights that differ from model.safetensors
("reinitialised") or are missing from it, whether the MLM decoder is tied to the word embeddings, and on request the
input ids of `--texts`, the top-5 fill-mask predictions of `--fill_mask`; `--outputs` saves {folder: output
tensors}. A folder that fails to load is reported with its "error"; "symbert_imported" says whether the package was
imported anyway.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType


class BlockProject:
    """A meta-path finder that makes `symbert` unimportable: a released folder must not need the package."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> None:
        if name == "symbert" or name.startswith("symbert."):
            raise ModuleNotFoundError(f"No module named {name!r} (a released folder must not need the symbert package)")
        return None


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fresh_load.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="saved model folders")
    parser.add_argument(
        "--auto_class",
        nargs="+",
        default=["AutoModelForMaskedLM"],
        help="transformers Auto class to load with: one for every folder, or one per folder",
    )
    parser.add_argument("--texts", help='JSON list of sentences ("{mask}" marks the masked word) to run the model on')
    parser.add_argument("--inputs", help="name of a file in each folder holding the model's inputs (tensors only)")
    parser.add_argument("--outputs", help="file to save {folder: [output tensors]} in")
    parser.add_argument("--fill_mask", help='JSON list of sentences ("{mask}" marks the masked word) to fill in')
    args = parser.parse_args(argv)
    if len(args.auto_class) not in (1, len(args.folders)):
        parser.error(f"--auto_class takes one name or one per folder ({len(args.folders)}), not {len(args.auto_class)}")
    if args.texts and args.inputs:
        parser.error("give --texts or --inputs, not both")
    return args


def load_and_report(folder: str, auto_class: str, args: argparse.Namespace, outputs: dict[str, list]) -> dict:
    import torch
    import transformers
    from safetensors.torch import load_file

    model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True).eval()
    report = {"class": type(model).__name__, "module": type(model).__module__}
    tokenizer = None
    if args.texts or args.fill_mask:  # trust_remote_code, else it asks: config.json maps custom code
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    inputs = None
    if args.texts:
        texts = [text.format(mask=tokenizer.mask_token) for text in json.loads(args.texts)]
        inputs = dict(tokenizer(texts, padding=True, return_tensors="pt"))
        report["input_ids"] = inputs["input_ids"].tolist()
    elif args.inputs:
        inputs = torch.load(Path(folder) / args.inputs, weights_only=True)  # tensors only
    if inputs is not None:
        with torch.no_grad():
            outputs[folder] = list(model(**inputs).to_tuple())
    saved, state = load_file(Path(folder) / "model.safetensors"), model.state_dict()
    report["reinitialised"] = [k for k, v in saved.items() if k in state and not torch.equal(state[k], v)]
    report["missing_from_file"] = [k for k in state if k not in saved and not k.startswith("cls.predictions.decoder")]
    report["tied"] = None
    if hasattr(model, "cls"):
        report["tied"] = model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    if args.fill_mask:
        fill_mask = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
        report["examples"] = []
        for sentence in json.loads(args.fill_mask):
            sentence = sentence.format(mask=tokenizer.mask_token)
            predictions = [(p["token_str"], round(p["score"], 3)) for p in fill_mask(sentence, top_k=5)]
            report["examples"].append({"sentence": sentence, "predictions": predictions})
    return report


def main(argv: list[str] | None = None) -> None:
    sys.meta_path.insert(0, BlockProject())
    args = parse_arguments(argv)
    import torch

    reports, outputs = {}, {}
    classes = args.auto_class * len(args.folders) if len(args.auto_class) == 1 else args.auto_class
    for folder, auto_class in zip(args.folders, classes, strict=True):
        try:
            reports[folder] = load_and_report(folder, auto_class, args, outputs)
        except Exception as error:  # reported per folder: the caller says what failed
            traceback.print_exc()
            reports[folder] = {"error": "".join(traceback.format_exception_only(error)).strip()}
    if args.outputs:
        torch.save(outputs, args.outputs)
    imported = any(m == "symbert" or m.startswith("symbert.") for m in sys.modules)
    print(json.dumps({"models": reports, "symbert_imported": imported}))


def load_in_fresh_process(folders: list[str | Path], *options: str | Path, timeout: float = 1800) -> dict:
    """The JSON report of this script run on `folders` (with command-line `options`) by a fresh interpreter in an
    empty temporary folder, offline, with its own remote-code cache and no PYTHONPATH."""
    with tempfile.TemporaryDirectory() as elsewhere:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_MODULES_CACHE": str(Path(elsewhere) / "modules"),
            "PYTHONPATH": "",
            "TOKENIZERS_PARALLELISM": "false",
        }
        result = subprocess.run(
            [sys.executable, __file__, *[str(Path(f).resolve()) for f in folders], *map(str, options)],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if result.returncode != 0:
        raise RuntimeError(
            f"Loading {', '.join(map(str, folders))} in a fresh process crashed:\n{result.stderr[-3000:]}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: a fresh process imports nothing from it
    main()
