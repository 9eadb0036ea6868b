// nvfp4_gemm (see nvfp4_gemm.cu): what follows the main loop. The swapped wgmma's tile stored through
// shared memory, and a split tile's slices summed inside its cluster.

#if MMA == 2
// The block's tile (accumulator (row, col) is c[m0 + col][n0 + row]) stored through shared memory: each
// warp writes its fp16 pairs transposed by stmatrix (8 x 8 matrices whose rows are 8 consecutive
// columns of one row of c, 16 bytes), then the block stores c's rows in whole 16-byte pieces (instead of
// 2-byte stores 2 N bytes apart). `staged` is the block's shared memory, free once every warp is past
// its last wgmma; where the tile does not fit it (few, small stages), the kernel stores pairs directly.
// With `groups` > 1 only the columns of c in the tile's 16-row groups w with w % groups == group are
// stored (those the block summed; SPLIT_CLUSTER_L2).
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
                                           half* out, int m0, int n0, int M, int N, bool owns_output = true,
                                           int groups = 1, int group = 0) {
    half* staged = reinterpret_cast<half*>(staged_bytes);  // [BLOCK_M][STAGED_PITCH]: c's rows m0 .., columns n0 ..
    const int lane = threadIdx.x % 32, i = lane / 8;
    __syncthreads();  // every warp is past its last wgmma: the stages are free
    // matrix i of an x4: accumulator tile n = 2 p + i / 2, rows + 8 (i % 2); lane gives the address of its c row
#pragma unroll
    for (int p = 0; p < NT / 2 && owns_output; ++p) {  // (the warps that hold the tile's sums)
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
        if (m0 + row >= M || n0 + column >= N || column / 16 % groups != group) continue;
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

// the block's tile stored pair by pair, where it does not fit shared memory: accumulator pair
// (row, col), (row, col + 1) is c[m0 + col][n0 + row] and c[m0 + col + 1][n0 + row]
__device__ __forceinline__ void store_pairs(const float (&acc)[MT][NT][4], int warp_row, half* out, int m0, int n0, int M,
                                            int N) {
    const int lane = threadIdx.x % 32, warp_col = 0;
    FOR_EACH_PAIR(if (n0 + row < N) {
                      if (m0 + col < M) out[(size_t)(m0 + col) * N + n0 + row] = __float2half_rn(acc[m][n][2 * h] * UNSCALE);
                      if (m0 + col + 1 < M)
                          out[(size_t)(m0 + col + 1) * N + n0 + row] = __float2half_rn(acc[m][n][2 * h + 1] * UNSCALE);
                  })
}
#endif

#if SPLIT_CLUSTER
// Once every block of the cluster is done with its stages (the cluster barrier here): slice r of this
// block's partial tile (rows r * TILE_ROWS / splits ..) goes to block r's shared memory (`partials`),
// as its partial `split`; this block's own slice by plain stores, the others' through distributed
// shared memory. Every store is fire-and-forget: a second cluster barrier orders them before the sums.
// (`owns_output` false: a warp whose sums another holds sends nothing.)
__device__ __forceinline__ void send_cluster_slices(const float (&acc)[MT][NT][4], float* partials, int warp_row,
                                                    int warp_col, int lane, int split, int splits,
                                                    bool owns_output = true) {
    const int slice_rows = TILE_ROWS / splits, slice_shift = __ffs(slice_rows) - 1;  // splits: a power of two
    cluster_sync();  // every block of the cluster is done with its stages
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2 && owns_output; ++h) {  // a row's pairs (FOR_EACH_PAIR's places) to the block summing its slice
            const int row = warp_row + m * M_STRIDE + lane / 4 + 8 * h, owner = row >> slice_shift;
            float* to = partials + ((split << slice_shift) + (row & (slice_rows - 1))) * REDUCE_PITCH + warp_col + lane % 4 * 2;
            if (owner == split) {  // this block's own slice: plain shared memory
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    *reinterpret_cast<float2*>(to + n * 8) = make_float2(acc[m][n][2 * h], acc[m][n][2 * h + 1]);
            } else {
                const unsigned remote = peer_address(to, owner);
#pragma unroll
                for (int n = 0; n < NT; ++n) store_cluster2(remote + n * 8 * 4, acc[m][n][2 * h], acc[m][n][2 * h + 1]);
            }
        }
}
#endif

#if SPLIT_CLUSTER_L2
// A split tile's blocks are one cluster; the 16-row group w of the swapped tile (one warp's rows, the
// same warp in every block) is summed by block w % splits. A warp whose rows another block sums leaves
// its fp32 sums in the global workspace, [block][group][MT * NT float4s][lane] (a warp's store covers
// 512 contiguous bytes); after a cluster barrier (release / acquire: the workspace writes are visible)
// the summing warp adds the other blocks' in block order, reading through L2. The cluster's distributed
// shared memory is not used: it moves a partial tile several times slower than L2 does.
static_assert(MMA == 2, "the L2 split sum hands the swapped tile's warp rows between blocks");
constexpr int ROW_GROUPS = TILE_ROWS / 16;

__device__ __forceinline__ float4* partial_of(float* records, int block, int group) {
    return reinterpret_cast<float4*>(records) + (size_t)(block * ROW_GROUPS + group) * (MT * NT * 32) + threadIdx.x % 32;
}

__device__ __forceinline__ void leave_partial(const float (&acc)[MT][NT][4], float4* to) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
            __stcg(to + (m * NT + n) * 32, make_float4(acc[m][n][0], acc[m][n][1], acc[m][n][2], acc[m][n][3]));
}

