"""Load saved model folders as a user without this project would, and report on them as JSON.

    python fresh_load.py FOLDER [FOLDER ...] [--auto_class NAME ...] [--trust_remote_code BOOL ...]
                         [--texts JSON] [--inputs FILE ...] [--all_outputs] [--outputs FILE] [--fill_mask JSON]

This file is a script first: it runs in a fresh interpreter in which `import symbert` fails, so each folder loads
from its own code with `trust_remote_code=True`, or, with `--trust_remote_code false`, with transformers' own classes
only (a plain BERT export). It imports nothing of this project (only the standard library, torch and transformers),
so it runs from any path. Pre-training's fill-mask example, the release validation and the tests all load folders
through `load_in_fresh_process`, which runs it.

Each folder's report: the loaded class and its module, the weights that differ from model.safetensors
("reinitialised") or are missing from it, whether the MLM decoder is tied to the word embeddings, and on request the
tokenizer's class and the input ids of `--texts`, the top-5 fill-mask predictions of `--fill_mask`; `--outputs` saves
{folder: output tensors} of the model on `--inputs`, else on `--texts`. A folder that fails to load is reported with
its "error"; "symbert_imported" says whether the package was imported anyway.
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

NO_INPUTS = "-"  # the --inputs value of a folder that has no inputs file: it runs on --texts, if given


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
    parser.add_argument(
        "--trust_remote_code",
        nargs="+",
        choices=["true", "false"],
        default=["true"],
        help="true: load with the folder's own code; false: with transformers' own classes only (a folder that needs "
        "code fails to load): one for every folder, or one per folder",
    )
    parser.add_argument(
        "--texts",
        help='JSON list of sentences ("{mask}" marks the masked word) to encode (input ids reported) and, without '
        "--inputs, to run the model on",
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        help=f"file holding the model's inputs (tensors only): a name found in each folder, or a path; one for every "
        f"folder, or one per folder ({NO_INPUTS!r} for a folder that runs on --texts)",
    )
    parser.add_argument(
        "--all_outputs",
        action="store_true",
        help="run with output_hidden_states=True and save every output tensor by name (hidden states as "
        "hidden_states.0, hidden_states.1, ...) instead of the output tuple",
    )
    parser.add_argument(
        "--outputs", help="file to save {folder: [output tensors]} in ({folder: {name: tensor}} with --all_outputs)"
    )
    parser.add_argument("--fill_mask", help='JSON list of sentences ("{mask}" marks the masked word) to fill in')
    args = parser.parse_args(argv)
    for option in ("auto_class", "trust_remote_code", "inputs"):
        values = getattr(args, option)
        if values is not None and len(values) not in (1, len(args.folders)):
            parser.error(f"--{option} takes one value or one per folder ({len(args.folders)}), not {len(values)}")
    return args


def per_folder(values: list[str] | None, folders: list[str]) -> list[str | None]:
    """An option's value for each folder: its one value for all of them, or one per folder; None where not given."""
    if values is None:
        return [None] * len(folders)
    return values * len(folders) if len(values) == 1 else values


def missing_code(folder: str) -> str | None:
    """A one-line error for a local folder whose config.json's `auto_map` names code files the folder lacks (copied
    without its .py files, or saved by code that did not write them): transformers would say the file is missing at a
    Hub address made of the folder's path. None when nothing named is missing, or nothing can be read."""
    try:
        auto_map = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return None
    references = auto_map.values() if isinstance(auto_map, dict) else []
    names = {  # "module.Class" (a "repo--module.Class" is another repository's code, not the folder's)
        f"{str(item).rsplit('.', 1)[0]}.py"
        for ref in references
        for item in (ref if isinstance(ref, list) else [ref])
        if item and "--" not in str(item)
    }
    missing = sorted(name for name in names if not (Path(folder) / name).is_file())
    if not missing:
        return None
    return (
        f"{folder} lacks {', '.join(missing)}, the model code its config.json's auto_map names for "
        "trust_remote_code=True: copy the folder with its .py files, or save the model again with save_pretrained "
        "after `import symbert` (which writes them)."
    )


def load_and_report(
    folder: str, auto_class: str, remote_code: bool, inputs_file: str | None, args: argparse.Namespace, outputs: dict
) -> dict:
    import torch
    import transformers
    from safetensors.torch import load_file

    if remote_code and (message := missing_code(folder)):
        raise FileNotFoundError(message)
    model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=remote_code).eval()
    report = {"class": type(model).__name__, "module": type(model).__module__}
    tokenizer = None
    if args.texts or args.fill_mask:  # as the model: with custom code mapped in config.json, false fails to load
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=remote_code)
        report["tokenizer"] = {"class": type(tokenizer).__name__, "module": type(tokenizer).__module__}
    inputs = None
    if args.texts:
        texts = [text.format(mask=tokenizer.mask_token) for text in json.loads(args.texts)]
        inputs = dict(tokenizer(texts, padding=True, return_tensors="pt"))
        report["input_ids"] = inputs["input_ids"].tolist()
    if inputs_file not in (None, NO_INPUTS):
        inputs = torch.load(Path(folder) / inputs_file, weights_only=True)  # tensors only; a path stays itself
    if inputs is not None:
        with torch.no_grad():
            if args.all_outputs:
                outputs[folder] = named_outputs(model(**inputs, output_hidden_states=True, return_dict=True))
            else:
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


def named_outputs(outputs) -> dict:
    """Every output tensor by name, in fp32: tuples (the hidden states) as name.0, name.1, ..."""
    tensors = {}
    for name, value in outputs.items():
        if isinstance(value, tuple):
            tensors.update({f"{name}.{i}": tensor.float() for i, tensor in enumerate(value)})
        else:
            tensors[name] = value.float()
    return tensors


def main(argv: list[str] | None = None) -> None:
    sys.meta_path.insert(0, BlockProject())
    args = parse_arguments(argv)
    import torch

    reports, outputs = {}, {}
    settings = zip(
        args.folders,
        per_folder(args.auto_class, args.folders),
        per_folder(args.trust_remote_code, args.folders),
        per_folder(args.inputs, args.folders),
        strict=True,
    )
    for folder, auto_class, remote_code, inputs_file in settings:
        try:
            reports[folder] = load_and_report(folder, auto_class, remote_code == "true", inputs_file, args, outputs)
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
