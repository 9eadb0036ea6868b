// nvfp4_gemm (see nvfp4_gemm.cu): the shared-memory plan, the operand loads, the dequantisation,
// and the three ways a K tile is multiplied (the epilogues: nvfp4_epilogue.cuh).
#include <cuda_fp16.h>

constexpr int THREADS = WARPS_M * WARPS_N * 32;  // the warps that multiply (and load b)
// A_PRODUCER: one more warpgroup, after them, writes a's fp16 tile of every stage (nvfp4_tma.cuh)
constexpr int PRODUCER_THREADS = A_PRODUCER ? 128 : 0;
// packed values of a row in a stage: padded (conflict-free words), or as TMA lays a box out (a thread
// reads its run of BLOCK_K / 4 values of a row with one load, conflict-free)
constexpr int ROW_BYTES = TMA_LOADS ? BLOCK_K / 2 : BLOCK_K / 2 + 16;
constexpr int SCALES = BLOCK_K / 16;         // scales of a row in a K tile
#if MMA == 1  // a warpgroup is the 4 warps along M; it owns BLOCK_M rows (m64 tiles) x WG_N columns
static_assert(WARPS_M == 4, "wgmma: a warpgroup's 4 warps lie along M");
constexpr int WG_N = BLOCK_N / WARPS_N;
constexpr int MT = BLOCK_M / 64, NT = WG_N / 8, M_STRIDE = 64;
#elif MMA == 2  // operands swapped: warpgroup w owns columns 64 w .. 64 w + 63 of c (b's rows: wgmma's M)
                // for all BLOCK_M rows of c (a's rows: wgmma's N); a warp 16 of the columns
static_assert(WARPS_M == 4 && BLOCK_N * WARPGROUP_K_SPLIT == 64 * WARPS_N, "swapped wgmma: a warpgroup (4 warps) owns 64 columns");
static_assert(WARPGROUP_K_SPLIT == 1 || (TMA_LOADS && WARPS_N % 2 == 0), "pairs of warpgroups share K tiles: TMA runs");
constexpr int MT = 1, NT = BLOCK_M / 8, M_STRIDE = 64;
#else  // a warp owns (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N): MT x NT tiles of 16 x 8
constexpr int WARP_M = BLOCK_M / WARPS_M, WARP_N = BLOCK_N / WARPS_N;
constexpr int MT = WARP_M / 16, NT = WARP_N / 8, M_STRIDE = 16;
static_assert(WARP_M % 16 == 0 && WARP_N % 8 == 0, "a warp owns whole 16 x 8 mma tiles");
#endif
static_assert(BLOCK_K % 64 == 0, "BLOCK_K is 64 or 128");
static_assert(MMA != 1 || DEQUANT == 1, "wgmma reads both operands from shared memory");
static_assert(MMA != 2 || DEQUANT == 0, "swapped wgmma: b is dequantised in registers");
static_assert(!A_PREPASS || MMA == 2, "a's fp16 copy feeds the swapped wgmma alone");
// k16 steps of a K tile one warpgroup multiplies (swapped wgmma; WARPGROUP_K_SPLIT 2: both warpgroups own
// the same 64 columns of c, each half of the tile's steps, and their sums are added after the K loop)
constexpr int WG_STEPS = MMA == 2 ? BLOCK_K / 16 / WARPGROUP_K_SPLIT : 1;
static_assert(!TMA_LOADS || A_PREPASS, "TMA boxes bring in a's fp16 copy and b's packed rows");
static_assert(!A_PRODUCER || (A_PREPASS && STAGE_BARRIERS), "a's producer warpgroup fills mbarrier-handed TMA stages");
static_assert(!STAGE_BARRIERS || (TMA_LOADS && WGMMA_IN_FLIGHT == 2 && STAGES >= 3),
              "stages handed over by mbarriers alone: TMA loads, two tiles' wgmmas in flight, 3+ stages");

__host__ __device__ constexpr int align128(int bytes) { return (bytes + 127) / 128 * 128; }
// fp16 tiles are [BLOCK_K / 64 atoms][rows][64 halves], 128-byte swizzled (1024-byte aligned)
constexpr int A_HALVES = BLOCK_M * BLOCK_K * 2;
// a stage: A's rows then B's (values), then A's scales then B's; with A_PREPASS, A's rows are
// already an fp16 tile (from a's fp16 copy) that the swapped wgmma reads where it lands
constexpr int A_BYTES = A_PREPASS ? A_HALVES : BLOCK_M * ROW_BYTES, B_BYTES = BLOCK_N * ROW_BYTES;
constexpr int A_SCALE_BYTES = A_PREPASS ? 0 : BLOCK_M * SCALES;
constexpr int STAGE_BYTES = A_PREPASS ? (A_BYTES + B_BYTES + BLOCK_N * SCALES + 1023) / 1024 * 1024
                                      : align128(A_BYTES + B_BYTES + A_SCALE_BYTES + BLOCK_N * SCALES);
