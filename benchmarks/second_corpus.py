"""The second pre-training corpus of the studies: the prose of the Python 3.11 documentation (modern technical
English: tutorial, library and language reference, HOWTOs, FAQ, What's New), with a WordPiece tokenizer trained on it.

    python benchmarks/second_corpus.py                # apt-get download, then build
    python benchmarks/second_corpus.py --deb python3.11-doc_3.11.2-6+deb12u9_all.deb

It takes Debian 12's `python3.11-doc` package (the version and sha256 below; a file that does not match is refused),
reads the reStructuredText sources it ships (html/_sources/**/*.rst.txt), keeps the prose paragraphs (no headings,
code, tables, directives or markup) and writes OUTPUT.txt.gz, one paragraph per line, and OUTPUT-wordpiece-8192/, an
uncased WordPiece tokenizer trained on it as the embedded corpus's shipped one was (`train_wordpiece`, 8,192 tokens).
The result ships in benchmarks/corpus/ (SOURCE.md there says why and under which licence), because Debian keeps
only the newest build of a package: this script rebuilds it while that build can still be downloaded.
"""

import gzip
import hashlib
import io
import lzma
import re
import subprocess
import tarfile
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically
from symbert.training.data.tokenizer import SHIPPED_WORDPIECE_SIZE, train_wordpiece

PACKAGE = "python3.11-doc"
VERSION = "3.11.2-6+deb12u9"
DEB_NAME = f"{PACKAGE}_{VERSION}_all.deb"
DEB_SHA256 = "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"
SOURCES = "usr/share/doc/python3.11/html/_sources/"
# Pages that are not prose: the generated changelog (one line per commit), the licence texts, Sphinx includes.
SKIPPED_PAGES = ("whatsnew/changelog.rst.txt", "license.rst.txt", "copyright.rst.txt", "includes/")
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "corpus" / "python_docs"

# Directives whose whole body is code, a table or an index, not prose.
CODE_DIRECTIVES = {
    "code-block", "sourcecode", "doctest", "testcode", "testsetup", "testcleanup", "testoutput", "productionlist",
    "literalinclude", "highlight", "parsed-literal", "index", "toctree", "list-table", "csv-table", "tabularcolumns",
    "raw", "include", "image", "figure", "module", "currentmodule", "program", "moduleauthor", "sectionauthor",
}  # fmt: skip
DIRECTIVE = re.compile(r"\.\.\s+([\w:-]+)::")
RULE = re.compile(r"^\s*([=\-~*^\"#+`'.:_|])\1{2,}[=\-+ |]*$")  # section underlines, transitions, table borders
BULLET = re.compile(r"^\s*(?:[-*+•]|#\.|\d+\.|\(?[a-z\d]\))\s+")
FIELD = re.compile(r"^\s*:[\w .-]+:\s+")  # a field list's name, e.g. ":param x:"
ROLE = re.compile(r":(?:[\w+.-]+:)+`([^`]+)`")
LINK = re.compile(r"`([^`<]+?)\s*(?:<[^>]*>)?`__?")
SENTENCE_END = tuple(".!?:")


def fetch_package(folder: Path) -> Path:
    """`apt-get download` the pinned package into `folder` (needs Debian's package lists: `apt-get update`)."""
    try:
        result = subprocess.run(
            ["apt-get", "download", f"{PACKAGE}={VERSION}"], cwd=folder, capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"cannot run apt-get download {PACKAGE}={VERSION}: {error}; pass --deb FILE") from error
    debs = list(folder.glob(f"{PACKAGE}_*.deb"))
    if result.returncode != 0 or not debs:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"apt-get download {PACKAGE}={VERSION} failed ({last}); pass --deb FILE")
    return debs[0]


def checked_deb(path: Path) -> bytes:
    """The package's bytes, if its sha256 is the pinned one."""
    if not path.is_file():
        raise UserError(f"--deb {path}: no such file")
    blob = path.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != DEB_SHA256:
        raise UserError(f"{path} has sha256 {digest}, not {DEB_SHA256} ({DEB_NAME})")
    return blob


def deb_data_tar(blob: bytes) -> tarfile.TarFile:
    """The data.tar.* member of a .deb (an ar archive), opened."""
    if not blob.startswith(b"!<arch>\n"):
        raise UserError("not a .deb (ar) archive")
    position = 8
    while position + 60 <= len(blob):
        name = blob[position : position + 16].decode().strip().rstrip("/")
        size = int(blob[position + 48 : position + 58])
        data = blob[position + 60 : position + 60 + size]
        position += 60 + size + size % 2  # members are 2-byte aligned
        if name.startswith("data.tar"):
            if name.endswith(".xz"):
                data = lzma.decompress(data)
            return tarfile.open(fileobj=io.BytesIO(data))
    raise UserError("the .deb holds no data.tar")


def documentation_pages(blob: bytes) -> Iterator[tuple[str, str]]:
    """(page, reStructuredText) for each documentation source in the .deb, in path order, less SKIPPED_PAGES."""
    with deb_data_tar(blob) as tar:
        members = {m.name.removeprefix("./"): m for m in tar if m.isfile()}
        for name in sorted(members):
            page = name.removeprefix(SOURCES)
            if name.startswith(SOURCES) and name.endswith(".rst.txt") and not page.startswith(SKIPPED_PAGES):
                yield page, tar.extractfile(members[name]).read().decode("utf-8")


