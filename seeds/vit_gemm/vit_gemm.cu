// ViT patch-embedding GEMM with its epilogue, Hopper (sm_90a):
//   C[b * P + p, n] = bf16( sum_k A[b * P + p, k] * W[n, k] + bias[n] + pos[p, n] )
// A bf16 [M, K] row-major; W bf16 [N, K] (K-major: nn.Linear's weight, and the patch conv's weight
// [N, C, 16, 16] seen as [N, K]); bias fp32 [N]; pos fp32 [P, N]; C bf16 [M, N]; fp32 accumulation.
// K and N multiples of 8 (16-byte rows for the TMA: launch.py pads A's and W's rows when K is not);
// M, N, K otherwise anything (tiles clipped).
//
// Warpgroup 0 is the producer: one thread brings in each 64-deep slice of K for A and W by TMA
// (128-byte swizzle) into a ring of STAGES stages, completed on "full" mbarriers, for every tile the
// block owns, running ahead of the consumers as far as the ring's "empty" mbarriers let it.
// Warpgroups 1..CONSUMERS are the consumers: each owns M_TILES x 64 rows of a tile, multiplies with
// wgmma m64nBLOCK_Nk16 straight from shared memory, releases each stage, then runs the epilogue.
//
// Knobs (macros):
//   BLOCK_N      tile columns = wgmma N (64, 128, 192, 256); M_TILES: m64 tiles a consumer owns (1, 2)
//   CONSUMERS    consumer warpgroups (1, 2); STAGES: ring depth (2..6)
//   SCHEDULE     0 cooperative: the consumers share one tile (BLOCK_M = 64 M_TILES CONSUMERS);
//                1 ping-pong: each consumer its own tile (BLOCK_M = 64 M_TILES), the two taking turns
//                at the tensor cores so that one's epilogue runs under the other's main loop
//   PERSISTENT   0: one block a tile; 1: one block per SM slot, looping over tiles (the grid, host side)
//   CLUSTER      1, or 2: the two blocks of a thread-block cluster take the two M tiles of one N band
//                together; each brings in half of the W slice and multicasts it to both (W crosses
//                from L2 once per pair); a stage is refilled when the consumers of both blocks are done
//   SPLIT_K      1, or 2..8 (CLUSTER 1, one block a tile): the SPLIT_K blocks of a cluster take one tile,
//                each an equal share of its K slices; blocks 1.. send their partial accumulators into
//                block 0's shared memory by st.async (counted in bytes on block 0's barrier), and block 0
//                adds them and runs the epilogue (more blocks for the small-M shapes of batch 1 and 8)
//   RASTER       tile order: 0 along N (the tiles of one row band run together and share A in L2), 1 along M
//   TILE_SYNC    0: the whole block meets at barrier 0 after every tile (the producer cannot run
//                into the next tile); 1: no block-wide barrier: only the ring's mbarriers, each
//                consumer's own named barrier around its staging slots, and the TMA store groups
//   WGMMA_DEPTH  1: wait for each K slice's wgmma group before releasing its stage; 2: keep one
//                group in flight and release the previous slice's stage
//   STORE        0: each 64-column chunk staged in shared memory (128-byte swizzle) and written by a
//                TMA store; 1: st.global of 4 bytes a lane from the accumulators; 2: 16 bytes a lane
//                after a quad transpose by shuffles
//   EPILOGUE_READS  0: bias and pos read where the accumulators are (a lane's column pairs across 8
//                rows); 1: each 64-column chunk staged in fp32 in shared memory and finished row by
//                row, bias, pos and C moving along whole 128-byte lines (with STORE 2)
//   OPERANDS_AHEAD  0: a chunk's bias and pos loaded (all at once) just before it is finished; 1: chunk
//                0's loaded while the tile's last wgmma runs, and each next chunk's before this one
//   OPERAND_PREFETCH  1: the producer warpgroup's idle warps copy pos along rows (cp.async) during the
//                main loop into shared memory, in the order the consumer reads it (a chunk a consumer,
//                on "prefetched full / free" mbarriers); 0: the consumer reads pos from global memory
//   PREFETCH_BUFFERS  chunks of pos a consumer has in shared memory (OPERAND_PREFETCH): 1 = the next
//                chunk is copied once this one is read; 2 = while this one is read
//   POS_TMA      with OPERAND_PREFETCH: one thread (warp 1 of the producer warpgroup) brings each chunk
//                of pos in by TMA, 32-column boxes of the consumer's rows (128-byte swizzle); where
//                the consumer's rows pass the last patch P - 1, a second box from row p0 - P brings the
//                wrapped rows into a second buffer (the TMA zero-fills rows outside 0..P - 1)
//   EPI_DEPTH    staging slots a consumer cycles through (STORE 0): 1 = convert a chunk only once the
//                previous chunk's store has read its slot (serial); 2, 3 = overlapped with the stores
//   FOLDED_TABLE 1: bias + pos folded into an fp16 table by the prepass vit_gemm_table (this kernel its
//                programmatic dependent); one thread of the producer warpgroup brings each consumer's
//                rows of the table by TMA into the consumer's staging (its whole share of the tile)
//                during the main loop, and the epilogue adds them and writes the bf16 result in place
//                for the TMA store (STORE 0; the 4th tensor map is the table's); 0: bias and pos fp32
//   SETMAXNREG   0: every thread gets the launch bound's registers; 1: the producer gives registers
//                back (setmaxnreg.dec to PRODUCER_REGS) and the consumers take them (to CONSUMER_REGS)
//   BLOCKS_PER_SM  1 or 2 (the register cap of __launch_bounds__)
// The translation unit spec.py builds: vit_gemm_parts.cuh (macros, shared-memory plan, tile order,
// with seeds/_hopper.cuh and the wgmma wrapper for BLOCK_N spliced in after its includes), then
// vit_gemm_table.cuh (the folded table's prepass and loader), vit_gemm_epilogue.cuh (bias/pos reads
// and prefetch, the epilogue), then this file (producer, kernel).

