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
//   SKINNY_MIN_BLOCKS   blocks an SM must hold at once (__launch_bounds__' register cap)
//   SKINNY_STAGES       1: b's runs loaded into registers (SKINNY_UNROLL, SKINNY_PREFETCH); more: through a ring of
//                       that many shared-memory stages of each warp's own, by cp.async (see StagedWeights)
//   SKINNY_SPLIT        the most blocks sharing a tile, each on a range of K (the launch picks how many, `splits`,
//                       to fill the GPU's waves); each leaves its sums in a global workspace and the last to
//                       arrive adds them up in split order and stores
//   SKINNY_PREFETCH     b's runs of the next SKINNY_UNROLL chunks loaded before this batch is multiplied (two
//                       batches of registers), a's token runs as each chunk comes (they hit L1 or L2)
//   SKINNY_A_PREPASS    a's rows dequantised once by nvfp4_dequantize_a (its span layout: a thread's run of a
//                       chunk is one span, 64 bytes of fp16 pairs) and loaded as they are, instead of every warp
//                       of every block dequantising them again (a third of the work at 8 tokens); the launch
//                       makes this kernel the prepass's programmatic dependent, and it waits before reading a
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

// a row past the operand's reads its last row (its results are never stored)
__device__ __forceinline__ int within_rows(int row, int rows) { return row < rows ? row : rows - 1; }

// one thread's runs along one row of an operand: its 16 bytes of each chunk and their two scales, from
// pointers computed once (a chunk is 64 bytes further along the row, and its scales 8 bytes further, or
// 1024 in the blocked layout: two tiles of 4 columns, 512 bytes apart); two consecutive scales of a row are
// adjacent in both layouts. A row past the operand's reads its last row: its results are never stored.
struct RunCursor {
    const unsigned char* values;
    const unsigned char* scales;
    int scale_step;
    bool streamed;  // b's rows: read once

    RunCursor() = default;
    __device__ __forceinline__ RunCursor(const unsigned char* operand, const unsigned char* operand_scales, int rows,
                                         int row, int chunk, int K, int blocked, bool streamed_)
        : scale_step(blocked ? 1024 : 8), streamed(streamed_) {
        const int t = threadIdx.x % 4, last = within_rows(row, rows);
        values = operand + (size_t)last * (K / 2) + chunk * 64 + t * 16;
        scales = operand_scales + scale_offset(last, chunk * 8 + 2 * t, K, blocked);
    }

    // the run `ahead` chunks on (a compile-time count in the unrolled loops)
    __device__ __forceinline__ SkinnyRun run(int ahead) const {
        return SkinnyRun{load_words(values + ahead * 64, streamed),
                         __ldg(reinterpret_cast<const unsigned short*>(scales + ahead * scale_step))};
    }

    __device__ __forceinline__ void advance(int chunks) {
        values += chunks * 64;
        scales += chunks * scale_step;
    }
};

