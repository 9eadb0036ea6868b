// NVFP4 block-scaled GEMM on Hopper (sm_90a), which has no FP4 tensor cores: the e2m1 values are
// turned into fp16 inside the main loop, multiplied by their e4m3 scale, and fed to the tensor cores
// (mma.sync m16n8k16 or wgmma m64nNk16) with fp32 accumulation.
//
//   c[l, m, n] = fp16( sum_k a[l, m, k] * sfa[l, m, k / 16] * b[l, n, k] * sfb[l, n, k / 16] )
//
// a: [L][M][K / 2] bytes, b: [L][N][K / 2] bytes (both K-major, two e2m1 a byte, even k low);
// sfa: [L][M][K / 16], sfb: [L][N][K / 16] e4m3 codes, plain row-major (blocked = 0) or in the
// cuBLAS / CUTLASS blocked layout (blocked = 1: 128 x 4 tiles, 32-row groups interleaved).
// A product of an e2m1 value and an e4m3 scale has at most 5 significant bits and lies in
// [2^-10, 2688]: exact in fp16, so the only rounding is the fp32 accumulation and the final store.
//
// Dequantisation: an e2m1 code's bits placed in an fp16 (sign, and e e m at the exponent's foot)
// times the scale times 2^7, exactly (dequantize8 in nvfp4_gemm_parts.cuh; the 2^-14 on each
// product is undone at the store). Where: in registers, each warp for the rows its fragments need
// (DEQUANT 0), or once per block into fp16 tiles in shared memory that the tensor cores read
// (DEQUANT 1).
// Accumulation: the tensor core adds its products into the fp32 accumulator with truncation, which
// over K = 16384 drifts by up to ~1e-3 of the result (measured on the H100, mma.sync); with PROMOTE
// each K tile's products go to fresh accumulators that are added (IEEE fp32) to the running ones.
//
// Knobs (macros):
//   BLOCK_M, BLOCK_N, BLOCK_K   block tile (BLOCK_K in K elements: 64 or 128)
//   WARPS_M, WARPS_N            warp grid; mma.sync: a warp owns (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N);
//                               wgmma: WARPS_M = 4 (a warpgroup), WARPS_N warpgroups side by side;
//                               swapped wgmma: WARPS_N warpgroups of 4 warps, 64 columns of c each
//   STAGES                      cp.async pipeline depth (packed values and scales of a K tile)
//   DEQUANT                     0: in registers; 1: into shared memory, the next tile's while the
//                               tensor cores multiply this one (two fp16 tiles)
//   MMA                         0: mma.sync m16n8k16; 1: wgmma from shared memory (needs DEQUANT 1);
//                               2: swapped wgmma (needs DEQUANT 0): b's rows are wgmma's M, dequantised
//                               in registers as its A operand, a's rows its N, dequantised once per
//                               block into an fp16 tile in shared memory (B); b never passes through
//                               shared memory as fp16
//   A_PREPASS                   swapped wgmma: a dequantised once by nvfp4_dequantize_a into an fp16
//                               copy (the launcher runs it first) that the stages bring in as it is
//   A_PRODUCER                  (with A_PREPASS's stage layout, TMA_LOADS and STAGE_BARRIERS) instead
//                               of that copy, one more warpgroup in every block dequantises a's rows of
//                               each K tile straight into the stage (no first kernel; nvfp4_tma.cuh)
//   PROMOTE                     1: fp32 add of each K tile's products into the running sums
//   BLOCKS_PER_SM               blocks an SM holds at once (the register cap of __launch_bounds__)
//   SPLIT_K                     the most blocks sharing one output tile (the launch passes `splits`,
//                               1..SPLIT_K), each on a contiguous range of K tiles; each leaves its
//                               fp32 partial tile in a workspace and the last to take its tile's
//                               ticket adds the others' to its own and stores
//   SPLIT_SPREAD                instead, every block waits until the tile's blocks have all left their
//                               partial tiles, then sums and stores a slice of the rows (the grid runs in
//                               one wave, so they all run at once)
//   SPLIT_CLUSTER               instead, the tile's blocks are one cluster (dimensions set at launch):
//                               each sends slice r of its partial tile to block r's shared memory
//                               (distributed shared memory) and sums and stores its own slice
//   SPLIT_CLUSTER_L2            (swapped wgmma) instead, the tile's blocks are one cluster; warp rows
//                               group w is summed by block w % splits from the others' partial sums,
//                               left in the global workspace before a cluster barrier
//   (A_PREPASS: the launch makes nvfp4_gemm the prepass's programmatic dependent: b's first stages
//    are requested before griddepcontrol.wait, a's after it)
//   TMA_LOADS                   A_PREPASS: a stage's fp16 tile of a and b's packed rows come in as TMA boxes
//                               requested by thread 0 (nvfp4_tma.cuh), each thread's K values a run of a row
//   WGMMA_IN_FLIGHT             A_PREPASS: 2: tile kt's wgmmas are issued before the warps wait for tile
//                               kt - 1's (two sets of A fragments pinned; one block barrier a tile)
//   STAGE_BARRIERS              TMA_LOADS, two in flight: no block barrier between tiles; full and empty
//                               mbarriers hand each stage between the copies and its readers
//   BIT_PLACEMENT               how e2m1 bits are placed in fp16s (nvfp4_bits.cuh): 0 shifts, 1 bytes + prmt
//   WARPGROUP_K_SPLIT           TMA_LOADS: 2: each pair of warpgroups owns 64 columns of the tile, each half
//                               of every K tile's k16 steps; the second's sums are added to the first's at the end

