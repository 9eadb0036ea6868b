// nvfp4_gemm (see nvfp4_gemm.cu), DESIGN 1 ("skinny"): for few rows of a (tokens), where the GEMM is
// a stream of b's packed rows (the weights) and the tile kernel's blocks are mostly idle rows.
//
// A block owns 16 rows of b (c's columns n0 .. n0 + 15) and SKINNY_TOKENS rows of a (c's rows); its
// SKINNY_WARPS warps split K, each a contiguous range of 128-value chunks, and their sums meet in shared
// memory at the end. In a chunk, thread (g, t) = (lane / 4, lane % 4) reads 16 bytes (32 values) at
// 16 t of b's rows g and g + 8 and of a's rows g (and g + 8 with 16 tokens), each with its two scales,
// and dequantises them in registers (dequantize8, the tile kernel's) straight into mma.sync m16n8k16
// fragments: b's rows are the mma's M, a's rows its N. K is permuted inside the chunk, a and b alike: word
// j of a thread's run feeds the two k16 steps 2j, 2j + 1 (pair 2q of dequantize8 in slots 2t, 2t + 1 of
// step q, pair 2q + 1 in slots 2t + 8, 2t + 9), so no value crosses a lane. Each chunk's products go to
// fresh accumulators added in fp32 to the running sums. A warp issues the loads of SKINNY_UNROLL chunks
// before it multiplies the first, so that many 16-byte loads a thread are in flight.
//   SKINNY_WARPS   warps of a block, splitting K (2 .. 16)
//   SKINNY_TOKENS  rows of a a block takes (8 or 16: one or two n8 fragments); more rows, more blocks
//   SKINNY_UNROLL  chunks of K whose loads are issued together (1, 2, 4)
//   SKINNY_L2_PREFETCH  b's runs loaded with L2's 256-byte prefetch, not kept in L1
#if DESIGN == 1
constexpr int SKINNY_FRAGMENTS = SKINNY_TOKENS / 8;
static_assert(SKINNY_TOKENS == 8 || SKINNY_TOKENS == 16, "one or two n8 fragments of tokens");

// a thread's run of one chunk of a row: 32 values (four words) and their two scales (words 0, 1 and 2, 3)
struct SkinnyRun {
    uint4 words;
    unsigned scales;
};

// 16 bytes of values: read-only; b's (`streamed`) with SKINNY_L2_PREFETCH through L2 alone, 256 bytes fetched
__device__ __forceinline__ uint4 load_words(const unsigned char* at, bool streamed) {
    if (SKINNY_L2_PREFETCH && streamed) {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(at));
        return v;
    }
    return __ldg(reinterpret_cast<const uint4*>(at));
}

struct SkinnyOperand {
    const unsigned char* values;  // this batch's [rows][K / 2]
    const unsigned char* scales;  // this batch's scales, plain or blocked
    int rows;
    bool streamed;  // b's rows: read once

    // row `row`'s run of chunk `chunk` for this thread (zeros past the operand's rows)
    __device__ __forceinline__ SkinnyRun run(int row, int chunk, int K, int blocked) const {
        SkinnyRun r{make_uint4(0, 0, 0, 0), 0};
        if (row < rows) {
            const int t = threadIdx.x % 4, column = chunk * 8 + 2 * t;  // the run's first scale
            r.words = load_words(values + (size_t)row * (K / 2) + chunk * 64 + t * 16, streamed);
            // two consecutive scales of a row are adjacent in both layouts (a blocked tile's 4 columns)
            r.scales = __ldg(reinterpret_cast<const unsigned short*>(scales + scale_offset(row, column, K, blocked)));
        }
        return r;
    }
};

__device__ __forceinline__ uint32_t run_word(const SkinnyRun& r, int j) {
    return j == 0 ? r.words.x : j == 1 ? r.words.y : j == 2 ? r.words.z : r.words.w;
}

// word j of a run, dequantised: 4 fp16 pairs (times 2^-7, as the tile kernel's)
__device__ __forceinline__ void run_pairs(const SkinnyRun& r, int j, uint32_t (&pairs)[4]) {
    dequantize8(run_word(r, j), scale_factor(j < 2 ? r.scales & 0xFF : r.scales >> 8), pairs);
}

