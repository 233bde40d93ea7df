"""Fixtures and hooks only, for every test file; the builders and assertions are in tests/helpers/."""

import pytest

from helpers.corpora import tiny_corpus, tiny_sentences
from symbert import ATTENTION_TYPES

# the fixtures defined beside the helpers that use them (tests/helpers/), for every test file
pytest_plugins = ["helpers.glue", "helpers.integrations", "helpers.release", "helpers.runs"]


@pytest.fixture(params=ATTENTION_TYPES)
def attention_type(request):
    return request.param


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """600 random sentences and a WordPiece tokenizer trained on them (tiny_corpus's layout); tests only read it."""
    return tiny_corpus(tmp_path_factory.mktemp("corpus"), tiny_sentences(600))