#if MMA == 2
// the K loop of two tiles in flight, two tiles a turn (the fragment sets swap roles), then the drain:
// the last wgmmas waited for, and everything they read or wrote tied to that point
template <typename Iteration, typename Fragments>
__device__ __forceinline__ void two_tiles_in_flight(int begin, int end, const Iteration& iteration, Fragments& fragments_0,
                                                    Fragments& fragments_1, float (&acc)[MT][NT][4]) {
    for (int kt = begin; kt < end; kt += 2) {
        iteration(kt, fragments_0, fragments_1);
        if (kt + 1 < end) iteration(kt + 1, fragments_1, fragments_0);
    }
    wgmma_wait<0>();
    pin_registers(reinterpret_cast<uint32_t(&)[WG_STEPS * 4]>(fragments_0));
    pin_registers(reinterpret_cast<uint32_t(&)[WG_STEPS * 4]>(fragments_1));
    pin_registers(reinterpret_cast<float(&)[MT * NT * 4]>(acc));
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS + PRODUCER_THREADS, BLOCKS_PER_SM)
nvfp4_gemm(const unsigned char* a, const unsigned char* b, const unsigned char* sfa, const unsigned char* sfb,
           half* c, int M, int N, int K, int blocked, int splits, float* workspace, unsigned* tickets,
           const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int batch = blockIdx.z / splits, split = blockIdx.z % splits;
    const int m0 = blockIdx.y * BLOCK_M, n0 = blockIdx.x * BLOCK_N;
    const Operand B{b + (size_t)batch * N * (K / 2), sfb + batch * scale_matrix_bytes(N, K, blocked), N, n0};
    const int k_tiles = K / BLOCK_K, begin = split * k_tiles / splits, end = (split + 1) * k_tiles / splits;

#if DEQUANT == 0 && MMA != 2  // no fp16 tiles (SWIZZLE_ALIGNED false)
    unsigned char* raw = smem;
#else
    unsigned char* halves = smem + (1024 - smem_address(smem) % 1024) % 1024;  // two fp16 tiles, swizzle-aligned
    unsigned char* raw = halves + 2 * HALF_STAGE;
#endif
#if TMA_LOADS  // thread 0 requests a's and b's boxes; every thread copies a few of b's scales
    const TmaStages tma{raw, reinterpret_cast<uint64_t*>(raw + STAGES * STAGE_BYTES), &a_map, &b_map, m0, n0, batch, begin};
    if (threadIdx.x == 0) tma.init();
    if (STAGE_BARRIERS) __syncthreads();  // the barriers are initialised before any thread arrives on them
#if A_PRODUCER  // the last warpgroup writes a's fp16 tile of every stage, then exits (an exited thread
                // holds up no later block or cluster barrier)
    if (threadIdx.x >= THREADS) {
        produce_a(tma, AProducer(a + (size_t)batch * M * (K / 2), sfa + batch * scale_matrix_bytes(M, K, blocked), M, K,
                                 blocked, m0),
                  begin, end);
        return;
    }
#endif
#elif A_PREPASS  // a is the fp16 copy nvfp4_dequantize_a made (sfa unused)
    const HalfTileLoader<BLOCK_M> a_loader(a + (size_t)batch * M * K * 2, M, m0, K);
#else
    const TileLoader<BLOCK_M> a_loader(Operand{a + (size_t)batch * M * (K / 2), sfa + batch * scale_matrix_bytes(M, K, blocked), M, m0},
                                       K, blocked);
#endif
    const TileLoader<BLOCK_N> b_loader(B, K, blocked);
    auto load_b = [&](int kt) {
        unsigned char* stage = raw + (kt - begin) % STAGES * STAGE_BYTES;
#if TMA_LOADS
        if (threadIdx.x == 0) tma.issue_b(kt);
        b_loader.load_scales(stage + A_BYTES + B_BYTES, kt);
#else
        b_loader.load(stage + A_BYTES, stage + A_BYTES + B_BYTES + A_SCALE_BYTES, kt);
#endif
    };
    // tile kt's boxes have landed (TMA_LOADS; cp.async copies are waited for by groups)
    [[maybe_unused]] auto landed = [&](int kt) {
#if TMA_LOADS
        if (kt < end) tma.wait(kt);
#endif
    };
    auto load_a = [&](int kt) {
        [[maybe_unused]] unsigned char* stage = raw + (kt - begin) % STAGES * STAGE_BYTES;
#if TMA_LOADS
        if (threadIdx.x == 0) tma.issue_a(kt);
#elif A_PREPASS
        a_loader.load(stage, kt);
#else
        a_loader.load(stage, stage + A_BYTES + B_BYTES, kt);
#endif
    };
    [[maybe_unused]] auto load_stage = [&](int kt) {  // (not the mbarrier-stage loop's: tma_k_loop)
        load_a(kt);
        load_b(kt);
    };
#if A_PREPASS
    // launched as the prepass's programmatic dependent: b's first stages are requested while the
    // prepass may still run; a's fp16 copy is read only once the prepass has completed and its
    // writes are visible (griddepcontrol.wait; without the launch attribute it returns at once).
    // The first commit group holds b's copies of every prologue stage and a's of the first.
    // (STAGE_BARRIERS: a stage is refilled two tiles after it was read, so the prologue fills one less.)
    constexpr int PROLOGUE = STAGE_BARRIERS ? STAGES - 2 : STAGES - 1;
#pragma unroll
    for (int s = 0; s < PROLOGUE; ++s)
        if (begin + s < end) {
            load_b(begin + s);
#if STAGE_BARRIERS
            tma.scales_arrive(begin + s);
#endif
        }
    asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
    for (int s = 0; s < PROLOGUE; ++s) {
        if (begin + s < end) load_a(begin + s);
        cp_async_commit();
    }
#else
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (begin + s < end) load_stage(begin + s);
        cp_async_commit();
    }