// a consumer warpgroup is done reading a stage: one arrival at the stage's "empty" barrier of every
// block of the cluster (each block's producer refills it by a multicast into all of them)
__device__ __forceinline__ void release_stage(uint64_t* empty) {
#if CLUSTER > 1
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) barrier_arrive_peer(empty, r);
#else
    barrier_arrive(empty);
#endif
}

// The producer warpgroup: this block's slice kt (of k_count from k_begin) of local tile i is the
// ring's (i * k_count + kt)-th fill. Its thread 0 brings in A (this block's rows) and W (with a
// cluster: its half of the slice, multicast)
__device__ void produce(const Tiles& tiles, int owned, int k_begin, int k_count, const TensorMap* a_map,
                        const TensorMap* w_map, unsigned char* smem, uint64_t* full, uint64_t* empty) {
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        if (threadIdx.x == 0) {
            const int2 origin = tiles.origin(i);
            for (int kt = k_begin; kt < k_begin + k_count; ++kt, ++fill) {
                const int s = fill % STAGES;
                unsigned char* stage = smem + s * STAGE_BYTES;
                if (fill >= STAGES) barrier_wait(empty + s, (fill / STAGES - 1) & 1);
                barrier_expect_bytes(full + s, STAGE_BYTES);
                tma_load(stage, a_map, kt * BLOCK_K, origin.x, full + s);
#if CLUSTER > 1
                constexpr int W_PART = BLOCK_N / CLUSTER;  // rows of W each block of the cluster brings in
                tma_load_multicast(stage + A_STAGE + tiles.rank() * W_PART * 128, w_map, kt * BLOCK_K,
                                   origin.y + tiles.rank() * W_PART, full + s, (1 << CLUSTER) - 1);
#else
                tma_load(stage + A_STAGE, w_map, kt * BLOCK_K, origin.y, full + s);
#endif
            }
        }
#if TILE_SYNC == 0
        __syncwarp();
        block_rendezvous();  // after tile i
#endif
    }
}

