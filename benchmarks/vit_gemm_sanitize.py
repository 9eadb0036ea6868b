"""Launch vit_gemm design points once per shape and check each output (GPU); for compute-sanitizer.

    compute-sanitizer --tool memcheck --report-api-errors no --kernel-name kns=vit_gemm \
        python benchmarks/vit_gemm_sanitize.py          # also --tool racecheck, --tool synccheck

The genomes of tests/test_vit_gemm.py (ping-pong, the cp.async prefetch, the row-wise epilogue,
clusters with TMA multicast, pos by TMA boxes, the folded table finished in the staging, K split over a
cluster's blocks, 192-column tiles) and the seed, on the family's two small shapes
(batch 8, and M and N multiples of no tile). Outputs are NaN-poisoned before each launch.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _reporting import launch_each
from evo.seeds import get_family
from test_vit_gemm import (CLUSTERED, CLUSTERED_192, CLUSTERED_WIDE, FOLDED, FOLDED_PER_TILE, FOLDED_PINGPONG, PINGPONG,
                           PINGPONG_192, PREFETCH, PREFETCH_TMA, PREFETCH_TWO, ROWWISE, SEED, SPLIT_FOUR, SPLIT_SMALL,
                           SPLIT_WIDE)

family = get_family("vit_gemm")
genomes = {"seed": SEED, "ping-pong": PINGPONG, "cp.async prefetch": PREFETCH, "two prefetch buffers": PREFETCH_TWO,
           "pos by TMA": PREFETCH_TMA, "row-wise": ROWWISE, "cluster ping-pong": CLUSTERED,
           "cluster cooperative": CLUSTERED_WIDE, "folded table": FOLDED, "folded table ping-pong": FOLDED_PINGPONG,
           "folded table, one block a tile": FOLDED_PER_TILE, "K split over 8 blocks": SPLIT_SMALL,
           "K split over 4 blocks": SPLIT_FOUR, "K split over 2, cooperative": SPLIT_WIDE,
           "192 columns, ping-pong": PINGPONG_192, "192 columns, cluster": CLUSTERED_192}
shapes = [s for s in family.shapes if not s.mission and s["m"] < 10_000]
launch_each(family, genomes, shapes, max_abs_error=family.tolerance.max_abs)
