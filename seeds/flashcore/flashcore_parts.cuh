// FlashCore building blocks: shared-memory tile layouts, global -> shared loads (plain and
// cp.async), ldmatrix / mma.sync wrappers, warp reductions. Prepended to flashcore.cu.
#include <cuda_fp16.h>
#include <math_constants.h>
#include <mma.h>
#include <stdint.h>
#include <utility>

// Each head dimension has its own key tile and warp count (the build passes BLOCK_N_D64, WARPS_D64,
// BLOCK_N_D128, WARPS_D128). These names read the template parameter D of the function or struct
// they appear in, so they are only usable inside code templated on the head dimension.
#define BLOCK_N (D == 128 ? BLOCK_N_D128 : BLOCK_N_D64)
#define WARPS (D == 128 ? WARPS_D128 : WARPS_D64)
#define THREADS (WARPS * 32)
#define KV_ROWS (BLOCK_N * KV_SPLIT)  // key/value rows a pipeline stage holds (one tile per split)
#define KV_SHARE (D == 64 ? KV_SHARE_D64 : 1)  // blocks of a cluster sharing the K/V stages
#define BLOCK_SPLIT (CLUSTER * GRID_SPLIT)  // blocks sharing query rows (a cluster, or the grid; never both)
#define TMA_STAGES (D == 64 && TMA_STAGES_D64)  // K/V stages by TMA boxes issued by one thread

__host__ __device__ constexpr int align128(int bytes) { return (bytes + 127) / 128 * 128; }

// Q/K/V rows of D halves in shared memory. at(row, col) is the offset of element (row, col);
// col is a multiple of 2 for half2 accesses and of 8 for 16-byte accesses (one "chunk").
template <int D>
struct Tile {
    static constexpr int ld = D + (LAYOUT == 1 ? 8 : 0);
    __device__ __forceinline__ static int at(int row, int col) {
#if LAYOUT == 2
        return row * ld + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);  // 16-byte chunks XOR row % 8
#else
        return row * ld + col;
#endif
    }
};

// EXP2: one MUFU.EX2 (ex2.approx.ftz; exp2f itself adds a denormal range fix-up around it),
// otherwise the accurate expf of the baseline.
__device__ __forceinline__ float exp_base(float x) {
#if EXP2
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return expf(x);
#endif
}

template <typename P>
__device__ __forceinline__ bool masked(const P& p, int key, int query) {
    return key >= p.S || (p.causal && key > query);
}

