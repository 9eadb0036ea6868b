// ViT patch-embedding GEMM with its epilogue, Hopper (sm_90a):
//   C[b * P + p, n] = bf16( sum_k A[b * P + p, k] * W[n, k] + bias[n] + pos[p, n] )
// A bf16 [M, K] row-major; W bf16 [N, K] (K-major: nn.Linear's weight, and the patch conv's weight
// [N, C, 16, 16] seen as [N, K]); bias fp32 [N]; pos fp32 [P, N]; C bf16 [M, N]; fp32 accumulation.
// K and N multiples of 8 (16-byte rows for the TMA); M, N, K otherwise anything (tiles clipped).
//
// Warpgroup 0 is the producer: one thread brings in each 64-deep slice of K for A and W by TMA
// (128-byte swizzle) into a ring of STAGES stages, completed on "full" mbarriers, for every tile the
// block owns, running ahead of the consumers as far as the ring's "empty" mbarriers let it.
// Warpgroups 1..CONSUMERS are the consumers: each owns M_TILES x 64 rows of a tile, multiplies with
// wgmma m64nBLOCK_Nk16 straight from shared memory, releases each stage, then runs the epilogue.
//
// Knobs (macros):
//   BLOCK_N      tile columns = wgmma N (64, 128, 256); M_TILES: m64 tiles a consumer owns (1, 2)
//   CONSUMERS    consumer warpgroups (1, 2); STAGES: ring depth (2..6)
//   SCHEDULE     0 cooperative: the consumers share one tile (BLOCK_M = 64 M_TILES CONSUMERS);
//                1 ping-pong: each consumer its own tile (BLOCK_M = 64 M_TILES), the two taking turns
//                at the tensor cores so that one's epilogue runs under the other's main loop
//   PERSISTENT   0: one block a tile; 1: one block per SM slot, looping over tiles (the grid, host side)
//   CLUSTER      1, or 2: the two blocks of a thread-block cluster take the two M tiles of one N band
//                together; each brings in half of the W slice and multicasts it to both (W crosses
//                from L2 once per pair); a stage is refilled when the consumers of both blocks are done
//   RASTER       tile order: 0 along N (the tiles of one row band run together and share A in L2), 1 along M
//   TILE_SYNC    0: the whole block meets at a __syncthreads after every tile (the producer cannot run
//                into the next tile); 1: no block-wide barrier: only the ring's mbarriers, each
//                consumer's own named barrier around its staging slots, and the TMA store groups
//   WGMMA_DEPTH  1: wait for each K slice's wgmma group before releasing its stage; 2: keep one
//                group in flight and release the previous slice's stage
//   STORE        0: each 64-column chunk staged in shared memory (128-byte swizzle) and written by a
//                TMA store; 1: st.global of 4 bytes a lane from the accumulators; 2: 16 bytes a lane
//                after a quad transpose by shuffles
//   EPILOGUE_READS  0: bias and pos read where the accumulators are (a lane's column pairs across 8
//                rows); 1: each 64-column chunk staged in fp32 in shared memory and finished row by
//                row, bias, pos and C moving along whole 128-byte lines (with STORE 2)
//   OPERANDS_AHEAD  0: a chunk's bias and pos loaded (all at once) just before it is finished; 1: chunk
//                0's loaded while the tile's last wgmma runs, and each next chunk's before this one
//   OPERAND_PREFETCH  1: the producer warpgroup's idle warps copy pos along rows (cp.async) during the
//                main loop into shared memory, in the order the consumer reads it (a chunk a consumer,
//                on "prefetched full / free" mbarriers); 0: the consumer reads pos from global memory
//   PREFETCH_BUFFERS  chunks of pos a consumer has in shared memory (OPERAND_PREFETCH): 1 = the next
//                chunk is copied once this one is read; 2 = while this one is read
//   POS_TMA      with OPERAND_PREFETCH: one thread (warp 1 of the producer warpgroup) brings each chunk
//                of pos in by TMA, 32-column boxes of the consumer's rows (128-byte swizzle); where
//                the consumer's rows pass the last patch P - 1, a second box from row p0 - P brings the
//                wrapped rows into a second buffer (the TMA zero-fills rows outside 0..P - 1)
//   EPI_DEPTH    staging slots a consumer cycles through (STORE 0): 1 = convert a chunk only once the
//                previous chunk's store has read its slot (serial); 2, 3 = overlapped with the stores
//   SETMAXNREG   0: every thread gets the launch bound's registers; 1: the producer gives registers
//                back (setmaxnreg.dec to PRODUCER_REGS) and the consumers take them (to CONSUMER_REGS)
//   BLOCKS_PER_SM  1 or 2 (the register cap of __launch_bounds__)
// spec.py splices seeds/_hopper.cuh (shared memory addresses, mbarriers, cluster, TMA loads) and the
// wgmma wrapper for BLOCK_N (its N / 2 accumulator operands written out) in after the includes.
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

