"""The installed package holds every subpackage of the source tree: setuptools installs only what pyproject.toml's
`packages` lists, so a new folder left out of it works in an editable install and is missing from a wheel."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_source_package_is_listed_for_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed, folders = set(setuptools["packages"]), setuptools["package-dir"]
    found = set()
    for package, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    # a folder mapped on its own (symbert.training) is not also a subpackage of its parent's folder
    assert found - listed == set(), f"in the tree, not in pyproject.toml's packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed, not in the tree: {sorted(listed - found)}"