#endif
    [[maybe_unused]] const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#if MMA == 1
    const int warp_row = warp % 4 * 16, warp_col = warp / 4 * WG_N;
#elif MMA == 2  // (row, col) of the accumulators: wgmma's (M, N) = c's (column, row)
    [[maybe_unused]] const int warp_row = warp / 4 / WARPGROUP_K_SPLIT * 64 + warp % 4 * 16, warp_col = 0;
#else
    const int warp_row = warp / WARPS_N * WARP_M, warp_col = warp % WARPS_N * WARP_N;
#endif
    // the warpgroup's half of each K tile's steps (WARPGROUP_K_SPLIT 2); the other half's sums are added
    // to the first's after the K loop, and the first alone writes the tile
    const int k_half = MMA == 2 ? warp / 4 % WARPGROUP_K_SPLIT : 0;
    const bool owns_output = k_half == 0;
    float acc[MT][NT][4] = {};
#if PROMOTE
    auto add_into_acc = [&](const float (&tile)[MT][NT][4]) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] += tile[m][n][e];
    };
#endif
#if MMA == 0
    // mma.sync (synchronous): a K tile's products into acc, through fresh accumulators with PROMOTE
    auto multiply_into_acc = [&](const unsigned char* operands) {
#if PROMOTE
        float tile[MT][NT][4] = {};
        multiply_stage(tile, operands, warp_row, warp_col);
        add_into_acc(tile);
#else
        multiply_stage(acc, operands, warp_row, warp_col);
#endif
    };
