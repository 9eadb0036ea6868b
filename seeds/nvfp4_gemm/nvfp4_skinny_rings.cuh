// nvfp4_gemm's skinny kernel (DESIGN 1, nvfp4_skinny.cuh): b's runs through each warp's ring of shared-memory
// stages (SKINNY_STAGES > 1), filled by every lane's cp.async copies (StagedWeights) or by TMA boxes
// (SKINNY_TMA_BOXES, BoxedStages), instead of loaded into registers. nvfp4_skinny_kernel.cuh picks one.
#if DESIGN == 1
#if SKINNY_STAGES > 1 && !SKINNY_TMA_BOXES
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

#if SKINNY_STAGES > 1 && SKINNY_TMA_BOXES
// SKINNY_TMA_BOXES: each warp's ring of SKINNY_STAGES stages in dynamic shared memory, a stage SKINNY_STAGE_CHUNKS
// chunks of its 16 rows (64 bytes a row a chunk) in one TMA box (lane 0's request; rows past N and columns past K
// land as zeros), so the bytes in flight cost no registers and no copy a lane. The 16 rows' scales of the stage
// follow, row-major ([row][chunk][8]), lane l copying 4 bytes of row l / 2 a chunk by cp.async. With a's prepass,
// a's fp16 rows of the stage come in a second box after them (SKINNY_TOKENS rows of 256 bytes a chunk, laid out as
// the prepass wrote them; rows past M land as zeros), so the loop loads nothing from global memory itself. A
// stage's mbarrier completes when its boxes have landed (lane 0 announces their bytes) and every lane's scale
// copies (their arrivals, noinc): 1 + 32 arrivals.
#define BOXED_TOKENS SKINNY_A_PREPASS
constexpr int BOX_ROW = SKINNY_STAGE_CHUNKS * 64;
constexpr int BOX_VALUE_BYTES = 16 * BOX_ROW;
constexpr int BOX_TOKEN_ROW = SKINNY_STAGE_CHUNKS * 256;
constexpr int BOX_TOKEN_OFFSET = BOX_VALUE_BYTES + 16 * SKINNY_STAGE_CHUNKS * 8;
constexpr int BOX_TOKEN_BYTES = BOXED_TOKENS ? SKINNY_TOKENS * BOX_TOKEN_ROW : 0;
constexpr int BOX_STAGE_BYTES = BOX_TOKEN_OFFSET + BOX_TOKEN_BYTES;
constexpr int BOX_RING_BYTES = SKINNY_STAGES * BOX_STAGE_BYTES;
constexpr int SKINNY_DYNAMIC_BYTES = SKINNY_WARPS * (BOX_RING_BYTES + SKINNY_STAGES * 8);  // rings, then barriers
static_assert(BOX_STAGE_BYTES % 128 == 0 && BOX_TOKEN_OFFSET % 128 == 0, "boxes land 128-byte aligned");
static_assert(BOX_ROW <= 256, "a box row of b is at most 256 bytes");

struct BoxedStages {
    const unsigned char* scales;  // row lane / 2's scales at the next chunk to copy, 4 bytes (lane % 2's half)
    const TensorMap *box, *token_box;  // b as [L][N][K / 2] bytes; (BOXED_TOKENS) a's fp16 copy as [L][M][K / 2] words
    int scale_step, next, end, n0, m0, batch;
    unsigned char* ring;  // the warp's stages
    uint64_t* full;       // a barrier a stage
    int top, scale_top;   // this lane's offsets in a stage: its run of row g at chunk 0, and its scale pair's
    int token_row[SKINNY_FRAGMENTS];  // (BOXED_TOKENS) its token runs' at chunk 0: rows past M read the last row's
                                      // (one address for a row's lanes)

    __device__ __forceinline__ BoxedStages(const unsigned char* weight_scales, int N, int n0_, int m0_, int M,
                                           int batch_, int begin, int end_, int K, int blocked, const TensorMap* box_,
                                           const TensorMap* token_box_, unsigned char* ring_, uint64_t* full_)
        : box(box_), token_box(token_box_), scale_step(blocked ? 1024 : 8), next(begin), end(end_), n0(n0_), m0(m0_),
          batch(batch_), ring(ring_), full(full_) {
        const int lane = threadIdx.x % 32;
        scales = weight_scales + scale_offset(within_rows(n0 + lane / 2, N), begin * 8 + 4 * (lane % 2), K, blocked);
        top = lane / 4 * BOX_ROW + lane % 4 * 16;
        scale_top = BOX_VALUE_BYTES + lane / 4 * SKINNY_STAGE_CHUNKS * 8 + 2 * (lane % 4);
#pragma unroll
        for (int f = 0; f < SKINNY_FRAGMENTS; ++f)
            token_row[f] = BOX_TOKEN_OFFSET + min(8 * f + lane / 4, M - m0 - 1) * BOX_TOKEN_ROW + lane % 4 * 16;
        if (lane == 0) {
            for (int s = 0; s < SKINNY_STAGES; ++s) barrier_init(full + s, 1 + 32);
            barrier_init_fence();
        }
        __syncwarp();
    }

