"""nvfp4_gemm's named design points: genomes that stand for its designs and their variants, which the tests
(screen, correctness on the GPU) and the benchmarks (A/B timings, reports) share."""

from evo.seeds.nvfp4_gemm.spec import FAMILY

SEED = FAMILY.seed_genomes[0]
# M = 128 shapes: 56 output tiles of 128 x 128 along N = 7168, split over K to fill the SMs
SPLIT = SEED.replace(block_k=128, stages=4, split_k=4)
# a wide, short tile: 64 x 256, eight warps of 32 x 64
WIDE = SEED.replace(block_m=64, block_n=256, warps_m=2, warps_n=4, block_k=128, stages=3, split_k=2)
# dequantised once per block into fp16 shared-memory tiles, read by ldmatrix + mma.sync
SHARED = SPLIT.replace(dequant="shared", block_k=64, stages=3, split_k=2)
# the same tiles read by wgmma: two warpgroups of 128 x 64, split over K
WGMMA = SHARED.replace(mma="wgmma", warps_m=4, warps_n=2, stages=4)
# four warpgroups of 128 x 64 (a 128 x 256 tile), accumulating in the tensor core, up to 8 splits
WGMMA_WIDE = WGMMA.replace(block_n=256, warps_n=4, promote=False, split_k=8)
# operands swapped: b dequantised in registers as wgmma's A, a's rows its N from shared memory
SWAPPED = SPLIT.replace(warps_m=4, warps_n=2, mma="wgmma_swapped", promote=False, split_k=8)
# one warpgroup of 64 columns, two blocks an SM
SWAPPED_NARROW = SWAPPED.replace(block_n=64, warps_n=1, stages=2, blocks_per_sm=2)
# two blocks an SM with two small stages: the output tile does not fit shared memory, so the pairs
# are stored directly instead of through it
SWAPPED_DIRECT_STORE = SWAPPED.replace(block_k=64, stages=2, blocks_per_sm=2)
# a dequantised once, by a first kernel, into an fp16 copy the blocks stream in
PREPASS = SWAPPED.replace(a_dequant="prepass")
# the split tiles summed inside a thread-block cluster through distributed shared memory
CLUSTER = PREPASS.replace(split_reduce="cluster")
CLUSTER_MMA_SYNC = SPLIT.replace(split_reduce="cluster")
# a's fp16 tile and b's packed rows by TMA boxes, each thread's K values a contiguous run
TMA_CLUSTER = CLUSTER.replace(loads="tma")
# ... with the ticket reduction, and two K tiles' wgmmas in flight
TMA_IN_FLIGHT = PREPASS.replace(loads="tma", wgmma_in_flight=2)
# ... with 64-wide K tiles (a thread's run is 16 values: two words, one scale) and six stages
TMA_SHORT_K = TMA_IN_FLIGHT.replace(block_k=64, stages=6)
# TMA stages handed over by mbarriers alone (no block barrier between K tiles), split tiles summed in a cluster
TMA_MBARRIERS = TMA_CLUSTER.replace(wgmma_in_flight=2, stage_sync="mbarriers")
# e2m1 codes placed in fp16s four high bytes at a time, then prmt (nvfp4_bits.cuh), on both TMA loops
# and on mma.sync from shared-memory tiles
BYTES = TMA_MBARRIERS.replace(bit_placement="bytes")
BYTES_IN_FLIGHT = TMA_IN_FLIGHT.replace(bit_placement="bytes")
BYTES_SHARED = SHARED.replace(bit_placement="bytes")
# every block of a split tile waits for the others and sums a slice of the rows from the workspace
SPREAD = TMA_IN_FLIGHT.replace(stage_sync="mbarriers", split_reduce="spread")
SPREAD_MMA_SYNC = SPLIT.replace(split_reduce="spread")
# two warpgroups share each K tile of a 64-column tile (each half the steps), summed after the K loop:
# with the cluster sum, with the ticket and two blocks an SM, and with 64-wide K tiles (one word a run)
K_SPLIT = TMA_MBARRIERS.replace(block_n=64, warpgroup_k_split=2)
K_SPLIT_TWO_BLOCKS = TMA_IN_FLIGHT.replace(block_n=64, warpgroup_k_split=2, stage_sync="mbarriers", blocks_per_sm=2,
                                           stages=3)