#endif
#if DEQUANT == 0 && MMA != 2  // no fp16 tiles
    for (int kt = begin; kt < end; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and everyone is done with the stage refilled next
        if (kt + STAGES - 1 < end) load_stage(kt + STAGES - 1);
        cp_async_commit();
        multiply_into_acc(raw + (kt - begin) % STAGES * STAGE_BYTES);
    }
#elif STAGE_BARRIERS
    // TMA stages handed over by mbarriers alone, two K tiles' wgmmas in flight (nvfp4_tma.cuh)
    tma_k_loop(tma, b_loader, acc, raw, warp_row, k_half, begin, end);
#elif WGMMA_IN_FLIGHT == 2
    // Swapped wgmma on a's fp16 copy, two K tiles' wgmmas in flight: tile kt's are issued before the
    // warpgroup waits for tile kt - 1's, so the tensor cores always have the next tile queued while
    // the warps dequantise b's fragments of tile kt + 1 into the set tile kt - 1 read. One barrier a
    // tile, between the wait and the refill of tile kt - 1's stage (every warpgroup done with it).
    static_assert(STAGES >= 3 && !PROMOTE, "two tiles in flight: 3+ stages, accumulation in the tensor core");
    using Fragments = uint32_t[WG_STEPS][4];
    Fragments fragments_0, fragments_1;
    cp_async_wait<STAGES - 2>();  // tile begin has landed (this thread's copies) ...
    fence_proxy_async();          // (wgmma reads a's tile through the async proxy)
    __syncthreads();              // ... everyone's (and TMA_LOADS' barriers are initialised)
    landed(begin);
    if (begin < end) load_fragments(raw, warp_row, fragments_0, k_half);
    auto iteration = [&](int kt, Fragments& use, Fragments& fill) {
        const int i = kt - begin;
        multiply_stage(acc, use, raw + i % STAGES * STAGE_BYTES, false, k_half);
        wgmma_wait<1>();  // tile kt - 1's wgmmas are done: `fill` is free
        pin_registers(reinterpret_cast<uint32_t(&)[WG_STEPS * 4]>(fill));
        if (kt + 1 < end) {
            cp_async_wait<STAGES - 3>();  // tile kt + 1 has landed (this thread's copies) ...
            fence_proxy_async();
            __syncthreads();  // ... everyone's; and every warpgroup is done with tile kt - 1's stage
            if (kt + STAGES - 1 < end) load_stage(kt + STAGES - 1);
            cp_async_commit();
            landed(kt + 1);
            load_fragments(raw + (i + 1) % STAGES * STAGE_BYTES, warp_row, fill, k_half);
        }
    };
    two_tiles_in_flight(begin, end, iteration, fragments_0, fragments_1, acc);
