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
//                   distributed shared memory (SplitMerge: each block's warps store into the owners
//                   of O's column chunks, in whichever block of the cluster they are)
//   GRID_SPLIT      fused path, no cluster: this many blocks of the grid share the query rows, each
//                   takes every GRID_SPLIT-th K/V stage and leaves its merged partial rows (O, max,
//                   sum) in a global workspace; the last of them to finish (a ticket counter per query
//                   block) merges them all and writes O
//   STAGE_WAIT      fused path, STAGES > 1: 0 each thread waits for its copies and the block meets at
//                   a barrier per stage; 1 every stage is announced on mbarriers (cp.async.mbarrier.arrive)
//                   and each warp waits for it alone, marking it empty when done: warps run free
//   WGMMA_D64       D = 64 kernel, fused path: Q K^T and P V by wgmma, a warpgroup per key split over
//                   64 rows (the block's BLOCK_M and padding), K and V read from the stages
//   KV_SHARE_D64    D = 64 kernel, fused path, STAGES > 1: this many blocks of a thread-block cluster
//                   (consecutive query blocks of one head) share every K/V stage; each brings in
//                   1 / KV_SHARE of its rows with a TMA copy multicast to the whole cluster, on
//                   mbarriers (read as KV_SHARE inside code templated on D; 1 for D = 128)
//   TMA_STAGES_D64  D = 64 kernel, fused path: thread 0 brings the Q tile and every K/V stage in by TMA box
//                   copies on mbarriers (flashcore_tma.cuh; read as TMA_STAGES inside code templated on D)
//   OVERLAP         with TMA stages: each warp computes Q K^T of its next tile in one stretch of code
//                   with the softmax and P V of the current one


// The full K, full V and empty mbarriers of every stage, in Plan<D>'s barrier region; thread 0
// initialises them (full: `full_count` arrivals, empty: `empty_count`), the caller then syncs.
// `tma_swizzled`: the stages are written by TMA copies, whose 128-byte swizzle repeats every 1024
// bytes: a block whose shared memory is not so aligned traps
template <int D>
struct StageBarriers {
    uint64_t* full_k;
    uint64_t* full_v;
    uint64_t* empty;

    __device__ StageBarriers(unsigned char* smem, unsigned full_count, unsigned empty_count, bool tma_swizzled)
        : full_k(reinterpret_cast<uint64_t*>(smem + Plan<D>::bytes - Plan<D>::merge_bytes - Plan<D>::barrier_bytes)),
          full_v(full_k + STAGES), empty(full_v + STAGES) {
        if (threadIdx.x == 0) {
            if (tma_swizzled && smem_address(smem) % 1024 != 0) __trap();
            for (int b = 0; b < STAGES; ++b) {
                barrier_init(full_k + b, full_count);
                barrier_init(full_v + b, full_count);
                barrier_init(empty + b, empty_count);
            }
            barrier_init_fence();
        }
    }

    __device__ void wait_k(int t) { barrier_wait(full_k + t % STAGES, (t / STAGES) & 1); }
    __device__ void wait_v(int t) { barrier_wait(full_v + t % STAGES, (t / STAGES) & 1); }
};

// K/V stages shared by the KV_SHARE blocks of a cluster (the D = 64 kernel, KV_SHARE_D64 > 1):
// warp 0 of each block brings in its 1 / KV_SHARE of the rows of every stage with one TMA copy
// per tensor, multicast to the whole cluster, so a head's K and V cross from L2 once per cluster
// instead of once per block. The tensor maps (built by the launcher) view K and V as
// [B * H][S][D] with a box of rows_each x D; rows past S arrive as zeros, and the 128-byte
// swizzle of the TMA is the swizzled layout's (LAYOUT 2; LAYOUT 0 copies unswizzled).
// full_k / full_v count a stage's bytes in; empty collects one arrival from every warp of every
// block before the stage is refilled.
template <int D>
struct SharedStages : StageBarriers<D> {
    static constexpr int rows_each = KV_ROWS / KV_SHARE, kv_tile = Plan<D>::kv_bytes / 2;
    static constexpr unsigned stage_bytes = KV_ROWS * D * 2;  // what lands in each block, per tensor
    static constexpr unsigned short everyone = (1u << KV_SHARE) - 1;
    static_assert(KV_ROWS % (8 * KV_SHARE) == 0, "each block's rows of a stage are whole 8-row swizzle groups");
    using StageBarriers<D>::full_k, StageBarriers<D>::full_v, StageBarriers<D>::empty;
    half* Ks;
    half* Vs;
    int rank;

