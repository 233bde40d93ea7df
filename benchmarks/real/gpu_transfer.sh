#!/usr/bin/env bash
# The staged transfer of transfer_study.sh on one GPU, with a budget 20 times the CPU's, to show each type's ceiling:
# symbert-transfer from all-MiniLM-L6-v2 with --steps (the CPU study's steps times 20), then the UCI sentences
# (symbert-glue's protocol, seeds 1, 2, 3). The GPU machine reaches no network, so everything travels in one folder:
#
#   bash benchmarks/real/gpu_transfer.sh pack .gpu-transfer    # here: the teacher as a bf16 copy, the data, wheels
#   bash benchmarks/real/gpu_transfer.sh run .gpu-transfer OUT STEPS TYPE...   # there (CUDA, torch and transformers)
#
# pack writes (at most about 60 MB): teacher/ (all-MiniLM-L6-v2 with its weights in bfloat16, the sentence-transformers
# files kept), data/ (the State of the Union train text, xz-compressed, and the UCI sentences), wheels/ (datasets and
# evaluate with the small packages they need that a CUDA image with torch usually lacks). run installs them into a
# private folder, installs this project without its dependencies, and writes OUT/transfer-TYPE, OUT/glue-TYPE and
# OUT/summary.md (each type's held-out cosine after every stage and its UCI score, written as each type ends).
# The CPU study's steps: 51 + 206 (pairwise, 12 minutes); 20 times that is about 5,000 steps a type. At about 3
# minutes a type on an H100 or H200 (estimated, not measured), a 10-minute call holds two or three types.
set -euo pipefail
mode=$1; PACK=$2; shift 2
HERE=$(cd "$(dirname "$0")/../.." && pwd)

if [ "$mode" = pack ]; then
  BERT=~/.cache/symbert-real/all-MiniLM-L6-v2
  DATA=~/.cache/symbert-real/data
  python "$HERE/benchmarks/real/fetch.py" > /dev/null
  rm -rf "$PACK.tmp" && mkdir -p "$PACK.tmp/teacher" "$PACK.tmp/data" "$PACK.tmp/wheels"
  cp -r "$BERT"/. "$PACK.tmp/teacher/"
  python - "$BERT/model.safetensors" "$PACK.tmp/teacher/model.safetensors" <<'EOF'
import sys

from safetensors.torch import load_file, save_file
import torch

weights = load_file(sys.argv[1])
save_file({name: tensor.to(torch.bfloat16) for name, tensor in weights.items()}, sys.argv[2], metadata={"format": "pt"})
EOF
  xz -T0 -c "$DATA/general_english/train.txt" > "$PACK.tmp/data/train.txt.xz"
  cp -r "$DATA/uci_sentiment" "$PACK.tmp/data/"
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$PACK.tmp/wheels" datasets evaluate dill multiprocess
  rm -rf "$PACK" && mv "$PACK.tmp" "$PACK"
  du -sh "$PACK"
  exit
fi

[ "$mode" = run ] || { echo "gpu_transfer.sh: error: the mode is 'pack' or 'run', not '$mode'" >&2; exit 2; }
OUT=$1; STEPS=$2; shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$PACK"/wheels/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e "$HERE"
xz -dc "$PACK/data/train.txt.xz" > /tmp/train.txt
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$OUT/summary.md" ] || printf '%s\n' "| type | steps | held-out cosine: copy -> converted -> attention -> model | UCI: mean (std), 3 seeds | seconds |" \
  "|---|---|---|---:|---:|" > "$OUT/summary.md"
for type in "$@"; do
  start=$(date +%s)
  symbert-transfer "$PACK/teacher" "$OUT/transfer-$type" --attention_type "$type" --steps "$STEPS" \
    --train_files /tmp/train.txt 2>&1 | grep -v "it/s\]" || true
  symbert-glue --model "$OUT/transfer-$type" --tasks uci_sentiment --seeds 1,2,3 --data_dir "$PACK/data" \
    --output_dir "$OUT/glue-$type" > "$OUT/glue-$type.log" 2>&1 || tail -n 5 "$OUT/glue-$type.log"
  python3 - "$OUT" "$type" "$(( $(date +%s) - start ))" <<'EOF'
import json
import sys
from pathlib import Path

out, kind, seconds = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
record = json.loads((out / f"transfer-{kind}" / "transfer.json").read_text())
cosine = record["held_out_mean_cosine"]
uci = json.loads((out / f"glue-{kind}" / "glue_results.json").read_text())["aggregates"]["tasks"]["uci_sentiment"]
stages = " -> ".join(f"{cosine[key]:.3f}" for key in ("copy", "convert", "attention", "model"))
with open(out / "summary.md", "a") as summary:
    summary.write(f"| {kind} | {record['stages']} | {stages} | {uci['mean']:.2f} ({uci['std']:.2f}) | {seconds} s |\n")
EOF
done
cat "$OUT/summary.md"