#if SPLIT_K > 1
// SPLIT_K: block k_rank of the cluster sends its consumer's accumulators to block 0 (st.async into its
// slot, counted on that consumer's partials_full barrier there); block 0 waits for every slot and adds
// them to its own. Whether this block finishes the tile (block 0).
__device__ __forceinline__ bool sum_split(float (&acc)[M_TILES][ACC], int k_rank, int consumer, float* partials,
                                          uint64_t* partials_full) {
    const int x = threadIdx.x % 128;
    if (k_rank > 0) {
        const unsigned slot = peer_address(partials + ((k_rank - 1) * CONSUMERS + consumer) * (PARTIAL_BYTES / 4), 0);
        const unsigned bar = peer_address(partials_full, 0);
#pragma unroll
        for (int t = 0; t < M_TILES; ++t)
#pragma unroll
            for (int a = 0; a < ACC; a += 4)
                store_async4(slot + ((t * ACC + a) / 4 * 128 + x) * 16,
                             make_float4(acc[t][a], acc[t][a + 1], acc[t][a + 2], acc[t][a + 3]), bar);
        return false;
    }
    if (x == 0) barrier_expect_bytes(partials_full, (SPLIT_K - 1) * PARTIAL_BYTES);
    barrier_wait(partials_full, 0);  // one tile a block: the barrier's first phase
#pragma unroll
    for (int q = 0; q < SPLIT_K - 1; ++q) {
        const float4* from = reinterpret_cast<const float4*>(partials) + (q * CONSUMERS + consumer) * (PARTIAL_BYTES / 16);
#pragma unroll
        for (int t = 0; t < M_TILES; ++t)
#pragma unroll
            for (int a = 0; a < ACC; a += 4) {
                const float4 v = from[(t * ACC + a) / 4 * 128 + x];
                acc[t][a] += v.x, acc[t][a + 1] += v.y, acc[t][a + 2] += v.z, acc[t][a + 3] += v.w;
            }
    }
    return true;
}
#endif

#if CLUSTER_BLOCKS > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_BLOCKS, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) CLUSTER_DIMS
vit_gemm(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap w_map,
         const __grid_constant__ TensorMap c_map, const __grid_constant__ TensorMap pos_map,
         const float* __restrict__ bias, const float* __restrict__ pos, __nv_bfloat16* __restrict__ C, int M, int N,
         int K, int P) {
    extern __shared__ unsigned char raw[];
    // the 128-byte swizzle repeats every 1024 bytes: stages and slots start on a 1024-byte boundary
    // (the same offset in every block: a multicast lands at its place in each)
    unsigned char* smem = raw + ((1024 - smem_address(raw) % 1024) % 1024);
    unsigned char* staging = smem + STAGES * STAGE_BYTES;
    float2* prefetched = reinterpret_cast<float2*>(staging + STAGING_BYTES);
    float* partials = reinterpret_cast<float*>(staging + STAGING_BYTES + PREFETCH_BYTES);  // SPLIT_K > 1
    uint64_t* full = reinterpret_cast<uint64_t*>(staging + STAGING_BYTES + PREFETCH_BYTES + PARTIALS_BYTES);
    uint64_t* empty = full + STAGES;
    uint64_t* prefetched_full = empty + STAGES;  // PREFETCH_BUFFERS of each a consumer
    uint64_t* prefetched_free = prefetched_full + CONSUMERS * PREFETCH_BUFFERS;
    uint64_t* table_full = prefetched_free + CONSUMERS * PREFETCH_BUFFERS;  // FOLDED_TABLE: one of each a consumer
    uint64_t* staging_free = table_full + CONSUMERS;
    uint64_t* partials_full = staging_free + CONSUMERS * FOLDED_TABLE;  // SPLIT_K > 1: one a consumer
    const Tiles tiles(M, N);
    const int owned = tiles.owned(), k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
    // this block's share of the K slices (all of them without SPLIT_K; none where K has fewer slices than splits)
    const int k_begin = tiles.k_rank() * k_tiles / SPLIT_K, k_count = (tiles.k_rank() + 1) * k_tiles / SPLIT_K - k_begin;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(full + s, 1);
            barrier_init(empty + s, SHARERS * CLUSTER);
        }
        for (int b = 0; b < CONSUMERS * PREFETCH_BUFFERS; ++b) {
            barrier_init(prefetched_full + b, POS_TMA ? 1 : PREFETCHERS);
            barrier_init(prefetched_free + b, 128);
        }
        for (int c = 0; c < CONSUMERS * FOLDED_TABLE; ++c) {
            barrier_init(table_full + c, 1);
            barrier_init(staging_free + c, 1);
        }
        for (int c = 0; c < CONSUMERS * (SPLIT_K > 1); ++c) barrier_init(partials_full + c, 1);
        barrier_init_fence();
    }
#if CLUSTER_BLOCKS > 1
    cluster_sync();  // every block's barriers exist before any block multicasts or arrives into it
#else
    __syncthreads();