    __device__ SharedStages(unsigned char* smem, half* ks, half* vs)
        : StageBarriers<D>(smem, 1, KV_SHARE * WARPS, LAYOUT == 2), Ks(ks), Vs(vs), rank(cluster_rank()) {
        cluster_sync();  // every block's barriers exist before any block copies or arrives into it
    }

    // warp 0: this block's rows of tile t (keys from key0) into stage t % STAGES of every block
    __device__ void issue(int t, int key0, int head, const TensorMap* k_map, const TensorMap* v_map) {
        const int b = t % STAGES;
        if (t >= STAGES) barrier_wait(empty + b, (t / STAGES - 1) & 1);  // the cluster is done with tile t - STAGES
        if (threadIdx.x == 0) {
            const int first = rank * rows_each;
            barrier_expect_bytes(full_k + b, stage_bytes);
            barrier_expect_bytes(full_v + b, stage_bytes);
            tensor_copy_multicast(Ks + b * kv_tile + first * D, k_map, key0 + first, head, full_k + b, everyone);
            tensor_copy_multicast(Vs + b * kv_tile + first * D, v_map, key0 + first, head, full_v + b, everyone);
        }
    }

    // every warp, done with tile t: one arrival at each block of the cluster, if a later tile refills the stage.
    // The refill is a TMA write (async proxy) after this warp's ldmatrix reads (generic proxy): the fence
    // orders them, so that no read still in flight sees the next tile
    __device__ void release(int t, int tiles) {
        if (t + STAGES >= tiles) return;
        fence_proxy_async();
        __syncwarp();
        if (threadIdx.x % 32 < KV_SHARE) barrier_arrive_peer(empty + t % STAGES, threadIdx.x % 32);
    }
};

// The main loop over key tiles when the cluster shares the K/V stages
template <int D, typename Engine>
__device__ void shared_stage_loop(Engine& engine, unsigned char* smem, const half* Qs, half* Ks, half* Vs,
                                  const Problem& p, int tiles, int own_end, const TensorMap* k_map,
                                  const TensorMap* v_map) {
    constexpr int kv_tile = Plan<D>::kv_bytes / 2;
    SharedStages<D> shared(smem, Ks, Vs);
    const bool producer = threadIdx.x < 32;  // warp 0 brings in this block's rows of every stage
    for (int t = 0; t < STAGES - 1; ++t)
        if (producer && t < tiles) shared.issue(t, t * KV_ROWS, blockIdx.y, k_map, v_map);
    engine.init(smem, Qs);
    if (!Q_REGS) {
        cp_async_wait<0>();  // the Q group
        __syncthreads();
    }
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        const int next = t + STAGES - 1, kv0 = t * KV_ROWS;
        if (producer && next < tiles) shared.issue(next, next * KV_ROWS, blockIdx.y, k_map, v_map);
        const bool seen = kv0 < own_end;  // causal: later tiles are for the cluster's later query blocks
        shared.wait_k(t);
        if (seen) engine.score(Ks + (t % STAGES) * kv_tile, p, kv0);
        shared.wait_v(t);
        if (seen) engine.accumulate(Vs + (t % STAGES) * kv_tile);
        shared.release(t, tiles);
    }
}

#if STAGE_WAIT == 1 && STAGES > 1
// K/V stages announced on mbarriers (STAGE_WAIT 1): every thread's cp.async copies of a stage end
// in an arrival on the stage's full barrier (cp.async.mbarrier.arrive: when they have landed), so a
// warp waits for the stage alone instead of the whole block at a barrier, and marks it empty when
// done; warps run free.
template <int D>
struct AnnouncedStages : StageBarriers<D> {
    using StageBarriers<D>::full_k, StageBarriers<D>::full_v, StageBarriers<D>::empty;
    static constexpr int kv_tile = Plan<D>::kv_bytes / 2;

    __device__ explicit AnnouncedStages(unsigned char* smem) : StageBarriers<D>(smem, THREADS, WARPS, false) {
        __syncthreads();  // the barriers exist before any copy arrives on them
    }

    // this thread's copies of tile t (keys from key0) into stage t % STAGES, once every warp is done
    // with the tile it held; two cp.async groups as in the block-barrier loop (the Q wait counts them)
    __device__ void issue(int t, int key0, const Problem& p, half* Ks, half* Vs) {
        const int b = t % STAGES;
        if (t >= STAGES) barrier_wait(empty + b, (t / STAGES - 1) & 1);
        copy_rows_async<D, KV_ROWS>(Ks + b * kv_tile, p.K + (size_t)key0 * D, p.S - key0, p.K);
        cp_async_arrive(full_k + b);
        cp_async_commit();
        copy_rows_async<D, KV_ROWS>(Vs + b * kv_tile, p.V + (size_t)key0 * D, p.S - key0, p.V);
        cp_async_arrive(full_v + b);
        cp_async_commit();
    }

