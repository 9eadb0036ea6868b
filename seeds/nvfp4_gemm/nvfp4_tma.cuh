// nvfp4_gemm (see nvfp4_gemm.cu), TMA_LOADS: a stage's fp16 tile of a's copy (two 64-column boxes,
// 128-byte swizzled, as wgmma reads them) and b's packed rows (one box, rows unpadded) come in by TMA,
// issued by thread 0 and counted on the stage's mbarrier; b's scales still by cp.async, 4 bytes a
// thread. K order: each thread of a quad owns a run of BLOCK_K / 4 consecutive values of a row (one
// 16- or 8-byte load, conflict-free on 64-byte rows, and half the scales of the span order); a's
// prepass writes its copy in the same order.
#if TMA_LOADS
constexpr int RUN_WORDS = BLOCK_K / 32;  // words (8 values) of a thread's run; RUN_WORDS / 2 scales (1 if 2 words)
// where the run order puts pair c (two values) of word w of run t in a K tile of a's fp16 copy: the four
// runs' pairs c of word w make 16-byte chunk run_chunk(w, c) of the row (a's producer writes it whole),
// run t's pair at columns run_column(w, c, t) and + 1 (a's prepass writes them so)
__host__ __device__ constexpr int run_chunk(int w, int c) { return 4 * w + c; }
__host__ __device__ constexpr int run_column(int w, int c, int t) { return 8 * run_chunk(w, c) + 2 * t; }

// the e4m3 scales of a run times 2^7, each in both halves of an fp16 pair (scale_factor's form)
__device__ __forceinline__ void run_factors(const unsigned char* scales, uint32_t (&factor)[RUN_WORDS / 2]) {
    if constexpr (RUN_WORDS == 4) {
        uint32_t pair;  // {first scale, second} in the low and high halves
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(*reinterpret_cast<const unsigned short*>(scales)));
        pair = mul_half2(pair, 0x58005800u);
        factor[0] = __byte_perm(pair, 0, 0x1010);
        factor[1] = __byte_perm(pair, 0, 0x3232);
    } else {
        factor[0] = scale_factor(scales[0]);
    }
}

// WORDS words of a row's run for this thread from word `first` (words w = 0 .. RUN_WORDS - 1 of a run:
// values BLOCK_K / 4 * t + 8 w .. + 7 of the K tile), dequantised: out[w] is dequantize8's four pairs of
// word first + w
template <int WORDS>
__device__ __forceinline__ void run_pairs(const unsigned char* values, const unsigned char* scales, int row, int first,
                                          uint32_t (&out)[WORDS][4]) {
    const int t = threadIdx.x % 4;
    const unsigned char* from = values + row * ROW_BYTES + t * (RUN_WORDS * 4) + first * 4;
    uint32_t words[WORDS], factor[(WORDS + 1) / 2];
    if constexpr (WORDS == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(from);
        words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else if constexpr (WORDS == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(from);
        words[0] = v.x, words[1] = v.y;
    } else {
        words[0] = *reinterpret_cast<const uint32_t*>(from);
    }
    if constexpr (WORDS == 4)
        run_factors(scales + row * SCALES + t * (RUN_WORDS / 2) + first / 2, factor);
    else
        factor[0] = scale_factor(scales[row * SCALES + t * (RUN_WORDS / 2) + first / 2]);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) dequantize8(words[w], factor[w / 2], out[w]);
}

// the warp's A fragments of one stage in the run order: k16 step j = 2 w + q takes word w's pairs 2q
// (slots 2t, 2t + 1) and 2q + 1 (slots 2t + 8, 2t + 9), rows g and g + 8 of its 16 columns of c; with
// two warpgroups to a K tile, warpgroup k_half takes words k_half * RUN_WORDS / 2 .. (its half of the steps)
__device__ __forceinline__ void load_run_fragments(const unsigned char* stage, int warp_row, uint32_t (&a)[WG_STEPS][4],
                                                   int k_half) {
    constexpr int WORDS = RUN_WORDS / WARPGROUP_K_SPLIT;
    const unsigned char* values = stage + A_BYTES;
    const unsigned char* scales = stage + A_BYTES + B_BYTES;
    const int g = threadIdx.x % 32 / 4;
    uint32_t top[WORDS][4], bottom[WORDS][4];
    run_pairs(values, scales, warp_row + g, k_half * WORDS, top);
    run_pairs(values, scales, warp_row + g + 8, k_half * WORDS, bottom);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) pairs_to_fragments(top[w], bottom[w], reinterpret_cast<uint32_t(&)[2][4]>(a[2 * w]));
}

