#!/usr/bin/env bash
# Evaluations a minute of the same search restricted to one GPU of this machine, then on all of its GPUs
# (issue 34: every evaluator kept busy). Each search starts from a fresh database; its summary gives the
# evaluations a minute and how busy the evaluators were; benchmarks/evaluation_pace.py the steady pace.
#   benchmarks/evaluator_rate.sh OUT_DIR LABEL SECONDS [evo search arguments...]
# e.g. benchmarks/evaluator_rate.sh $OUT flashcore 90 --family flashcore
set -u
export COLUMNS=200
out=$1 label=$2 seconds=$3
shift 3
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
for visible in 0 "$gpus"; do
  name="$label-gpus${visible//,/}"
  echo "== $name: CUDA_VISIBLE_DEVICES=$visible evo search $* --time-budget ${seconds}s"
  CUDA_VISIBLE_DEVICES=$visible python -m evo search --budget 1000000 "$@" --time-budget "${seconds}s" --db "$out/$name.db" \
    > "$out/$name.log" 2>&1
  echo "exit $?"
  grep -E "evaluations a minute|best time|workload  " "$out/$name.log" | tail -4
  python benchmarks/evaluation_pace.py "$out/$name.db"
done