    // every warp, done with tile t: one arrival if a later tile refills the stage
    __device__ void release(int t, int tiles) {
        if (t + STAGES >= tiles) return;
        __syncwarp();
        if (threadIdx.x % 32 == 0) barrier_arrive(empty + t % STAGES);
    }
};

// the keys of this block's tile t start at first_key(t) (a cluster or grid split takes every
// BLOCK_SPLIT-th tile)
template <int D, typename Engine, typename FirstKey>
__device__ void announced_stage_loop(Engine& engine, unsigned char* smem, const half* Qs, half* Ks, half* Vs,
                                     const Problem& p, int tiles, FirstKey first_key) {
    constexpr int kv_tile = Plan<D>::kv_bytes / 2;
    AnnouncedStages<D> stages(smem);
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < tiles) {
            stages.issue(t, first_key(t), p, Ks, Vs);
        } else {
            cp_async_commit();
            cp_async_commit();
        }
    }
    engine.init(smem, Qs);  // with Q in registers it waits for the Q group
    if (!Q_REGS) {
        cp_async_wait<2 * (STAGES - 1)>();  // the Q group
        __syncthreads();
    }
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        const int next = t + STAGES - 1;
        if (next < tiles) stages.issue(next, first_key(next), p, Ks, Vs);
        stages.wait_k(t);
        engine.score(Ks + (t % STAGES) * kv_tile, p, first_key(t));
        stages.wait_v(t);
        engine.accumulate(Vs + (t % STAGES) * kv_tile);
        stages.release(t, tiles);
    }
}
#endif