// two fp16 tiles (the one multiplied and the next): DEQUANT 1, A's then B's; swapped wgmma, A's alone
constexpr int HALF_STAGE = DEQUANT == 1 ? (BLOCK_M + BLOCK_N) * BLOCK_K * 2 : MMA == 2 && !A_PREPASS ? A_HALVES : 0;
constexpr bool SWIZZLE_ALIGNED = DEQUANT == 1 || MMA == 2;  // shared memory starts at a 1024-byte boundary
// TMA_LOADS: after the stages, one mbarrier per stage that completes when its boxes have landed
constexpr int BARRIER_BYTES = TMA_LOADS ? (STAGE_BARRIERS ? 16 : 8) * STAGES : 0;  // (+ an empty barrier a stage)
constexpr int SHARED_BYTES = STAGES * STAGE_BYTES + 2 * HALF_STAGE + (SWIZZLE_ALIGNED ? 1024 : 0)  // + alignment slack
                             + BARRIER_BYTES;
constexpr int TILE_COLS = MMA == 2 ? BLOCK_M : BLOCK_N;  // columns of an accumulator tile (wgmma's N)
constexpr int TILE_ROWS = BLOCK_M * BLOCK_N / TILE_COLS;
// SPLIT_CLUSTER: a partial tile in shared memory, rows padded by 4 floats (16 bytes: the float4 reads
// of 8 consecutive rows fall in distinct banks)
constexpr int REDUCE_PITCH = TILE_COLS + 4;
static_assert(!SPLIT_CLUSTER || TILE_ROWS * REDUCE_PITCH * 4 <= SHARED_BYTES, "a partial tile fits the stages");

struct Operand {
    const unsigned char* values;  // this batch's [rows][K / 2]
    const unsigned char* scales;  // this batch's scales, plain or blocked
    int rows, first_row;          // rows of the operand; the block's first
};

// byte offset of scale (row, column) of a rows x columns scale matrix in the blocked layout
__device__ __forceinline__ int blocked_offset(int row, int column, int columns) {
    const int tile = (row / 128) * ((columns + 3) / 4) + column / 4;
    return tile * 512 + (row % 32) * 16 + (row % 128) / 32 * 4 + column % 4;
}

// byte offset of scale (row, column) of an operand's scales (K / 16 a row), plain row-major or blocked
__device__ __forceinline__ size_t scale_offset(int row, int column, int K, int blocked) {
    return blocked ? (size_t)blocked_offset(row, column, K / 16) : (size_t)row * (K / 16) + column;
}

// bytes from a row's scales of one K tile to the next tile's (its SCALES scales further along the row),
// and from one group of 4 consecutive scales of a row to the next, in either layout (the blocked
// layout's tiles of 4 columns lie 512 bytes apart)
__device__ __forceinline__ int tile_scale_step(int blocked) { return blocked ? SCALES / 4 * 512 : SCALES; }
__device__ __forceinline__ int scale_group_step(int blocked) { return blocked ? 512 : 4; }

__device__ __forceinline__ void copy4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}

// The copies of one operand's rows of a K tile into shared memory, spread over the block: values in
// 16-byte pieces, scales 4 at a time (4 consecutive scales of a row are contiguous in both layouts).
// A thread's sources are found once; tile kt's lie kt steps further (a step is the same for all of a
// layout's scales: blocked tiles of 4 columns are 512 bytes apart). Rows past the operand read zeros.
template <int ROWS>
struct TileLoader {
    static constexpr int CHUNKS = BLOCK_K / 32, VALUE_COPIES = ROWS * CHUNKS, SCALE_COPIES = ROWS * (SCALES / 4);
    static constexpr int VALUE_PASSES = (VALUE_COPIES + THREADS - 1) / THREADS;
    static constexpr int SCALE_PASSES = (SCALE_COPIES + THREADS - 1) / THREADS;
    const unsigned char* value_source[VALUE_PASSES];
    const unsigned char* scale_source[SCALE_PASSES];
    unsigned value_valid = 0, scale_valid = 0;  // bit p: pass p's row lies in the operand
    int scale_step;

