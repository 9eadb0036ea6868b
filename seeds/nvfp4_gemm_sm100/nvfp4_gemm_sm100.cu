// NVFP4 block-scaled GEMM, Blackwell (sm_100a) variant of seeds/nvfp4_gemm: the tensor cores take
// the e2m1 values and their e4m3 scales as they are (tcgen05.mma kind::mxf4nvf4, scale_vec::4X:
// one scale per 16 values), fp32 accumulators in tensor memory (TMEM).
//
//   c[l, m, n] = fp16( sum_k a[l, m, k] * sfa[l, m, k / 16] * b[l, n, k] * sfb[l, n, k / 16] )
//
// a: [L][M][K / 2] bytes, b: [L][N][K / 2] bytes (K-major, two e2m1 a byte), brought in by TMA
// (3-d maps: rows past M or N arrive as zeros) with the 128-byte swizzle, 256 values (128 bytes)
// of K a stage. sfa, sfb: the blocked layout of cuBLAS / CUTLASS, where the scales of 128 rows x 4
// groups of 16 values are one 512-byte tile (32 rows of 16 bytes, 32-row groups interleaved); a
// stage's 4 tiles of 128 rows are 2048 contiguous bytes, brought in by one bulk copy and copied to
// TMEM by tcgen05.cp 32x128b.warpx4 (the tile's 32 rows to each lane quarter, 4 columns: column j
// holds the scales of rows 32 j + lane), where the MMA reads them.
//
// Warp roles of a persistent block (one block an SM). A unit of work is one K range of one output
// tile (128 x BLOCK_N): with SPLITS > 1 the tile's blocks each leave an fp32 partial tile in a
// global workspace and the last to take the tile's ticket adds the others' and stores.
//   warp 0       producer: one thread issues the TMA and bulk copies of each stage into a ring of
//                STAGES ("full" / "empty" mbarriers)
//   warp 1       MMA warp: allocates TMEM (accumulators, then the scales of every stage); the
//                stage's shared-memory descriptors and TMEM addresses are computed (by one lane and
//                broadcast, or by every lane), then one elected thread copies the stage's scales into
//                TMEM and issues its MMAs (M 128, N 128, K 64, one or two N halves); tcgen05.commit
//                frees the stage when they are done and, after the unit's last stage, arrives on the
//                buffer's "TMEM full" barrier
//   warps 2..    EPILOGUE_WARPS epilogue warps read the accumulators (tcgen05.ld, each load waited
//                for before its registers are used), and arrive on "TMEM empty" after the
//                tcgen05 fence that orders their loads before the MMA warp's next writes
// Knobs (macros):
//   BLOCK_N          tile columns: 128 (one MMA of N 128 a K step) or 256 (two, sharing a's tile)
//   STAGES           ring depth (2..6)
//   ACC_BUFFERS      accumulator buffers in TMEM (1, 2): with 2 the MMA warp runs the next unit's
//                    main loop while the epilogue drains this one
//   EPILOGUE_WARPS   4 or 8 (8: two a lane quarter, each half the columns)
//   TMEM_LOAD_DEPTH  1: load 16 columns, wait, use; 2: the next 16 columns' load is in flight meanwhile
//   DESC_BROADCAST   0: every lane of the MMA warp computes the stage's descriptors and TMEM
//                    addresses; 1: lane 0 computes them and broadcasts them (__shfl_sync)
//   SPLIT_K          the most units an output tile is split into (the launch passes SPLITS <= it)
// Built and screened for sm_100a anywhere; it runs on a compute capability 10.0 GPU only, and is
// reported as built-but-unverified elsewhere.
#include <cuda_fp16.h>
#include <stdint.h>

#define BLOCK_M 128
#define BLOCK_K 256  // values of K a stage: 128 bytes a row, one swizzle atom
#define MMA_K 64     // values of one MMA: 32 bytes a row, 4 scales
#define MMA_N 128
#define N_MMAS (BLOCK_N / MMA_N)
#define K_STEPS (BLOCK_K / MMA_K)
#define CHUNK 16  // accumulator columns of one TMEM load
#define THREADS (32 * (2 + EPILOGUE_WARPS))
#define COLUMN_SPLIT (EPILOGUE_WARPS / 4)
static_assert(BLOCK_N % MMA_N == 0 && N_MMAS <= 2, "BLOCK_N is 128 or 256");

