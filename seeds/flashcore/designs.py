"""flashcore's named design points: genomes that stand for its designs and their variants, which the tests
(screen, correctness on the GPU) and the benchmarks (A/B timings, reports) share."""

from evo.seeds.flashcore.spec import FAMILY

# the FlashAttention-2 design point: mma.sync both ways, softmax in registers, Q in registers
FA2_LIKE = FAMILY.seed_genomes[0].replace(
    block_m=64, block_n_d64=64, warps_d64=4, block_n_d128=64, warps_d128=4, qk="mma", pv="mma", softmax="registers",
    reduce="shuffle", exp2=True, layout="swizzled", kv_loads="cp_async2", q_in_registers=True)
# the throughput design point: 128-row blocks; at D = 64 FA2's tile (a warp owns 32 rows x 128 keys),
# at D = 128 a warp owns 16 rows (32 would not fit the registers)
LARGE_TILES = FA2_LIKE.replace(block_m=128, block_n_d64=128, warps_d64=4, block_n_d128=128, warps_d128=8,
                               q_in_registers=False)
# the mission-shape design point with its K/V stages shared by a cluster of 2 blocks (TMA multicast)
SHARED_STAGES = FA2_LIKE.replace(block_m=32, warps_d64=8, block_n_d128=32, warps_d128=8, kv_split=4, kv_share_d64=2)
# the mission-shape design point whose keys are split over 2 blocks of the grid (merged through a
# global workspace by the last block to finish): 64 query rows, 8 warps = 4 row groups x 2 key splits
GRID_SPLIT = FA2_LIKE.replace(warps_d64=8, warps_d128=8, kv_split=2, grid_kv_split=2)
# the mission design point: 32 query rows, 4 warps = 2 row groups x 2 key splits of 128-key tiles,
# 3 cp.async stages; and the same with its stages announced on mbarriers (warps run free)
MISSION = FA2_LIKE.replace(block_m=32, block_n_d64=128, block_n_d128=32, kv_split=2, kv_loads="cp_async3")
ANNOUNCED = MISSION.replace(stage_wait="mbarrier")
# keys split over the 2 blocks of a cluster, and over 2 blocks x 2 warps (the merge stores into peers
# and into its own block)
CLUSTER_SPLIT = FA2_LIKE.replace(cluster_kv_split=2)
CLUSTER_WARP_SPLIT = MISSION.replace(block_m=64, cluster_kv_split=2, kv_loads="cp_async2")
# wgmma at D = 64: two warpgroups (key splits) of 64 rows over the mission's 32 query rows (half of
# each is padding); and one warpgroup on 64 query rows, the large-shape design point
WGMMA_PADDED = MISSION.replace(wgmma_d64=True, warps_d64=8)
# the mission design point with Q and its K/V stages brought in by TMA, and with Q K^T of each warp's next
# tile beside the softmax and P V of its current one
TMA_STAGES = MISSION.replace(tma_stages_d64=True)
OVERLAP = TMA_STAGES.replace(overlap_tiles=True)
WGMMA_ROWS = FA2_LIKE.replace(block_n_d64=128, wgmma_d64=True, kv_loads="cp_async3", block_n_d128=32, warps_d128=4)
# FlashAttention-3's design (flashcore_ws.cuh): a producer warpgroup, two consumer warpgroups of 64 rows,
# 128-key tiles, 2 stages, registers moved to the consumers; with the softmax beside P V within a
# warpgroup, and the two consumers in ping-pong (3 stages, the longest causal blocks first); one consumer
# of 64-key tiles
WARP_SPECIALIZED = FAMILY.seed_genomes[0].replace(
    warp_specialized=True, block_m=128, block_n_d64=128, block_n_d128=128, kv_loads="cp_async2", ws_registers=True)
WS_OVERLAP = WARP_SPECIALIZED.replace(ws_overlap=True)
WS_PINGPONG = WS_OVERLAP.replace(ws_pingpong=True, ws_heavy_first=True, kv_loads="cp_async3")
WS_ONE_CONSUMER = WARP_SPECIALIZED.replace(block_m=64, ws_registers=False, block_n_d64=64, block_n_d128=64)
WS_THREE_CONSUMERS = WS_PINGPONG.replace(block_m=192, block_n_d128=64, kv_loads="cp_async2")  # FA3's 192-row tiles
