#!/usr/bin/env bash
# The study of benchmarks/results/real-minilm/: every attention type made from all-MiniLM-L6-v2 (converted, then
# distilled on the embedded corpus), its agreement with the teacher, and its downstream scores on the UCI sentences
# and SpamAssassin beside the teacher fine-tuned identically, the same type trained from scratch, majority and chance.
# Every step skips what a finished earlier run left (symbert-glue skips finished seeds; a finished pre-training run
# is refused, so its folder is checked first). About 4 hours on 2 CPU cores; run steps in parallel on more.
#
#   bash benchmarks/real/study.sh [OUTPUTS]      (default OUTPUTS: outputs/real-minilm)
set -euo pipefail
OUT=${1:-outputs/real-minilm}
BERT=~/.cache/symbert-real/all-MiniLM-L6-v2
DATA=~/.cache/symbert-real/data
UCI=(--tasks uci_sentiment --seeds 1,2,3 --data_dir "$DATA")
# SpamAssassin's e-mails are long: one epoch of 64-token inputs keeps a seed near 6 minutes on 2 cores
SPAM=(--tasks spam_assassin --num_train_epochs 1 --max_length 64 --seeds 1,2,3 --data_dir "$DATA")
MINILM_SHAPE='{"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536}'
TYPES=(pairwise symmetric no_query shared gqa mhe_add mhe_mul)  # original and symmetric_init convert exactly
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

pretrained() { [ -f "$1/training_summary.json" ]; }
distil() {  # distil TYPE STEPS OUTPUT EVAL_STEPS SAVE_STEPS
  pretrained "$3" || symbert-pretrain --recipe cpu-demo --init_from "$OUT/minilm-$1" --teacher "$BERT" \
    --max_seq_length 128 --per_device_train_batch_size 16 --learning_rate 2e-4 --warmup_steps 20 --max_steps "$2" \
    --eval_steps "$4" --eval_blocks 64 --save_steps "$5" --logging_steps 10 --eval_on_start true --output_dir "$3"
}
from_scratch() {  # from_scratch TYPE: the same shape, tokenizer, data and steps as the distillation, no teacher
  pretrained "$OUT/scratch-minilm-$1" || symbert-pretrain --recipe cpu-demo --attention_type "$1" \
    --tokenizer "$BERT" --config_overrides "$MINILM_SHAPE" --max_seq_length 128 --per_device_train_batch_size 16 \
    --learning_rate 5e-4 --warmup_steps 20 --max_steps 200 --eval_steps 50 --eval_blocks 64 --save_steps 100 \
    --logging_steps 10 --output_dir "$OUT/scratch-minilm-$1"
}

python benchmarks/real/fetch.py
symbert-glue --model "$BERT" "${UCI[@]}" --output_dir "$OUT/glue-teacher"
symbert-glue --model "$BERT" "${SPAM[@]}" --output_dir "$OUT/spam-teacher"
for type in original symmetric_init "${TYPES[@]}"; do
  [ -d "$OUT/minilm-$type" ] || symbert-convert "$BERT" "$OUT/minilm-$type" --attention_type "$type"
done
for type in "${TYPES[@]}"; do
  distil "$type" 200 "$OUT/distil-minilm-$type" 50 100
  symbert-glue --model "$OUT/minilm-$type" "${UCI[@]}" --output_dir "$OUT/glue-minilm-$type"
  symbert-glue --model "$OUT/distil-minilm-$type" "${UCI[@]}" --output_dir "$OUT/glue-distil-minilm-$type"
done
# the longest distillation the targets allow (30 minutes on this machine), for the type closest after 200 steps
distil pairwise 450 "$OUT/distil30-minilm-pairwise" 75 150
symbert-glue --model "$OUT/distil30-minilm-pairwise" "${UCI[@]}" --output_dir "$OUT/glue-distil30-minilm-pairwise"
symbert-glue --model "$OUT/distil-minilm-pairwise" "${SPAM[@]}" --output_dir "$OUT/spam-distil-minilm-pairwise"
from_scratch pairwise
symbert-glue --model "$OUT/scratch-minilm-pairwise" "${UCI[@]}" --output_dir "$OUT/glue-scratch-minilm-pairwise"

python benchmarks/agreement.py --bert "$BERT" --output benchmarks/results/real-minilm/agreement \
  --models "$OUT"/minilm-{original,symmetric_init} \
  $(for type in "${TYPES[@]}"; do echo "$OUT/minilm-$type" "$OUT/distil-minilm-$type"; done) \
  "$OUT/distil30-minilm-pairwise"/checkpoint-{150,300} "$OUT/distil30-minilm-pairwise"
rows=("teacher=$OUT/glue-teacher")
for type in "${TYPES[@]}"; do
  rows+=("$type, converted=$OUT/glue-minilm-$type" "$type, distilled 200 steps=$OUT/glue-distil-minilm-$type")
done
rows+=("pairwise, distilled 450 steps=$OUT/glue-distil30-minilm-pairwise")
rows+=("pairwise, from scratch=$OUT/glue-scratch-minilm-pairwise")
python benchmarks/downstream_table.py --reference teacher --rows "${rows[@]}" \
  --output benchmarks/results/real-minilm/downstream-uci
python benchmarks/downstream_table.py --reference teacher --rows "teacher=$OUT/spam-teacher" \
  "pairwise, distilled 200 steps=$OUT/spam-distil-minilm-pairwise" --output benchmarks/results/real-minilm/downstream-spam

# the release, staged and validated (add --push and a namespace of your own to publish)
symbert-release "$OUT/distil30-minilm-pairwise" --results "$OUT/glue-distil30-minilm-pairwise" \
  --namespace symbert --name_template "symbert-minilm-l6-{attention_type}" \
  --base_model sentence-transformers/all-MiniLM-L6-v2 \
  --baselines "all-MiniLM-L6-v2, the teacher=$OUT/glue-teacher/glue_results.json" \
  "pairwise from scratch=$OUT/glue-scratch-minilm-pairwise/glue_results.json" \
  --output_dir "$OUT/release"