// wgmma operand descriptor of a K-major tile whose rows are 128 bytes, 128-byte swizzled
// (8-row groups 1024 bytes apart), starting at `tile`
__device__ __forceinline__ uint64_t descriptor(const void* tile) {
    const uint64_t address = smem_address(tile);
    return ((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory"); }

// named barriers: 0 is __syncthreads; 1 + c: consumer c's staging slots; 3 + c: consumer c's turn (ping-pong)
__device__ __forceinline__ void named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// shared memory: STAGES x (A slice, W slice), each consumer's staging, each consumer's prefetched
// bias + pos chunk (OPERAND_PREFETCH), then the barriers: full and empty of every stage, and a
// consumer's prefetched chunk full and free
constexpr int A_STAGE = BLOCK_M * BLOCK_K * 2, W_STAGE = BLOCK_N * BLOCK_K * 2;
constexpr int STAGE_BYTES = A_STAGE + W_STAGE;
constexpr int SLOT_BYTES = WG_ROWS * CHUNK * 2;
#define ROWWISE_STRIDE (CHUNK + 8)  // floats
constexpr int STAGING_BYTES = EPILOGUE_READS == 1 ? CONSUMERS * WG_ROWS * ROWWISE_STRIDE * 4
                              : STORE == 0          ? CONSUMERS * EPI_DEPTH * SLOT_BYTES
                                                    : 0;
constexpr int PREFETCH_BYTES = OPERAND_PREFETCH ? CONSUMERS * PREFETCH_BUFFERS * WG_ROWS * CHUNK * 4 * (POS_TMA ? 2 : 1) : 0;
constexpr int POS_BOX_BYTES = WG_ROWS * 128;  // a TMA box of pos: the consumer's rows, 32 fp32 columns
constexpr int BARRIER_BYTES = (2 * STAGES + 2 * CONSUMERS * PREFETCH_BUFFERS) * 8;
constexpr int SHARED_BYTES = STAGES * STAGE_BYTES + STAGING_BYTES + PREFETCH_BYTES + BARRIER_BYTES + 1024;  // + alignment slack
#define PREFETCHERS 96  // the producer warpgroup's warps 1..3

// The tiles of C in the order the clusters take them: a unit is CLUSTER tiles stacked along M (one
// tile without a cluster), unit u goes to cluster u % clusters, and block `rank` of the cluster takes
// the unit's rank-th tile (past M when M has fewer tiles: its rows read as zeros and are not stored)
struct Tiles {
    int m_units, n_count;
    __device__ Tiles(int M, int N)
        : m_units((M + BLOCK_M * CLUSTER - 1) / (BLOCK_M * CLUSTER)), n_count((N + BLOCK_N - 1) / BLOCK_N) {}
    __device__ static int cluster() { return blockIdx.x / CLUSTER; }
    __device__ static int clusters() { return gridDim.x / CLUSTER; }
    __device__ static int rank() { return blockIdx.x % CLUSTER; }
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

// bias and pos of the values a thread finishes in one chunk, loaded ahead of their use
struct ChunkOperands {
#if EPILOGUE_READS == 1
    float4 bias;
    float4 pos[WG_ROWS / 8];
#else
    float2 bias[CHUNK / 8];
    float2 pos[M_TILES][2][CHUNK / 8];
#endif
};

__device__ __forceinline__ void load_operands(ChunkOperands& o, int chunk, int row0, int col0, int M, int N, int P,
                                              const float* __restrict__ bias, const float* __restrict__ pos) {
    const Place at;
    col0 += chunk * CHUNK;  // N % 8 == 0: a lane's 2 or 4 columns are all inside or all outside
#if EPILOGUE_READS == 1
    const int col = col0 + at.rowwise_col();
    o.bias = col < N ? *reinterpret_cast<const float4*>(bias + col) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < WG_ROWS / 8; ++i) {
        const int row = row0 + at.rowwise_row(i);
        o.pos[i] = col < N && row < M ? *reinterpret_cast<const float4*>(pos + (size_t)(row % P) * N + col)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#else
#pragma unroll
    for (int jj = 0; jj < CHUNK / 8; ++jj) {
        const int col = col0 + at.fragment_col(jj);
        o.bias[jj] = col < N ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int t = 0; t < M_TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + at.fragment_row(t, h);
            const float* pos_row = pos + (size_t)((row < M ? row : 0) % P) * N;
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) {
                const int col = col0 + at.fragment_col(jj);
                o.pos[t][h][jj] = col < N ? *reinterpret_cast<const float2*>(pos_row + col) : make_float2(0.f, 0.f);
            }
        }
#endif
}

// OPERAND_PREFETCH: pos of a consumer's chunk sits in shared memory in the order the consumer reads
// it: value v = (t, h, jj) of thread x at float2 (v * 128 + x), so that a warp reads 256 contiguous bytes
__device__ __forceinline__ int prefetched_index(int t, int h, int jj, int thread) {
    return ((t * 2 + h) * (CHUNK / 8) + jj) * 128 + thread;
}

// the consumer's sequence-th chunk: its buffer sequence % PREFETCH_BUFFERS, round sequence / PREFETCH_BUFFERS
__device__ __forceinline__ void take_prefetched(ChunkOperands& o, int chunk, int row0, int col0, int N, int P,
                                                const float* __restrict__ bias, const float2* buffers,
                                                uint64_t* full, uint64_t* free, int sequence) {
#if EPILOGUE_READS == 0
    const Place at;
#pragma unroll
    for (int jj = 0; jj < CHUNK / 8; ++jj) {  // the same 8 pairs for every row: hits in L1
        const int col = col0 + chunk * CHUNK + at.fragment_col(jj);
        o.bias[jj] = col < N ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.f, 0.f);
    }
    const int b = sequence % PREFETCH_BUFFERS;
    const float2* prefetched = buffers + b * (PREFETCH_BYTES / (CONSUMERS * PREFETCH_BUFFERS * 8));
    barrier_wait(full + b, (sequence / PREFETCH_BUFFERS) & 1);
#pragma unroll
    for (int t = 0; t < M_TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#if POS_TMA
            // row r of the consumer's rows: in the first buffer while row0 % P + r < P, else in the second;
            // its 16-byte column group g of a 32-column box sits at group g ^ (r % 8)
            const int r = at.fragment_row(t, h);
            const unsigned char* box = reinterpret_cast<const unsigned char*>(prefetched) +
                                       (row0 % P + r < P ? 0 : 2 * POS_BOX_BYTES) + r * 128;
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) {
                const int c = at.fragment_col(jj);  // 0..63: box c / 32, byte (c % 32) * 4 of its row
                o.pos[t][h][jj] = *reinterpret_cast<const float2*>(
                    box + (c / 32) * POS_BOX_BYTES + ((((c % 32) / 4) ^ (r % 8)) * 16) + (c % 4) * 4);
            }
#else
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) o.pos[t][h][jj] = prefetched[prefetched_index(t, h, jj, threadIdx.x % 128)];
#endif
        }
#if POS_TMA
    // the next TMA write into this buffer is in the async proxy: order these generic-proxy reads
    // before it (without the fence a read still in flight could see the next chunk: wrong pos in
    // 1-5 of 40 launches on the H100)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
    barrier_arrive(free + b);
#endif
}

