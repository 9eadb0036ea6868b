// FlashDecode: attention of a few query tokens over a long K/V cache, split across the sequence
// (FlashDecoding): O = softmax(Q K^T / sqrt(D)) V with Q [B, H, Q, D], K and V [B, H_kv, KV, D], H a multiple
// of H_kv (grouped K/V heads), fp16 or bf16, fp32 softmax and accumulation.
//
// The work is bound by reading K and V once. A block takes one K/V head of one sequence, the rows of up to 16
// (query head, query token) pairs that share it (a row tile: the G = H / H_kv query heads times the Q tokens,
// in tiles of 16), and one split of the sequence. Its WARPS warps each stream their own tiles of KEYS_PER_WARP
// keys through shared memory (cp.async, STAGES deep, no block-wide barrier while streaming) and keep their own
// online softmax; S = Q K^T and O += P V run on mma.sync m16n8k16 (rows padded to 16). At the end the warps'
// states are merged in shared memory; with one split the block writes O, else its normalised partial O and
// log2-sum-exp go to a workspace that the combine kernel (COMBINE 0; COMBINE 1: launched as a programmatic
// dependent, so that its launch overlaps the split kernel's end) or the split's last block to finish (COMBINE 2:
// a ticket per row tile) reduces into O.
//
// Knobs (macros): WARPS, KEYS_PER_WARP, STAGES, COMBINE. The split count is chosen at launch (runtime.py).
// Causal (Problem::causal): 1, PyTorch SDPA's is_causal, whose mask is aligned to the top left: query token i sees
// keys 0..i; 2, aligned to the lower right (the queries are the last Q of the KV positions, as in chunked prefill):
// query token i sees keys 0..KV - Q + i.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef WARPS
#define WARPS 4
#endif
#ifndef KEYS_PER_WARP
#define KEYS_PER_WARP 32
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef COMBINE
#define COMBINE 0
#endif

#define ROWS 16  // rows of a tile: the m of mma.m16n8k16
#define PAD 8    // halves after each shared row of K and V: ldmatrix and 32-bit loads without bank conflicts

static_assert(KEYS_PER_WARP % 16 == 0, "KEYS_PER_WARP is a multiple of 16");
static_assert(STAGES >= 2, "STAGES is at least 2");

template <int D>
struct Plan {
    static constexpr int PITCH = D + PAD;                            // halves per shared row
    static constexpr int TILE = KEYS_PER_WARP * PITCH;              // halves of one K (or V) tile
    static constexpr int WARP_HALVES = STAGES * 2 * TILE;           // a warp's K and V stages
    static constexpr int O_PITCH = D + 4;                           // floats per row of a warp's merged state
    static constexpr int STATE_FLOATS = 2 * ROWS + ROWS * O_PITCH;  // m, l and O of a warp, over its stages
    static_assert(STATE_FLOATS * 4 <= WARP_HALVES * 2, "a warp's state fits in its stages");
    static constexpr int SHARED_BYTES = WARPS * WARP_HALVES * 2 + 16;
};

// the dynamic shared memory each head dimension's kernel needs; runtime.py checks its own figure against it
extern "C" __device__ const int flashdecode_shared_bytes[2] = {Plan<64>::SHARED_BYTES, Plan<128>::SHARED_BYTES};