__device__ __forceinline__ void add_partial(float (&acc)[MT][NT][4], const float4* from) {
    float4 v[MT][NT];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n) v[m][n] = __ldcg(from + (m * NT + n) * 32);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
            acc[m][n][0] += v[m][n].x, acc[m][n][1] += v[m][n].y, acc[m][n][2] += v[m][n].z, acc[m][n][3] += v[m][n].w;
}
#endif

#if WARPGROUP_K_SPLIT == 2
// two warpgroups to a K tile: the second's sums (over the other half of every tile's k16 steps) added
// to the first's through `sums` (the stages' shared memory, free once everyone is past the K loop:
// [MT * NT * 4][128] for each pair of warpgroups (2p, 2p + 1: columns 64 p ..), values thread-major)
__device__ __forceinline__ void add_other_k_half(float (&acc)[MT][NT][4], float* sums, int k_half) {
    float (&flat)[MT * NT * 4] = reinterpret_cast<float(&)[MT * NT * 4]>(acc);
    const int lane_of_group = threadIdx.x % 128;
    if constexpr (WARPS_N > 2) sums += threadIdx.x / 256 * (MT * NT * 4 * 128);  // this pair's
    __syncthreads();  // everyone is done with the stages
    if (k_half == 1)
#pragma unroll
        for (int i = 0; i < MT * NT * 4; ++i) sums[i * 128 + lane_of_group] = flat[i];
    __syncthreads();
    if (k_half == 0)
#pragma unroll
        for (int i = 0; i < MT * NT * 4; ++i) flat[i] += sums[i * 128 + lane_of_group];
}
#endif

#if SPLIT_CLUSTER || SPLIT_SPREAD
// Block `rank` of the SPLITS blocks of a split tile: its slice of the tile, rows rank * TILE_ROWS / SPLITS
// .., summed over the SPLITS partial slices (`partial(q, row, col)`: the float4 at (row, col) of the
// slice of block q; added in rank order: the same sum in every launch) and stored. A thread loads all
// its sums before it stores any. Swapped wgmma: tile (row, col) is c[m0 + col][n0 + row], so
// consecutive threads take consecutive rows (consecutive columns of c); otherwise consecutive columns.
// The partials: SPLIT_CLUSTER, sent to this block's shared memory by the cluster's blocks; SPLIT_SPREAD,
// the blocks' whole partial tiles in the global workspace.
template <int SPLITS, typename Partial>
__device__ __forceinline__ void sum_slice(const Partial& partial, int rank, half* out, int m0, int n0, int M, int N) {
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
                const float4 v = partial(q, row + r, col);
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

// the slice of `rank` summed over `splits` (2, 4 or 8) partial slices, each from `partial_of<SPLITS>()`
template <typename PartialOf>
__device__ __forceinline__ void sum_split_slice(const PartialOf& partial_of, int rank, int splits, half* out, int m0,
                                                int n0, int M, int N) {
    if (splits == 2) sum_slice<2>(partial_of.template get<2>(), rank, out, m0, n0, M, N);
    if (SPLIT_K >= 4 && splits == 4) {
        constexpr int S = SPLIT_K >= 4 ? 4 : 1;
        sum_slice<S>(partial_of.template get<S>(), rank, out, m0, n0, M, N);
    }
    if (SPLIT_K >= 8 && splits == 8) {
        constexpr int S = SPLIT_K >= 8 ? 8 : 1;
        sum_slice<S>(partial_of.template get<S>(), rank, out, m0, n0, M, N);
    }
}

#if SPLIT_CLUSTER
// the slices the cluster's blocks sent: [SPLITS][TILE_ROWS / SPLITS][REDUCE_PITCH] in shared memory
struct ClusterPartials {
    const float* partials;
    template <int SPLITS>
    __device__ auto get() const {
        const float* base = partials;
        return [base](int q, int row, int col) {
            return *reinterpret_cast<const float4*>(base + (q * (TILE_ROWS / SPLITS) + row) * REDUCE_PITCH + col);
        };
    }
};

__device__ __forceinline__ void sum_cluster_slice(const float* partials, int rank, int splits, half* out, int m0, int n0,
                                                  int M, int N) {
    sum_split_slice(ClusterPartials{partials}, rank, splits, out, m0, n0, M, N);
}
#else
// every block's whole partial tile, [SPLITS][TILE_ROWS][TILE_COLS] floats in the global workspace, read
// through L2 (written by other blocks during this launch)
struct SpreadPartials {
    const float* records;
    int rank;
    template <int SPLITS>
    __device__ auto get() const {
        const float* base = records + rank * (TILE_ROWS / SPLITS) * TILE_COLS;
        return [base](int q, int row, int col) {
            return __ldcg(reinterpret_cast<const float4*>(base + (q * TILE_ROWS + row) * TILE_COLS + col));
        };
    }
};
#endif
#endif
