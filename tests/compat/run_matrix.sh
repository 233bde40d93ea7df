#!/usr/bin/env bash
# transformers compatibility matrix (not part of pytest). On 2 CPU cores: a few minutes of pip per new environment,
# then about 10 minutes for the saves and the 16 loads.
#
#   tests/compat/run_matrix.sh [VERSION ...]     # default: 4.54.0 (oldest supported), 4.57.6 (last 4.x),
#                                                #   5.2.0 (last with the question-answering pipeline), 5.23.0
#
# For each transformers version: a virtual environment /tmp/symbert-compat/venv-VERSION (CPU torch 2.13.0 first, then
# this project with the pinned transformers), which saves every head and variant; then every environment loads every
# environment's folders in a fresh process that cannot import the project (trust_remote_code=True), so both
# same-version and cross-version loading are checked, for the models and their tokenizers (those of the model
# folders and the WordPiece tokenizer pre-training trains: same ids as the saving version, and BERT's token_type_ids
# for sentence pairs). Prints the Markdown table that docs/integrations.md shows.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${SYMBERT_COMPAT_DIR:-/tmp/symbert-compat}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(4.54.0 4.57.6 5.2.0 5.23.0)
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONPATH=
mkdir -p "$work"

for version in "${versions[@]}"; do
    venv=$work/venv-$version
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import transformers as t; assert t.__version__ == '$version'" 2>/dev/null; then
        echo "== creating $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q torch==2.13.0
        "$venv/bin/pip" install -q -e "$repo" "transformers==$version"
    fi
    echo "== saving with transformers $version" >&2
    rm -rf "$work/saved-$version"
    (cd "$work" && "$venv/bin/python" "$repo/tests/compat/check_compat.py" save "$work/saved-$version" >/dev/null 2>&1)
done

echo "| saved by | loaded by | remote code | outputs identical (max abs diff) | tensors changed or missing on load | decoder tied after load | tied after resize_token_embeddings | question-answering pipeline | tokenizers load, same ids | pairs get BERT's token_type_ids | result |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
status=0
for saver in "${versions[@]}"; do
    for loader in "${versions[@]}"; do
        elsewhere=$(mktemp -d)  # empty working directory and module cache: only the folder's code can be used
        log=$work/load-$saver-by-$loader.log
        if ! row=$(cd "$elsewhere" && HF_MODULES_CACHE="$elsewhere/modules" "$work/venv-$loader/bin/python" \
            "$repo/tests/compat/check_compat.py" load "$work/saved-$saver" "$work/report-$saver-by-$loader.json" 2>"$log"); then
            status=1
            [ -n "$row" ] || row="| $saver | $loader | crashed: see $log | | | | | | | | FAIL |"
        fi
        echo "$row"
        rm -rf "$elsewhere"
    done
done
exit $status
