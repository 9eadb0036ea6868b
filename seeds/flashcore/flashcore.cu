// FlashCore: O = softmax(Q K^T * scale) V for fp16 Q, K, V laid out [B, H, S, D], fp32 softmax
// and accumulation, fp16 output, D in {64, 128}, causal or not, any S (tails masked).
//
// One block computes BLOCK_M query rows of one (batch, head); it walks the keys in tiles of
// BLOCK_N with the online-softmax rescaling of FlashAttention, so memory stays O(tile).
// The family compiles one translation unit: flashcore_parts.cuh (layouts, loads, ldmatrix / mma
// wrappers, the shared-memory plan), flashcore_materialised.cuh, flashcore_fused.cuh, then this file.
//
// Knobs (macros):
//   BLOCK_M         query rows per block
//   BLOCK_N_D64, BLOCK_N_D128, WARPS_D64, WARPS_D128
//                   key/value rows per tile and warps per block of each head dimension's kernel
//                   (read as BLOCK_N and WARPS inside code templated on D)
//   QK, PV          how S = Q K^T and O += P V are computed: 0 scalar FMA, 1 WMMA 16x16x16,
//                   2 mma.sync m16n8k16 with ldmatrix
//   SOFTMAX         0: S/P tile materialised in shared memory, 1: fused online softmax in registers
//                   (needs QK = PV = 2; each warp owns BLOCK_M / WARPS query rows)
//   REDUCE          materialised softmax's row max / sum: 0 one thread per row, 1 warp shuffles
//   EXP2            0: expf(s * scale)   1: exp2f with log2(e) folded into the scale
//   LAYOUT          Q/K/V rows in shared memory: 0 plain, 1 padded by 16 bytes, 2 XOR-swizzled
//   STAGES          1: plain 16-byte loads, 2 or 3: cp.async pipeline of that many K/V tiles
//   Q_REGS          fused path: Q fragments loaded once into registers
//   KV_SPLIT        fused path: this many warps share each query row, each takes one BLOCK_N slice
//                   of every K/V stage; their partial results are merged at the end
//   CLUSTER         fused path: this many blocks of a thread-block cluster share the query rows,
//                   each takes every CLUSTER-th K/V stage; the partial results are merged through
//                   distributed shared memory, each block writing BLOCK_M / CLUSTER rows of O


template <int D>
__device__ void attention(const half* __restrict__ Q, const half* __restrict__ K, const half* __restrict__ V,
                          half* __restrict__ O, int S, int causal, float scale) {
    using P_ = Plan<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    half* Qs = reinterpret_cast<half*>(smem);
    half* Ks = reinterpret_cast<half*>(smem + P_::q_bytes);
    half* Vs = reinterpret_cast<half*>(smem + P_::q_bytes + STAGES * P_::kv_bytes);
    constexpr int kv_tile = P_::kv_bytes / 2;  // halves between consecutive K (or V) buffers

    const size_t head = (size_t)blockIdx.y * S * D;
    Problem p;
    p.rank = CLUSTER > 1 ? cluster_rank() : 0;
    p.q0 = blockIdx.x / CLUSTER * BLOCK_M;
    p.S = S;
    p.causal = causal;
    p.K = K + head;
    p.V = V + head;
    p.kv_end = causal ? min(S, p.q0 + BLOCK_M) : S;
    p.logit_scale = EXP2 ? scale * 1.4426950408889634f : scale;

#if STAGES > 1
    // the Q tile is the first cp.async group, so its latency overlaps the K/V prologue's
    copy_rows_async<D, BLOCK_M>(Qs, Q + head + (size_t)p.q0 * D, S - p.q0, Q + head);
    cp_async_commit();
#else
    load_rows<D>(Qs, Q + head + (size_t)p.q0 * D, min(BLOCK_M, S - p.q0), BLOCK_M);
#endif
#if SOFTMAX == 1
    Fused<D> engine;
#else
    Materialised<D> engine;
#endif
    // this block's stages: key tiles rank, rank + CLUSTER, ... (all of them without a cluster)
    const int all_tiles = (p.kv_end + KV_ROWS - 1) / KV_ROWS;
    const int tiles = all_tiles > p.rank ? (all_tiles - p.rank + CLUSTER - 1) / CLUSTER : 0;
    auto first_key = [&](int t) { return (p.rank + t * CLUSTER) * KV_ROWS; };
    // K and V of a stage are separate cp.async groups: Q K^T and the softmax run while V lands
#if STAGES > 1
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < tiles) copy_rows_async<D, KV_ROWS>(Ks + t * kv_tile, p.K + (size_t)first_key(t) * D, S - first_key(t), p.K);
        cp_async_commit();
        if (t < tiles) copy_rows_async<D, KV_ROWS>(Vs + t * kv_tile, p.V + (size_t)first_key(t) * D, S - first_key(t), p.V);
        cp_async_commit();
    }
#endif
    engine.init(smem, Qs);  // with Q in registers it waits for the Q group (the K/V stages stay in flight)
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        const int kv0 = first_key(t);
#if STAGES == 1
        __syncthreads();  // everyone is done with the previous tile
        load_rows<D>(Ks, p.K + (size_t)kv0 * D, min(KV_ROWS, S - kv0), KV_ROWS);
        load_rows<D>(Vs, p.V + (size_t)kv0 * D, min(KV_ROWS, S - kv0), KV_ROWS);
        __syncthreads();
        engine.score(Ks, p, kv0);
        __syncthreads();
        engine.accumulate(Vs);
#else
        cp_async_wait<2 * STAGES - 3>();  // K of stage t has landed (its V and later stages may not have)
        __syncthreads();  // ... for every thread; and every warp is done with stage t - 1, whose buffers refill now
        const int next = t + STAGES - 1, buffer = next % STAGES;
        if (next < tiles) copy_rows_async<D, KV_ROWS>(Ks + buffer * kv_tile, p.K + (size_t)first_key(next) * D, S - first_key(next), p.K);
        cp_async_commit();
        if (next < tiles) copy_rows_async<D, KV_ROWS>(Vs + buffer * kv_tile, p.V + (size_t)first_key(next) * D, S - first_key(next), p.V);
        cp_async_commit();
        engine.score(Ks + (t % STAGES) * kv_tile, p, kv0);
        cp_async_wait<2 * STAGES - 2>();  // V of stage t has landed
        __syncthreads();
        engine.accumulate(Vs + (t % STAGES) * kv_tile);
#endif
    }
    engine.finish(O + head, p, smem);
}

#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(WARPS_D64 * 32)
flashcore_d64(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale) {
    attention<64>(Q, K, V, O, S, causal, scale);
}

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(WARPS_D128 * 32)
flashcore_d128(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale) {
    attention<128>(Q, K, V, O, S, causal, scale);
}

// what Plan<D> carves out, read back by the family's load() to check spec.py agrees
extern "C" __constant__ int flashcore_shared_bytes[2] = {Plan<64>::bytes, Plan<128>::bytes};