// the warpgroup's WG_STEPS k16 steps of a stage into d (asynchronous: committed, not waited for); `first`:
// the descriptor of its first step's slice, whose address field (16-byte units) is stepped to the others';
// `fresh`: the first step overwrites d
__device__ __forceinline__ void multiply_steps(float (&d)[MT][NT][4], const uint32_t (&a)[WG_STEPS][4], uint64_t first,
                                               bool fresh) {
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < WG_STEPS; ++j)
        wgmma_rs(reinterpret_cast<float(&)[NT * 4]>(d[0]), a[j], first + step_offset(j) / 16, !(fresh && j == 0));
    wgmma_commit();
}

template <int N>
struct Constant {
    static constexpr int value = N;
};

// f(Constant<0>{}), ..., f(Constant<COUNT - 1>{}): a loop unrolled with its index a compile-time constant
template <int COUNT, int J = 0, typename F>
__device__ __forceinline__ void unroll_constants(F&& f) {
    if constexpr (J < COUNT) {
        f(Constant<J>{});
        unroll_constants<COUNT, J + 1>(f);
    }
}

// The stages' mbarriers (in shared memory after the stages) and thread 0's boxes of a K tile: a's fp16
// rows m0 .. m0 + BLOCK_M - 1 (3-d map [L][M][K] halves) and b's packed rows n0 .. n0 + BLOCK_N - 1
// (3-d map [L][N][K / 2] bytes); rows past M or N land as zeros. A stage's "full" barrier completes
// when its boxes have landed (and with STAGE_BARRIERS every thread's scale copies: no block barrier
// between tiles); its "empty" one (STAGE_BARRIERS) when every thread is done with it.
struct TmaStages {
    unsigned char* raw;
    uint64_t* full;  // STAGES full barriers, then (STAGE_BARRIERS) STAGES empty ones
    const TensorMap *a_map, *b_map;
    int m0, n0, batch, begin;

    // K tile kt sits in stage slot (kt - begin) % STAGES; its barriers' phase flips every STAGES tiles.
    // The *_in forms take the slot (a compile-time constant in an unrolled loop) and the phase.
    __device__ int slot(int kt) const { return (kt - begin) % STAGES; }
    __device__ unsigned phase(int kt) const { return (kt - begin) / STAGES & 1; }
    __device__ uint64_t* full_in(int s) const { return full + s; }
    __device__ uint64_t* empty_in(int s) const { return full + STAGES + s; }
    __device__ unsigned char* stage_in(int s) const { return raw + s * STAGE_BYTES; }

    // thread 0, before any copy: the barriers (published to the block by a later __syncthreads)
    __device__ void init() const {
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(full + s, STAGE_BARRIERS ? 1 + THREADS + PRODUCER_THREADS : 1);
            if (STAGE_BARRIERS) barrier_init(full + STAGES + s, THREADS);
        }
        barrier_init_fence();
    }
    // every thread, after its scale copies of the tile in slot s: they count as its arrival on the full barrier
    __device__ void scales_arrive_in(int s) const {
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(full_in(s))) : "memory");
    }
    __device__ void scales_arrive(int kt) const { scales_arrive_in(slot(kt)); }
    // every thread: done with the stage in slot s (its reads, and its warpgroup's wgmmas)
    __device__ void release_in(int s) const { barrier_arrive(empty_in(s)); }
    // every thread: every thread is done with the stage in slot s, which may be refilled
    __device__ void wait_empty_in(int s, unsigned parity) const { barrier_wait(empty_in(s), parity); }
    // thread 0: the tile's bytes are announced with b's box, before a's boxes are requested (A_PRODUCER:
    // a's tile is written by the producer warpgroup, whose threads arrive on the full barrier instead)
    __device__ void issue_b_in(int s, int kt) const {
        barrier_expect_bytes(full_in(s), (A_PRODUCER ? 0 : A_HALVES) + BLOCK_N * ROW_BYTES);
        tma_load_3d(stage_in(s) + A_BYTES, b_map, kt * (BLOCK_K / 2), n0, batch, full_in(s));
    }
    __device__ void issue_a_in(int s, int kt) const {
        if (A_PRODUCER) return;
#pragma unroll
        for (int atom = 0; atom < BLOCK_K / 64; ++atom)
            tma_load_3d(stage_in(s) + atom * BLOCK_M * 128, a_map, kt * BLOCK_K + atom * 64, m0, batch, full_in(s));
    }
    __device__ void issue_b(int kt) const { issue_b_in(slot(kt), kt); }
    __device__ void issue_a(int kt) const { issue_a_in(slot(kt), kt); }
    // every thread: the tile in slot s has landed (only issued tiles complete)
    __device__ void wait_in(int s, unsigned parity) const { barrier_wait(full_in(s), parity); }
    __device__ void wait(int kt) const { wait_in(slot(kt), phase(kt)); }
};
#endif

