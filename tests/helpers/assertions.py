"""Assertions shared by the tests: a command's one-line refusal, a folder's file names under either transformers."""

import pytest

# What a BERT tokenizer's save_pretrained writes beyond tokenizer.json and tokenizer_config.json under transformers
# 4.x (and not under 5.x), for tests that list a folder's files.
TOKENIZER_EXTRAS_4X = {"special_tokens_map.json", "vocab.txt"}


def file_names(names):
    """`names` sorted, without the 4.x-only tokenizer files."""
    return sorted(name for name in names if name not in TOKENIZER_EXTRAS_4X)


def assert_one_line(main, argv, message, capsys, **paths):
    """`main(argv)` refuses `argv` as a command does: exit status 2, one line on stderr that holds `message`. Each
    `{NAME}` in `argv` and `message` stands for the path `paths[NAME]`."""

    def fill(text):
        for name, path in paths.items():
            text = text.replace(f"{{{name}}}", str(path))
        return text

    with pytest.raises(SystemExit) as stopped:
        main([fill(arg) for arg in argv])
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and "\n" not in error and fill(message) in error, error