__device__ __forceinline__ float quad_reduce_max(float v, int width) {
#pragma unroll
    for (int offset = width / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// 1 / x by the approximate reciprocal (MUFU.RCP, about 1 ulp): the row sums it divides by are at
// least 1 (a row's largest score contributes exp(0)), so no denormal or zero needs IEEE division's slow path
__device__ __forceinline__ float reciprocal(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float quad_reduce_sum(float v, int width) {
#pragma unroll
    for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// rows x D halves from global (row stride D) into a shared tile, 16 bytes a thread-step;
// rows at or past rows_valid are zero-filled.
template <int D>
__device__ __forceinline__ void load_rows(half* dst, const half* src, int rows_valid, int rows) {
    constexpr int chunks = D / 8;
    for (int v = threadIdx.x; v < rows * chunks; v += THREADS) {
        const int r = v / chunks, c = (v % chunks) * 8;
        uint4 value = make_uint4(0u, 0u, 0u, 0u);
        if (r < rows_valid) value = *reinterpret_cast<const uint4*>(src + (size_t)r * D + c);
        *reinterpret_cast<uint4*>(dst + Tile<D>::at(r, c)) = value;
    }
}

// The same as load_rows as cp.async copies, for a tile of ROWS rows (the Q tile, a K or V stage).
// A thread copies the same 16-byte chunk of rows r0, r0 + step, r0 + 2 step, ...: its shared and
// global addresses are one base each plus compile-time offsets (the swizzle repeats every 8 rows).
// Rows at or past rows_valid are zero-filled (only a last tile has any; a valid dummy address is passed).
template <int D, int ROWS>
__device__ __forceinline__ void copy_rows_async(half* dst, const half* src, int rows_valid, const half* dummy) {
    constexpr int chunks = D / 8, step = THREADS / chunks, steps = (ROWS + step - 1) / step;
    static_assert(THREADS % chunks == 0, "a thread keeps one chunk column");
    constexpr bool repeats = LAYOUT != 2 || step % 8 == 0;
    const int r0 = threadIdx.x / chunks, c = threadIdx.x % chunks * 8;
    const unsigned base = smem_address(dst + Tile<D>::at(r0, c));
    const half* from = src + r0 * D + c;
    if (rows_valid >= ROWS) {  // every stage but the last: no predicate, no address select
#pragma unroll
        for (int i = 0; i < steps; ++i) {
            if (ROWS % step != 0 && r0 + i * step >= ROWS) break;
            const unsigned address = repeats ? base + i * step * Tile<D>::ld * 2 : smem_address(dst + Tile<D>::at(r0 + i * step, c));
            copy16_async(address, from + i * step * D);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < steps; ++i) {
        const int r = r0 + i * step;
        if (ROWS % step != 0 && r >= ROWS) break;
        const unsigned address = repeats ? base + i * step * Tile<D>::ld * 2 : smem_address(dst + Tile<D>::at(r, c));
        const bool valid = r < rows_valid;
        copy16_async(address, valid ? from + i * step * D : dummy, valid);
    }
}

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldsm_x2(uint32_t* r, const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldsm_x2_trans(uint32_t* r, const half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(p)));
}

// an arrival on mbarrier `bar` once this thread's cp.async copies so far have landed (the barrier
// counts it among its expected arrivals: .noinc)
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(bar)) : "memory");
}

// named barrier `id` (1..15; 0 is __syncthreads) of `threads` threads
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// op over the 2 * N values of row half h in a thread's S fragments (N a power of two), as a tree
template <int N, typename Op>
__device__ __forceinline__ float pair_tree(const float (&s)[N][4], int h, Op op) {
    float v[N];
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = op(s[n][2 * h], s[n][2 * h + 1]);
#pragma unroll
    for (int step = 1; step < N; step *= 2)
#pragma unroll
        for (int i = 0; i < N; i += 2 * step) v[i] = op(v[i], v[i + step]);
    return v[0];
}

// the A fragment (mma.sync's layout, also wgmma's from registers) of keys 16 k .. 16 k + 15 of P,
// packed to fp16 from the S/P fragments of a thread's 16 rows: the C layout of two n-tiles is the A
// layout of one k-step
template <int N>
__device__ __forceinline__ void probability_fragment(uint32_t (&a)[4], const float (&s)[N][4], int k) {
    a[0] = pack_half2(s[2 * k][0], s[2 * k][1]);
    a[1] = pack_half2(s[2 * k][2], s[2 * k][3]);
    a[2] = pack_half2(s[2 * k + 1][0], s[2 * k + 1][1]);
    a[3] = pack_half2(s[2 * k + 1][2], s[2 * k + 1][3]);
}

// A fragment of rows row0..row0+15, columns col0..col0+15 of a Q tile
template <int D>
__device__ __forceinline__ void load_a(uint32_t* a, const half* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    ldsm_x4(a, tile + Tile<D>::at(row0 + (lane & 15), col0 + (lane >> 4) * 8));
}

// Shared memory of one block, in 128-byte aligned regions (spec.py's shared_bytes mirrors it).
template <int D>
struct Plan {
    using T = Tile<D>;
    static constexpr int s_ld = BLOCK_N + 4;  // floats per S row (materialised path)
    static constexpr int p_ld = BLOCK_N + 8;  // halves per P row (materialised, tensor-core P V)
    static constexpr int o_ld = D + 4;        // floats per O row (WMMA P V keeps O in shared memory)
    static constexpr int q_bytes = align128(BLOCK_M * T::ld * 2);
    static constexpr int kv_bytes = align128(KV_ROWS * T::ld * 2);  // one K or V stage
    // fused path with KV_SPLIT, CLUSTER or GRID_SPLIT > 1: the partial results of the splits of the block's
    // rows (KV_SPLIT * CLUSTER of them): SplitMerge's records, O and (max, max, sum, sum) a lane per 16 rows,
    // KV_SPLIT * CLUSTER * BLOCK_M * (D + 8) floats; or, with GRID_SPLIT, each warp split's O in rows padded
    // to D + 4 floats, then (max, sum) a row. Last, with CLUSTER > 1, SplitMerge's mbarriers (one per row group)
    static constexpr int merge_barrier_bytes = SOFTMAX == 1 && CLUSTER > 1 ? 128 : 0;
    static constexpr int merge_bytes = SOFTMAX == 1 && (KV_SPLIT > 1 || BLOCK_SPLIT > 1)
        ? align128(KV_SPLIT * CLUSTER * BLOCK_M * (D + 4) * 4) + align128(4 * KV_SPLIT * CLUSTER * BLOCK_M * 4) +
              merge_barrier_bytes
        : 0;
    static constexpr int s_bytes = SOFTMAX == 0 ? align128(BLOCK_M * s_ld * 4) : 0;
    static constexpr int p_bytes = SOFTMAX == 0 && PV != 0 ? align128(BLOCK_M * p_ld * 2) : 0;
    static constexpr int o_bytes = SOFTMAX == 0 && PV == 1 ? align128(BLOCK_M * o_ld * 4) : 0;
    static constexpr int stat_bytes = SOFTMAX == 0 ? align128(3 * BLOCK_M * 4) : 0;
    // K/V shared across a cluster or announced on mbarriers: full (K), full (V) and empty mbarriers of every
    // stage; K/V by TMA: full K and full V of every stage, then the Q tile's
    static constexpr int barrier_bytes = KV_SHARE > 1 || TMA_STAGES || (STAGE_WAIT == 1 && SOFTMAX == 1 && STAGES > 1) ? align128(3 * STAGES * 8) : 0;
    static constexpr int bytes = q_bytes + 2 * STAGES * kv_bytes + s_bytes + p_bytes + o_bytes + stat_bytes +
                                 barrier_bytes + merge_bytes;

    // SplitMerge's mbarriers (CLUSTER > 1): the last merge_barrier_bytes of the block's shared memory
    __device__ static uint64_t* merge_barriers(unsigned char* smem) {
        return reinterpret_cast<uint64_t*>(smem + bytes - merge_barrier_bytes);
    }
};

struct Problem {
    const half* __restrict__ K;
    const half* __restrict__ V;
    int S, causal, q0, kv_end;
    int rank;  // this block's place among the BLOCK_SPLIT sharing its rows: key tiles rank, rank + BLOCK_SPLIT, ...
    float logit_scale;
    float* workspace;   // GRID_SPLIT > 1: the partial rows of every block, BLOCK_M x (D + 2) floats each
    unsigned* tickets;  // GRID_SPLIT > 1: a counter per query block, taken by each of its blocks when done
};

// K/V shared by the KV_SHARE blocks of a cluster (mbarriers in _hopper.cuh): TMA copies
// (cp.async.bulk.tensor) multicast to every block of the cluster.
// The box of a 3-d tensor map at (column 0, row, head) into the same shared-memory offset of every
// block of `mask`, each block's barrier at `bar`'s offset counting the bytes
__device__ __forceinline__ void tensor_copy_multicast(void* dst, const TensorMap* map, int row, int head, uint64_t* bar,
                                                      unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(smem_address(dst)), "l"(reinterpret_cast<uint64_t>(map)),
                 "r"(0), "r"(row), "r"(head), "r"(smem_address(bar)), "h"(mask) : "memory");
}

// the box of a 3-d tensor map at (column 0, row, head) into this block's shared memory, counted on `bar`
__device__ __forceinline__ void tensor_copy(void* dst, const TensorMap* map, int row, int head, uint64_t* bar) {
    tma_load_3d(dst, map, 0, row, head, bar);
}