template <typename T> __device__ __forceinline__ uint32_t pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack<half>(float lo, float hi) {
    half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ half from_float<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

// 16 bytes from global to shared; zeros where ``valid`` is false (nothing is read then)
__device__ __forceinline__ void copy16(void* shared, const void* global, bool valid) {
    uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(address), "l"(global), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_groups() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

struct Problem {
    int batch, heads, group, queries, keys, causal, split_keys, splits, row_tiles;  // causal: 0, 1 or 2 (above)
    float scale_log2;  // log2(e) / sqrt(D)
};

// a warp's tile of KEYS_PER_WARP keys of K and V, from key ``first`` on (zeros past ``end``), into its stage
template <int D, typename T>
__device__ __forceinline__ void load_tile(T* k_stage, T* v_stage, const T* k, const T* v, int first, int end, int lane) {
    constexpr int CHUNKS = D / 8;  // 16-byte pieces of a row
    #pragma unroll
    for (int i = lane; i < KEYS_PER_WARP * CHUNKS; i += 32) {
        const int row = i / CHUNKS, chunk = i % CHUNKS, key = first + row;
        const bool valid = key < end;
        const size_t offset = static_cast<size_t>(valid ? key : 0) * D + chunk * 8;
        copy16(k_stage + row * Plan<D>::PITCH + chunk * 8, k + offset, valid);
        copy16(v_stage + row * Plan<D>::PITCH + chunk * 8, v + offset, valid);
    }
}

// Row r of a row tile is (query head h_kv * group + r / queries, query token r % queries); it exists while
// r < group * queries.
template <int D, typename T>
__device__ __forceinline__ void decode_split(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                             T* __restrict__ o, float* __restrict__ part, float* __restrict__ lse,
                                             unsigned* __restrict__ tickets, const Problem p) {
    extern __shared__ __align__(16) unsigned char shared[];
    const int split = blockIdx.x, kv_head = blockIdx.y / p.row_tiles, tile = blockIdx.y % p.row_tiles, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int kv_heads = p.heads / p.group, rows = p.group * p.queries;
    T* k_stages = reinterpret_cast<T*>(shared) + warp * Plan<D>::WARP_HALVES;
    T* v_stages = k_stages + STAGES * Plan<D>::TILE;
    const size_t kv_offset = (static_cast<size_t>(b) * kv_heads + kv_head) * p.keys * D;
    const T* k_head = k + kv_offset;
    const T* v_head = v + kv_offset;
    const int begin = split * p.split_keys, end = min(p.keys, begin + p.split_keys);

    float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
    float acc[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    const int step = WARPS * KEYS_PER_WARP;
    const int causal_shift = p.causal == 2 ? p.keys - p.queries : 0;  // the lower-right mask's offset
    const int tiles = (end - begin + step - 1) / step;  // the same count for every warp; late tiles may be empty
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) load_tile<D>(k_stages + s * Plan<D>::TILE, v_stages + s * Plan<D>::TILE, k_head, v_head,
                                    begin + s * step + warp * KEYS_PER_WARP, end, lane);
        commit();
    }
    // this lane's two rows (g and g + 8) and their query tokens; their Q as mma A fragments, zero past the rows
    // (read while the first tiles are on their way)
    int row_query[2];
    uint32_t qa[D / 16][4];
    #pragma unroll
    for (int half_tile = 0; half_tile < 2; ++half_tile) {
        const int r = tile * ROWS + g + 8 * half_tile;
        row_query[half_tile] = r < rows ? r % p.queries : -1;
        const T* q_row = q + ((static_cast<size_t>(b) * p.heads + kv_head * p.group + r / p.queries) * p.queries
                              + r % p.queries) * D;
        #pragma unroll
        for (int j = 0; j < D / 16; ++j) {
            qa[j][half_tile] = r < rows ? *reinterpret_cast<const uint32_t*>(q_row + 16 * j + 2 * t) : 0u;
            qa[j][2 + half_tile] = r < rows ? *reinterpret_cast<const uint32_t*>(q_row + 16 * j + 8 + 2 * t) : 0u;
        }
    }

    for (int i = 0; i < tiles; ++i) {
        wait_groups<STAGES - 2>();
        __syncwarp();
        const int next = i + STAGES - 1;
        if (next < tiles) load_tile<D>(k_stages + (next % STAGES) * Plan<D>::TILE, v_stages + (next % STAGES) * Plan<D>::TILE,
                                       k_head, v_head, begin + next * step + warp * KEYS_PER_WARP, end, lane);
        commit();
        const int first = begin + i * step + warp * KEYS_PER_WARP;
        if (first < end) {
            const T* ks = k_stages + (i % STAGES) * Plan<D>::TILE;
            const T* vs = v_stages + (i % STAGES) * Plan<D>::TILE;
            float s[KEYS_PER_WARP / 8][4];
            #pragma unroll
            for (int n = 0; n < KEYS_PER_WARP / 8; ++n) {
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
                const T* k_row = ks + (n * 8 + g) * Plan<D>::PITCH + 2 * t;
                #pragma unroll
                for (int j = 0; j < D / 16; ++j)
                    mma<T>(s[n], qa[j], *reinterpret_cast<const uint32_t*>(k_row + 16 * j),
                           *reinterpret_cast<const uint32_t*>(k_row + 16 * j + 8));
            }
            float most[2] = {-INFINITY, -INFINITY};
            #pragma unroll
            for (int n = 0; n < KEYS_PER_WARP / 8; ++n)
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = first + n * 8 + 2 * t + (e & 1), half_tile = e >> 1;
                    const bool seen = key < end && row_query[half_tile] >= 0 &&
                                      (!p.causal || key <= row_query[half_tile] + causal_shift);
                    s[n][e] = seen ? s[n][e] * p.scale_log2 : -INFINITY;
                    most[half_tile] = fmaxf(most[half_tile], s[n][e]);
                }
            float alpha[2];
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                most[h] = fmaxf(most[h], __shfl_xor_sync(0xffffffffu, most[h], 1));
                most[h] = fmaxf(most[h], __shfl_xor_sync(0xffffffffu, most[h], 2));
                const float m_new = fmaxf(m[h], most[h]);
                alpha[h] = exp2f(m[h] - m_new);
                m[h] = m_new;
                l[h] *= alpha[h];
            }
            #pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                acc[n][0] *= alpha[0]; acc[n][1] *= alpha[0]; acc[n][2] *= alpha[1]; acc[n][3] *= alpha[1];
            }
            #pragma unroll
            for (int n = 0; n < KEYS_PER_WARP / 8; ++n)
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[n][e] = exp2f(s[n][e] - m[e >> 1]);
                    l[e >> 1] += s[n][e];
                }
            #pragma unroll
            for (int kk = 0; kk < KEYS_PER_WARP / 16; ++kk) {
                const uint32_t pa[4] = {pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
                                        pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                const T* v_rows = vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * Plan<D>::PITCH + (lane >> 4) * 8;
                #pragma unroll
                for (int n = 0; n < D / 8; n += 2) {
                    uint32_t vb[4];
                    ldmatrix_x4_trans(vb, v_rows + n * 8);
                    mma<T>(acc[n], pa, vb[0], vb[1]);
                    mma<T>(acc[n + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncwarp();
    }
    wait_groups<0>();
#if COMBINE == 1
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the combine kernel may be launched now
#endif
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    __syncwarp();

    // the warps' states side by side in shared memory (each over its own stages), then merged by the block
    float* state = reinterpret_cast<float*>(k_stages);
    if (t == 0) {
        state[g] = m[0]; state[g + 8] = m[1]; state[ROWS + g] = l[0]; state[ROWS + g + 8] = l[1];
    }
    float* o_state = state + 2 * ROWS;
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<float2*>(o_state + g * Plan<D>::O_PITCH + n * 8 + 2 * t) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2*>(o_state + (g + 8) * Plan<D>::O_PITCH + n * 8 + 2 * t) = make_float2(acc[n][2], acc[n][3]);
    }
    __syncthreads();
    const float* states = reinterpret_cast<const float*>(shared);
    constexpr int WARP_FLOATS = Plan<D>::WARP_HALVES / 2;
    for (int index = threadIdx.x; index < ROWS * D; index += WARPS * 32) {
        const int row = index / D, d = index % D, r = tile * ROWS + row;
        if (r >= rows) continue;
        float most = -1e30f;
        #pragma unroll
        for (int w = 0; w < WARPS; ++w) most = fmaxf(most, states[w * WARP_FLOATS + row]);
        float sum = 0.f, out = 0.f;
        #pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float* ws = states + w * WARP_FLOATS;
            const float weight = exp2f(ws[row] - most);
            sum += ws[ROWS + row] * weight;
            out += ws[2 * ROWS + row * Plan<D>::O_PITCH + d] * weight;
        }
        const size_t at = (static_cast<size_t>(b) * p.heads + kv_head * p.group + r / p.queries) * p.queries + r % p.queries;
        if (p.splits == 1) {
            o[at * D + d] = from_float<T>(out / sum);
        } else {
            const size_t slot = static_cast<size_t>(split) * p.batch * p.heads * p.queries + at;
            part[slot * D + d] = sum > 0.f ? out / sum : 0.f;
            if (d == 0) lse[slot] = sum > 0.f ? most + log2f(sum) : -INFINITY;
        }
    }
#if COMBINE == 2
    if (p.splits == 1) return;
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned ticket = atomicAdd(tickets + (b * kv_heads + kv_head) * p.row_tiles + tile, 1u);
        last = (ticket + 1) % p.splits == 0;  // tickets count on across launches, never reset
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const size_t per_split = static_cast<size_t>(p.batch) * p.heads * p.queries;
    for (int index = threadIdx.x; index < ROWS * D; index += WARPS * 32) {
        const int row = index / D, d = index % D, r = tile * ROWS + row;
        if (r >= rows) continue;
        const size_t at = (static_cast<size_t>(b) * p.heads + kv_head * p.group + r / p.queries) * p.queries + r % p.queries;
        float most = -INFINITY;
        for (int s = 0; s < p.splits; ++s) most = fmaxf(most, __ldcg(lse + s * per_split + at));
        float sum = 0.f, out = 0.f;
        for (int s = 0; s < p.splits; ++s) {
            const float weight = exp2f(__ldcg(lse + s * per_split + at) - most);
            sum += weight;
            out += weight * __ldcg(part + (s * per_split + at) * D + d);
        }
        o[at * D + d] = from_float<T>(out / sum);
    }
#endif
}

// O from the splits' partial results: one block per (sequence, query head, query token), a thread per element
template <int D, typename T>
__device__ __forceinline__ void combine_splits(const float* __restrict__ part, const float* __restrict__ lse,
                                               T* __restrict__ o, int splits, int rows_total) {
    const int at = blockIdx.x, d = threadIdx.x;
    asm volatile("griddepcontrol.wait;\n" ::: "memory");  // launched early (COMBINE 1): the split kernel's results
    float most = -INFINITY;
    for (int s = 0; s < splits; ++s) most = fmaxf(most, lse[static_cast<size_t>(s) * rows_total + at]);
    float sum = 0.f, out = 0.f;
    for (int s = 0; s < splits; ++s) {
        const float weight = exp2f(lse[static_cast<size_t>(s) * rows_total + at] - most);
        sum += weight;
        out += weight * part[(static_cast<size_t>(s) * rows_total + at) * D + d];
    }
    o[static_cast<size_t>(at) * D + d] = from_float<T>(out / sum);
}

#define DECODE_ENTRY(NAME, D, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(                                                 \
        const T* q, const T* k, const T* v, T* o, float* part, float* lse, unsigned* tickets, Problem p) {        \
        decode_split<D, T>(q, k, v, o, part, lse, tickets, p);                                                     \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(D) NAME##_combine(const float* part, const float* lse, T* o,     \
                                                                   int splits, int rows_total) {                   \
        combine_splits<D, T>(part, lse, o, splits, rows_total);                                                    \
    }

DECODE_ENTRY(flashdecode_f16_d64, 64, half)
DECODE_ENTRY(flashdecode_f16_d128, 128, half)
DECODE_ENTRY(flashdecode_bf16_d64, 64, __nv_bfloat16)
DECODE_ENTRY(flashdecode_bf16_d128, 128, __nv_bfloat16)
