#!/usr/bin/env bash
# Evaluations a minute of the same search on all the GPUs of this machine, then restricted to one of them
# (issue 34: every evaluator kept busy; whatever the first run warms up favours the one-GPU run). Each search starts from a fresh database; its summary gives the
# evaluations a minute and how busy the evaluators were; benchmarks/evaluation_pace.py the steady pace.
# Each search builds into its own empty artifact cache (EVO_CACHE): a cache shared with the run before would
# hand the second search the first one's cubins (both start from the same seed and breed alike) for free.
#   benchmarks/evaluator_rate.sh OUT_DIR LABEL SECONDS [evo search arguments...]
# e.g. benchmarks/evaluator_rate.sh $OUT flashcore 90 --family flashcore
set -u
export COLUMNS=200
out=$1 label=$2 seconds=$3
shift 3
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
for visible in "$gpus" 0; do
  name="$label-gpus${visible//,/}"
  echo "== $name: CUDA_VISIBLE_DEVICES=$visible evo search $* --time-budget ${seconds}s"
  EVO_CACHE=$(mktemp -d) CUDA_VISIBLE_DEVICES=$visible python -m evo search --budget 1000000 "$@" --time-budget "${seconds}s" --db "$out/$name.db" \
    > "$out/$name.log" 2>&1
  echo "exit $?"
  grep -E "evaluations a minute|best time|workload  " "$out/$name.log" | tail -4
  python benchmarks/evaluation_pace.py "$out/$name.db"
done
