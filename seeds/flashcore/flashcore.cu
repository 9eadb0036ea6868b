// FlashCore: O = softmax(Q K^T * scale) V for fp16 Q, K, V laid out [B, H, S, D], fp32 softmax
// and accumulation, fp16 output, D in {64, 128}, causal or not, any S (tails masked).
//
// One block computes BLOCK_M query rows of one (batch, head); it walks the keys in tiles of
// BLOCK_N with the online-softmax rescaling of FlashAttention, so memory stays O(tile).
//
// Knobs (macros):
//   BLOCK_M, BLOCK_N   query rows per block, key/value rows per tile
//   WARPS              warps per block
//   REDUCE             0: row max / sum by one thread per row (serial)   1: warp shuffles
//   EXP2               0: expf(s * scale)   1: exp2f with log2(e) folded into the scale
//   SMEM_PAD           0: rows of D halves   1: rows padded by 8 halves (16 bytes) against bank conflicts
// This is the scalar path (FMA on fp32): the S/P tile is materialised in shared memory.
#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

#define THREADS (WARPS * 32)

template <int D>
struct Layout {
    static constexpr int ld = D + (SMEM_PAD ? 8 : 0);  // halves per Q/K/V row in shared memory
    static constexpr int s_ld = BLOCK_N + 1;            // floats per S/P row
    static constexpr int acc = BLOCK_M * D / THREADS;   // output accumulators per thread
    static_assert(BLOCK_M * D % THREADS == 0, "BLOCK_M * D must be a multiple of the thread count");
};

__device__ __forceinline__ float exp_base(float x) { return EXP2 ? exp2f(x) : expf(x); }

// rows x D halves from global (row stride D) to shared (row stride ld), 16 bytes a thread-step;
// rows at or past rows_valid are zero-filled.
template <int D, int ld>
__device__ __forceinline__ void load_tile(half* dst, const half* src, int rows_valid, int rows) {
    constexpr int vectors_per_row = D / 8;
    for (int v = threadIdx.x; v < rows * vectors_per_row; v += THREADS) {
        const int r = v / vectors_per_row, c = (v % vectors_per_row) * 8;
        uint4 value = make_uint4(0u, 0u, 0u, 0u);
        if (r < rows_valid) value = *reinterpret_cast<const uint4*>(src + (size_t)r * D + c);
        *reinterpret_cast<uint4*>(dst + r * ld + c) = value;
    }
}

// Online softmax over the current tile, row by row: new row max, p = exp(s - max) written back
// over s, the factor that rescales what was accumulated before, and the running row sum.
template <int D>
__device__ void softmax_tile(float* Ss, float* row_max, float* row_sum, float* rescale) {
    constexpr int s_ld = Layout<D>::s_ld;
#if REDUCE == 0
    for (int i = threadIdx.x; i < BLOCK_M; i += THREADS) {
        float* row = Ss + i * s_ld;
        const float previous = row_max[i];
        float m = previous;
        for (int j = 0; j < BLOCK_N; ++j) m = fmaxf(m, row[j]);
        const float reference = m == -CUDART_INF_F ? 0.f : m;  // a row with no key yet
        float sum = 0.f;
        for (int j = 0; j < BLOCK_N; ++j) {
            const float p = exp_base(row[j] - reference);
            row[j] = p;
            sum += p;
        }
        const float r = exp_base(previous - reference);
        rescale[i] = r;
        row_sum[i] = row_sum[i] * r + sum;
        row_max[i] = m;
    }
#else
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < BLOCK_M; i += WARPS) {
        float* row = Ss + i * s_ld;
        const float previous = row_max[i];
        float m = previous;
        for (int j = lane; j < BLOCK_N; j += 32) m = fmaxf(m, row[j]);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
        const float reference = m == -CUDART_INF_F ? 0.f : m;
        float sum = 0.f;
        for (int j = lane; j < BLOCK_N; j += 32) {
            const float p = exp_base(row[j] - reference);
            row[j] = p;
            sum += p;
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (lane == 0) {
            const float r = exp_base(previous - reference);
            rescale[i] = r;
            row_sum[i] = row_sum[i] * r + sum;
            row_max[i] = m;
        }
    }
#endif
}

