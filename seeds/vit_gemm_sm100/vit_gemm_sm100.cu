// ViT patch-embedding GEMM with its epilogue, Blackwell (sm_100a) variant of seeds/vit_gemm:
//   C[b * P + p, n] = bf16( sum_k A[b * P + p, k] * W[n, k] + bias[n] + pos[p, n] )
// A bf16 [M, K] row-major, W bf16 [N, K] (K-major), bias fp32 [N], pos fp32 [P, N], C bf16 [M, N].
//
// Warp roles of a persistent block (one block an SM, tiles of 128 x BLOCK_N):
//   warp 0       the producer: one thread brings in 64-deep K slices of A and W by TMA (128-byte
//                swizzle) into a ring of STAGES stages ("full" / "empty" mbarriers)
//   warp 1       the MMA warp: allocates the accumulators in tensor memory (TMEM), and one elected
//                thread issues tcgen05.mma (M 128, N BLOCK_N, K 16) from shared memory into them;
//                tcgen05.commit frees each stage when its MMAs are done and, after a tile's last
//                slice, arrives on the tile's "mainloop done" barrier (accumulators full)
//   warps 2..    EPILOGUE_WARPS epilogue warps: each reads its quarter of the TMEM lanes (its rows;
//                with 8 warps, half the columns) with tcgen05.ld, adds bias and pos, converts to
//                bf16 and stores; then arrives on "epilogue done" (accumulators free)
// Knobs (macros):
//   BLOCK_N          tile columns = MMA N (64, 128, 256); STAGES: ring depth (2..6)
//   ACC_BUFFERS      accumulator buffers in TMEM (1, 2): with 2 the MMA warp runs the next tile's
//                    main loop while the epilogue drains this one
//   EPILOGUE_WARPS   4 or 8
//   TMEM_LOAD_DEPTH  1: load a 16-column chunk of the accumulators, wait, finish it; 2: the next
//                    chunk's tcgen05.ld is in flight while this one is finished
//   DESC_BROADCAST   0: every lane of the MMA warp computes the stage's shared-memory descriptors;
//                    1: lane 0 computes them once and broadcasts them to the warp (__shfl_sync)
//   The elected thread issues in both cases.
// Built and screened for sm_100a on machines without such a GPU, where it is reported as unverified.
#include <cuda_bf16.h>
#include <stdint.h>

#define BLOCK_M 128
#define BLOCK_K 64  // one 128-byte swizzle atom of bf16
#define CHUNK 16    // accumulator columns a tcgen05.ld brings to each thread (32x32b.x16)
#define THREADS (32 * (2 + EPILOGUE_WARPS))
#define COLUMN_SPLIT (EPILOGUE_WARPS / 4)  // epilogue warps sharing one quarter of the TMEM lanes
#define TMEM_COLUMNS (ACC_BUFFERS * BLOCK_N)

constexpr int A_STAGE = BLOCK_M * BLOCK_K * 2, W_STAGE = BLOCK_N * BLOCK_K * 2;
constexpr int STAGE_BYTES = A_STAGE + W_STAGE;
// shared memory: the stages, then the barriers (full, empty of every stage; accumulators full and
// free of every buffer) and the TMEM address the MMA warp's allocation writes
constexpr int BARRIER_BYTES = (2 * STAGES + 2 * ACC_BUFFERS) * 8 + 16;
constexpr int SHARED_BYTES = STAGES * STAGE_BYTES + BARRIER_BYTES + 1024;  // + alignment slack

// -- the fifth-generation tensor cores (TMEM, fences, descriptors, commits, loads: _blackwell.cuh)
// instruction descriptor, kind::f16: fp32 accumulators, bf16 A and B, both K-major, M 128, N BLOCK_N
constexpr uint32_t INSTRUCTION = (1u << 4) | (1u << 7) | (1u << 10) | (uint32_t(BLOCK_N >> 3) << 17) |
                                 (uint32_t(BLOCK_M >> 4) << 24);