constexpr int A_STAGE = BLOCK_M * BLOCK_K / 2, B_STAGE = BLOCK_N * BLOCK_K / 2;
constexpr int SCALE_TILE = 512;                     // 128 rows x 4 scales, blocked
constexpr int SCALE_GROUP = K_STEPS * SCALE_TILE;   // a stage's scales of 128 rows: 2048 contiguous bytes
constexpr int STAGE_BYTES = A_STAGE + B_STAGE + (1 + N_MMAS) * SCALE_GROUP;  // a multiple of 1024
static_assert(STAGE_BYTES % 1024 == 0, "every stage starts on the swizzle's 1024-byte period");
// shared memory: the stages, then the barriers (full, empty of every stage; TMEM full and empty of
// every accumulator buffer), the TMEM address and the epilogue's ticket flag
constexpr int BARRIER_BYTES = (2 * STAGES + 2 * ACC_BUFFERS) * 8 + 16;
constexpr int SHARED_BYTES = STAGES * STAGE_BYTES + BARRIER_BYTES + 1024;  // + alignment slack

// TMEM: ACC_BUFFERS x BLOCK_N accumulator columns, then per stage the scales of a (4 columns a K
// step) and of b (the same for each 128 rows)
constexpr int SCALE_COLUMNS = 4 * K_STEPS;
constexpr int STAGE_SCALE_COLUMNS = (1 + N_MMAS) * SCALE_COLUMNS;
constexpr int SCALES_BASE = ACC_BUFFERS * BLOCK_N;
constexpr int TMEM_COLUMNS = tmem_allocation(SCALES_BASE + STAGES * STAGE_SCALE_COLUMNS);
static_assert(SCALES_BASE + STAGES * STAGE_SCALE_COLUMNS <= 512, "accumulators and scales fit TMEM's 512 columns");

// instruction descriptor, kind::mxf4nvf4: e2m1 A and B (format 1), both K-major, e4m3 scales (scale
// format 0), scale ids 0 (4 scales fill a column), M 128, N 128, dense K 64
constexpr uint32_t INSTRUCTION = (1u << 7) | (1u << 10) | (uint32_t(MMA_N >> 3) << 17) | (uint32_t(BLOCK_M >> 4) << 24);

__device__ __forceinline__ void mma_block_scaled(unsigned d, uint64_t a, uint64_t b, unsigned scales_a,
                                                 unsigned scales_b, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%0], %1, %2, %3, [%4], [%5], p;\n}"
                 ::"r"(d), "l"(a), "l"(b), "r"(INSTRUCTION), "r"(scales_a), "r"(scales_b), "r"(int(accumulate))
                 : "memory");
}

// a 512-byte scale tile (32 rows of 16 bytes, no swizzle, 8-row groups 128 bytes apart) into 4 TMEM
// columns of every lane quarter
__device__ __forceinline__ void copy_scales(unsigned columns, unsigned tile_address) {
    const uint64_t source = uint64_t((tile_address & 0x3FFFF) >> 4) | (uint64_t(128 >> 4) << 32) | (uint64_t(1) << 46);
    asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" ::"r"(columns), "l"(source) : "memory");
}

// `bytes` contiguous bytes (a multiple of 16, both ends 16-byte aligned) into shared memory, counted on `bar`
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(smem_address(bar)) : "memory");
}

// One unit of work: stages begin..end - 1 of output tile `tile` (batch, m0, n0), split `split`
struct Unit {
    int tile, split, batch, m0, n0, begin, end;
};

// The units in the order the blocks take them: unit u goes to block u % gridDim.x; a tile's splits
// are consecutive units, so they run side by side
struct Units {
    int n_tiles, m_tiles, count, splits, stages;
    __device__ Units(int M, int N, int K, int L, int splits_)
        : n_tiles((N + BLOCK_N - 1) / BLOCK_N), m_tiles((M + BLOCK_M - 1) / BLOCK_M),
          count(n_tiles * m_tiles * L * splits_), splits(splits_), stages(K / BLOCK_K) {}
    __device__ int owned() const { return blockIdx.x < count ? (count - blockIdx.x + gridDim.x - 1) / gridDim.x : 0; }
    __device__ Unit at(int local) const {
        const int u = blockIdx.x + local * gridDim.x, tile = u / splits, split = u % splits;
        return {tile, split, tile / (n_tiles * m_tiles), tile / n_tiles % m_tiles * BLOCK_M, tile % n_tiles * BLOCK_N,
                split * stages / splits, (split + 1) * stages / splits};
    }
};

