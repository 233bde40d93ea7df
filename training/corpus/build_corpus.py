#!/usr/bin/env python3
"""Rebuild english_prose.txt.gz from the downloaded registry packages.

Inputs (see SOURCE.md for where to get them); each may be given as the
downloaded archive (.deb or .tar.gz) or as a folder it was unpacked into:

  --janeaustenr  r-cran-janeaustenr_1.0.0-1_all.deb            (Debian)
  --lz4          golang-github-pierrec-lz4-dev_2.5.2-2_all.deb (Debian)
  --brotli       brotli-1.2.1.tar.gz                          (PyPI sdist)

Output: gzip (mtime=0, no file name) of UTF-8 text, one paragraph per line.
Standard library only; the output is byte-for-byte deterministic.
"""

import argparse
import gzip
import hashlib
import io
import lzma
import os
import re
import struct
import sys
import tarfile
import unicodedata
import zlib

AUSTEN_DIR = "usr/lib/R/site-library/janeaustenr/data/"
LZ4_DIR = "usr/share/gocode/src/github.com/pierrec/lz4/testdata/"
BROTLI_DIR = "brotli-1.2.1/tests/testdata/"

# sha256 of every file read from the packages, so a changed input is caught.
SHA256 = {
    AUSTEN_DIR + "Rdata.rdx": "cab8cbe4ce965d3b42b35c03383bafccc0eb78151f70e4748ead45270470c22f",
    AUSTEN_DIR + "Rdata.rdb": "8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21",
    LZ4_DIR + "pg1661.txt": "242ec73a70f0a03dcbe007e32038e7deeaee004aaec9a09a07fa322743440fa8",
    LZ4_DIR + "Mark.Twain-Tom.Sawyer.txt": "461eb7cb2d57d293fc680c836464c9125e4382be3596f7d415093ae9db8fcb0e",
    BROTLI_DIR + "alice29.txt": "7467306ee0feed4971260f3c87421154a05be571d944e9cb021a5713700c38f0",
}

# Works in order of first publication: (package option, R object or file
# name, title, author, year, text starts at / None, text ends before / None).
WORKS = [
    ("janeaustenr", "sensesensibility", "Sense and Sensibility", "Jane Austen", 1811, None, None),
    ("janeaustenr", "prideprejudice", "Pride and Prejudice", "Jane Austen", 1813, None, None),
    ("janeaustenr", "mansfieldpark", "Mansfield Park", "Jane Austen", 1814, None, None),
    ("janeaustenr", "emma", "Emma", "Jane Austen", 1815, None, None),
    # janeaustenr's copy ends with a modern editor's "A NOTE ON THE TEXT"
    # (from a Signet Classic edition), which is not Austen's: cut it.
    ("janeaustenr", "northangerabbey", "Northanger Abbey", "Jane Austen", 1817, None, "A NOTE ON THE TEXT"),
    ("janeaustenr", "persuasion", "Persuasion", "Jane Austen", 1817, None, None),
    ("brotli", "alice29.txt", "Alice's Adventures in Wonderland", "Lewis Carroll", 1865, None, None),
    # Skip the title page; start at Twain's preface.
    (
        "lz4",
        "Mark.Twain-Tom.Sawyer.txt",
        "The Adventures of Tom Sawyer",
        "Mark Twain",
        1876,
        "MOST of the adventures",
        None,
    ),
    # Skip the title page and table of contents.
    (
        "lz4",
        "pg1661.txt",
        "The Adventures of Sherlock Holmes",
        "Arthur Conan Doyle",
        1892,
        "ADVENTURE I. A SCANDAL",
        None,
    ),
]


# ---------------------------------------------------------------- reading