// POS_TMA: one thread brings every chunk every consumer finishes, in the consumers' order, into the
// consumer's next buffer once the consumer has read what it held
__device__ void load_pos(const Tiles& tiles, int owned, int N, int P, const TensorMap* pos_map, unsigned char* buffers,
                         uint64_t* full, uint64_t* free) {
    int sequence[CONSUMERS] = {};
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        for (int chunk = 0; chunk < BLOCK_N / CHUNK && origin.y + chunk * CHUNK < N; ++chunk) {
#pragma unroll
            for (int c = 0; c < CONSUMERS; ++c) {
                if (SCHEDULE == 1 && i % 2 != c) continue;
                const int p0 = (origin.x + (SCHEDULE == 1 ? 0 : c * WG_ROWS)) % P;
                const int b = c * PREFETCH_BUFFERS + sequence[c] % PREFETCH_BUFFERS, round = sequence[c] / PREFETCH_BUFFERS;
                if (round > 0) barrier_wait(free + b, (round - 1) & 1);
                unsigned char* buffer = buffers + b * 4 * POS_BOX_BYTES;
                const bool wraps = p0 + WG_ROWS > P;
                barrier_expect_bytes(full + b, (wraps ? 4 : 2) * POS_BOX_BYTES);
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int col = origin.y + chunk * CHUNK + 32 * half;
                    tma_load(buffer + half * POS_BOX_BYTES, pos_map, col, p0, full + b);
                    if (wraps) tma_load(buffer + (2 + half) * POS_BOX_BYTES, pos_map, col, p0 - P, full + b);
                }
                ++sequence[c];
            }
        }
    }
}

