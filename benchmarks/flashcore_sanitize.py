"""Launch FlashCore design points once per shape and check each output (GPU); for compute-sanitizer.

    compute-sanitizer --tool memcheck --report-api-errors no --kernel-name kns=flashcore \
        python benchmarks/flashcore_sanitize.py          # also --tool racecheck, --tool synccheck
    ... python benchmarks/flashcore_sanitize.py --warp-specialized    # the warp-specialised design points
    ... python benchmarks/flashcore_sanitize.py --warp-specialized --only "three consumers"    # one of them

The genomes: the bounded 0.5x run's best and second best, SHARED_STAGES (TMA multicast, mbarriers),
LARGE_TILES, cluster key splits of 2 and 4 (the merge's st.async stores into the peers, on mbarriers),
one of 2 blocks x 2 warps (stores into the own block as well), grid key splits of 2 and 4 (global workspace,
tickets), the mission design point with TMA stages (3 and 2, the stages refilled on long shapes) and with
the overlap of tiles, and the seed; shapes with and without tails,
causal and not, D = 64 and 128. Outputs are NaN-poisoned before each launch.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _reporting import launch_each
from evo.seeds import get_family
from evo.seeds.flashcore.spec import attention_shape
from test_flashcore import CLUSTER_SPLIT, CLUSTER_WARP_SPLIT, GRID_SPLIT, LARGE_TILES, OVERLAP, SHARED_STAGES, TMA_STAGES

fam = get_family("flashcore")
best = fam.space.genome({"block_m": 32, "block_n_d128": 32, "block_n_d64": 64, "cluster_kv_split": 1, "exp2": True, "kv_loads": "cp_async2", "kv_split": 4, "layout": "swizzled", "pv": "mma", "q_in_registers": True, "qk": "mma", "reduce": "shuffle", "softmax": "registers", "warps_d128": 8, "warps_d64": 8, "kv_share_d64": 1})
second = best.replace(block_n_d64=128, kv_loads="cp_async3", kv_split=2, warps_d64=4, warps_d128=4)
genomes = {"search best (bounded run)": best, "2nd best": second, "SHARED_STAGES": SHARED_STAGES,
           "LARGE_TILES": LARGE_TILES, "cluster split 2": CLUSTER_SPLIT,
           "cluster split 4": CLUSTER_SPLIT.replace(cluster_kv_split=4), "cluster 2 x warps 2": CLUSTER_WARP_SPLIT,
           "grid split 2": GRID_SPLIT, "grid split 4": GRID_SPLIT.replace(grid_kv_split=4), "TMA stages": TMA_STAGES,
           "TMA overlap": OVERLAP, "TMA overlap x2, 64 keys": OVERLAP.replace(kv_loads="cp_async2", block_n_d64=64),
           "seed": fam.seed_genomes[0]}
shapes = [attention_shape("mission", 1, 8, 512, 64), attention_shape("ragged", 2, 4, 300, 64, causal=True),
          attention_shape("long", 1, 2, 2048, 64), attention_shape("d128", 1, 8, 512, 128), attention_shape("d128ragged", 1, 2, 200, 128, causal=True)]
if "--warp-specialized" in sys.argv:  # FlashAttention-3's design, fp16 and bf16, grouped heads
    from test_flashcore import WARP_SPECIALIZED, WS_ONE_CONSUMER, WS_OVERLAP, WS_PINGPONG, WS_THREE_CONSUMERS

    genomes = {"warp-specialised": WARP_SPECIALIZED, "overlap": WS_OVERLAP, "ping-pong": WS_PINGPONG,
               "one consumer": WS_ONE_CONSUMER, "three consumers": WS_THREE_CONSUMERS}
    shapes = shapes + [attention_shape("gqa_bf16", 1, 8, 700, 128, causal=True, h_kv=2, bf16=True),
                       attention_shape("gqa_d64", 2, 4, 333, 64, h_kv=1, bf16=True),
                       attention_shape("long_d128", 1, 2, 1100, 128, causal=True),
                       # queries and keys apart: a chunk after a cache (lower right), SDPA's top left, cross-attention
                       attention_shape("chunk_lower_right", 1, 8, 300, 128, h_kv=2, bf16=True, kv=1000, lower_right=True),
                       attention_shape("queries_past_keys", 1, 2, 300, 128, causal=True, h_kv=1, bf16=True, kv=100),
                       attention_shape("cross", 2, 4, 450, 64, kv=77)]
if "--only" in sys.argv:  # --only NAME: the one design point of that name
    only = sys.argv[sys.argv.index("--only") + 1]
    genomes = {name: genome for name, genome in genomes.items() if name == only}
launch_each(fam, genomes, shapes, max_abs_error=0.02)