    __device__ TileLoader(const Operand& op, int K, int blocked) : scale_step(tile_scale_step(blocked)) {
#pragma unroll
        for (int p = 0; p < VALUE_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS, row = op.first_row + i / CHUNKS;
            const bool valid = row < op.rows;
            value_valid |= unsigned(valid) << p;
            value_source[p] = op.values + (valid ? (size_t)row * (K / 2) + i % CHUNKS * 16 : 0);
        }
#pragma unroll
        for (int p = 0; p < SCALE_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS, row = op.first_row + i / (SCALES / 4), column = i % (SCALES / 4) * 4;
            const bool valid = row < op.rows;
            scale_valid |= unsigned(valid) << p;
            scale_source[p] = op.scales + (!valid ? 0 : blocked ? blocked_offset(row, column, K / 16)
                                                                 : (size_t)row * (K / 16) + column);
        }
    }

    __device__ __forceinline__ void load(unsigned char* values, unsigned char* scales, int kt) const {
        load_values(values, kt);
        load_scales(scales, kt);
    }

    __device__ __forceinline__ void load_values(unsigned char* values, int kt) const {
#pragma unroll
        for (int p = 0; p < VALUE_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (VALUE_COPIES % THREADS != 0 && i >= VALUE_COPIES) break;
            const bool valid = value_valid >> p & 1;
            copy16_async(values + i / CHUNKS * ROW_BYTES + i % CHUNKS * 16,
                         value_source[p] + (valid ? kt * (BLOCK_K / 2) : 0), valid);
        }
    }

    __device__ __forceinline__ void load_scales(unsigned char* scales, int kt) const {
#pragma unroll
        for (int p = 0; p < SCALE_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (SCALE_COPIES % THREADS != 0 && i >= SCALE_COPIES) break;
            const bool valid = scale_valid >> p & 1;
            copy4(scales + i / (SCALES / 4) * SCALES + i % (SCALES / 4) * 4,
                  scale_source[p] + (valid ? kt * scale_step : 0), valid);
        }
    }
};

__device__ __forceinline__ uint32_t mul_half2(uint32_t a, uint32_t b) {
    uint32_t out;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(a), "r"(b));
    return out;
}

// Dequantised operands carry a factor 2^-7 each (so their products 2^-14, undone in fp32 at the store):
// an e2m1 code (s e e m) placed as the fp16 bits (s 0 0 0 e e m 0...0) is the e2m1 value times 2^-14
// (subnormals included), and times (scale * 2^7) it is value * scale * 2^-7: at most 5 significant
// bits in [2^-17, 21], exact in fp16 (its subnormals reach 2^-24), with no overflow (448 * 2^7 < 65504).
constexpr float UNSCALE = 16384.0f;

// an e4m3 scale times 2^7, in both halves of an fp16 pair
__device__ __forceinline__ uint32_t scale_factor(unsigned scale) {
    uint32_t pair;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(static_cast<unsigned short>(scale | (scale << 8))));
    return mul_half2(pair, 0x58005800u);
}

// 8 e2m1 values (one word, value i in bits 4i..4i+3) times their scale factor -> 4 fp16 pairs, in the
// order of the placement BIT_PLACEMENT selects (nvfp4_bits.cuh); a and b are dequantised alike, so
// their K slots pair up
__device__ __forceinline__ void dequantize8(uint32_t w, uint32_t factor, uint32_t (&out)[4]) {
#if BIT_PLACEMENT == 1
    const BytePlacement placed(w);
    out[0] = mul_half2(placed.pair<0>(), factor);
    out[1] = mul_half2(placed.pair<1>(), factor);
    out[2] = mul_half2(placed.pair<2>(), factor);
    out[3] = mul_half2(placed.pair<3>(), factor);
#else
    out[0] = mul_half2(shifted_pair<0>(w), factor);
    out[1] = mul_half2(shifted_pair<1>(w), factor);
    out[2] = mul_half2(shifted_pair<2>(w), factor);
    out[3] = mul_half2(shifted_pair<3>(w), factor);
#endif
}

// byte offset of 16-byte chunk c (of the K tile) of row r in an fp16 tile of `rows` rows
__device__ __forceinline__ int chunk_offset(int r, int c, int rows) {
    return (c / 8) * rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16;
}