// 16 bytes global -> shared without registers; zero-filled when !inside
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_address(dst)), "l"(src),
                 "r"(inside ? 16 : 0) : "memory");
}

// The prefetching warps (producer warpgroup, warps 1..3): for every chunk every consumer finishes, in
// the consumers' order, the rows of pos copied along rows (16 bytes a lane, cp.async) into the
// consumer's next buffer once the consumer has read what it held; the copies themselves arrive on the
// buffer's "full" barrier when they land
__device__ void prefetch_operands(const Tiles& tiles, int owned, int M, int N, int P, const float* __restrict__ pos,
                                  float2* buffers, uint64_t* full, uint64_t* free) {
    const int p = threadIdx.x - 32;
    int sequence[CONSUMERS] = {};
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        // chunk by chunk, each consumer's in turn: cooperative consumers finish their chunks together
        for (int chunk = 0; chunk < BLOCK_N / CHUNK && origin.y + chunk * CHUNK < N; ++chunk) {
#pragma unroll
            for (int c = 0; c < CONSUMERS; ++c) {
                if (SCHEDULE == 1 && i % 2 != c) continue;
                const int row0 = origin.x + (SCHEDULE == 1 ? 0 : c * WG_ROWS);
                const int b = c * PREFETCH_BUFFERS + sequence[c] % PREFETCH_BUFFERS, round = sequence[c] / PREFETCH_BUFFERS;
                if (round > 0) barrier_wait(free + b, (round - 1) & 1);
                float2* buffer = buffers + b * WG_ROWS * CHUNK / 2;
                for (int e = p; e < WG_ROWS * CHUNK / 4; e += PREFETCHERS) {
                    const int r = e / (CHUNK / 4), k = e % (CHUNK / 4), row = row0 + r;
                    const int col = origin.y + chunk * CHUNK + 4 * k;
                    const bool inside = row < M && col < N;
                    // row r, columns 4k..4k+3: pair jj = k / 2 of lane (r % 8) * 4 + 2 (k % 2) and the next lane
                    const int thread = (r % 64) / 16 * 32 + (r % 8) * 4 + 2 * (k % 2);
                    copy16_async(buffer + prefetched_index(r / 64, (r % 16) / 8, k / 2, thread),
                                 inside ? pos + (size_t)(row % P) * N + col : pos, inside);
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(full + b))
                             : "memory");
                ++sequence[c];
            }
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
}