def read_member(container, member):
    """Bytes of `member` (a path inside the package) from a .deb, a .tar.gz
    or an unpacked folder."""
    if os.path.isdir(container):  # unpacked: try with and without the top folder
        for path in (os.path.join(container, member), os.path.join(container, member.split("/", 1)[1])):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    return f.read()
        raise FileNotFoundError(f"{member} not under {container}")
    with open(container, "rb") as f:
        blob = f.read()
    if blob.startswith(b"!<arch>\n"):  # .deb: an ar archive holding data.tar.*
        pos = 8
        while pos < len(blob):
            name = blob[pos : pos + 16].decode().strip().rstrip("/")
            size = int(blob[pos + 48 : pos + 58])
            data = blob[pos + 60 : pos + 60 + size]
            pos += 60 + size + (size & 1)
            if name.startswith("data.tar"):
                if name.endswith(".xz"):
                    data = lzma.decompress(data)
                elif name.endswith(".gz"):
                    data = gzip.decompress(data)
                return _from_tar(io.BytesIO(data), member)
        raise ValueError(f"no data.tar in {container}")
    return _from_tar(io.BytesIO(blob), member)


def _from_tar(fileobj, member):
    with tarfile.open(fileobj=fileobj) as tar:
        for info in tar:
            if info.name.removeprefix("./") == member:
                return tar.extractfile(info).read()
    raise FileNotFoundError(member)


def checked(container, member):
    data = read_member(container, member)
    digest = hashlib.sha256(data).hexdigest()
    if SHA256[member] != digest:
        sys.exit(f"sha256 mismatch for {member} in {container}: {digest}")
    return data


# ------------------------------------------- R lazy-load data (janeaustenr)


class RUnserializer:
    """Just enough of R's XDR serialization format for janeaustenr's data:
    character vectors, lists, pairlists, symbols and numbers."""

    def __init__(self, data):
        assert data[:2] == b"X\n", "not an XDR R serialization"
        self.b, self.p, self.refs = data, 2, []
        version = self.int()
        self.int(), self.int()  # writer and minimal reader R versions
        if version == 3:
            self.take(self.int())  # native encoding name

    def int(self):
        (v,) = struct.unpack(">i", self.b[self.p : self.p + 4])
        self.p += 4
        return v

    def take(self, n):
        self.p += n
        return self.b[self.p - n : self.p]

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & 512, flags & 1024
        if kind in (254, 253, 242, 251):  # NULL, global/empty env, missing
            return None
        if kind == 255:  # reference to an earlier symbol
            return self.refs[(flags >> 8 or self.int()) - 1]
        if kind == 1:  # symbol
            name = self.item()
            self.refs.append(name)
            return name
        if kind == 9:  # CHARSXP
            n = self.int()
            return None if n == -1 else self.take(n).decode("utf-8")
        if kind == 2:  # pairlist: (tag, value) pairs
            if has_attr:
                self.item()  # a pairlist's own attributes: not needed
            tag = self.item() if has_tag else None
            head = (tag, self.item())
            return [head] + (self.item() or [])
        n = self.int()
        if kind in (16, 19):  # character vector, list
            value = [self.item() for _ in range(n)]
        elif kind in (10, 13):  # logical, integer
            value = list(struct.unpack(f">{n}i", self.take(4 * n)))
        elif kind == 14:  # double
            value = list(struct.unpack(f">{n}d", self.take(8 * n)))
        else:
            raise ValueError(f"unsupported R type {kind}")
        if has_attr:
            attrs = dict(self.item())
            if "names" in attrs:
                return dict(zip(attrs["names"], value))
        return value


def austen_novels(container):
    """{object name: text} from the package's lazy-load database."""
    index = RUnserializer(gzip.decompress(checked(container, AUSTEN_DIR + "Rdata.rdx"))).item()
    rdb = checked(container, AUSTEN_DIR + "Rdata.rdb")
    novels = {}
    for name, (offset, length) in index["variables"].items():
        chunk = rdb[offset : offset + length]  # 4-byte length, then zlib data
        lines = RUnserializer(zlib.decompress(chunk[4:])).item()
        novels[name] = "\n".join(line or "" for line in lines)
    return novels