#else
    // tile kt's fp16 operands are in halves[(kt - begin) % 2]; while the tensor cores multiply them,
    // the block dequantises tile kt + 1 into the other pair. With 3 or more stages tile kt + 1's packed
    // operands have landed before the barrier that ends iteration kt - 1 (one barrier a K tile);
    // with 2, a second barrier waits for them. Swapped wgmma: halves hold a's tiles alone, and each
    // warp dequantises b's rows of tile kt + 1 into its next A fragments meanwhile.
    constexpr int AHEAD = STAGES >= 3 ? 1 : 0;  // packed tiles beyond the next known landed at a barrier
    // Swapped wgmma: A fragments in two sets, the one the tile's wgmma reads and the one the next
    // tile's are dequantised into, swapping roles every tile (the loop below takes two tiles a turn):
    // a wgmma reads its A registers while it runs, so a set is pinned until the wait and only then
    // refilled. The other paths have no fragments (a set of one, unused).
    using Fragments = uint32_t[WG_STEPS][4];
    Fragments fragments_0, fragments_1;
    auto prepare = [&](const unsigned char* stage, unsigned char* tiles, Fragments& fill) {
#if MMA == 2
        if (!A_PREPASS) dequantize_a(stage, tiles);
        load_fragments(stage, warp_row, fill, k_half);
#else
        dequantize_stage(stage, tiles);
#endif
    };
    auto multiply = [&](float (&d)[MT][NT][4], const unsigned char* tiles, bool fresh, const Fragments& use) {
#if MMA == 2
        multiply_stage(d, use, tiles, fresh, k_half);
#elif MMA == 1
        multiply_stage(d, tiles, warp_col, fresh);
#else
        multiply_into_acc(tiles);
#endif
    };
    cp_async_wait<STAGES - 2 - AHEAD>();
    __syncthreads();
    landed(begin);
    if (AHEAD) landed(begin + 1);
    if (begin < end) prepare(raw, halves, fragments_0);
    fence_proxy_async();  // (wgmma reads through the async proxy)
    __syncthreads();
    // K tile kt, its A fragments in `use`; tile kt + 1's go to `fill`
    auto iteration = [&](int kt, Fragments& use, Fragments& fill) {
        const int i = kt - begin;
        if (kt + STAGES - 1 < end) load_stage(kt + STAGES - 1);  // into the stage dequantised before the last barrier
        cp_async_commit();
        // the fp16 tiles multiplied: dequantised by the block, or (A_PREPASS) a's as it landed in the stage
        const unsigned char* current = A_PREPASS ? raw + i % STAGES * STAGE_BYTES : halves + i % 2 * HALF_STAGE;
#if MMA != 0 && PROMOTE
        float tile[MT][NT][4];
        multiply(tile, current, true, use);
#else
        multiply(acc, current, false, use);
#endif
        if (kt + 1 < end) {
            if (!AHEAD) {
                cp_async_wait<STAGES - 2>();  // tile kt + 1 has landed (everyone's, after the barrier)
                __syncthreads();
                landed(kt + 1);
            }
            prepare(raw + (i + 1) % STAGES * STAGE_BYTES, halves + (i + 1) % 2 * HALF_STAGE, fill);
            fence_proxy_async();
        }
#if MMA != 0
        wgmma_wait<0>();
#if MMA == 2
        pin_registers(reinterpret_cast<uint32_t(&)[WG_STEPS * 4]>(use));
#endif
#if PROMOTE
        pin_registers(reinterpret_cast<float(&)[MT * NT * 4]>(tile));
        add_into_acc(tile);
#else
        pin_registers(reinterpret_cast<float(&)[MT * NT * 4]>(acc));
#endif
#endif
        if (AHEAD) cp_async_wait<STAGES - 3>();  // tile kt + 2 has landed (everyone's, after the barrier)
        __syncthreads();  // tile kt + 1's fp16 operands are complete; tile kt's pair is free
        if (AHEAD) landed(kt + 2);
    };
    for (int kt = begin; kt < end; kt += 2) {
        iteration(kt, fragments_0, fragments_1);
        if (kt + 1 < end) iteration(kt + 1, fragments_1, fragments_0);
    }