__device__ __forceinline__ uint32_t component(const uint4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// a thread's token run as nvfp4_dequantize_a left it: span chunk c holds pair c of words 0..3
struct HalfRun {
    uint4 chunks[4];
};

// (with SKINNY_A_PREPASS) a thread's runs along one row of a's fp16 copy ([rows][K] halves in spans of 32
// values, a span 64 bytes): its span of each chunk, 256 bytes on from the last
struct HalfCursor {
    const uint4* at;

    HalfCursor() = default;
    __device__ __forceinline__ HalfCursor(const half* halves, int rows, int row, int chunk, int K) {
        const int last = within_rows(row, rows);
        at = reinterpret_cast<const uint4*>(halves + (size_t)last * K + (chunk * 4 + threadIdx.x % 4) * 32);
    }

    __device__ __forceinline__ HalfRun run(int ahead) const {
        HalfRun r;
#pragma unroll
        for (int c = 0; c < 4; ++c) r.chunks[c] = __ldg(at + ahead * 16 + c);
        return r;
    }

    __device__ __forceinline__ void advance(int chunks) { at += chunks * 16; }
};

__device__ __forceinline__ uint32_t run_word(const SkinnyRun& r, int j) { return component(r.words, j); }

// word j of a run, dequantised: 4 fp16 pairs (times 2^-7, as the tile kernel's)
__device__ __forceinline__ void run_pairs(const SkinnyRun& r, int j, uint32_t (&pairs)[4]) {
    dequantize8(run_word(r, j), scale_factor(j < 2 ? r.scales & 0xFF : r.scales >> 8), pairs);
}

// word j of a token run made by the prepass: its 4 fp16 pairs, already dequantised
__device__ __forceinline__ void run_pairs(const HalfRun& r, int j, uint32_t (&pairs)[4]) {
#pragma unroll
    for (int c = 0; c < 4; ++c) pairs[c] = component(r.chunks[c], j);
}

#if SKINNY_A_PREPASS
using TokenRun = HalfRun;
using TokenCursor = HalfCursor;
#else
using TokenRun = SkinnyRun;
using TokenCursor = RunCursor;
#endif

// one chunk: b's rows g, g + 8 (top, bottom) against the token fragments, 8 k16 steps
__device__ __forceinline__ void multiply_chunk(float (&acc)[SKINNY_FRAGMENTS][4], const SkinnyRun& top,
                                               const SkinnyRun& bottom, const TokenRun (&tokens)[SKINNY_FRAGMENTS]) {
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

// the tile's blocks of a K split: true in the last to arrive (after every other's partial sums are written),
// which sets the tile's counter back to zero for the next launch. All threads call it.
__device__ __forceinline__ bool last_of_splits(unsigned* counter, int splits) {
    __threadfence();  // this block's partial sums are visible to the GPU before its ticket is
    __syncthreads();
    unsigned ticket = 0;
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    const bool last = __syncthreads_or(threadIdx.x == 0 && ticket == unsigned(splits - 1));
    if (last && threadIdx.x == 0) *counter = 0u;
    __threadfence();  // the other blocks' sums are read after their tickets
    return last;
}

// COUNT chunks' runs of b's rows g and g + 8
template <int COUNT>
struct WeightBatch {
    SkinnyRun upper[COUNT], lower[COUNT];
};

// a warp's runs of the chunks it multiplies: b's rows g and g + 8, and a's row of each token fragment
struct WarpCursors {
    RunCursor top, bottom;
    TokenCursor tokens[SKINNY_FRAGMENTS];

    template <int COUNT>
    __device__ __forceinline__ void load(WeightBatch<COUNT>& batch) {
#pragma unroll
        for (int u = 0; u < COUNT; ++u) {
            batch.upper[u] = top.run(u);
            batch.lower[u] = bottom.run(u);
        }
        top.advance(COUNT);
        bottom.advance(COUNT);
    }

    // a batch of b's runs multiplied, each chunk's token runs loaded as it comes (L1 and L2 hits)
    template <int COUNT>
    __device__ __forceinline__ void multiply(float (&acc)[SKINNY_FRAGMENTS][4], const WeightBatch<COUNT>& batch) {
#pragma unroll
        for (int u = 0; u < COUNT; ++u) {
            TokenRun token[SKINNY_FRAGMENTS];
#pragma unroll
            for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[f] = tokens[f].run(u);
            multiply_chunk(acc, batch.upper[u], batch.lower[u], token);
        }
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f) tokens[f].advance(COUNT);
    }

    // the next `COUNT` chunks' runs loaded, b's and a's (all loads issued before any multiply), then multiplied
    template <int COUNT>
    __device__ __forceinline__ void multiply(float (&acc)[SKINNY_FRAGMENTS][4]) {
        WeightBatch<COUNT> batch;
        TokenRun token[COUNT][SKINNY_FRAGMENTS];
        load(batch);
#pragma unroll
        for (int u = 0; u < COUNT; ++u)
#pragma unroll
            for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[u][f] = tokens[f].run(u);
#pragma unroll
        for (int u = 0; u < COUNT; ++u) multiply_chunk(acc, batch.upper[u], batch.lower[u], token[u]);
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f) tokens[f].advance(COUNT);
    }

    // chunks [begin, end) in batches of COUNT, the last ones one at a time; with SKINNY_PREFETCH b's runs
    // of the next batch are loaded before this one is multiplied (two batches of registers, ping-pong)
    template <int COUNT>
    __device__ __forceinline__ void multiply_range(float (&acc)[SKINNY_FRAGMENTS][4], int begin, int end) {
        int chunk = begin;
#if SKINNY_PREFETCH
        WeightBatch<COUNT> ping, pong;
        if (chunk + COUNT <= end) load(ping);
        while (chunk + COUNT <= end) {  // ping holds [chunk, chunk + COUNT)
            const bool more = chunk + 2 * COUNT <= end;
            if (more) load(pong);
            multiply(acc, ping);
            chunk += COUNT;
            if (!more) break;
            const bool again = chunk + 2 * COUNT <= end;
            if (again) load(ping);
            multiply(acc, pong);
            chunk += COUNT;
            if (!again) break;
        }
#else
        for (; chunk + COUNT <= end; chunk += COUNT) multiply<COUNT>(acc);
#endif
        for (; chunk < end; ++chunk) multiply<1>(acc);  // the range's last chunks, one at a time
    }
};