#if A_PRODUCER
// A_PRODUCER: the block's last warpgroup turns a's packed rows of each K tile into the stage's fp16 tile,
// in the layout a's TMA boxes of the prepass's copy would give it (the run order, 128-byte swizzled),
// instead of a first kernel writing that copy for every block to stream in. A thread owns one row
// (two threads a row of a 64-row tile, each half of every run's words): it reads the row's packed
// values and scales of a tile straight from global memory (the next tile's while it writes this
// one), and writes whole 16-byte chunks: chunk run_chunk(w, c) of a row holds pair c of word w of its
// four runs t = 0..3. Rows past M are zeros.
struct AProducer {
    static constexpr int PER_ROW = PRODUCER_THREADS / BLOCK_M, WORDS = RUN_WORDS / PER_ROW;  // words of a run
    static_assert(PER_ROW * BLOCK_M == PRODUCER_THREADS && WORDS >= 1, "a row's runs split evenly");
    struct Packed {
        uint32_t words[4][WORDS];     // [run t][its word part * WORDS + i]
        uint32_t scales[SCALES / 4];  // the row's scales of the tile, 4 a word
    };
    const unsigned char* values;  // K tile 0 of this thread's row, its first word of run 0
    const unsigned char* scales;  // the row's first 4 scales of K tile 0
    int row, scale_step, group_step;
    bool valid;

    // which part of each run's words this thread dequantises (a constant with one thread a row, so that
    // every index into a Packed folds and it stays in registers)
    __device__ __forceinline__ static int part() { return PER_ROW == 1 ? 0 : (threadIdx.x - THREADS) / BLOCK_M; }

    __device__ AProducer(const unsigned char* a, const unsigned char* sfa, int M, int K, int blocked, int m0)
        : row((threadIdx.x - THREADS) % BLOCK_M), scale_step(tile_scale_step(blocked)),
          group_step(scale_group_step(blocked)), valid(m0 + row < M) {
        const int r = valid ? m0 + row : 0;
        values = a + (size_t)r * (K / 2) + part() * WORDS * 4;
        scales = sfa + (blocked ? blocked_offset(r, 0, K / 16) : (size_t)r * (K / 16));
    }

    __device__ __forceinline__ void fetch(Packed& p, int kt) const {
        const unsigned char* from = values + kt * (BLOCK_K / 2);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const unsigned char* run = from + t * RUN_WORDS * 4;
            if constexpr (WORDS == 4) {
                const uint4 v = valid ? __ldg(reinterpret_cast<const uint4*>(run)) : make_uint4(0, 0, 0, 0);
                p.words[t][0] = v.x, p.words[t][1] = v.y, p.words[t][2] = v.z, p.words[t][3] = v.w;
            } else if constexpr (WORDS == 2) {
                const uint2 v = valid ? __ldg(reinterpret_cast<const uint2*>(run)) : make_uint2(0, 0);
                p.words[t][0] = v.x, p.words[t][1] = v.y;
            } else {
                p.words[t][0] = valid ? __ldg(reinterpret_cast<const uint32_t*>(run)) : 0u;
            }
        }
#pragma unroll
        for (int g = 0; g < SCALES / 4; ++g)
            p.scales[g] = valid ? __ldg(reinterpret_cast<const uint32_t*>(scales + kt * scale_step + g * group_step)) : 0u;
    }

    // the scale of run t's word w (scale t * RUN_WORDS / 2 + w / 2 of the row's tile), times 2^7, twice;
    // a run's RUN_WORDS / 2 scales lie in one word of p.scales
    __device__ __forceinline__ static uint32_t factor(const Packed& p, int t, int w) {
        const int i = t * (RUN_WORDS / 2) + w / 2;
        return scale_factor(p.scales[t * (RUN_WORDS / 2) / 4] >> (8 * (i % 4)) & 0xFF);
    }

    __device__ __forceinline__ void store(const Packed& p, unsigned char* tile) const {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) {
            const int w = part() * WORDS + i;
            uint32_t pairs[4][4];  // [run t][pair c]
#pragma unroll
            for (int t = 0; t < 4; ++t) dequantize8(p.words[t][i], factor(p, t, w), pairs[t]);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const uint32_t chunk[4] = {pairs[0][c], pairs[1][c], pairs[2][c], pairs[3][c]};
                store16(tile + chunk_offset(row, run_chunk(w, c), BLOCK_M), chunk);
            }
        }
    }
};

