#!/usr/bin/env bash
# The staged-transfer study of benchmarks/results/real-minilm-transfer/: attention types made from all-MiniLM-L6-v2
# by the one command (symbert-transfer: conversion, the attention stage, the model stage) on general English (the
# State of the Union addresses, benchmarks/real/fetch.py), then fine-tuned on the UCI sentences (3 seeds) beside the
# teacher fine-tuned identically; the agreement on held-out and other-domain text, and the tables.
#
#   bash benchmarks/real/transfer_study.sh OUTPUTS MINUTES TYPE...    # one lane: transfer and fine-tune each TYPE
#   bash benchmarks/real/transfer_study.sh OUTPUTS MINUTES teacher    # the teacher's fine-tuning
#   bash benchmarks/real/transfer_study.sh OUTPUTS MINUTES untrained TYPE...   # from scratch: no teacher, no training
#   bash benchmarks/real/transfer_study.sh OUTPUTS MINUTES tables TYPE...
#
# Each step skips what a finished earlier run left (symbert-transfer goes on where it stopped; symbert-glue skips
# finished seeds). The measured runs: two lanes of 1 torch thread each on 2 cores, MINUTES 25 (mhe_add 12).
# TASKS (default uci_sentiment; e.g. TASKS=uci_sentiment,spam_assassin) names the tasks fine-tuned: the UCI
# sentences by symbert-glue's protocol into glue-*, SpamAssassin's long e-mails with 1 epoch of 64-token inputs (as in
# ../results/real-minilm/) into spam-*; TRAIN the text distilled on (default the State of the Union train text; e.g.
# TRAIN=$DATA/task_text/uci_sentiment.txt); SEED the stages' seed (default 42).
set -euo pipefail
OUT=$1; MINUTES=$2; shift 2
BERT=~/.cache/symbert-real/all-MiniLM-L6-v2
DATA=~/.cache/symbert-real/data
TRAIN=${TRAIN:-$DATA/general_english/train.txt}
TASKS=${TASKS:-uci_sentiment}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python benchmarks/real/fetch.py > /dev/null

fine_tune() {  # MODEL NAME: each task of TASKS, 3 seeds, into OUT/glue-NAME (UCI) and OUT/spam-NAME (SpamAssassin)
  if [[ ,$TASKS, == *,uci_sentiment,* ]]; then
    symbert-glue --model "$1" --tasks uci_sentiment --seeds 1,2,3 --data_dir "$DATA" --output_dir "$OUT/glue-$2"
  fi
  if [[ ,$TASKS, == *,spam_assassin,* ]]; then
    symbert-glue --model "$1" --tasks spam_assassin --num_train_epochs 1 --max_length 64 --seeds 1,2,3 \
      --data_dir "$DATA" --output_dir "$OUT/spam-$2"
  fi
}

if [ "$1" = teacher ]; then
  fine_tune "$BERT" teacher
  exit
fi
if [ "$1" = untrained ]; then  # each type in MiniLM's shape at random initialisation, fine-tuned alike
  shift
  for type in "$@"; do
    python benchmarks/real/untrained.py "$BERT" "$OUT/untrained-$type" --attention_type "$type"
    fine_tune "$OUT/untrained-$type" "untrained-$type"
  done
  exit
fi
if [ "$1" = tables ]; then
  shift
  RESULTS=benchmarks/results/real-minilm-transfer
  models=(); rows=("teacher=$OUT/glue-teacher"); spam_rows=("teacher=$OUT/spam-teacher")
  for type in "$@"; do
    models+=("$OUT/transfer-$type/stages/convert" "$OUT/transfer-$type/stages/attention" "$OUT/transfer-$type")
    minutes=$(python -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['minutes']:g}\")" "$OUT/transfer-$type/transfer-plan.json")
    rows+=("$type, one command ($minutes min)=$OUT/glue-transfer-$type")
    spam_rows+=("$type, one command ($minutes min)=$OUT/spam-transfer-$type")
  done
  if [[ ,$TASKS, == *,spam_assassin,* ]]; then
    python benchmarks/downstream_table.py --reference teacher --rows "${spam_rows[@]}" --output "$RESULTS/downstream-spam"
  fi
  python benchmarks/agreement.py --bert "$BERT" --models "${models[@]}" --output "$RESULTS/agreement" \
    --domains "speeches (held-out addresses)=$DATA/general_english/held_out.txt" \
    "licences=$DATA/other_domains/licences.txt" "reviews=$DATA/other_domains/reviews.txt" \
    "e-mails=$DATA/other_domains/emails.txt"
  python benchmarks/downstream_table.py --reference teacher --rows "${rows[@]}" --output "$RESULTS/downstream-uci"
  exit
fi
for type in "$@"; do
  symbert-transfer "$BERT" "$OUT/transfer-$type" --attention_type "$type" --minutes "$MINUTES" --train_files "$TRAIN" \
    --seed "${SEED:-42}"
  fine_tune "$OUT/transfer-$type" "transfer-$type"
done
