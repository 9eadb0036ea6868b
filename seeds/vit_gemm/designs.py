"""vit_gemm's named design points: genomes that stand for its designs and their variants, which the tests
(screen, correctness on the GPU) and the benchmarks (A/B timings, reports) share."""

from evo.seeds.vit_gemm.spec import FAMILY

SEED = FAMILY.seed_genomes[0]
# two consumer warpgroups, 4 stages, one wgmma group in flight, the 16-byte direct store
WIDE = SEED.replace(consumers=2, stages=4, wgmma_depth=2, store="direct16")
# the fastest measured on the H100: persistent ping-pong of 128 x 128 tiles, TMA store through 2 slots
PINGPONG = SEED.replace(consumers=2, m_tiles=2, schedule="pingpong", stages=4, persistent=True, tile_sync="local",
                        wgmma_depth=2, epi_depth=2, setmaxnreg=True)
# the prefetching warps, the row-wise epilogue
PREFETCH = PINGPONG.replace(operand_prefetch=True, stages=3)
ROWWISE = PINGPONG.replace(m_tiles=1, block_n=256, epilogue_reads="rowwise", store="direct16", epi_depth=1)
# clusters of two blocks sharing W by multicast: ping-pong and persistent, cooperative 128 x 256, one block a tile
CLUSTERED = PINGPONG.replace(cluster=2, epi_depth=1)
CLUSTERED_WIDE = WIDE.replace(block_n=256, store="tma", cluster=2, persistent=True, tile_sync="local", setmaxnreg=True)
CLUSTERED_PER_TILE = WIDE.replace(cluster=2)
# cooperative 128 x 256 with pos prefetched into two chunk buffers a consumer (3 stages leave room)
PREFETCH_TWO = SEED.replace(consumers=2, block_n=256, stages=3, wgmma_depth=2, persistent=True, tile_sync="local",
                            setmaxnreg=True, operand_prefetch=True, prefetch_buffers=2)
# the same, pos brought in by TMA boxes (rows past the last patch from a second box)
PREFETCH_TMA = PREFETCH_TWO.replace(pos_tma=True, prefetch_buffers=1)
# bias + pos folded into an fp16 table, each tile's rows brought into the staging by TMA and finished in
# place: cooperative 128 x 256 at 3 stages, ping-pong 128 x 128 at 4, and one block a tile
FOLDED = PREFETCH_TWO.replace(operand_prefetch=False, prefetch_buffers=1, folded_table=True)
FOLDED_PINGPONG = PINGPONG.replace(epi_depth=1, folded_table=True)
FOLDED_PER_TILE = WIDE.replace(store="tma", tile_sync="local", folded_table=True, stages=3)
# a tile's K slices split over the blocks of a cluster, summed in block 0 (the batch-1 and batch-8 shapes):
# 64 x 64 tiles over 8 blocks, 128 x 128 over 4, and the cooperative pair over 2
SPLIT_SMALL = SEED.replace(block_n=64, split_k=8, stages=3)
SPLIT_FOUR = SEED.replace(split_k=4, stages=3, wgmma_depth=2, tile_sync="local")
SPLIT_WIDE = WIDE.replace(split_k=2)
# 192 columns: N = 768 in 4 tiles (ViT-B), ping-pong of 64-row tiles and a cluster pair of 128-row ones
PINGPONG_192 = PINGPONG.replace(block_n=192, m_tiles=1)
CLUSTERED_192 = CLUSTERED_WIDE.replace(block_n=192)
NAMED = (SEED, WIDE, PINGPONG, PREFETCH, ROWWISE, CLUSTERED, CLUSTERED_WIDE, CLUSTERED_PER_TILE, PREFETCH_TWO,
         PREFETCH_TMA, FOLDED, FOLDED_PINGPONG, FOLDED_PER_TILE, SPLIT_SMALL, SPLIT_FOUR, SPLIT_WIDE, PINGPONG_192,
         CLUSTERED_192)