__device__ __forceinline__ void store16(unsigned char* dst, const uint32_t (&v)[4]) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
}

// a span of 32 values of a row (four words: values 8 t .. 8 t + 7 in word t) and its two scales
// (of words 0, 1 and 2, 3) as the swapped wgmma's B operand takes them: chunk c (8 halves) holds
// dequantize8's pair c of words 0..3, so that k16 step 2 s' + step of the span finds in slots 2t, 2t + 1
// the pair 2 step of word t and in slots 2t + 8, 2t + 9 its pair 2 step + 1 (load_b_fragments' order)
__device__ __forceinline__ void dequantize_span(uint4 words, unsigned low_scale, unsigned high_scale,
                                                uint32_t (&chunks)[4][4]) {
    const uint32_t low = scale_factor(low_scale), high = scale_factor(high_scale);
    uint32_t pairs[4][4];  // [word t][pair]
    dequantize8(words.x, low, pairs[0]);
    dequantize8(words.y, low, pairs[1]);
    dequantize8(words.z, high, pairs[2]);
    dequantize8(words.w, high, pairs[3]);
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int t = 0; t < 4; ++t) chunks[c][t] = pairs[t][c];
}

// one word's pairs of rows g (`top`) and g + 8 (`bottom`) as the A fragments of two k16 steps: step q
// takes pair 2q (slots 2t, 2t + 1) and pair 2q + 1 (slots 2t + 8, 2t + 9)
__device__ __forceinline__ void pairs_to_fragments(const uint32_t (&top)[4], const uint32_t (&bottom)[4],
                                                   uint32_t (&a)[2][4]) {
#pragma unroll
    for (int step = 0; step < 2; ++step) {
        a[step][0] = top[2 * step];
        a[step][1] = bottom[2 * step];
        a[step][2] = top[2 * step + 1];
        a[step][3] = bottom[2 * step + 1];
    }
}

#if DEQUANT == 0
// -- dequantisation in registers: each warp turns the packed words of its own rows into mma.sync
// fragments. K may be permuted inside a row as long as A and B are permuted alike: a thread takes 8
// consecutive values (one word, one scale) of a 32-wide K span as its k slots of two m16n8k16 steps.

// a row's word for this thread in span s of a stage: values 32 s + 8 t .. + 7, and their scale
__device__ __forceinline__ void row_word(const unsigned char* values, const unsigned char* scales, int row, int s,
                                         uint32_t (&out)[4]) {
    const int t = threadIdx.x % 4;
    const uint32_t word = *reinterpret_cast<const uint32_t*>(values + row * ROW_BYTES + s * 16 + t * 4);
    dequantize8(word, scale_factor(scales[row * SCALES + 2 * s + t / 2]), out);
}

// the 16 x 16 fragments (mma.sync's A layout) of rows row .. row + 15 for the two k16 steps of span s
__device__ __forceinline__ void span_fragments(const unsigned char* values, const unsigned char* scales, int row, int s,
                                               uint32_t (&a)[2][4]) {
    const int g = threadIdx.x % 32 / 4;
    uint32_t top[4], bottom[4];  // rows g and g + 8
    row_word(values, scales, row + g, s, top);
    row_word(values, scales, row + g + 8, s, bottom);
    pairs_to_fragments(top, bottom, a);
}

#if MMA == 0
// the warp's tile over one stage: two m16n8k16 steps per 32-wide span of K
__device__ __forceinline__ void multiply_stage(float (&acc)[MT][NT][4], const unsigned char* stage, int warp_row,
                                               int warp_col) {
    const unsigned char* a_values = stage;
    const unsigned char* b_values = stage + A_BYTES;
    const unsigned char* a_scales = stage + A_BYTES + B_BYTES;
    const unsigned char* b_scales = a_scales + BLOCK_M * SCALES;
    const int g = threadIdx.x % 32 / 4;
#pragma unroll
    for (int s = 0; s < BLOCK_K / 32; ++s) {
        uint32_t a[MT][2][4], b[NT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) span_fragments(a_values, a_scales, warp_row + m * 16, s, a[m]);
#pragma unroll
        for (int n = 0; n < NT; ++n) row_word(b_values, b_scales, warp_col + n * 8 + g, s, b[n]);
#pragma unroll
        for (int step = 0; step < 2; ++step)
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < NT; ++n) mma16816(acc[m][n], a[m][step], b[n][2 * step], b[n][2 * step + 1]);
    }
}
#else
// -- swapped wgmma (MMA 2): b's rows are wgmma's M, dequantised by each warp into its A fragments in
// registers (row_word's order, as mma.sync takes them); a's rows are wgmma's N, dequantised once per
// block into an fp16 tile in shared memory whose k slots follow the same order: in k16 step
// j = 2 s + step, thread t's slots 2t, 2t + 1 hold dequantize8's pair 2 step of its word, slots 2t + 8,
// 2t + 9 pair 2 step + 1; so chunk 2 j + half of a row is pair 2 step + half of words t = 0..3.

