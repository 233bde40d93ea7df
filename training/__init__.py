"""`symbert.training` once installed, so `..` is the package `symbert`: the modeling/ folder (see pyproject.toml)."""