def prose_lines(rst: str) -> Iterator[str]:
    """The lines of `rst` less code: literal blocks (after `::`), code and index directives, comments and link
    targets, directive lines and their options. Left-out lines become blank lines, so paragraphs stay apart."""
    skip_deeper_than = None  # skip lines indented more than this (the body of a code block)
    literal_after = None  # the indentation of a paragraph that ended with `::`
    after_directive = False
    for line in rst.splitlines():
        indent, text = len(line) - len(line.lstrip()), line.strip()
        if skip_deeper_than is not None:
            if not text or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if literal_after is not None and text:
            if indent > literal_after:
                skip_deeper_than = literal_after
                literal_after = None
                yield ""
                continue
            literal_after = None
        if after_directive and text.startswith(":"):  # a directive's options, e.g. ":synopsis: ..."
            continue
        after_directive = False
        if directive := DIRECTIVE.match(text):
            after_directive = True
            if directive.group(1) in CODE_DIRECTIVES:
                skip_deeper_than = indent
            yield ""
            continue
        if text.startswith(".."):  # a comment, a link target or a footnote, with its indented lines
            skip_deeper_than = indent
            yield ""
            continue
        if text.endswith("::"):
            literal_after = indent
            text = text[:-2].rstrip() + (":" if not text[:-2].endswith(" ") else "")
        yield text


def plain(text: str) -> str:
    """`text` without reStructuredText inline markup: roles, literals, links, emphasis, footnote references."""
    text = re.sub(r"\s*\[(?:#[\w-]*|\d+)\]_", "", text)  # footnote references
    text = ROLE.sub(lambda m: role_text(m.group(1)), text)
    text = re.sub(r"``(.+?)``", r"\1", text)
    text = LINK.sub(r"\1", text)
    text = re.sub(r"\*\*(\S(?:.*?\S)?)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])", r"\1", text)
    text = text.replace("\\ ", "").replace("\\", "")
    return " ".join(text.split())


def role_text(content: str) -> str:
    """What a role such as :func:`~os.path.join` or :ref:`the tutorial <tut-intro>` shows: its title, else its target
    (`~` keeps the last dotted part, `!` only turns off the link)."""
    if match := re.match(r"(.+?)\s*<[^>]*>$", content):
        return match.group(1)
    if content.startswith("~"):
        return content[1:].split(".")[-1]
    return content.lstrip("!")


def is_prose(paragraph: str) -> bool:
    """A paragraph of sentences: six words or more, ending like a sentence, mostly letters (not code or a table)."""
    words = paragraph.split()
    letters = sum(c.isalpha() or c.isspace() for c in paragraph)
    return len(words) >= 6 and paragraph.rstrip(")\"'").endswith(SENTENCE_END) and letters >= 0.85 * len(paragraph)


def paragraphs(rst: str) -> Iterator[str]:
    """The prose paragraphs of one page, each list item on its own, as plain text."""
    rst = unicodedata.normalize("NFC", rst.replace("\r\n", "\n"))
    for block in re.split(r"\n\s*\n", "\n".join(prose_lines(rst))):
        lines = block.strip("\n").splitlines()
        if not lines or lines[0].lstrip().startswith(">>>") or any(RULE.match(line) for line in lines):
            continue  # a doctest, a heading (title and underline) or a table
        items, item = [], []
        for line in lines:
            if BULLET.match(line) and item and " ".join(item).count("``") % 2 == 0:  # not inside a literal
                items.append(item)
                item = []
            item.append(BULLET.sub("", line, count=1) if not item else line)
        for item in [*items, item]:
            paragraph = plain(FIELD.sub("", " ".join(item)))
            if is_prose(paragraph):
                yield paragraph


def gzip_text(lines: list[str]) -> bytes:
    """One line per paragraph, gzip level 9 with no time or name in the header, so a rebuild is byte-for-byte equal."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as file:
        file.write(("\n".join(lines) + "\n").encode("utf-8"))
    return buffer.getvalue()


def build(blob: bytes, output: Path) -> list[str]:
    """Write OUTPUT.txt.gz from the package `blob`; the paragraphs."""
    lines = [paragraph for _, page in documentation_pages(blob) for paragraph in paragraphs(page)]
    if not lines:
        raise UserError("the package holds no documentation prose")
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(output.with_name(output.name + ".txt.gz"), lambda file: file.write(gzip_text(lines)), binary=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    def run(argv: list[str]) -> None:
        parser = command_parser(__doc__)
        parser.add_argument("--deb", type=Path, help=f"the downloaded {DEB_NAME}; by default apt-get downloads it")
        parser.add_argument(
            "--output", type=Path, default=DEFAULT_OUTPUT, help="writes OUTPUT.txt.gz and OUTPUT-wordpiece-8192/"
        )
        args = parser.parse_args(argv)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            blob = checked_deb(args.deb or fetch_package(Path(folder)))
        lines = build(blob, args.output)
        tokenizer_dir = args.output.with_name(f"{args.output.name}-wordpiece-{SHIPPED_WORDPIECE_SIZE}")
        train_wordpiece(lines, SHIPPED_WORDPIECE_SIZE).save_pretrained(tokenizer_dir)
        text = "\n".join(lines) + "\n"
        print(
            f"{len(lines)} paragraphs, {len(text.split())} words, {len(text.encode())} bytes -> "
            f"{args.output}.txt.gz and {tokenizer_dir}/ in {time.perf_counter() - started:.0f} s"
        )

    run_command(run, argv)


if __name__ == "__main__":
    main()