__device__ __forceinline__ void mma(unsigned accumulators, uint64_t a, uint64_t b, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}"
                 ::"r"(accumulators), "l"(a), "l"(b), "r"(INSTRUCTION), "r"(int(accumulate)) : "memory");
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
}

// The tiles in the order the blocks take them: tile t goes to block t % gridDim.x, along N first
struct Tiles {
    int m_count, n_count;
    __device__ Tiles(int M, int N) : m_count((M + BLOCK_M - 1) / BLOCK_M), n_count((N + BLOCK_N - 1) / BLOCK_N) {}
    __device__ int owned() const {
        const int count = m_count * n_count;
        return blockIdx.x < count ? (count - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    }
    __device__ int2 origin(int local) const {
        const int t = blockIdx.x + local * gridDim.x;
        return make_int2(t / n_count * BLOCK_M, t % n_count * BLOCK_N);
    }
};

__device__ void produce(const Tiles& tiles, int owned, int k_tiles, const TensorMap* a_map, const TensorMap* w_map,
                        unsigned char* smem, uint64_t* full, uint64_t* empty) {
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
            const int s = fill % STAGES;
            if (fill >= STAGES) barrier_wait(empty + s, (fill / STAGES - 1) & 1);
            unsigned char* stage = smem + s * STAGE_BYTES;
            barrier_expect_bytes(full + s, STAGE_BYTES);
            tma_load(stage, a_map, kt * BLOCK_K, origin.x, full + s);
            tma_load(stage + A_STAGE, w_map, kt * BLOCK_K, origin.y, full + s);
        }
    }
}

// The MMA warp: tile i accumulates in buffer i % ACC_BUFFERS, once the epilogue has freed it
__device__ void issue_mmas(int owned, int k_tiles, unsigned char* smem, unsigned tmem, uint64_t* full,
                           uint64_t* empty, uint64_t* acc_full, uint64_t* acc_free) {
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        const int b = i % ACC_BUFFERS;
        if (i >= ACC_BUFFERS) barrier_wait(acc_free + b, (i / ACC_BUFFERS - 1) & 1);
        tcgen05_after_sync();
        const unsigned accumulators = tmem + b * BLOCK_N;  // columns of buffer b, lanes 0..127
        for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
            const int s = fill % STAGES;
            barrier_wait(full + s, (fill / STAGES) & 1);
            tcgen05_after_sync();
            const unsigned stage = smem_address(smem + s * STAGE_BYTES);
#if DESC_BROADCAST
            uint64_t a = 0, w = 0;
            if (threadIdx.x % 32 == 0) a = swizzled_descriptor(stage), w = swizzled_descriptor(stage + A_STAGE);
            a = __shfl_sync(0xffffffffu, a, 0);
            w = __shfl_sync(0xffffffffu, w, 0);
#else
            const uint64_t a = swizzled_descriptor(stage), w = swizzled_descriptor(stage + A_STAGE);
#endif
            if (elect_one()) {
#pragma unroll
                for (int k = 0; k < BLOCK_K / 16; ++k)  // 16 deep = 32 bytes = 2 in the descriptor's address
                    mma(accumulators, a + 2 * k, w + 2 * k, kt > 0 || k > 0);
                mma_commit(empty + s);  // the stage is free once these MMAs have read it
                if (kt == k_tiles - 1) mma_commit(acc_full + b);  // mainloop done: the accumulators are full
            }
            __syncwarp();
        }
    }
}

