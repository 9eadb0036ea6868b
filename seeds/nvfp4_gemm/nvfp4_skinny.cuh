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
// This file: the runs, the chunk's multiply and the register loads; the shared-memory rings are in
// nvfp4_skinny_rings.cuh, the kernel itself in nvfp4_skinny_kernel.cuh.
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
//   SKINNY_TMA_BOXES    (SKINNY_STAGES > 1) the rings filled by the TMA instead: a stage holds SKINNY_STAGE_CHUNKS
//                       chunks of the warp's 16 rows, one box (and with SKINNY_A_PREPASS a second of a's fp16 rows),
//                       counted on the stage's mbarrier with the lanes' scale copies (see BoxedStages); the rings are
//                       dynamic shared memory (nvfp4_skinny_shared_bytes)
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

// a thread's token run as nvfp4_dequantize_a left it for this kernel: words[j] holds word j's 4 pairs (in four
// consecutive registers, so an mma's B pairs need no moves)
struct HalfRun {
    uint4 words[4];
};

// (with SKINNY_A_PREPASS) a thread's runs along one row of a's fp16 copy ([rows][K] halves; in each chunk of 128
// values, 256 bytes, word w of lane t's span at 16 bytes w * 4 + t): its run of each chunk, 256 bytes on from the last
struct HalfCursor {
    const uint4* at;

    HalfCursor() = default;
    __device__ __forceinline__ HalfCursor(const half* halves, int rows, int row, int chunk, int K) {
        const int last = within_rows(row, rows);
        at = reinterpret_cast<const uint4*>(halves + (size_t)last * K + chunk * 128) + threadIdx.x % 4;
    }

    __device__ __forceinline__ HalfRun run(int ahead) const {
        HalfRun r;
#pragma unroll
        for (int w = 0; w < 4; ++w) r.words[w] = __ldg(at + ahead * 16 + w * 4);
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
    pairs[0] = r.words[j].x;
    pairs[1] = r.words[j].y;
    pairs[2] = r.words[j].z;
    pairs[3] = r.words[j].w;
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

#endif