#if SKINNY_STAGES > 1
// SKINNY_STAGES > 1: b's runs come through a ring of shared-memory stages of each warp's own, one chunk a
// stage, by cp.async (SKINNY_STAGES - 1 chunks in flight whatever the registers): a stage holds the lanes'
// runs of rows g (512 bytes, lane-major) and g + 8 (512), and the 16 rows' 8 scales of the chunk (128 bytes,
// row-major), lane l copying 4 of row l / 2's. A lane reads back its own runs and the scale pairs of its rows.
constexpr int SKINNY_STAGE_BYTES = 2 * 32 * 16 + 16 * 8;

struct StagedWeights {
    const unsigned char* top;     // this lane's run of row g at the next chunk to copy, row g + 8's 8 rows on
    const unsigned char* scales;  // 4 bytes of row lane / 2's scales at that chunk
    size_t bottom_offset;
    int scale_step;
    unsigned char* ring;  // the warp's stages

    __device__ __forceinline__ StagedWeights(const unsigned char* weights, const unsigned char* weight_scales, int N,
                                             int n0, int chunk, int K, int blocked, unsigned char* ring_)
        : scale_step(blocked ? 1024 : 8), ring(ring_) {
        const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
        const int row = within_rows(n0 + g, N), lower = within_rows(n0 + g + 8, N), scale_row = within_rows(n0 + lane / 2, N);
        top = weights + (size_t)row * (K / 2) + chunk * 64 + t * 16;
        bottom_offset = (size_t)(lower - row) * (K / 2);
        scales = weight_scales + scale_offset(scale_row, chunk * 8 + 4 * (lane % 2), K, blocked);
    }

    // the next chunk's copies into `slot` (zeros, reading nothing, past the warp's range); one commit group
    __device__ __forceinline__ void copy_next(int slot, bool inside) {
        unsigned char* stage = ring + slot * SKINNY_STAGE_BYTES;
        const int lane = threadIdx.x % 32;
        copy16_async(stage + lane * 16, top, inside);
        copy16_async(stage + 512 + lane * 16, top + bottom_offset, inside);
        copy4(stage + 1024 + lane * 4, scales, inside);
        cp_async_commit();
        top += 64;
        scales += scale_step;
    }

    __device__ __forceinline__ SkinnyRun run(int slot, int half) const {
        const unsigned char* stage = ring + slot * SKINNY_STAGE_BYTES;
        const int lane = threadIdx.x % 32, row = lane / 4 + 8 * half;
        return SkinnyRun{*reinterpret_cast<const uint4*>(stage + half * 512 + lane * 16),
                         *reinterpret_cast<const unsigned short*>(stage + 1024 + row * 8 + 2 * (lane % 4))};
    }
};

// chunks [begin, end) through the warp's ring: copy chunk + SKINNY_STAGES - 1, wait for chunk's, multiply it
__device__ __forceinline__ void multiply_staged(float (&acc)[SKINNY_FRAGMENTS][4], StagedWeights& weights,
                                                TokenCursor (&tokens)[SKINNY_FRAGMENTS], int begin, int end) {
#pragma unroll
    for (int s = 0; s < SKINNY_STAGES - 1; ++s) weights.copy_next(s, begin + s < end);
    // a's token runs (L1 and L2 hits) one chunk ahead in registers, so their latency overlaps a chunk's work
    TokenRun token[SKINNY_FRAGMENTS], next[SKINNY_FRAGMENTS];
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[f] = begin < end ? tokens[f].run(0) : TokenRun{};
    for (int chunk = begin, i = 0; chunk < end; ++chunk, ++i) {
        weights.copy_next((i + SKINNY_STAGES - 1) % SKINNY_STAGES, chunk + SKINNY_STAGES - 1 < end);
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f) {
            tokens[f].advance(1);
            if (chunk + 1 < end) next[f] = tokens[f].run(0);
        }
        cp_async_wait<SKINNY_STAGES - 1>();
        __syncwarp();  // every lane's copies of this chunk landed (the scales are read across lanes)
        const int slot = i % SKINNY_STAGES;
        multiply_chunk(acc, weights.run(slot, 0), weights.run(slot, 1), token);
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[f] = next[f];
        __syncwarp();  // every lane done with the slot before it is copied into again
    }
    cp_async_wait<0>();
}
#endif