// One epilogue warp: rows 32 q .. 32 q + 31 of each tile (q = its TMEM lane quarter), columns of its
// COLUMN_SPLIT-th share, 16 at a time; then "epilogue done" on the buffer
__device__ void drain(const Tiles& tiles, int owned, unsigned tmem, uint64_t* acc_full, uint64_t* acc_free, int M,
                      int N, int P, const float* __restrict__ bias, const float* __restrict__ pos,
                      __nv_bfloat16* __restrict__ C) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int quarter = warp % 4, share = (warp - 2) / 4;
    constexpr int COLUMNS = BLOCK_N / COLUMN_SPLIT, CHUNKS = COLUMNS / CHUNK;
    for (int i = 0; i < owned; ++i) {
        const int b = i % ACC_BUFFERS;
        barrier_wait(acc_full + b, (i / ACC_BUFFERS) & 1);
        tcgen05_after_sync();
        const int2 origin = tiles.origin(i);
        const int row = origin.x + 32 * quarter + lane, first = share * COLUMNS;
        const unsigned lanes = tmem + (unsigned(32 * quarter) << 16) + b * BLOCK_N + first;
        const float* pos_row = pos + (size_t)((row < M ? row : 0) % P) * N;
        uint32_t v[TMEM_LOAD_DEPTH][CHUNK];
        tmem_load16(lanes, v[0]);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            uint32_t (&now)[CHUNK] = v[c % TMEM_LOAD_DEPTH];
            tmem_wait16(now);
            if (TMEM_LOAD_DEPTH > 1 && c + 1 < CHUNKS) tmem_load16(lanes + (c + 1) * CHUNK, v[(c + 1) % TMEM_LOAD_DEPTH]);
            const int col = origin.y + first + c * CHUNK;
            if (row < M && col < N) {  // N % 8 == 0: past N - 8 a chunk keeps its first 8 columns only
                const bool whole = col + CHUNK <= N;
                unsigned packed[CHUNK / 2] = {};
#pragma unroll
                for (int j = 0; j < CHUNK; j += 4) {
                    if (j >= 8 && !whole) break;
                    const float4 bj = *reinterpret_cast<const float4*>(bias + col + j);
                    const float4 pj = *reinterpret_cast<const float4*>(pos_row + col + j);
                    packed[j / 2] = bf16_pair(__uint_as_float(now[j]) + bj.x + pj.x,
                                              __uint_as_float(now[j + 1]) + bj.y + pj.y);
                    packed[j / 2 + 1] = bf16_pair(__uint_as_float(now[j + 2]) + bj.z + pj.z,
                                                  __uint_as_float(now[j + 3]) + bj.w + pj.w);
                }
                uint4* out = reinterpret_cast<uint4*>(C + (size_t)row * N + col);
                out[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
                if (whole) out[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
            }
            if (TMEM_LOAD_DEPTH == 1 && c + 1 < CHUNKS) tmem_load16(lanes + (c + 1) * CHUNK, v[0]);
        }
        tcgen05_before_sync();
        __syncwarp();
        if (lane == 0) barrier_arrive(acc_free + b);  // epilogue done: the MMA warp may refill the buffer
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
vit_gemm_sm100(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap w_map,
               const float* __restrict__ bias, const float* __restrict__ pos, __nv_bfloat16* __restrict__ C,
               int M, int N, int K, int P) {
    extern __shared__ unsigned char raw[];
    unsigned char* smem = raw + ((1024 - smem_address(raw) % 1024) % 1024);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * STAGE_BYTES);
    uint64_t* empty = full + STAGES;
    uint64_t* acc_full = empty + STAGES;
    uint64_t* acc_free = acc_full + ACC_BUFFERS;
    unsigned* tmem_slot = reinterpret_cast<unsigned*>(acc_free + ACC_BUFFERS);
    const Tiles tiles(M, N);
    const int owned = tiles.owned(), k_tiles = (K + BLOCK_K - 1) / BLOCK_K, warp = threadIdx.x / 32;

    const unsigned tmem = start_warp_roles<TMEM_COLUMNS>(full, STAGES, ACC_BUFFERS, EPILOGUE_WARPS, tmem_slot);

    if (warp == 0) {
        if (threadIdx.x == 0) produce(tiles, owned, k_tiles, &a_map, &w_map, smem, full, empty);
    } else if (warp == 1) {
        issue_mmas(owned, k_tiles, smem, tmem, full, empty, acc_full, acc_free);
    } else {
        drain(tiles, owned, tmem, acc_full, acc_free, M, N, P, bias, pos, C);
    }
    end_warp_roles<TMEM_COLUMNS>(tmem);
}

extern "C" __constant__ int vit_gemm_sm100_shared_bytes = SHARED_BYTES;