struct Ring {  // the block's shared memory and barriers
    unsigned char* stages;
    uint64_t *full, *empty, *tmem_full, *tmem_empty;
    unsigned* tmem_slot;
    volatile unsigned* last_flag;
};

__device__ void produce(const Units& units, int owned, const Ring& ring, const TensorMap* a_map,
                        const TensorMap* b_map, const unsigned char* sfa, const unsigned char* sfb, int M, int N, int K) {
    const size_t row_tile_bytes = (size_t)(K / 64) * SCALE_TILE;  // the scales of 128 rows, all of K
    const int b_row_tiles = (N + 127) / 128;
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        const Unit u = units.at(i);
        const unsigned char* a_scales = sfa + (size_t)u.batch * ((M + 127) / 128) * row_tile_bytes + u.m0 / 128 * row_tile_bytes;
        const unsigned char* b_scales = sfb + (size_t)u.batch * b_row_tiles * row_tile_bytes + u.n0 / 128 * row_tile_bytes;
        const int b_groups = min(N_MMAS, b_row_tiles - u.n0 / 128);  // scale groups that exist (N past: none)
        for (int kt = u.begin; kt < u.end; ++kt, ++fill) {
            const int s = fill % STAGES;
            if (fill >= STAGES) barrier_wait(ring.empty + s, (fill / STAGES - 1) & 1);
            unsigned char* stage = ring.stages + s * STAGE_BYTES;
            barrier_expect_bytes(ring.full + s, A_STAGE + B_STAGE + (1 + b_groups) * SCALE_GROUP);
            tma_load_3d(stage, a_map, kt * BLOCK_K / 2, u.m0, u.batch, ring.full + s);
            tma_load_3d(stage + A_STAGE, b_map, kt * BLOCK_K / 2, u.n0, u.batch, ring.full + s);
            unsigned char* scales = stage + A_STAGE + B_STAGE;
            bulk_load(scales, a_scales + kt * SCALE_GROUP, SCALE_GROUP, ring.full + s);
            for (int j = 0; j < b_groups; ++j)
                bulk_load(scales + (1 + j) * SCALE_GROUP, b_scales + j * row_tile_bytes + kt * SCALE_GROUP, SCALE_GROUP,
                          ring.full + s);
        }
    }
}

// what the MMAs of a stage read: a's and b's descriptors, the TMEM columns of its scales
struct StageOperands {
    uint64_t a, b;
    unsigned scales;
};

__device__ __forceinline__ StageOperands stage_operands(const Ring& ring, unsigned tmem, int s) {
    const unsigned stage = smem_address(ring.stages + s * STAGE_BYTES);
    return {swizzled_descriptor(stage), swizzled_descriptor(stage + A_STAGE), tmem + SCALES_BASE + s * STAGE_SCALE_COLUMNS};
}