template <int D>
__device__ void attention(const half* __restrict__ Q, const half* __restrict__ K, const half* __restrict__ V,
                          half* __restrict__ O, int S, int causal, float scale) {
    using L = Layout<D>;
    constexpr int ld = L::ld, s_ld = L::s_ld;
    extern __shared__ __align__(16) unsigned char smem[];
    half* Qs = reinterpret_cast<half*>(smem);
    half* Ks = Qs + BLOCK_M * ld;
    half* Vs = Ks + BLOCK_N * ld;
    float* Ss = reinterpret_cast<float*>(Vs + BLOCK_N * ld);
    float* row_max = Ss + BLOCK_M * s_ld;
    float* row_sum = row_max + BLOCK_M;
    float* rescale = row_sum + BLOCK_M;

    const int q0 = blockIdx.x * BLOCK_M;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head;
    K += head;
    V += head;
    O += head;

    load_tile<D, ld>(Qs, Q + (size_t)q0 * D, min(BLOCK_M, S - q0), BLOCK_M);
    for (int i = threadIdx.x; i < BLOCK_M; i += THREADS) {
        row_max[i] = -CUDART_INF_F;
        row_sum[i] = 0.f;
    }
    float acc[L::acc];
#pragma unroll
    for (int a = 0; a < L::acc; ++a) acc[a] = 0.f;
    const float logit_scale = EXP2 ? scale * 1.4426950408889634f : scale;
    const int kv_end = causal ? min(S, q0 + BLOCK_M) : S;

    for (int kv0 = 0; kv0 < kv_end; kv0 += BLOCK_N) {
        __syncthreads();  // everyone is done with the previous K/V/P tiles
        const int valid = min(BLOCK_N, S - kv0);
        load_tile<D, ld>(Ks, K + (size_t)kv0 * D, valid, BLOCK_N);
        load_tile<D, ld>(Vs, V + (size_t)kv0 * D, valid, BLOCK_N);
        __syncthreads();
#pragma unroll 1
        for (int e = threadIdx.x; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const int i = e / BLOCK_N, j = e % BLOCK_N;
            const int key = kv0 + j, query = q0 + i;
            float s = -CUDART_INF_F;
            if (key < S && !(causal && key > query)) {
                const half2* q = reinterpret_cast<const half2*>(Qs + i * ld);
                const half2* k = reinterpret_cast<const half2*>(Ks + j * ld);
                float dot = 0.f;
#pragma unroll 8
                for (int d = 0; d < D / 2; ++d) {
                    const float2 a = __half22float2(q[d]), b = __half22float2(k[d]);
                    dot = fmaf(a.x, b.x, fmaf(a.y, b.y, dot));
                }
                s = dot * logit_scale;
            }
            Ss[i * s_ld + j] = s;
        }
        __syncthreads();
        softmax_tile<D>(Ss, row_max, row_sum, rescale);
        __syncthreads();
        // O = O * rescale + P V; each thread owns the same (row, column) pairs throughout
#pragma unroll
        for (int a = 0; a < L::acc; ++a) acc[a] *= rescale[(threadIdx.x + a * THREADS) / D];
#pragma unroll 1
        for (int j = 0; j < BLOCK_N; ++j) {
#pragma unroll
            for (int a = 0; a < L::acc; ++a) {
                const int e = threadIdx.x + a * THREADS, i = e / D, d = e % D;
                acc[a] = fmaf(Ss[i * s_ld + j], __half2float(Vs[j * ld + d]), acc[a]);
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < L::acc; ++a) {
        const int e = threadIdx.x + a * THREADS, i = e / D, d = e % D;
        if (q0 + i < S) O[(size_t)(q0 + i) * D + d] = __float2half(acc[a] / row_sum[i]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
flashcore_d64(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale) {
    attention<64>(Q, K, V, O, S, causal, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS)
flashcore_d128(const half* Q, const half* K, const half* V, half* O, int S, int causal, float scale) {
    attention<128>(Q, K, V, O, S, causal, scale);
}