K_SPLIT_SHORT_K = TMA_SHORT_K.replace(block_n=64, warpgroup_k_split=2)
# two such pairs of warpgroups on a 128-column tile (sixteen warps)
K_SPLIT_WIDE = K_SPLIT.replace(block_n=128, warps_n=4, bit_placement="bytes")
# the split tiles' warp rows summed through the global workspace inside a cluster: the search's best
# genome so far (two 64-column warpgroups, a split of 2) with it, and the pairs of warpgroups at up to 8 splits
CLUSTER_L2 = BYTES.replace(stages=5, split_k=2, split_reduce="cluster_l2")
K_SPLIT_L2 = K_SPLIT.replace(split_reduce="cluster_l2", bit_placement="bytes")
# one warpgroup on a 64-column tile (four warps a block): the best genomes of the searches tuned for
# M=128 N=7168 K=2048 (one block a tile; split_reduce spread, unused there) and N=4096 K=7168 (split 2, cluster sum)
ONE_WARPGROUP = K_SPLIT.replace(warps_n=1, warpgroup_k_split=1, bit_placement="bytes", split_reduce="spread")
ONE_WARPGROUP_CLUSTER = ONE_WARPGROUP.replace(split_k=4, split_reduce="cluster")
# a's rows dequantised in every block by a producer warpgroup straight into the TMA stages (no prepass):
# on one warpgroup (K=2048's best), with the L2 cluster sum on two, and on 64-row tiles (two producer
# threads a row) with 64-wide K tiles (one word of each run a thread) and two warpgroups to a K tile
PRODUCER = ONE_WARPGROUP.replace(a_dequant="producer")
PRODUCER_CLUSTER_L2 = CLUSTER_L2.replace(a_dequant="producer")
PRODUCER_SHORT_K = K_SPLIT_SHORT_K.replace(a_dequant="producer", block_m=64, stage_sync="mbarriers")
# the skinny kernel (few tokens): 16 of b's rows a block, K split between its warps
SKINNY = SEED.replace(design="skinny", skinny_warps=8, skinny_tokens=8, skinny_unroll=2)
SKINNY_WIDE = SKINNY.replace(skinny_warps=8, skinny_tokens=16, skinny_unroll=4, bit_placement="bytes",
                             skinny_l2_prefetch=True)
SKINNY_NARROW = SKINNY.replace(skinny_warps=2, skinny_unroll=1)
# four warps a block, four blocks an SM at least (the register cap), four chunks' loads in flight: the best of
# the register loads at M = 4..16 on the H200 (2026-11-28)
SKINNY_FOUR_WARPS = SKINNY_WIDE.replace(skinny_warps=4, skinny_tokens=8, skinny_min_blocks=4)
# a's rows dequantised once by the prepass kernel, every warp loading its fp16 pairs
SKINNY_PREPASS = SKINNY.replace(skinny_a_prepass=True, bit_placement="bytes", skinny_l2_prefetch=True)
SKINNY_PREPASS_DEEP = SKINNY_PREPASS.replace(skinny_unroll=4)
SKINNY_PREPASS_WIDE = SKINNY_PREPASS.replace(skinny_warps=16, skinny_tokens=16, skinny_unroll=1)
# ... with the next batch of b's runs loaded before this one is multiplied: the best at M = 1 on large layers
SKINNY_PREPASS_PREFETCH = SKINNY_PREPASS.replace(skinny_prefetch=True, skinny_warps=4, skinny_min_blocks=4)
# b's runs through shared-memory rings by cp.async, with a K split over blocks; 16 tokens: the best at M = 16
SKINNY_STAGED = SKINNY.replace(skinny_stages=8, skinny_warps=4, bit_placement="bytes", skinny_split=4)
SKINNY_STAGED_TOKENS = SKINNY.replace(skinny_stages=4, skinny_warps=4, skinny_tokens=16, bit_placement="bytes")
# b's rows through each warp's ring by the TMA (a box of 16 rows a stage), a's fp16 rows (the prepass's) in a second
# box of the stage: 16 tokens a block, two stages of one chunk, two blocks an SM at least; the best at M = 16 on the
# H200 (2026-11-29); and with 8 tokens from global memory (no prepass), four chunks a stage
SKINNY_TMA = SKINNY_PREPASS.replace(skinny_stages=2, skinny_ring_fill="tma_boxes", skinny_stage_chunks=1,
                                    skinny_warps=4, skinny_tokens=16, skinny_min_blocks=2, skinny_l2_prefetch=False)
SKINNY_TMA_PACKED = SKINNY_TMA.replace(skinny_tokens=8, skinny_a_prepass=False, skinny_stage_chunks=4)
DESIGN_POINTS = (SEED, SKINNY, SKINNY_TMA, SKINNY_TMA_PACKED, SKINNY_WIDE, SKINNY_NARROW, SKINNY_FOUR_WARPS, SKINNY_PREPASS, SKINNY_PREPASS_DEEP,
                 SKINNY_PREPASS_WIDE, SKINNY_PREPASS_PREFETCH, SKINNY_STAGED, SKINNY_STAGED_TOKENS, SPLIT, WIDE, SHARED, WGMMA, WGMMA_WIDE, SWAPPED, SWAPPED_NARROW, SWAPPED_DIRECT_STORE, PREPASS,
                 CLUSTER, CLUSTER_MMA_SYNC, TMA_CLUSTER, TMA_IN_FLIGHT, TMA_SHORT_K, TMA_MBARRIERS, BYTES,
                 BYTES_IN_FLIGHT, BYTES_SHARED, SPREAD, SPREAD_MMA_SYNC, K_SPLIT, K_SPLIT_TWO_BLOCKS, K_SPLIT_SHORT_K,
                 K_SPLIT_WIDE, CLUSTER_L2, K_SPLIT_L2, ONE_WARPGROUP, ONE_WARPGROUP_CLUSTER, PRODUCER,
                 PRODUCER_CLUSTER_L2, PRODUCER_SHORT_K)