    __device__ __forceinline__ unsigned char* stage(int slot) const { return ring + slot * BOX_STAGE_BYTES; }

    // the next stage's chunks (up to SKINNY_STAGE_CHUNKS, to the warp's end) into `slot`; nothing past the end
    __device__ __forceinline__ void copy_next(int slot) {
        const int chunks = min(SKINNY_STAGE_CHUNKS, end - next), lane = threadIdx.x % 32;
        if (chunks <= 0) return;
        unsigned char* at = stage(slot);
        if (lane == 0) {  // a box is counted whole, zeros included
            barrier_expect_bytes(full + slot, BOX_VALUE_BYTES + BOX_TOKEN_BYTES);
            tma_load_3d(at, box, next * 64, n0, batch, full + slot);
            if (BOXED_TOKENS) tma_load_3d(at + BOX_TOKEN_OFFSET, token_box, next * 64, m0, batch, full + slot);
        }
        unsigned char* scale_at = at + BOX_VALUE_BYTES + (lane / 2) * SKINNY_STAGE_CHUNKS * 8 + (lane % 2) * 4;
#pragma unroll
        for (int u = 0; u < SKINNY_STAGE_CHUNKS; ++u)
            if (u < chunks) copy4(scale_at + u * 8, scales + u * scale_step, true);
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(full + slot)) : "memory");
        scales += chunks * scale_step;
        next += chunks;
    }

    // this lane's run of chunk u of a stage: row g (half 0) or g + 8 (half 1)
    template <int HALF>
    __device__ __forceinline__ SkinnyRun run(const unsigned char* at, int u) const {
        return SkinnyRun{*reinterpret_cast<const uint4*>(at + top + HALF * 8 * BOX_ROW + u * 64),
                         *reinterpret_cast<const unsigned short*>(at + scale_top + (HALF * 8 * SKINNY_STAGE_CHUNKS + u) * 8)};
    }

    // (BOXED_TOKENS) this lane's token run of chunk u of a stage, fragment f (its words 64 bytes apart)
    __device__ __forceinline__ HalfRun token(const unsigned char* at, int u, int f) const {
        HalfRun r;
#pragma unroll
        for (int w = 0; w < 4; ++w) r.words[w] = *reinterpret_cast<const uint4*>(at + token_row[f] + u * 256 + w * 64);
        return r;
    }
};

// chunks [begin, end) through the warp's ring: every stage's copies requested at the start, then stage by stage
// wait for it, multiply its chunks and refill its slot. a's token runs come from the stage (BOXED_TOKENS) or one
// chunk ahead from global memory into two sets of registers taken in turn (chunk u of a stage in set u % 2 with an
// even chunk count; with one chunk a stage the next set is copied over), so no run waits on its load.
__device__ __forceinline__ void multiply_boxed(float (&acc)[SKINNY_FRAGMENTS][4], BoxedStages& stages,
                                               TokenCursor (&tokens)[SKINNY_FRAGMENTS], int begin, int end) {
#pragma unroll
    for (int s = 0; s < SKINNY_STAGES; ++s) stages.copy_next(s);
    TokenRun token[2][SKINNY_FRAGMENTS];
#if !BOXED_TOKENS
#pragma unroll
    for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[0][f] = begin < end ? tokens[f].run(0) : TokenRun{};
#endif
    for (int i = 0, chunk = begin; chunk < end; ++i) {
        const int slot = i % SKINNY_STAGES, chunks = min(SKINNY_STAGE_CHUNKS, end - chunk);
        barrier_wait(stages.full + slot, (i / SKINNY_STAGES) & 1);
        const unsigned char* at = stages.stage(slot);
#pragma unroll
        for (int u = 0; u < SKINNY_STAGE_CHUNKS; ++u) {
            if (u >= chunks) break;
#if BOXED_TOKENS
#pragma unroll
            for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[0][f] = stages.token(at, u, f);
            multiply_chunk(acc, stages.run<0>(at, u), stages.run<1>(at, u), token[0]);
#else
            constexpr int ALTERNATE = SKINNY_STAGE_CHUNKS % 2 == 0 ? 1 : 0;
            const int now = u % 2 * ALTERNATE, after = ALTERNATE ? (u + 1) % 2 : 1;
#pragma unroll
            for (int f = 0; f < SKINNY_FRAGMENTS; ++f) {
                tokens[f].advance(1);
                if (chunk + u + 1 < end) token[after][f] = tokens[f].run(0);
            }
            multiply_chunk(acc, stages.run<0>(at, u), stages.run<1>(at, u), token[now]);
            if (!ALTERNATE) {
#pragma unroll
                for (int f = 0; f < SKINNY_FRAGMENTS; ++f) token[0][f] = token[1][f];
            }
#endif
        }
        chunk += chunks;
        __syncwarp();  // every lane done with the slot before it is copied into again
        stages.copy_next(slot);
    }
}
#else
constexpr int SKINNY_DYNAMIC_BYTES = 0;
#endif
#endif