// the warp's A fragments of one stage: rows g and g + 8 of its 16 columns of c, every k16 step
__device__ __forceinline__ void load_b_fragments(const unsigned char* stage, int warp_row,
                                                 uint32_t (&a)[BLOCK_K / 16][4]) {
    const unsigned char* b_values = stage + A_BYTES;
    const unsigned char* b_scales = stage + A_BYTES + B_BYTES + A_SCALE_BYTES;
#pragma unroll
    for (int s = 0; s < BLOCK_K / 32; ++s)
        span_fragments(b_values, b_scales, warp_row, s, reinterpret_cast<uint32_t(&)[2][4]>(a[2 * s]));
}

// a's BLOCK_M packed rows of a stage into the fp16 tile `tile`: a unit is (row, span s), the four
// words of the span (one 16-byte load) and their two scales, written as four 16-byte chunks
// (dequantize_span). Consecutive threads take consecutive rows: eight of them load 80-byte-strided
// rows and store one chunk column of eight swizzled rows, both without bank conflicts
__device__ __forceinline__ void dequantize_a(const unsigned char* stage, unsigned char* tile) {
    constexpr int SPANS = BLOCK_K / 32, UNITS = BLOCK_M * SPANS;
    const unsigned char* scales = stage + A_BYTES + B_BYTES;
#pragma unroll
    for (int unit = threadIdx.x; unit < UNITS; unit += THREADS) {
        const int r = unit % BLOCK_M, s = unit / BLOCK_M;
        uint32_t chunks[4][4];
        dequantize_span(*reinterpret_cast<const uint4*>(stage + r * ROW_BYTES + s * 16), scales[r * SCALES + 2 * s],
                        scales[r * SCALES + 2 * s + 1], chunks);
#pragma unroll
        for (int c = 0; c < 4; ++c) store16(tile + chunk_offset(r, 4 * s + c, BLOCK_M), chunks[c]);
    }
}

// byte offset of k16 step `step`'s slice of a's swizzled fp16 tile (BLOCK_K / 64 atoms of BLOCK_M 128-byte
// rows); offset(half's first step + j) = offset(half's first step) + offset(j) for j < WG_STEPS
__host__ __device__ constexpr int step_offset(int step) { return step / 4 * BLOCK_M * 128 + step % 4 * 32; }

#if TMA_LOADS  // (nvfp4_tma.cuh) the warpgroup's WG_STEPS k16 steps from the slice of descriptor `first`
__device__ __forceinline__ void multiply_steps(float (&d)[MT][NT][4], const uint32_t (&a)[WG_STEPS][4], uint64_t first,
                                               bool fresh = false);
#endif

// the warpgroup's wgmma over one stage, A from registers (asynchronous: committed, not waited for)
__device__ __forceinline__ void multiply_stage(float (&d)[MT][NT][4], const uint32_t (&a)[WG_STEPS][4],
                                               const unsigned char* a_tile, bool fresh, int k_half = 0) {
#if TMA_LOADS  // this warpgroup's half of the K tile's steps
    multiply_steps(d, a, descriptor(a_tile) + step_offset(k_half * WG_STEPS) / 16, fresh);
#else
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < BLOCK_K / 16; ++j)
        wgmma_rs(reinterpret_cast<float(&)[NT * 4]>(d[0]), a[j],
                 descriptor(a_tile + step_offset(j)), !(fresh && j == 0));
    wgmma_commit();
#endif
}
#endif
#else
// -- dequantisation into shared memory: the whole block turns a stage's packed rows into fp16 tiles
// once (16 values, two 16-byte chunks, one scale per thread at a time), laid out for wgmma's 128-byte
// swizzle, which ldmatrix reads conflict-free too. Chunk c of a row holds its 8 values in
// dequantize8's order, the same in A and B, so the products pair up.