// The epilogue of one consumer: its accumulators (rows row0.., columns col0..) + bias + pos, as bf16,
// one 64-column chunk at a time; the one function for every store path and every tile.
// ops[0] holds chunk 0's operands when OPERANDS_AHEAD (loaded while the last wgmma ran); then each
// chunk's successor is loaded before the chunk is finished.
__device__ __forceinline__ void epilogue(float (&acc)[M_TILES][ACC], ChunkOperands (&ops)[2], int row0, int col0,
                                         int M, int N, int P, const float* __restrict__ bias,
                                         const float* __restrict__ pos, __nv_bfloat16* __restrict__ C,
                                         const TensorMap* c_map, unsigned char* slots, int consumer,
                                         const float2* prefetched, uint64_t* prefetched_full,
                                         uint64_t* prefetched_free, int& chunk_sequence) {
    const Place at;
#pragma unroll
    for (int chunk = 0; chunk < BLOCK_N / CHUNK; ++chunk) {
        if (col0 + chunk * CHUNK >= N) break;  // the same for every thread of the warpgroup
        const ChunkOperands& o = ops[chunk % 2];
        if (OPERAND_PREFETCH)
            take_prefetched(ops[chunk % 2], chunk, row0, col0, N, P, bias, prefetched, prefetched_full, prefetched_free,
                            chunk_sequence);
        else if (!OPERANDS_AHEAD) load_operands(ops[chunk % 2], chunk, row0, col0, M, N, P, bias, pos);
        else if (chunk + 1 < BLOCK_N / CHUNK) load_operands(ops[(chunk + 1) % 2], chunk + 1, row0, col0, M, N, P, bias, pos);
#if EPILOGUE_READS == 1
        // the chunk to shared memory as fp32 (rows ROWWISE_STRIDE floats apart: the fragment's float2
        // writes and the rows' float4 reads meet no bank conflict), then finished row by row, 16 lanes
        // a row: the loads of bias and pos and the stores of C move whole 128-byte lines
        float* rows = reinterpret_cast<float*>(slots);
#pragma unroll
        for (int t = 0; t < M_TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const int j = chunk * CHUNK / 8 + jj;
                    *reinterpret_cast<float2*>(rows + at.fragment_row(t, h) * ROWWISE_STRIDE + at.fragment_col(jj)) =
                        make_float2(acc[t][4 * j + 2 * h], acc[t][4 * j + 2 * h + 1]);
                }
        named_sync(1 + consumer, 128);
        const int col = col0 + chunk * CHUNK + at.rowwise_col();
#pragma unroll
        for (int i = 0; i < WG_ROWS / 8; ++i) {
            const int row = row0 + at.rowwise_row(i);
            const float4 a = *reinterpret_cast<const float4*>(rows + at.rowwise_row(i) * ROWWISE_STRIDE + at.rowwise_col());
            const float4 b = o.bias, q = o.pos[i];
            if (row < M && col < N)
                *reinterpret_cast<uint2*>(C + (size_t)row * N + col) =
                    make_uint2(bf16_pair(a.x + b.x + q.x, a.y + b.y + q.y), bf16_pair(a.z + b.z + q.z, a.w + b.w + q.w));
        }
        named_sync(1 + consumer, 128);  // the rows are read before the next chunk overwrites them
#else
#if STORE == 0
        unsigned char* slot = slots + (chunk_sequence % EPI_DEPTH) * SLOT_BYTES;
        if (threadIdx.x % 128 == 0) tma_store_wait_read<EPI_DEPTH - 1>();  // the slot's previous store has read it
        named_sync(1 + consumer, 128);
#endif
#pragma unroll
        for (int t = 0; t < M_TILES; ++t) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int local_row = at.fragment_row(t, h), row = row0 + local_row;
                float2 v[CHUNK / 8];  // the finished column pairs of this row
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const int j = chunk * CHUNK / 8 + jj;
                    v[jj] = make_float2(acc[t][4 * j + 2 * h] + o.bias[jj].x + o.pos[t][h][jj].x,
                                        acc[t][4 * j + 2 * h + 1] + o.bias[jj].y + o.pos[t][h][jj].y);
                }
#if STORE == 2
                // 16 bytes a lane: the 4 lanes of a quad hold a pair of each 8-column group jj; after
                // a transpose by shuffles lane q holds all 8 columns of group 4 i + q
#pragma unroll
                for (int i = 0; i < CHUNK / 32; ++i) {
                    float mine[8];
#pragma unroll
                    for (int g = 0; g < 4; ++g)
#pragma unroll
                        for (int src = 0; src < 4; ++src) {
                            const float w0 = __shfl_sync(0xffffffffu, v[4 * i + g].x, (at.lane & ~3) | src);
                            const float w1 = __shfl_sync(0xffffffffu, v[4 * i + g].y, (at.lane & ~3) | src);
                            if (at.lane % 4 == g) {
                                mine[2 * src] = w0;
                                mine[2 * src + 1] = w1;
                            }
                        }
                    const int col = col0 + chunk * CHUNK + 8 * (4 * i + at.lane % 4);
                    if (row < M && col < N)  // N % 8 == 0
                        *reinterpret_cast<uint4*>(C + (size_t)row * N + col) =
                            make_uint4(bf16_pair(mine[0], mine[1]), bf16_pair(mine[2], mine[3]),
                                       bf16_pair(mine[4], mine[5]), bf16_pair(mine[6], mine[7]));
                }
#else
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const unsigned value = bf16_pair(v[jj].x, v[jj].y);
#if STORE == 1
                    const int col = col0 + chunk * CHUNK + at.fragment_col(jj);
                    if (row < M && col < N) *reinterpret_cast<unsigned*>(C + (size_t)row * N + col) = value;
#else
                    // 128-byte swizzle: the 16-byte column group jj of row r sits at group jj ^ (r % 8)
                    *reinterpret_cast<unsigned*>(slot + local_row * 128 + ((jj ^ (local_row % 8)) * 16) +
                                                 (at.lane % 4) * 4) = value;
#endif
                }
