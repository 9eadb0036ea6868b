// FlashCore, fused path: the Q tile and the K/V stages brought in by TMA (TMA_STAGES: TMA_STAGES_D64,
// the D = 64 kernel), and the main loop over them, with or without Q K^T of the next tile beside the
// softmax of the current one (OVERLAP). Part of the source flashcore.cu; the family concatenates the parts.

#if SOFTMAX == 1 && TMA_STAGES_D64
// Thread 0 brings the Q tile and each stage's K and V in with one box copy each (3-d tensor maps the
// launcher encodes, boxes of BLOCK_M and KV_ROWS rows; rows past S arrive as zeros), counted in bytes
// on mbarriers on which every thread waits: no cp.async group, no block barrier before a tile. The Q
// tile and the first stage go out first thing, before the block reads any parameter (the first read
// of the launch's parameters is an L2 round trip of about 500 cycles on the H100). The block alone has
// its query rows (no cluster or grid split: block x is its query block, tile t starts at key
// t * KV_ROWS).
template <int D>
struct TmaStages {
    static constexpr int kv_tile = Plan<D>::kv_bytes / 2;  // halves between consecutive K (or V) buffers
    static constexpr unsigned stage_bytes = KV_ROWS * D * 2, q_bytes = BLOCK_M * D * 2;
    uint64_t* full_k;  // Plan<D>'s barrier region: full K and full V of every stage, then the Q tile's
    uint64_t* full_v;
    uint64_t* q_full;
    half* Ks;
    half* Vs;
    const TensorMap* k_map;
    const TensorMap* v_map;

    __device__ TmaStages(unsigned char* smem, half* Qs, half* ks, half* vs, const TensorMap* q_map,
                         const TensorMap* k_tensor, const TensorMap* v_tensor)
        : full_k(reinterpret_cast<uint64_t*>(smem + Plan<D>::bytes - Plan<D>::merge_bytes - Plan<D>::barrier_bytes)),
          full_v(full_k + STAGES), q_full(full_v + STAGES), Ks(ks), Vs(vs), k_map(k_tensor), v_map(v_tensor) {
        if constexpr (TMA_STAGES) {
            if (threadIdx.x == 0) {
                if (LAYOUT == 2 && smem_address(smem) % 1024 != 0) __trap();  // the 128-byte swizzle's period
                barrier_init(q_full, 1);
                for (int b = 0; b < STAGES; ++b) {
                    barrier_init(full_k + b, 1);
                    barrier_init(full_v + b, 1);
                }
                barrier_init_fence();
                barrier_expect_bytes(q_full, q_bytes);
                tensor_copy(Qs, q_map, blockIdx.x * BLOCK_M, blockIdx.y, q_full);
                issue(0);
            }
        }
    }

    // thread 0: K and V of tile t into stage t % STAGES
    __device__ void issue(int t) {
        const int b = t % STAGES;
        barrier_expect_bytes(full_k + b, stage_bytes);
        tensor_copy(Ks + b * kv_tile, k_map, t * KV_ROWS, blockIdx.y, full_k + b);
        barrier_expect_bytes(full_v + b, stage_bytes);
        tensor_copy(Vs + b * kv_tile, v_map, t * KV_ROWS, blockIdx.y, full_v + b);
    }

    // before tile t's stage is read: tile t + STAGES - 1 refills the stage tile t - 1 held, once every
    // warp is done with it and has fenced its reads (generic proxy) before the copy's writes (async proxy)
    __device__ void refill(int t, int tiles) {
        const int next = t + STAGES - 1;
        if (next >= tiles) return;
        if (t > 0) {
            fence_proxy_async();
            __syncthreads();
        }
        if (threadIdx.x == 0) issue(next);
    }

    __device__ const half* k_stage(int t) const { return Ks + t % STAGES * kv_tile; }
    __device__ const half* v_stage(int t) const { return Vs + t % STAGES * kv_tile; }
    __device__ void wait_k(int t) { barrier_wait(full_k + t % STAGES, (t / STAGES) & 1); }
    __device__ void wait_v(int t) { barrier_wait(full_v + t % STAGES, (t / STAGES) & 1); }
};

// The main loop over the TMA stages. A wait on an mbarrier is a loop, across which ptxas moves no
// instruction, so V is waited for between Q K^T and the softmax: after the softmax the wait would keep
// the exponentials from running beside P V's mma.sync.
template <int D>
__device__ void tma_stage_loop(Fused<D>& engine, TmaStages<D>& stages, unsigned char* smem, const half* Qs,
                               const Problem& p, int tiles) {
    if (threadIdx.x == 0)
        for (int t = 1; t < STAGES - 1 && t < tiles; ++t) stages.issue(t);
    engine.init(smem, Qs, stages.q_full);  // its block barrier also publishes the initialised mbarriers
    if (!Q_REGS) {
        __syncthreads();
        barrier_wait(stages.q_full, 0);
    }
#if OVERLAP
    // Q K^T of tile t + 1 in one stretch of code with the softmax and P V of tile t (FlashAttention-3's
    // overlap within a warp): the scores alternate between engine.s and engine.s_next, two tiles a trip
    auto step = [&](int t, auto& ready, auto& next) {  // false: tile t was the last
        if (t + 1 >= tiles) {
            stages.wait_v(t);
            engine.last(stages.v_stage(t), p, ready);
            return false;
        }
        stages.refill(t, tiles);
        stages.wait_k(t + 1);
        stages.wait_v(t);
        engine.overlapped(stages.k_stage(t + 1), stages.v_stage(t), p, ready, next);
        engine.mask_edge(next, p, (t + 1) * KV_ROWS);
        return true;
    };
    stages.wait_k(0);
    engine.scores(stages.k_stage(0), p, 0, engine.s);
#pragma unroll 1
    for (int t = 0; step(t, engine.s, engine.s_next) && step(t + 1, engine.s_next, engine.s); t += 2) {
    }
#else
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        stages.refill(t, tiles);
        stages.wait_k(t);
        engine.score(stages.k_stage(t), p, t * KV_ROWS, [&] { stages.wait_v(t); });
        engine.accumulate(stages.v_stage(t));
    }
#endif
}
#endif