// ROWS packed rows (values at `values`, scales at `scales`) into the fp16 tile `tile`; a thread takes
// the same 16-value unit of every (THREADS / UNITS)-th row
template <int ROWS>
__device__ __forceinline__ void dequantize_rows(const unsigned char* values, const unsigned char* scales,
                                                unsigned char* tile) {
    constexpr int UNITS = BLOCK_K / 16, ROWS_PER_PASS = THREADS / UNITS;
    static_assert(THREADS % UNITS == 0, "a thread keeps its unit");
    const int u = threadIdx.x % UNITS, first = threadIdx.x / UNITS;
#pragma unroll
    for (int pass = 0; pass < (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS; ++pass) {
        const int r = first + pass * ROWS_PER_PASS;
        if (ROWS % ROWS_PER_PASS != 0 && r >= ROWS) break;
        const uint2 words = *reinterpret_cast<const uint2*>(values + r * ROW_BYTES + u * 8);
        const uint32_t factor = scale_factor(scales[r * SCALES + u]);
        uint32_t first_half[4], second_half[4];
        dequantize8(words.x, factor, first_half);
        dequantize8(words.y, factor, second_half);
        store16(tile + chunk_offset(r, 2 * u, ROWS), first_half);
        store16(tile + chunk_offset(r, 2 * u + 1, ROWS), second_half);
    }
}

__device__ __forceinline__ void dequantize_stage(const unsigned char* stage, unsigned char* halves) {
    const unsigned char* scales = stage + A_BYTES + B_BYTES;
    dequantize_rows<BLOCK_M>(stage, scales, halves);
    dequantize_rows<BLOCK_N>(stage + A_BYTES, scales + BLOCK_M * SCALES, halves + A_HALVES);
}

#if MMA == 0
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const unsigned char* address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(address)));
}

// the warp's tile over one stage from the fp16 tiles: per k16 step, ldmatrix x4 gives an A fragment
// (rows +0 / +8, chunks 2j / 2j + 1) or the B fragments of two n8 tiles, then mma.sync
__device__ __forceinline__ void multiply_stage(float (&acc)[MT][NT][4], const unsigned char* halves, int warp_row,
                                               int warp_col) {
    const int lane = threadIdx.x % 32, q = lane / 8;
#pragma unroll
    for (int j = 0; j < BLOCK_K / 16; ++j) {
        uint32_t a[MT][4], b[NT][2];
#pragma unroll
        for (int m = 0; m < MT; ++m)
            ldmatrix_x4(a[m], halves + chunk_offset(warp_row + m * 16 + q % 2 * 8 + lane % 8, 2 * j + q / 2, BLOCK_M));
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t r[4];
            ldmatrix_x4(r, halves + A_HALVES + chunk_offset(warp_col + (n + q / 2) * 8 + lane % 8, 2 * j + q % 2, BLOCK_N));
            b[n][0] = r[0], b[n][1] = r[1], b[n + 1][0] = r[2], b[n + 1][1] = r[3];
        }
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n) mma16816(acc[m][n], a[m], b[n][0], b[n][1]);
    }
}
#else
// the warpgroup's wgmma over one stage (asynchronous: committed, not waited for); `fresh`: the first
// k16 step overwrites d instead of adding to it
__device__ __forceinline__ void multiply_stage(float (&d)[MT][NT][4], const unsigned char* halves, int warp_col,
                                               bool fresh) {
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < BLOCK_K / 16; ++j) {
        const int atom = j / 4, within = j % 4 * 32;
        const uint64_t b = descriptor(halves + A_HALVES + atom * BLOCK_N * 128 + warp_col * 128 + within);
#pragma unroll
        for (int t = 0; t < MT; ++t)
            wgmma_f16(reinterpret_cast<float(&)[NT * 4]>(d[t]),
                      descriptor(halves + atom * BLOCK_M * 128 + t * 64 * 128 + within), b, !(fresh && j == 0));
    }
    wgmma_commit();
}
#endif
#endif

// each accumulator pair's place in the block tile: row, column of acc[m][n][2h], acc[m][n][2h + 1]
#define FOR_EACH_PAIR(...)                                                              \
    _Pragma("unroll") for (int m = 0; m < MT; ++m)                                       \
    _Pragma("unroll") for (int n = 0; n < NT; ++n)                                       \
    _Pragma("unroll") for (int h = 0; h < 2; ++h) {                                      \
        const int row = warp_row + m * M_STRIDE + lane / 4 + 8 * h;                            \
        const int col = warp_col + n * 8 + lane % 4 * 2;                                 \
        __VA_ARGS__                                                                      \
    }
