// nvfp4_gemm (see nvfp4_gemm.cu), TMA_LOADS: a stage's fp16 tile of a's copy (two 64-column boxes,
// 128-byte swizzled, as wgmma reads them) and b's packed rows (one box, rows unpadded) come in by TMA,
// issued by thread 0 and counted on the stage's mbarrier; b's scales still by cp.async, 4 bytes a
// thread. K order: each thread of a quad owns a run of BLOCK_K / 4 consecutive values of a row (one
// 16- or 8-byte load, conflict-free on 64-byte rows, and half the scales of the span order); a's
// prepass writes its copy in the same order.
#if TMA_LOADS
constexpr int RUN_WORDS = BLOCK_K / 32;  // words (8 values) of a thread's run; RUN_WORDS / 2 scales (1 if 2 words)

// the e4m3 scales of a run times 2^7, each in both halves of an fp16 pair (scale_factor's form)
__device__ __forceinline__ void run_factors(const unsigned char* scales, uint32_t (&factor)[RUN_WORDS / 2]) {
    if constexpr (RUN_WORDS == 4) {
        uint32_t pair;  // {first scale, second} in the low and high halves
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(*reinterpret_cast<const unsigned short*>(scales)));
        pair = mul_half2(pair, 0x58005800u);
        factor[0] = __byte_perm(pair, 0, 0x1010);
        factor[1] = __byte_perm(pair, 0, 0x3232);
    } else {
        factor[0] = scale_factor(scales[0]);
    }
}

// WORDS words of a row's run for this thread from word `first` (words w = 0 .. RUN_WORDS - 1 of a run:
// values BLOCK_K / 4 * t + 8 w .. + 7 of the K tile), dequantised: out[w] is dequantize8's four pairs of
// word first + w
template <int WORDS>
__device__ __forceinline__ void run_pairs(const unsigned char* values, const unsigned char* scales, int row, int first,
                                          uint32_t (&out)[WORDS][4]) {
    const int t = threadIdx.x % 4;
    const unsigned char* from = values + row * ROW_BYTES + t * (RUN_WORDS * 4) + first * 4;
    uint32_t words[WORDS], factor[(WORDS + 1) / 2];
    if constexpr (WORDS == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(from);
        words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else if constexpr (WORDS == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(from);
        words[0] = v.x, words[1] = v.y;
    } else {
        words[0] = *reinterpret_cast<const uint32_t*>(from);
    }
    if constexpr (WORDS == 4)
        run_factors(scales + row * SCALES + t * (RUN_WORDS / 2) + first / 2, factor);
    else
        factor[0] = scale_factor(scales[row * SCALES + t * (RUN_WORDS / 2) + first / 2]);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) dequantize8(words[w], factor[w / 2], out[w]);
}

// the warp's A fragments of one stage in the run order: k16 step j = 2 w + q takes word w's pairs 2q
// (slots 2t, 2t + 1) and 2q + 1 (slots 2t + 8, 2t + 9), rows g and g + 8 of its 16 columns of c; with
// two warpgroups to a K tile, warpgroup k_half takes words k_half * RUN_WORDS / 2 .. (its half of the steps)
__device__ __forceinline__ void load_run_fragments(const unsigned char* stage, int warp_row, uint32_t (&a)[WG_STEPS][4],
                                                   int k_half) {
    constexpr int WORDS = RUN_WORDS / WARPGROUP_K_SPLIT;
    const unsigned char* values = stage + A_BYTES;
    const unsigned char* scales = stage + A_BYTES + B_BYTES;
    const int g = threadIdx.x % 32 / 4;
    uint32_t top[WORDS][4], bottom[WORDS][4];
    run_pairs(values, scales, warp_row + g, k_half * WORDS, top);
    run_pairs(values, scales, warp_row + g + 8, k_half * WORDS, bottom);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) pairs_to_fragments(top[w], bottom[w], reinterpret_cast<uint32_t(&)[2][4]>(a[2 * w]));
}

// The stages' mbarriers (in shared memory after the stages) and thread 0's boxes of a K tile: a's fp16
// rows m0 .. m0 + BLOCK_M - 1 (3-d map [L][M][K] halves) and b's packed rows n0 .. n0 + BLOCK_N - 1
// (3-d map [L][N][K / 2] bytes); rows past M or N land as zeros. A stage's "full" barrier completes
// when its boxes have landed (and with STAGE_BARRIERS every thread's scale copies: no block barrier
// between tiles); its "empty" one (STAGE_BARRIERS) when every thread is done with it.
struct TmaStages {
    unsigned char* raw;
    uint64_t* full;  // STAGES full barriers, then (STAGE_BARRIERS) STAGES empty ones
    const TensorMap *a_map, *b_map;
    int m0, n0, batch, begin;

    __device__ uint64_t* barrier(int kt) const { return full + (kt - begin) % STAGES; }
    __device__ uint64_t* empty(int kt) const { return full + STAGES + (kt - begin) % STAGES; }
    __device__ unsigned phase(int kt) const { return (kt - begin) / STAGES & 1; }
    __device__ unsigned char* stage(int kt) const { return raw + (kt - begin) % STAGES * STAGE_BYTES; }

    // thread 0, before any copy: the barriers (published to the block by a later __syncthreads)
    __device__ void init() const {
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(full + s, STAGE_BARRIERS ? 1 + THREADS : 1);
            if (STAGE_BARRIERS) barrier_init(full + STAGES + s, THREADS);
        }
        barrier_init_fence();
    }
    // every thread, after its scale copies of tile kt: they count as its arrival on the full barrier
    __device__ void scales_arrive(int kt) const {
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(barrier(kt))) : "memory");
    }
    // every thread: done with tile kt's stage (its reads, and its warpgroup's wgmmas)
    __device__ void release(int kt) const { barrier_arrive(empty(kt)); }
    // every thread: every thread is done with tile kt's stage, which may be refilled
    __device__ void wait_empty(int kt) const { barrier_wait(empty(kt), phase(kt)); }
    // thread 0: the tile's bytes are announced with b's box, before a's boxes are requested
    __device__ void issue_b(int kt) const {
        barrier_expect_bytes(barrier(kt), A_HALVES + BLOCK_N * ROW_BYTES);
        tma_load_3d(stage(kt) + A_BYTES, b_map, kt * (BLOCK_K / 2), n0, batch, barrier(kt));
    }
    __device__ void issue_a(int kt) const {
#pragma unroll
        for (int atom = 0; atom < BLOCK_K / 64; ++atom)
            tma_load_3d(stage(kt) + atom * BLOCK_M * 128, a_map, kt * BLOCK_K + atom * 64, m0, batch, barrier(kt));
    }
    // every thread: tile kt's boxes have landed (kt < end: only issued tiles complete)
    __device__ void wait(int kt) const { barrier_wait(barrier(kt), phase(kt)); }
};
#endif

#if DEQUANT == 0 && MMA == 2
// the swapped wgmma's A fragments of a stage, in the stage's K order
__device__ __forceinline__ void load_fragments(const unsigned char* stage, int warp_row, uint32_t (&a)[WG_STEPS][4],
                                               int k_half = 0) {
#if TMA_LOADS
    load_run_fragments(stage, warp_row, a, k_half);
#else
    load_b_fragments(stage, warp_row, a);
#endif
}
#endif