#endif
            }
        }
#if STORE == 0
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the TMA store reads what st.shared wrote
        named_sync(1 + consumer, 128);
        if (threadIdx.x % 128 == 0) tma_store(c_map, col0 + chunk * CHUNK, row0, slot);  // clips rows >= M, columns >= N
#endif
#endif
        ++chunk_sequence;
    }
}

// a consumer warpgroup is done reading a stage: one arrival at the stage's "empty" barrier of every
// block of the cluster (each block's producer refills it by a multicast into all of them)
__device__ __forceinline__ void release_stage(uint64_t* empty) {
#if CLUSTER > 1
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) barrier_arrive_peer(empty, r);
#else
    barrier_arrive(empty);
#endif
}

// The producer warpgroup: slice kt of local tile i is the ring's (i * k_tiles + kt)-th fill. Its
// thread 0 brings in A (this block's rows) and W (with a cluster: its half of the slice, multicast)
__device__ void produce(const Tiles& tiles, int owned, int k_tiles, const TensorMap* a_map, const TensorMap* w_map,
                        unsigned char* smem, uint64_t* full, uint64_t* empty) {
    int fill = 0;
    for (int i = 0; i < owned; ++i) {
        if (threadIdx.x == 0) {
            const int2 origin = tiles.origin(i);
            for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
                const int s = fill % STAGES;
                unsigned char* stage = smem + s * STAGE_BYTES;
                if (fill >= STAGES) barrier_wait(empty + s, (fill / STAGES - 1) & 1);
                barrier_expect_bytes(full + s, STAGE_BYTES);
                tma_load(stage, a_map, kt * BLOCK_K, origin.x, full + s);
#if CLUSTER > 1
                constexpr int W_PART = BLOCK_N / CLUSTER;  // rows of W each block of the cluster brings in
                tma_load_multicast(stage + A_STAGE + tiles.rank() * W_PART * 128, w_map, kt * BLOCK_K,
                                   origin.y + tiles.rank() * W_PART, full + s, (1 << CLUSTER) - 1);
#else
                tma_load(stage + A_STAGE, w_map, kt * BLOCK_K, origin.y, full + s);
#endif
            }
        }
#if TILE_SYNC == 0
        __syncwarp();
        __syncthreads();  // the block's rendezvous after tile i
#endif
    }
}