template <int D>
__device__ void attention(const half* __restrict__ Q, const half* __restrict__ K, const half* __restrict__ V,
                          half* __restrict__ O, int S, int causal, float scale, const TensorMap* q_map,
                          const TensorMap* k_map, const TensorMap* v_map, float* workspace, unsigned* tickets) {
    using P_ = Plan<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    half* Qs = reinterpret_cast<half*>(smem);
    half* Ks = reinterpret_cast<half*>(smem + P_::q_bytes);
    half* Vs = reinterpret_cast<half*>(smem + P_::q_bytes + STAGES * P_::kv_bytes);
    constexpr int kv_tile = P_::kv_bytes / 2;  // halves between consecutive K (or V) buffers
#if TMA_STAGES_D64
    TmaStages<D> tma_stages(smem, Qs, Ks, Vs, q_map, k_map, v_map);  // its first copies go out now
#endif

#if SOFTMAX == 1 && CLUSTER > 1
    // SplitMerge's mbarriers, then this block's arrival on the cluster barrier its merge waits on
    if (threadIdx.x == 0) {
        for (int b = 0; b < P_::merge_barrier_bytes / 8; ++b) barrier_init(P_::merge_barriers(smem) + b, 1);
        barrier_init_fence();
    }
    cluster_arrive_relaxed();
#endif
    const size_t head = (size_t)blockIdx.y * S * D;
    Problem p;
    p.rank = CLUSTER > 1 ? cluster_rank() : blockIdx.x % GRID_SPLIT;
    p.q0 = blockIdx.x / BLOCK_SPLIT * BLOCK_M;
    p.workspace = workspace;
    p.tickets = tickets;
    p.S = S;
    p.causal = causal;
    p.K = K + head;
    p.V = V + head;
    // the keys this block reads: with shared stages, those the cluster's last query block needs
    const int reader_end = KV_SHARE > 1 ? (blockIdx.x / KV_SHARE + 1) * KV_SHARE * BLOCK_M : p.q0 + BLOCK_M;
    p.kv_end = causal ? min(S, reader_end) : S;
    const int own_end = p.q0 >= S ? 0 : causal ? min(S, p.q0 + BLOCK_M) : S;  // the keys its own rows see
    p.logit_scale = EXP2 ? scale * 1.4426950408889634f : scale;

#if STAGES > 1
    // the Q tile is the first cp.async group, so its latency overlaps the K/V prologue's
    if (!TMA_STAGES) {
        copy_rows_async<D, BLOCK_M>(Qs, Q + head + (size_t)p.q0 * D, S - p.q0, Q + head);
        cp_async_commit();
    }
#else
    load_rows<D>(Qs, Q + head + (size_t)p.q0 * D, min(BLOCK_M, S - p.q0), BLOCK_M);
#endif
#if SOFTMAX == 1
    Fused<D> engine;
#else
    Materialised<D> engine;
#endif
    // this block's stages: key tiles rank, rank + BLOCK_SPLIT, ... (all of them when it has its rows alone)
    const int all_tiles = (p.kv_end + KV_ROWS - 1) / KV_ROWS;
    const int tiles = all_tiles > p.rank ? (all_tiles - p.rank + BLOCK_SPLIT - 1) / BLOCK_SPLIT : 0;
    auto first_key = [&](int t) { return (p.rank + t * BLOCK_SPLIT) * KV_ROWS; };
    if constexpr (KV_SHARE > 1) {
        shared_stage_loop<D>(engine, smem, Qs, Ks, Vs, p, tiles, own_end, k_map, v_map);
        engine.finish(O + head, p, smem);
        cluster_sync();  // no block leaves while copies it issued may still be landing in the others
        return;
    }
#if STAGE_WAIT == 1 && STAGES > 1
    announced_stage_loop<D>(engine, smem, Qs, Ks, Vs, p, tiles, first_key);
    engine.finish(O + head, p, smem);
    return;
#endif
#if TMA_STAGES_D64
    if constexpr (TMA_STAGES) {
        tma_stage_loop<D>(engine, tma_stages, smem, Qs, p, tiles);
        engine.finish(O + head, p, smem);
        return;
    }
#endif
    // K and V of a stage are separate cp.async groups: Q K^T and the softmax run while V lands.
    // Tiles that wgmma reads (the async proxy) are fenced by each thread that wrote them (the generic
    // proxy: ordinary and cp.async stores) before the barrier that publishes them
    constexpr bool read_by_wgmma = D == 64 && WGMMA_D64;
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
        if (read_by_wgmma) fence_proxy_async();
        __syncthreads();
        engine.score(Ks, p, kv0);
        __syncthreads();
        engine.accumulate(Vs);
#else
        cp_async_wait<2 * STAGES - 3>();  // K of stage t has landed (its V and later stages may not have)
        if (read_by_wgmma) fence_proxy_async();
        __syncthreads();  // ... for every thread; and every warp is done with stage t - 1, whose buffers refill now
        const int next = t + STAGES - 1, buffer = next % STAGES;
        if (next < tiles) copy_rows_async<D, KV_ROWS>(Ks + buffer * kv_tile, p.K + (size_t)first_key(next) * D, S - first_key(next), p.K);
        cp_async_commit();
        if (next < tiles) copy_rows_async<D, KV_ROWS>(Vs + buffer * kv_tile, p.V + (size_t)first_key(next) * D, S - first_key(next), p.V);
        cp_async_commit();
        engine.score(Ks + (t % STAGES) * kv_tile, p, kv0);
        cp_async_wait<2 * STAGES - 2>();  // V of stage t has landed
        if (read_by_wgmma) fence_proxy_async();
        __syncthreads();
        engine.accumulate(Vs + (t % STAGES) * kv_tile);
#endif
    }
    engine.finish(O + head, p, smem);
}

// a kernel's cluster: CLUSTER blocks splitting the keys, or KV_SHARE blocks sharing the K/V stages
#if CLUSTER * KV_SHARE_D64 > 1
#define CLUSTER_D64 __cluster_dims__(CLUSTER * KV_SHARE_D64, 1, 1)
#else
#define CLUSTER_D64
#endif
#if CLUSTER > 1
#define CLUSTER_D128 __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_D128
#endif

// q_map, k_map and v_map: TMA descriptors of Q, K and V, read only by a kernel with TMA stages (q_map
// too) or shared K/V stages; workspace and tickets: read only with GRID_SPLIT > 1 (sizes in spec.py's
// grid_workspace)
extern "C" __global__ void CLUSTER_D64 __launch_bounds__(WARPS_D64 * 32)
flashcore_d64(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale,
              const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
              const __grid_constant__ TensorMap v_map, float* workspace, unsigned* tickets) {
    attention<64>(Q, K, V, O, S, causal, scale, &q_map, &k_map, &v_map, workspace, tickets);
}

extern "C" __global__ void CLUSTER_D128 __launch_bounds__(WARPS_D128 * 32)
flashcore_d128(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale,
               const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
               const __grid_constant__ TensorMap v_map, float* workspace, unsigned* tickets) {
    attention<128>(Q, K, V, O, S, causal, scale, &q_map, &k_map, &v_map, workspace, tickets);
}

// what Plan<D> carves out, read back by the family's load() to check spec.py agrees
extern "C" __constant__ int flashcore_shared_bytes[2] = {Plan<64>::bytes, Plan<128>::bytes};