// The MMA warp: unit i accumulates in buffer i % ACC_BUFFERS once the epilogue has emptied it
__device__ void issue_mmas(const Units& units, int owned, const Ring& ring, unsigned tmem) {
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        const Unit u = units.at(i);
        const int buffer = i % ACC_BUFFERS;
        if (i >= ACC_BUFFERS) barrier_wait(ring.tmem_empty + buffer, (i / ACC_BUFFERS - 1) & 1);
        tcgen05_after_sync();
        const unsigned accumulators = tmem + buffer * BLOCK_N;
        for (int kt = u.begin; kt < u.end; ++kt, ++fill) {
            const int s = fill % STAGES;
            barrier_wait(ring.full + s, (fill / STAGES) & 1);
            tcgen05_after_sync();
#if DESC_BROADCAST
            StageOperands op{};
            if (threadIdx.x % 32 == 0) op = stage_operands(ring, tmem, s);
            op.a = __shfl_sync(0xffffffffu, op.a, 0);
            op.b = __shfl_sync(0xffffffffu, op.b, 0);
            op.scales = __shfl_sync(0xffffffffu, op.scales, 0);
#else
            const StageOperands op = stage_operands(ring, tmem, s);
#endif
            if (elect_one()) {
                // the stage's scales into TMEM (tcgen05.cp and tcgen05.mma of one thread run in order)
                const unsigned scale_tiles = smem_address(ring.stages + s * STAGE_BYTES + A_STAGE + B_STAGE);
#pragma unroll
                for (int g = 0; g < 1 + N_MMAS; ++g)
#pragma unroll
                    for (int k = 0; k < K_STEPS; ++k)
                        copy_scales(op.scales + g * SCALE_COLUMNS + 4 * k, scale_tiles + g * SCALE_GROUP + k * SCALE_TILE);
#pragma unroll
                for (int k = 0; k < K_STEPS; ++k)  // 64 values = 32 bytes = 2 in the descriptor's address
#pragma unroll
                    for (int h = 0; h < N_MMAS; ++h)  // b's rows 128 h..: 128 rows x 128 bytes = 1024 in the address
                        mma_block_scaled(accumulators + h * MMA_N, op.a + 2 * k, op.b + h * 1024 + 2 * k,
                                         op.scales + 4 * k, op.scales + (1 + h) * SCALE_COLUMNS + 4 * k,
                                         kt > u.begin || k > 0);
                mma_commit(ring.empty + s);  // the stage is free once these have read it
                if (kt == u.end - 1) mma_commit(ring.tmem_full + buffer);  // the unit's accumulators are full
            }
            __syncwarp();
        }
    }
}

__device__ __forceinline__ void epilogue_barrier() {  // the epilogue warps alone (named barrier 1)
    asm volatile("bar.sync 1, %0;" ::"n"(EPILOGUE_WARPS * 32) : "memory");
}

// the epilogue warps' ticket for a tile: true in the last of its `splits` units to arrive, whose
// later reads (.cg) see the others' partial tiles
__device__ bool last_of_tile(unsigned* counter, int splits, volatile unsigned* flag) {
    __threadfence();  // this thread's partial results are visible before the ticket is taken
    epilogue_barrier();
    if (threadIdx.x == 64) *flag = atomicAdd(counter, 1u) % splits == unsigned(splits - 1);
    epilogue_barrier();
    const bool last = *flag != 0;
    if (last) __threadfence();
    return last;
}

// this thread's row of the epilogue warp's columns, CHUNK at a time: action(column, values)
template <typename Action>
__device__ __forceinline__ void for_each_chunk(unsigned lanes, Action&& action) {
    constexpr int CHUNKS = BLOCK_N / COLUMN_SPLIT / CHUNK;
    uint32_t v[TMEM_LOAD_DEPTH][CHUNK];
    tmem_load16(lanes, v[0]);
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
        uint32_t (&now)[CHUNK] = v[c % TMEM_LOAD_DEPTH];
        tmem_wait16(now);  // every TMEM load is waited for before its registers are read
        if (TMEM_LOAD_DEPTH > 1 && c + 1 < CHUNKS) tmem_load16(lanes + (c + 1) * CHUNK, v[(c + 1) % TMEM_LOAD_DEPTH]);
        action(c * CHUNK, now);
        if (TMEM_LOAD_DEPTH == 1 && c + 1 < CHUNKS) tmem_load16(lanes + (c + 1) * CHUNK, v[0]);
    }
}

