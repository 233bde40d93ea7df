"""Fixtures and hooks only, for every test file; the builders and assertions are in tests/helpers/."""

import os

import pytest
import torch

from helpers.corpora import tiny_corpus, tiny_sentences
from symbert import ATTENTION_TYPES

# the fixtures defined beside the helpers that use them (tests/helpers/), for every test file
pytest_plugins = ["helpers.glue", "helpers.integrations", "helpers.release", "helpers.runs"]


def pytest_configure(config):
    """Under pytest-xdist (README's `-n auto`), each worker computes on one thread, and so do the commands it launches:
    two workers of one thread each share the cores where two of two threads each would contend for them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)


@pytest.fixture(params=ATTENTION_TYPES)
def attention_type(request):
    return request.param


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """600 random sentences and a WordPiece tokenizer trained on them (tiny_corpus's layout); tests only read it."""
    return tiny_corpus(tmp_path_factory.mktemp("corpus"), tiny_sentences(600))
