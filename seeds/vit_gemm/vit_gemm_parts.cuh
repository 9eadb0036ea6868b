// vit_gemm (see vit_gemm.cu): macros, helpers, the shared-memory plan, the tile order, the fragment layout.
#include <cuda_bf16.h>
#include <stdint.h>

#define BLOCK_K 64  // one 128-byte swizzle atom of bf16
#define WG_ROWS (64 * M_TILES)
#if SCHEDULE == 1
#define BLOCK_M WG_ROWS
#define SHARERS 1  // consumer warpgroups reading one stage
#else
#define BLOCK_M (WG_ROWS * CONSUMERS)
#define SHARERS CONSUMERS
#endif
#define THREADS (128 * (CONSUMERS + 1))
#define CLUSTER_BLOCKS (CLUSTER * SPLIT_K)  // blocks of a cluster: M pairs (CLUSTER) or the K slices of a tile (SPLIT_K)
#define ACC (BLOCK_N / 2)  // fp32 accumulators a thread holds per m64 tile
#define CHUNK 64           // epilogue columns at a time: one 128-byte row of bf16
#define PRODUCER_REGS 40

__device__ __forceinline__ void tma_store(const TensorMap* map, int column, int row, const void* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(smem_address(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <int PENDING>  // at most PENDING of this thread's TMA stores still reading shared memory
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(PENDING) : "memory");
}

// named barriers: 0 is the whole block (block_rendezvous); 1 + c: consumer c's staging slots; 3 + c: consumer c's turn (ping-pong)
__device__ __forceinline__ void named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// the whole block's rendezvous after a tile (TILE_SYNC 0), reached from the producer's and the
// consumers' own call sites: barrier 0 in its non-aligned form, which allows that (__syncthreads is
// the aligned form, which requires every thread to execute the same instruction)
__device__ __forceinline__ void block_rendezvous() { asm volatile("barrier.sync 0;" ::: "memory"); }

// shared memory: STAGES x (A slice, W slice), each consumer's staging, each consumer's prefetched
// bias + pos chunk (OPERAND_PREFETCH), then the barriers: full and empty of every stage, a
// consumer's prefetched chunk full and free, and (FOLDED_TABLE) a consumer's table rows landed in
// its staging and its staging free (its last tile's stores have read it)
constexpr int A_STAGE = BLOCK_M * BLOCK_K * 2, W_STAGE = BLOCK_N * BLOCK_K * 2;
constexpr int STAGE_BYTES = A_STAGE + W_STAGE;
constexpr int SLOT_BYTES = WG_ROWS * CHUNK * 2;
#define ROWWISE_STRIDE (CHUNK + 8)  // floats
// FOLDED_TABLE: a consumer's staging is its whole share of the tile (every chunk's slot), which the
// table's rows fill during the main loop and the epilogue finishes in place
constexpr int STAGING_BYTES = FOLDED_TABLE          ? CONSUMERS * (BLOCK_N / CHUNK) * SLOT_BYTES
                              : EPILOGUE_READS == 1 ? CONSUMERS * WG_ROWS * ROWWISE_STRIDE * 4
                              : STORE == 0          ? CONSUMERS * EPI_DEPTH * SLOT_BYTES
                                                    : 0;
constexpr int PREFETCH_BYTES = OPERAND_PREFETCH ? CONSUMERS * PREFETCH_BUFFERS * WG_ROWS * CHUNK * 4 * (POS_TMA ? 2 : 1) : 0;
constexpr int POS_BOX_BYTES = WG_ROWS * 128;  // a TMA box of pos: the consumer's rows, 32 fp32 columns
// SPLIT_K > 1: block 0 of the cluster receives the other blocks' partial accumulators, a slot for each
// (block, consumer): float4 j of consumer thread x at float4 j * 128 + x
constexpr int PARTIAL_QUADS = M_TILES * ACC / 4;  // float4s of accumulators a consumer thread holds
constexpr int PARTIAL_BYTES = 128 * PARTIAL_QUADS * 16;  // one consumer's partial tile
constexpr int PARTIALS_BYTES = SPLIT_K > 1 ? (SPLIT_K - 1) * CONSUMERS * PARTIAL_BYTES : 0;
constexpr int BARRIER_BYTES =
    (2 * STAGES + 2 * CONSUMERS * PREFETCH_BUFFERS + 2 * CONSUMERS * FOLDED_TABLE + CONSUMERS * (SPLIT_K > 1)) * 8;
constexpr int SHARED_BYTES =
    STAGES * STAGE_BYTES + STAGING_BYTES + PREFETCH_BYTES + PARTIALS_BYTES + BARRIER_BYTES + 1024;  // + alignment slack
#define PREFETCHERS 96  // the producer warpgroup's warps 1..3

// The tiles of C in the order the clusters take them: a unit is CLUSTER tiles stacked along M (one
// tile without a cluster), unit u goes to cluster u % clusters, and block `rank` of the cluster takes
// the unit's rank-th tile (past M when M has fewer tiles: its rows read as zeros and are not stored).
// With SPLIT_K > 1 (CLUSTER 1) the cluster's blocks take the same tile, block k_rank its k_rank-th
// share of the K slices.
struct Tiles {
    int m_units, n_count;
    __device__ Tiles(int M, int N)
        : m_units((M + BLOCK_M * CLUSTER - 1) / (BLOCK_M * CLUSTER)), n_count((N + BLOCK_N - 1) / BLOCK_N) {}
    __device__ static int cluster() { return blockIdx.x / CLUSTER_BLOCKS; }
    __device__ static int clusters() { return gridDim.x / CLUSTER_BLOCKS; }
    __device__ static int rank() { return blockIdx.x % CLUSTER; }
    __device__ static int k_rank() { return blockIdx.x % CLUSTER_BLOCKS / CLUSTER; }
    __device__ int count() const { return m_units * n_count; }
    __device__ int owned() const {  // tiles this block computes: as many as its cluster's other blocks
        return cluster() < count() ? (count() - cluster() + clusters() - 1) / clusters() : 0;
    }
    __device__ int2 origin(int local) const {  // (row0, col0) of this block's local-th tile
        const int u = cluster() + local * clusters();
#if RASTER == 0
        return make_int2((u / n_count * CLUSTER + rank()) * BLOCK_M, u % n_count * BLOCK_N);
#else
        return make_int2((u % m_units * CLUSTER + rank()) * BLOCK_M, u / m_units * BLOCK_N);
#endif
    }
};

// Where a thread's epilogue values sit: its rows and columns of a 64-column chunk
struct Place {
    int warp, lane;
    __device__ Place() : warp((threadIdx.x / 32) % 4), lane(threadIdx.x % 32) {}
    // the accumulators' layout: row of m64 tile t, half h; column of 8-column group jj (a pair)
    __device__ int fragment_row(int t, int h) const { return t * 64 + warp * 16 + lane / 4 + h * 8; }
    __device__ int fragment_col(int jj) const { return 8 * jj + 2 * (lane % 4); }
    // the row-wise walk: 16 lanes a row, 4 columns a lane, row i-th of the thread
    __device__ int rowwise_row(int i) const { return (threadIdx.x % 128) / 16 + 8 * i; }
    __device__ int rowwise_col() const { return 4 * (lane % 16); }
};