// One epilogue warp: rows 32 q .. 32 q + 31 of each unit's tile (q = its TMEM lane quarter), its
// share of the columns; with splits, its partial rows first, then (in the tile's last unit) the sum
__device__ void drain(const Units& units, int owned, const Ring& ring, unsigned tmem, half* __restrict__ c,
                      int M, int N, float* __restrict__ workspace, unsigned* tickets) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int quarter = warp % 4, first = (warp - 2) / 4 * (BLOCK_N / COLUMN_SPLIT);
    const int row = 32 * quarter + lane;
    for (int i = 0; i < owned; ++i) {
        const Unit u = units.at(i);
        const int buffer = i % ACC_BUFFERS;
        barrier_wait(ring.tmem_full + buffer, (i / ACC_BUFFERS) & 1);
        tcgen05_after_sync();
        const unsigned lanes = tmem + (unsigned(32 * quarter) << 16) + buffer * BLOCK_N + first;
        float* records = workspace + (size_t)u.tile * units.splits * BLOCK_M * BLOCK_N;
        bool finish = true;
        if (SPLIT_K > 1 && units.splits > 1) {
            for_each_chunk(lanes, [&](int col, const uint32_t (&v)[CHUNK]) {
                float4* mine = reinterpret_cast<float4*>(records + (u.split * BLOCK_M + row) * BLOCK_N + first + col);
#pragma unroll
                for (int j = 0; j < CHUNK / 4; ++j)
                    mine[j] = make_float4(__uint_as_float(v[4 * j]), __uint_as_float(v[4 * j + 1]),
                                          __uint_as_float(v[4 * j + 2]), __uint_as_float(v[4 * j + 3]));
            });
            finish = last_of_tile(tickets + u.tile, units.splits, ring.last_flag);
        }
        if (finish) {
            half* out = c + ((size_t)u.batch * M + u.m0 + row) * N + u.n0 + first;
            for_each_chunk(lanes, [&](int col, const uint32_t (&v)[CHUNK]) {
                float sum[CHUNK];
#pragma unroll
                for (int j = 0; j < CHUNK; ++j) sum[j] = __uint_as_float(v[j]);
                for (int other = 0; SPLIT_K > 1 && other < units.splits; ++other) {
                    if (other == u.split) continue;
                    const float4* theirs = reinterpret_cast<const float4*>(
                        records + (other * BLOCK_M + row) * BLOCK_N + first + col);
#pragma unroll
                    for (int j = 0; j < CHUNK / 4; ++j) {
                        const float4 t = __ldcg(theirs + j);
                        sum[4 * j] += t.x, sum[4 * j + 1] += t.y, sum[4 * j + 2] += t.z, sum[4 * j + 3] += t.w;
                    }
                }
                const int column = u.n0 + first + col;
                if (u.m0 + row >= M || column >= N) return;
                half2 pairs[CHUNK / 2];
#pragma unroll
                for (int j = 0; j < CHUNK / 2; ++j) pairs[j] = __floats2half2_rn(sum[2 * j], sum[2 * j + 1]);
                if (column + CHUNK <= N && N % 8 == 0) {  // whole, 16-byte aligned
                    uint4* to = reinterpret_cast<uint4*>(out + col);
                    to[0] = *reinterpret_cast<const uint4*>(pairs);
                    to[1] = *reinterpret_cast<const uint4*>(pairs + 4);
                } else {  // N is even: pair by pair up to N
                    for (int j = 0; j < CHUNK / 2 && column + 2 * j < N; ++j)
                        reinterpret_cast<half2*>(out + col)[j] = pairs[j];
                }
            });
        }
        tcgen05_before_sync();  // this warp's TMEM loads are done before the MMA warp may overwrite
        __syncwarp();
        if (lane == 0) barrier_arrive(ring.tmem_empty + buffer);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
nvfp4_gemm_sm100(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map,
                 const unsigned char* sfa, const unsigned char* sfb, half* c, int M, int N, int K, int L, int splits,
                 float* workspace, unsigned* tickets) {
    extern __shared__ unsigned char raw[];
    unsigned char* smem = raw + ((1024 - smem_address(raw) % 1024) % 1024);
    Ring ring;
    ring.stages = smem;
    ring.full = reinterpret_cast<uint64_t*>(smem + STAGES * STAGE_BYTES);
    ring.empty = ring.full + STAGES;
    ring.tmem_full = ring.empty + STAGES;
    ring.tmem_empty = ring.tmem_full + ACC_BUFFERS;
    ring.tmem_slot = reinterpret_cast<unsigned*>(ring.tmem_empty + ACC_BUFFERS);
    ring.last_flag = ring.tmem_slot + 1;
    const Units units(M, N, K, L, splits);
    const int owned = units.owned(), warp = threadIdx.x / 32;

    const unsigned tmem = start_warp_roles<TMEM_COLUMNS>(ring.full, STAGES, ACC_BUFFERS, EPILOGUE_WARPS, ring.tmem_slot);

    if (warp == 0) {
        if (threadIdx.x == 0) produce(units, owned, ring, &a_map, &b_map, sfa, sfb, M, N, K);
    } else if (warp == 1) {
        issue_mmas(units, owned, ring, tmem);
    } else {
        drain(units, owned, ring, tmem, c, M, N, workspace, tickets);
    }
    end_warp_roles<TMEM_COLUMNS>(tmem);
}

extern "C" __constant__ int nvfp4_sm100_shared_bytes = SHARED_BYTES;
