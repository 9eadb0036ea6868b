// nvfp4_gemm (see nvfp4_gemm.cu): what follows the main loop. The swapped wgmma's tile stored through
// shared memory, and a split tile's slices summed inside its cluster.

#if MMA == 2
// The block's tile (accumulator (row, col) is c[m0 + col][n0 + row]) stored through shared memory: each
// warp writes its fp16 pairs transposed by stmatrix (8 x 8 matrices whose rows are 8 consecutive
// columns of one row of c, 16 bytes), then the block stores c's rows in whole 16-byte pieces (instead of
// 2-byte stores 2 N bytes apart). `staged` is the block's shared memory, free once every warp is past
// its last wgmma; where the tile does not fit it (few, small stages), the kernel stores pairs directly.
constexpr int STAGED_PITCH = BLOCK_N + 8;  // halves of a staged row of c, padded: stmatrix's rows hit distinct banks
constexpr bool TILE_STAGED = BLOCK_M * STAGED_PITCH * 2 <= SHARED_BYTES;

__device__ __forceinline__ void stmatrix_x4_trans(unsigned address, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(address), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

__device__ __forceinline__ uint32_t half_pair(float low, float high) {
    const half2 pair = __floats2half2_rn(low, high);
    return *reinterpret_cast<const uint32_t*>(&pair);
}

__device__ __forceinline__ void store_tile(const float (&acc)[MT][NT][4], unsigned char* staged_bytes, int warp_row,
                                           half* out, int m0, int n0, int M, int N) {
    half* staged = reinterpret_cast<half*>(staged_bytes);  // [BLOCK_M][STAGED_PITCH]: c's rows m0 .., columns n0 ..
    const int lane = threadIdx.x % 32, i = lane / 8;
    __syncthreads();  // every warp is past its last wgmma: the stages are free
    // matrix i of an x4: accumulator tile n = 2 p + i / 2, rows + 8 (i % 2); lane gives the address of its c row
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
        uint32_t r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            r[j] = half_pair(acc[0][2 * p + j / 2][2 * (j % 2)] * UNSCALE, acc[0][2 * p + j / 2][2 * (j % 2) + 1] * UNSCALE);
        stmatrix_x4_trans(smem_address(staged + ((2 * p + i / 2) * 8 + lane % 8) * STAGED_PITCH + warp_row + 8 * (i % 2)), r);
    }
    __syncthreads();
    constexpr int CHUNKS = BLOCK_N / 8, UNITS = BLOCK_M * CHUNKS;
    const bool aligned = N % 8 == 0;  // every row's pieces are 16-byte aligned
#pragma unroll
    for (int unit = threadIdx.x; unit < UNITS; unit += THREADS) {
        const int row = unit / CHUNKS, column = unit % CHUNKS * 8;
        if (m0 + row >= M || n0 + column >= N) continue;
        const uint4 piece = *reinterpret_cast<const uint4*>(staged + row * STAGED_PITCH + column);
        half* to = out + (size_t)(m0 + row) * N + n0 + column;
        if (aligned && n0 + column + 8 <= N) {
            *reinterpret_cast<uint4*>(to) = piece;
        } else {
            const half* values = reinterpret_cast<const half*>(&piece);
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (n0 + column + j < N) to[j] = values[j];
        }
    }
}
#endif

#if SPLIT_CLUSTER
// Block `rank` of the SPLITS of a tile's cluster: its slice of the tile, rows rank * TILE_ROWS / SPLITS
// .., summed over the SPLITS partial slices the blocks sent to its shared memory (`partials`:
// [SPLITS][TILE_ROWS / SPLITS][REDUCE_PITCH], added in rank order: the same sum in every launch) and
// stored. A thread loads all its sums before it stores any. Swapped wgmma: tile (row, col) is
// c[m0 + col][n0 + row], so consecutive threads take consecutive rows (consecutive columns of c);
// otherwise consecutive columns
template <int SPLITS>
__device__ __forceinline__ void sum_slice(const float* partials, int rank, half* out, int m0, int n0, int M, int N) {
    constexpr int ROWS = TILE_ROWS / SPLITS, UNIT_ROWS = MMA == 2 ? 2 : 1, UNITS = ROWS * TILE_COLS / 4 / UNIT_ROWS,
                  PASSES = (UNITS + THREADS - 1) / THREADS;
    const int first = rank * ROWS;
    // this thread's unit of pass p (false past the slice): its first row and column
    auto place = [](int p, int& row, int& col) {
        const int unit = threadIdx.x + p * THREADS;
        if (UNITS % THREADS != 0 && unit >= UNITS) return false;
#if MMA == 2  // a unit: rows 2 r, 2 r + 1 and 4 columns (a column of c's rows: two halves at once)
        row = unit % (ROWS / 2) * 2, col = unit / (ROWS / 2) * 4;
#else
        row = unit / (TILE_COLS / 4), col = unit % (TILE_COLS / 4) * 4;
#endif
        return true;
    };
    float sums[PASSES][UNIT_ROWS][4] = {};
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        int row, col;
        if (!place(p, row, col)) break;
#pragma unroll
        for (int q = 0; q < SPLITS; ++q)
#pragma unroll
            for (int r = 0; r < UNIT_ROWS; ++r) {
                const float4 v = *reinterpret_cast<const float4*>(partials + (q * ROWS + row + r) * REDUCE_PITCH + col);
                sums[p][r][0] += v.x, sums[p][r][1] += v.y, sums[p][r][2] += v.z, sums[p][r][3] += v.w;
            }
    }
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        int row, col;
        if (!place(p, row, col)) break;
#if MMA == 2  // N is even: the pair of rows (columns of c) lies inside N or past it
        if (n0 + first + row < N)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (m0 + col + j < M)
                    *reinterpret_cast<half2*>(out + (size_t)(m0 + col + j) * N + n0 + first + row) =
                        __floats2half2_rn(sums[p][0][j] * UNSCALE, sums[p][1][j] * UNSCALE);
#else
        if (m0 + first + row < M)
#pragma unroll
            for (int j = 0; j < 4; j += 2)  // N is even: a pair lies inside N or past it
                if (n0 + col + j < N)
                    *reinterpret_cast<half2*>(out + (size_t)(m0 + first + row) * N + n0 + col + j) =
                        __floats2half2_rn(sums[p][0][j] * UNSCALE, sums[p][0][j + 1] * UNSCALE);
#endif
    }
}

__device__ __forceinline__ void sum_cluster_slice(const float* partials, int rank, int splits, half* out, int m0, int n0,
                                                  int M, int N) {
    if (splits == 2) sum_slice<2>(partials, rank, out, m0, n0, M, N);
    if (SPLIT_K >= 4 && splits == 4) sum_slice<SPLIT_K >= 4 ? 4 : 1>(partials, rank, out, m0, n0, M, N);
    if (SPLIT_K >= 8 && splits == 8) sum_slice<SPLIT_K >= 8 ? 8 : 1>(partials, rank, out, m0, n0, M, N);
}
#endif