// the producer warpgroup's loop: tile kt goes into its stage once the consumers have released the
// tile STAGES before it; its writes are fenced for wgmma (the async proxy), then every producer thread
// arrives on the stage's full barrier. Two tiles' packed rows are in flight in registers: tile kt + 2's
// loads are issued once tile kt is written (two tiles a turn, so each set's index is a constant).
__device__ __forceinline__ void produce_a(const TmaStages& tma, const AProducer& producer, int begin, int end) {
    AProducer::Packed sets[2];
    auto write = [&](const AProducer::Packed& p, int kt) {
        const int s = tma.slot(kt), passes = (kt - begin) / STAGES;
        if (passes > 0) tma.wait_empty_in(s, (passes - 1) & 1);
        producer.store(p, tma.stage_in(s));
        fence_proxy_async();
        barrier_arrive(tma.full_in(s));
    };
    if (begin < end) producer.fetch(sets[0], begin);
    if (begin + 1 < end) producer.fetch(sets[1], begin + 1);
    for (int kt = begin; kt < end; kt += 2) {
        write(sets[0], kt);
        if (kt + 2 < end) producer.fetch(sets[0], kt + 2);
        if (kt + 1 < end) {
            write(sets[1], kt + 1);
            if (kt + 3 < end) producer.fetch(sets[1], kt + 3);
        }
    }
}
#endif

#if DEQUANT == 0 && MMA == 2
// the swapped wgmma's A fragments of a stage, in the stage's K order
__device__ __forceinline__ void load_fragments(const unsigned char* stage, int warp_row, uint32_t (&a)[WG_STEPS][4],
                                               int k_half = 0) {
#if TMA_LOADS
    load_run_fragments(stage, warp_row, a, k_half);
#else
    load_b_fragments(stage, warp_row, a);
#endif
}
#endif

#if TMA_LOADS && STAGE_BARRIERS
// TMA stages handed over by mbarriers alone, two K tiles' wgmmas in flight: no block barrier, so
// the warpgroups, which share the tensor cores, need not keep in step. After tile kt - 1's
// wgmmas are done a thread releases its stage; tile kt + STAGES - 2 goes into tile kt - 2's stage
// once every thread has released it (a tile later: rarely waited for); each thread's scale copies
// arrive on the tile's full barrier with thread 0's boxes. The loop takes UNROLL tiles a turn, a
// multiple of STAGES and of the two fragment sets, so each tile's stage slot and fragment set are
// compile-time constants (addresses and wgmma descriptors are immediates; phases are parities).
__device__ __forceinline__ void tma_k_loop(const TmaStages& tma, const TileLoader<BLOCK_N>& b_loader, float (&acc)[MT][NT][4],
                                           const unsigned char* raw, int warp_row, int k_half, int begin, int end) {
    constexpr int UNROLL = STAGES % 2 ? 2 * STAGES : STAGES;
    using Fragments = uint32_t[WG_STEPS][4];
    Fragments fragments[2];
    const uint64_t a_descriptor = descriptor(raw) + step_offset(k_half * WG_STEPS) / 16;  // slot 0, this half's steps
    if (begin < end) {  // tile begin's fragments (slot 0, phase 0)
        tma.wait_in(0, 0);
        load_fragments(raw, warp_row, fragments[0], k_half);
    }
    for (int turn = begin; turn < end; turn += UNROLL) {
        const int cycles = (turn - begin) / STAGES;  // passes over the slots before this turn
        unroll_constants<UNROLL>([&](auto j) {
            constexpr int J = decltype(j)::value, SLOT = J % STAGES, NEXT = (J + STAGES - 2) % STAGES;
            // the parity of tile turn + t's barrier phases (t >= -UNROLL, a constant once inlined)
            auto parity = [&](int t) { return unsigned(cycles + (t + UNROLL) / STAGES - UNROLL / STAGES) & 1; };
            const int kt = turn + J;
            if (kt >= end) return;
            Fragments &use = fragments[J % 2], &fill = fragments[1 - J % 2];
            multiply_steps(acc, use, a_descriptor + SLOT * STAGE_BYTES / 16);
            wgmma_wait<1>();  // tile kt - 1's wgmmas are done: `fill` and its stage are free
            pin_registers(reinterpret_cast<uint32_t(&)[WG_STEPS * 4]>(fill));
            if (kt > begin) tma.release_in((SLOT + STAGES - 1) % STAGES);
            if (const int next = kt + STAGES - 2; next < end) {  // into tile kt - 2's slot
                if (next - STAGES >= begin) tma.wait_empty_in(NEXT, parity(J - 2));
                if (threadIdx.x == 0) {
                    tma.issue_b_in(NEXT, next);
                    tma.issue_a_in(NEXT, next);
                }
                b_loader.load_scales(tma.stage_in(NEXT) + A_BYTES + B_BYTES, next);
                tma.scales_arrive_in(NEXT);
            }
            if (kt + 1 < end) {
                tma.wait_in((SLOT + 1) % STAGES, parity(J + 1));
                load_fragments(tma.stage_in((SLOT + 1) % STAGES), warp_row, fill, k_half);
            }
        });
    }
    wgmma_wait<0>();
    pin_registers(reinterpret_cast<uint32_t(&)[2 * WG_STEPS * 4]>(fragments));
    pin_registers(reinterpret_cast<float(&)[MT * NT * 4]>(acc));
}
#endif