#endif

#if WARPGROUP_K_SPLIT == 2
    add_other_k_half(acc, reinterpret_cast<float*>(raw), k_half);
#endif
    half* out = c + (size_t)batch * M * N;
    [[maybe_unused]] bool stores = owns_output;  // this warp's sums go to c (a warp of the block storing them)
    [[maybe_unused]] int groups = 1, group = 0;  // the tile's 16-row groups w with w % groups == group are stored
#if SPLIT_K > 1 && SPLIT_CLUSTER
    if (splits > 1) {  // the tile's blocks are one cluster (along z): block r sums slice r of the rows
        // slice r of block q's partial tile goes to block r's stages, as its partial q: every block's
        // stores are fire-and-forget, and the sums read local shared memory alone
        float* partials = reinterpret_cast<float*>(smem);
        send_cluster_slices(acc, partials, warp_row, warp_col, lane, split, splits, owns_output);
        cluster_sync();  // every block's slices have arrived
        sum_cluster_slice(partials, split, splits, out, m0, n0, M, N);
        return;
    }
#elif SPLIT_K > 1 && SPLIT_CLUSTER_L2
    if (splits > 1) {  // the tile's blocks are one cluster (along z): block r sums the row groups w % splits == r
        const size_t tile = ((size_t)batch * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        float* records = workspace + tile * splits * BLOCK_M * BLOCK_N;
        const int row_group = warp_row / 16;
        stores = owns_output && row_group % splits == split, groups = splits, group = split;
        if (owns_output && !stores) leave_partial(acc, partial_of(records, split, row_group));
        cluster_sync();  // every block's partial sums are in the workspace
        for (int other = 0; other < splits && stores; ++other)
            if (other != split) add_partial(acc, partial_of(records, other, row_group));
    }
#elif SPLIT_K > 1
    if (splits > 1) {
        // this block's partial tile into its record; the last of the tile's `splits` blocks adds the others'
        const size_t tile = ((size_t)batch * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        float* records = workspace + tile * splits * BLOCK_M * BLOCK_N;
        if (owns_output)
            FOR_EACH_PAIR(*reinterpret_cast<float2*>(records + split * BLOCK_M * BLOCK_N + row * TILE_COLS + col) =
                              make_float2(acc[m][n][2 * h], acc[m][n][2 * h + 1]);)
#if SPLIT_SPREAD  // every block waits for the others, then sums and stores slice `split` of the rows
        all_arrived(tickets + tile, splits);
        sum_split_slice(SpreadPartials{records, split}, split, splits, out, m0, n0, M, N);
        return;
#endif
        if (!last_to_arrive(tickets + tile, splits)) return;
        for (int other = 0; other < splits && owns_output; ++other) {
            if (other == split) continue;
            FOR_EACH_PAIR(const float2 v = __ldcg(reinterpret_cast<const float2*>(
                              records + other * BLOCK_M * BLOCK_N + row * TILE_COLS + col));
                          acc[m][n][2 * h] += v.x; acc[m][n][2 * h + 1] += v.y;)
        }
    }
#endif
#if MMA == 2  // the pair is c[m0 + col][n0 + row] and c[m0 + col + 1][n0 + row]: through shared memory
    if constexpr (TILE_STAGED)
        store_tile(acc, smem, warp_row, out, m0, n0, M, N, stores, groups, group);
    else if (stores)
        store_pairs(acc, warp_row, out, m0, n0, M, N);
#else
    FOR_EACH_PAIR(if (m0 + row < M && n0 + col < N) *reinterpret_cast<half2*>(out + (size_t)(m0 + row) * N + n0 + col) =
                      __floats2half2_rn(acc[m][n][2 * h] * UNSCALE, acc[m][n][2 * h + 1] * UNSCALE);)
#endif
}

// what the kernel carves out of shared memory, read back by the family's load() to check spec.py
extern "C" __constant__ int nvfp4_shared_bytes = SHARED_BYTES;
