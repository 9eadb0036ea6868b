// nvfp4_gemm's skinny kernel (DESIGN 1): its entry point, after its runs and register loads
// (nvfp4_skinny.cuh) and its rings (nvfp4_skinny_rings.cuh); the warps' sums added in shared memory, and
// with a K split over blocks in a global workspace by the last block to arrive.
#if DESIGN == 1
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

// the dynamic shared memory a skinny block plans (the launch checks the spec sized the same)
extern "C" __constant__ int nvfp4_skinny_shared_bytes = SKINNY_DYNAMIC_BYTES;

extern "C" __global__ void __launch_bounds__(SKINNY_WARPS * 32, SKINNY_MIN_BLOCKS)
nvfp4_skinny(const unsigned char* a, const unsigned char* b, const unsigned char* sfa, const unsigned char* sfb,
             half* c, int M, int N, int K, int blocked, int splits, float* partials, unsigned* tickets,
             const __grid_constant__ TensorMap skinny_box, const __grid_constant__ TensorMap token_box) {
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
#if SKINNY_STAGES > 1 && SKINNY_TMA_BOXES
    extern __shared__ __align__(128) unsigned char boxed_rings[];
    BoxedStages boxed(weight_scales, N, n0, m0, M, batch, begin, end, K, blocked, &skinny_box, &token_box,
                      boxed_rings + warp * BOX_RING_BYTES,
                      reinterpret_cast<uint64_t*>(boxed_rings + SKINNY_WARPS * BOX_RING_BYTES) + warp * SKINNY_STAGES);
    multiply_boxed(acc, boxed, runs.tokens, begin, end);
#elif SKINNY_STAGES > 1
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
