#!/bin/bash
# On the GPU machine (issue 35 and 36 figures): the CUDA skeleton family searched, exported and self-checked;
# `evo search --target 0.5x` (flashcore, default strategy) from fresh databases for seeds 0-2; a second run
# on seed 0's database (its measurements reused). Logs and databases under $OUT/logs, packed as $OUT/gpu1.tar.xz.
#     tar xJf .devdeps/site.tar.xz -C /tmp && export PYTHONPATH=/tmp/site:$PWD; bash benchmarks/target_half_searches.sh
L=$OUT/logs; mkdir -p "$L"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch; print('torch', torch.__version__)"; } > "$L/env.txt" 2>&1
timeout 120 python -m pytest -q -s -rs \
  tests/test_families.py::test_the_cuda_skeleton_searched_exported_and_self_checked_on_the_gpu > "$L/skeleton.log" 2>&1
for s in 0 1 2; do
  timeout 100 python -m evo search --target 0.5x --budget 600 --seed $s --db "$L/half-s$s.db" > "$L/half-s$s.log" 2>&1
done
timeout 80 python -m evo search --target 0.5x --budget 600 --seed 0 --db "$L/half-s0.db" > "$L/half-s0-again.log" 2>&1
python - "$L" > "$L/summary.txt" 2>&1 <<'PY'
import glob, sqlite3, sys
for path in sorted(glob.glob(sys.argv[1] + "/*.db")):
    for row in sqlite3.connect(path).execute("select id, strategy, seed, status, message from runs"):
        print(path.rsplit("/", 1)[1], *row)
PY
tar cJf "$OUT/gpu1.tar.xz" -C "$OUT" logs && rm -rf "$L"