#endif

    if (warpgroup == 0) {
#if SETMAXNREG
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
#endif
#if OPERAND_PREFETCH  // (with TILE_SYNC 1: no block-wide barrier to meet)
        if (threadIdx.x >= 32) {
            if (!POS_TMA)
                prefetch_operands(tiles, owned, M, N, P, pos, prefetched, prefetched_full, prefetched_free);
            else if (threadIdx.x == 32)
                load_pos(tiles, owned, N, P, &pos_map, reinterpret_cast<unsigned char*>(prefetched), prefetched_full,
                         prefetched_free);
        } else
#elif FOLDED_TABLE  // (with TILE_SYNC 1)
        if (threadIdx.x >= 32) {
            if (threadIdx.x == 32) load_table(tiles, owned, N, P, &pos_map, staging, table_full, staging_free);
        } else
#endif
            produce(tiles, owned, k_begin, k_count, &a_map, &w_map, smem, full, empty);
    } else {
#if SETMAXNREG
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
#endif
        const int consumer = warpgroup - 1;
        const int a_row0 = SCHEDULE == 1 ? 0 : consumer * WG_ROWS;  // this consumer's rows within an A stage
        unsigned char* slots = staging + consumer * (STAGING_BYTES / CONSUMERS);
        int chunk_sequence = 0;  // the chunks this consumer has finished: its staging slot, its prefetched chunk
        int tables = 0;          // the tiles this consumer has finished (FOLDED_TABLE: its staging's rounds)
        float acc[M_TILES][ACC];
        for (int i = 0; i < owned; ++i) {
#if SCHEDULE == 1
            if (i % 2 != consumer) {  // the other consumer's tile
#if TILE_SYNC == 0
                block_rendezvous();
#endif
                continue;
            }
            if (i > 0) named_sync(3 + consumer, 256);  // the other consumer's main loop of tile i - 1 is over
#endif
#pragma unroll
            for (int t = 0; t < M_TILES; ++t)
#pragma unroll
                for (int a = 0; a < ACC; ++a) acc[t][a] = 0.f;

            const int first = i * k_count;
            for (int kt = 0; kt < k_count; ++kt) {
                const int fill = first + kt, s = fill % STAGES;
                barrier_wait(full + s, (fill / STAGES) & 1);
                const unsigned char* stage = smem + s * STAGE_BYTES;
                wgmma_fence();
#pragma unroll
                for (int t = 0; t < M_TILES; ++t)
#pragma unroll
                    for (int k = 0; k < BLOCK_K / 16; ++k)  // 16 deep = 32 bytes along the swizzled row
                        wgmma_bf16(acc[t], descriptor(stage + (a_row0 + t * 64) * 128 + k * 32),
                                   descriptor(stage + A_STAGE + k * 32));
                wgmma_commit();
                if (kt == k_count / 2) free_staging(staging_free + consumer, tables);
                wgmma_wait<WGMMA_DEPTH - 1>();  // fill - WGMMA_DEPTH + 1 is done: its stage can be refilled
                if (threadIdx.x % 128 == 0 && kt >= WGMMA_DEPTH - 1)
                    release_stage(empty + (fill - WGMMA_DEPTH + 1) % STAGES);
            }
            const int2 origin = tiles.origin(i);
            ChunkOperands ops[2];
            if (OPERANDS_AHEAD) load_operands(ops[0], 0, origin.x + a_row0, origin.y, M, N, P, bias, pos);
            wgmma_wait<0>();  // the accumulators are final
            if (WGMMA_DEPTH == 2 && threadIdx.x % 128 == 0 && k_count > 0)
                release_stage(empty + (first + k_count - 1) % STAGES);
#if SPLIT_K > 1
            const bool finishes = sum_split(acc, tiles.k_rank(), consumer, partials, partials_full + consumer);
#else
            constexpr bool finishes = true;
#endif
#if SCHEDULE == 1
            if (i + 1 < owned) named_arrive(3 + (1 - consumer), 256);  // the other consumer's turn
#endif
            if (finishes)
                epilogue(acc, ops, origin.x + a_row0, origin.y, M, N, P, bias, pos, C, &c_map, slots, consumer,
                     prefetched + consumer * PREFETCH_BYTES / (CONSUMERS * 8),
                     prefetched_full + consumer * PREFETCH_BUFFERS, prefetched_free + consumer * PREFETCH_BUFFERS,
                     chunk_sequence, table_full + consumer, tables);
            ++tables;
#if TILE_SYNC == 0
            block_rendezvous();
#endif
        }
#if STORE == 0
        if (threadIdx.x % 128 == 0) tma_store_wait_read<0>();  // shared memory stays until the last store read it
#endif
    }
#if CLUSTER_BLOCKS > 1
    // no block leaves while another may still arrive on its barriers or multicast into its stages
    __syncwarp();
    cluster_sync();
#endif
}

extern "C" __constant__ int vit_gemm_shared_bytes = SHARED_BYTES;