#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) CLUSTER_DIMS
vit_gemm(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap w_map,
         const __grid_constant__ TensorMap c_map, const __grid_constant__ TensorMap pos_map,
         const float* __restrict__ bias, const float* __restrict__ pos, __nv_bfloat16* __restrict__ C, int M, int N,
         int K, int P) {
    extern __shared__ unsigned char raw[];
    // the 128-byte swizzle repeats every 1024 bytes: stages and slots start on a 1024-byte boundary
    // (the same offset in every block: a multicast lands at its place in each)
    unsigned char* smem = raw + ((1024 - smem_address(raw) % 1024) % 1024);
    unsigned char* staging = smem + STAGES * STAGE_BYTES;
    float2* prefetched = reinterpret_cast<float2*>(staging + STAGING_BYTES);
    uint64_t* full = reinterpret_cast<uint64_t*>(staging + STAGING_BYTES + PREFETCH_BYTES);
    uint64_t* empty = full + STAGES;
    uint64_t* prefetched_full = empty + STAGES;  // PREFETCH_BUFFERS of each a consumer
    uint64_t* prefetched_free = prefetched_full + CONSUMERS * PREFETCH_BUFFERS;
    const Tiles tiles(M, N);
    const int owned = tiles.owned(), k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(full + s, 1);
            barrier_init(empty + s, SHARERS * CLUSTER);
        }
        for (int b = 0; b < CONSUMERS * PREFETCH_BUFFERS; ++b) {
            barrier_init(prefetched_full + b, POS_TMA ? 1 : PREFETCHERS);
            barrier_init(prefetched_free + b, 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#if CLUSTER > 1
    cluster_sync();  // every block's barriers exist before any block multicasts or arrives into it
#else
    __syncthreads();
#endif

    if (warpgroup == 0) {
#if SETMAXNREG
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
#endif
#if OPERAND_PREFETCH  // (with TILE_SYNC 1: no block-wide barrier to meet)
        if (threadIdx.x >= 32) {
            if (!POS_TMA)
                prefetch_operands(tiles, owned, M, N, P, pos, prefetched, prefetched_full, prefetched_free);
            else if (threadIdx.x == 32)
                load_pos(tiles, owned, N, P, &pos_map, reinterpret_cast<unsigned char*>(prefetched), prefetched_full,
                         prefetched_free);
        } else
#endif
            produce(tiles, owned, k_tiles, &a_map, &w_map, smem, full, empty);
    } else {
#if SETMAXNREG
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
#endif
        const int consumer = warpgroup - 1;
        const int a_row0 = SCHEDULE == 1 ? 0 : consumer * WG_ROWS;  // this consumer's rows within an A stage
        unsigned char* slots = staging + consumer * (STAGING_BYTES / CONSUMERS);
        int chunk_sequence = 0;  // the chunks this consumer has finished: its staging slot, its prefetched chunk
        float acc[M_TILES][ACC];
        for (int i = 0; i < owned; ++i) {
#if SCHEDULE == 1
            if (i % 2 != consumer) {  // the other consumer's tile
#if TILE_SYNC == 0
                __syncthreads();
#endif
                continue;
            }
            if (i > 0) named_sync(3 + consumer, 256);  // the other consumer's main loop of tile i - 1 is over
#endif
#pragma unroll
            for (int t = 0; t < M_TILES; ++t)
#pragma unroll
                for (int a = 0; a < ACC; ++a) acc[t][a] = 0.f;

            const int first = i * k_tiles;
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int fill = first + kt, s = fill % STAGES;
                barrier_wait(full + s, (fill / STAGES) & 1);
                const unsigned char* stage = smem + s * STAGE_BYTES;
                wgmma_fence();
#pragma unroll
                for (int t = 0; t < M_TILES; ++t)
#pragma unroll
                    for (int k = 0; k < BLOCK_K / 16; ++k)  // 16 deep = 32 bytes along the swizzled row
                        wgmma_bf16(acc[t], descriptor(stage + (a_row0 + t * 64) * 128 + k * 32),
                                   descriptor(stage + A_STAGE + k * 32));
                wgmma_commit();
                wgmma_wait<WGMMA_DEPTH - 1>();  // fill - WGMMA_DEPTH + 1 is done: its stage can be refilled
                if (threadIdx.x % 128 == 0 && kt >= WGMMA_DEPTH - 1)
                    release_stage(empty + (fill - WGMMA_DEPTH + 1) % STAGES);
            }
            const int2 origin = tiles.origin(i);
            ChunkOperands ops[2];
            if (OPERANDS_AHEAD) load_operands(ops[0], 0, origin.x + a_row0, origin.y, M, N, P, bias, pos);
            wgmma_wait<0>();  // the accumulators are final
            if (WGMMA_DEPTH == 2 && threadIdx.x % 128 == 0) release_stage(empty + (first + k_tiles - 1) % STAGES);
#if SCHEDULE == 1
            if (i + 1 < owned) named_arrive(3 + (1 - consumer), 256);  // the other consumer's turn
#endif
            epilogue(acc, ops, origin.x + a_row0, origin.y, M, N, P, bias, pos, C, &c_map, slots, consumer,
                     prefetched + consumer * PREFETCH_BYTES / (CONSUMERS * 8),
                     prefetched_full + consumer * PREFETCH_BUFFERS, prefetched_free + consumer * PREFETCH_BUFFERS,
                     chunk_sequence);
#if TILE_SYNC == 0
            __syncthreads();
#endif
        }
#if STORE == 0
        if (threadIdx.x % 128 == 0) tma_store_wait_read<0>();  // shared memory stays until the last store read it
#endif
    }
#if CLUSTER > 1
    // no block leaves while another may still arrive on its barriers or multicast into its stages
    __syncwarp();
    cluster_sync();
#endif
}

extern "C" __constant__ int vit_gemm_shared_bytes = SHARED_BYTES;