extern "C" __global__ void __launch_bounds__(SKINNY_WARPS * 32, SKINNY_MIN_BLOCKS)
nvfp4_skinny(const unsigned char* a, const unsigned char* b, const unsigned char* sfa, const unsigned char* sfb,
             half* c, int M, int N, int K, int blocked, int splits, float* partials, unsigned* tickets) {
    __shared__ float4 partial[SKINNY_WARPS][SKINNY_FRAGMENTS][32];  // each warp's sums, lane by lane
    const int batch = blockIdx.z / splits, split = blockIdx.z % splits, n0 = blockIdx.x * 16, m0 = blockIdx.y * SKINNY_TOKENS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    // the block's range of K's chunks (its split's), and the warp's part of it
    const int chunks = K / 128, first = split * chunks / splits, count = (split + 1) * chunks / splits - first;
    const int begin = first + warp * count / SKINNY_WARPS, end = first + (warp + 1) * count / SKINNY_WARPS;
    const unsigned char* weights = b + (size_t)batch * N * (K / 2);
    const unsigned char* weight_scales = sfb + batch * scale_matrix_bytes(N, K, blocked);
    WarpCursors runs{RunCursor(weights, weight_scales, N, n0 + g, begin, K, blocked, true),
                     RunCursor(weights, weight_scales, N, n0 + g + 8, begin, K, blocked, true), {}};
#if SKINNY_A_PREPASS  // `a` is the prepass's fp16 copy, written by the grid before this one
    const half* halves = reinterpret_cast<const half*>(a) + (size_t)batch * M * K;
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f) runs.tokens[f] = HalfCursor(halves, M, m0 + 8 * f + g, begin, K);
    asm volatile("griddepcontrol.wait;" ::: "memory");
#else
    const unsigned char* token_values = a + (size_t)batch * M * (K / 2);
    const unsigned char* token_scales = sfa + batch * scale_matrix_bytes(M, K, blocked);
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f)
        runs.tokens[f] = RunCursor(token_values, token_scales, M, m0 + 8 * f + g, begin, K, blocked, false);
#endif
    float acc[SKINNY_FRAGMENTS][4] = {};
#if SKINNY_STAGES > 1
    __shared__ __align__(16) unsigned char rings[SKINNY_WARPS][SKINNY_STAGES * SKINNY_STAGE_BYTES];
    StagedWeights staged(weights, weight_scales, N, n0, begin, K, blocked, rings[warp]);
    multiply_staged(acc, staged, runs.tokens, begin, end);
#else
    runs.multiply_range<SKINNY_UNROLL>(acc, begin, end);
#endif
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f) partial[warp][f][lane] = make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]);
    __syncthreads();
    // sum over the warps: output i is (fragment f, lane l, element e) of the accumulator layout, c's
    // column n0 + l / 4 (+ 8 for e >= 2) and row m0 + 8 f + 2 (l % 4) + e % 2; with a K split over blocks,
    // each leaves its sums in the workspace and the last of the tile's blocks to arrive adds them up
    constexpr int OUTPUTS = SKINNY_FRAGMENTS * 32 * 4, PASSES = (OUTPUTS + SKINNY_WARPS * 32 - 1) / (SKINNY_WARPS * 32);
    const size_t tile = ((size_t)batch * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    float* tile_partials = partials + tile * splits * OUTPUTS;
    float sums[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int i = threadIdx.x + p * SKINNY_WARPS * 32, e = i % 4, l = i / 4 % 32, f = i / 128;
        float sum = 0.0f;
        if (i < OUTPUTS) {
#pragma unroll
            for (int w = 0; w < SKINNY_WARPS; ++w) sum += reinterpret_cast<const float*>(&partial[w][f][l])[e];
            if (splits > 1) __stcg(tile_partials + split * OUTPUTS + i, sum);
        }
        sums[p] = sum;
    }
    if (splits > 1 && !last_of_splits(tickets + tile, splits)) return;
    half* out = c + (size_t)batch * M * N;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int i = threadIdx.x + p * SKINNY_WARPS * 32, e = i % 4, l = i / 4 % 32, f = i / 128;
        if (i >= OUTPUTS) break;
        float sum = splits > 1 ? 0.0f : sums[p];  // (in split order, whichever block is last: the same sum every run)
        for (int other = 0; other < splits && splits > 1; ++other) sum += __ldcg(tile_partials + other * OUTPUTS + i);
        const int column = n0 + l / 4 + (e >= 2 ? 8 : 0), row = m0 + 8 * f + 2 * (l % 4) + e % 2;
        if (column < N && row < M) out[(size_t)row * N + column] = __float2half_rn(sum * UNSCALE);
    }
}
#endif