// one chunk: b's rows g, g + 8 (top, bottom) against the token fragments, 8 k16 steps
__device__ __forceinline__ void multiply_chunk(float (&acc)[SKINNY_FRAGMENTS][4], const SkinnyRun& top,
                                               const SkinnyRun& bottom, const SkinnyRun (&tokens)[SKINNY_FRAGMENTS]) {
    float chunk[SKINNY_FRAGMENTS][4] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t upper[4], lower[4];
        run_pairs(top, j, upper);
        run_pairs(bottom, j, lower);
        uint32_t fragments[2][4];  // b's rows as the A fragments of k16 steps 2j, 2j + 1
        pairs_to_fragments(upper, lower, fragments);
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f) {
            uint32_t b[4];
            run_pairs(tokens[f], j, b);
#pragma unroll
            for (int q = 0; q < 2; ++q) mma16816(chunk[f], fragments[q], b[2 * q], b[2 * q + 1]);
        }
    }
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[f][e] += chunk[f][e];
}

extern "C" __global__ void __launch_bounds__(SKINNY_WARPS * 32)
nvfp4_skinny(const unsigned char* a, const unsigned char* b, const unsigned char* sfa, const unsigned char* sfb,
             half* c, int M, int N, int K, int blocked) {
    __shared__ float4 partial[SKINNY_WARPS][SKINNY_FRAGMENTS][32];  // each warp's sums, lane by lane
    const int batch = blockIdx.z, n0 = blockIdx.x * 16, m0 = blockIdx.y * SKINNY_TOKENS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const SkinnyOperand weights{b + (size_t)batch * N * (K / 2), sfb + batch * scale_matrix_bytes(N, K, blocked), N, true};
    const SkinnyOperand tokens{a + (size_t)batch * M * (K / 2), sfa + batch * scale_matrix_bytes(M, K, blocked), M, false};
    const int chunks = K / 128, begin = warp * chunks / SKINNY_WARPS, end = (warp + 1) * chunks / SKINNY_WARPS;
    float acc[SKINNY_FRAGMENTS][4] = {};
    for (int first = begin; first < end; first += SKINNY_UNROLL) {
        SkinnyRun top[SKINNY_UNROLL], bottom[SKINNY_UNROLL], token[SKINNY_UNROLL][SKINNY_FRAGMENTS];
#pragma unroll
        for (int u = 0; u < SKINNY_UNROLL; ++u) {
            const int chunk = first + u < end ? first + u : first;  // (a chunk past the range is not multiplied)
            top[u] = weights.run(n0 + g, chunk, K, blocked);
            bottom[u] = weights.run(n0 + g + 8, chunk, K, blocked);
#pragma unroll
            for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[u][f] = tokens.run(m0 + 8 * f + g, chunk, K, blocked);
        }
#pragma unroll
        for (int u = 0; u < SKINNY_UNROLL; ++u)
            if (first + u < end) multiply_chunk(acc, top[u], bottom[u], token[u]);
    }
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f) partial[warp][f][lane] = make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]);
    __syncthreads();
    // sum over the warps: output i is (fragment f, lane l, element e) of the accumulator layout, c's
    // column n0 + l / 4 (+ 8 for e >= 2) and row m0 + 8 f + 2 (l % 4) + e % 2
    half* out = c + (size_t)batch * M * N;
    for (int i = threadIdx.x; i < SKINNY_FRAGMENTS * 32 * 4; i += SKINNY_WARPS * 32) {
        const int e = i % 4, l = i / 4 % 32, f = i / 128;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < SKINNY_WARPS; ++w) sum += reinterpret_cast<const float*>(&partial[w][f][l])[e];
        const int column = n0 + l / 4 + (e >= 2 ? 8 : 0), row = m0 + 8 * f + 2 * (l % 4) + e % 2;
        if (column < N && row < M) out[(size_t)row * N + column] = __float2half_rn(sum * UNSCALE);
    }
}
#endif