# ---------------------------------------------------------------- cleaning

PG_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", re.M | re.I)
PG_END = re.compile(r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg).*$", re.M | re.I)
HEADING = re.compile(r"^(chapter|volume|book|part|adventure)\s+([ivxlc]+|\d+|[a-z-]+)\b\W*$", re.I)
# A short paragraph ending in one of these is speech or a lead-in ("Tom said:").
SENTENCE_END = tuple(".!?:;,-\"'\u201d\u2019\u2014")
QUOTES = tuple("\"'\u201c\u2018")


def strip_gutenberg(text):
    """Drop the Project Gutenberg header and the licence footer."""
    start = PG_START.search(text)
    if start:
        text = text[start.end() :]
    end = PG_END.search(text)
    if end:
        text = text[: end.start()]
    return text


def is_heading(par):
    """Titles, chapter headings and the like, which are not prose."""
    if not re.search(r"[a-z]", par) and not par.startswith(QUOTES):
        return True  # all-caps titles, numerals, "* * *" (but keep "TOM!")
    if HEADING.match(par):  # "Chapter 1", "CHAPTER XII"
        return True
    words = par.split()
    return len(words) <= 4 and not par.endswith(SENTENCE_END)  # "By Jane Austen"


def is_chapter_title(par):
    """A short Title Case line such as "Who Stole the Tarts?" (only tested
    right after a chapter heading)."""
    words = par.split()
    capitalised = sum(w[0].isupper() for w in words)
    return len(words) <= 10 and not par.startswith(QUOTES) and 2 * capitalised >= len(words)


def paragraphs(text, start_at=None, cut_at=None):
    text = unicodedata.normalize("NFC", text.replace("\ufeff", ""))
    text = strip_gutenberg(text.replace("\r\n", "\n").replace("\r", "\n"))
    if start_at:
        text = text[text.index(start_at) :]
    if cut_at:
        text = text[: text.index(cut_at)]
    after_heading = False
    for block in re.split(r"\n[ \t]*\n", text):
        par = re.sub(r"(?<=-)[ \t]*\n[ \t]*", "", block)  # "sheep-\nbells"
        par = par.replace("_", "")  # _italic_ markup
        par = par.replace("`", "'")  # `quote' style in the Alice e-text
        par = " ".join(par.split())  # join wrapped lines, normalise spaces
        if not par:
            continue
        if is_heading(par):
            after_heading = bool(HEADING.match(par))
            continue
        if after_heading and is_chapter_title(par):
            continue
        after_heading = False
        if par.startswith("Produced by ") or par.startswith("["):
            continue  # e-text credits, editors' and transcribers' notes
        yield par


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--janeaustenr", required=True)
    ap.add_argument("--lz4", required=True)
    ap.add_argument("--brotli", required=True)
    ap.add_argument(
        "-o", "--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "english_prose.txt.gz")
    )
    args = ap.parse_args()

    austen = austen_novels(args.janeaustenr)
    out, stats = [], []
    for option, name, title, author, year, start_at, cut_at in WORKS:
        if option == "janeaustenr":
            text = austen[name]
        else:
            member = (LZ4_DIR if option == "lz4" else BROTLI_DIR) + name
            text = checked(getattr(args, option), member).decode("utf-8")
        pars = list(paragraphs(text, start_at, cut_at))
        out.extend(pars)
        stats.append((title, author, year, len(pars), sum(len(p.split()) for p in pars)))

    raw = ("\n".join(out) + "\n").encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    with open(args.output, "wb") as f:
        f.write(buf.getvalue())

    for title, author, year, n_par, n_words in stats:
        print(f"{title} ({author}, {year}): {n_par} paragraphs, {n_words} words")
    print(
        f"total: {len(out)} paragraphs, {sum(s[4] for s in stats)} words, "
        f"{len(raw)} bytes uncompressed, {buf.tell()} bytes gzip -> {args.output}"
    )


if __name__ == "__main__":
    main()
