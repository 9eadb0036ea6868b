// FlashCore, materialised path (SOFTMAX = 0): S tile in shared memory, softmax by rows, P V by any
// of the three engines. Part of the source flashcore.cu; the family concatenates the parts.

#if SOFTMAX == 0
template <int D>
struct Materialised {
    using T = Tile<D>;
    using P_ = Plan<D>;
    static constexpr int ld = T::ld, s_ld = P_::s_ld, p_ld = P_::p_ld, o_ld = P_::o_ld;
#if PV == 2
    static constexpr int acc_tiles = (BLOCK_M / 16) * (D / 8) / WARPS;  // 16x8 O tiles per warp
    float acc[acc_tiles][4];
#elif PV == 0
    static constexpr int acc_count = BLOCK_M * D / THREADS;
    static_assert(BLOCK_M * D % THREADS == 0, "BLOCK_M * D must be a multiple of the thread count");
    float acc[acc_count];
#endif
    const half* Qs;
    float *Ss, *row_max, *row_sum, *rescale, *Os;
    half* Ps;

    __device__ void init(unsigned char* smem, const half* q_tile) {
        Qs = q_tile;
        unsigned char* rest = smem + P_::q_bytes + 2 * STAGES * P_::kv_bytes;
        Ss = reinterpret_cast<float*>(rest);
        Ps = reinterpret_cast<half*>(rest + P_::s_bytes);
        Os = reinterpret_cast<float*>(rest + P_::s_bytes + P_::p_bytes);
        row_max = reinterpret_cast<float*>(rest + P_::s_bytes + P_::p_bytes + P_::o_bytes);
        row_sum = row_max + BLOCK_M;
        rescale = row_sum + BLOCK_M;
        for (int i = threadIdx.x; i < BLOCK_M; i += THREADS) {
            row_max[i] = -CUDART_INF_F;
            row_sum[i] = 0.f;
        }
#if PV == 1
        for (int e = threadIdx.x; e < BLOCK_M * o_ld; e += THREADS) Os[e] = 0.f;
#elif PV == 2
        for (int t = 0; t < acc_tiles; ++t)
            for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;
#else
        for (int a = 0; a < acc_count; ++a) acc[a] = 0.f;
#endif
    }

    // raw dot products q . k into Ss (scale and masks are applied by the softmax)
    __device__ void scores(const half* Ks, const Problem& p, int kv0) {
#if QK == 0
#pragma unroll 1
        for (int e = threadIdx.x; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const int i = e / BLOCK_N, j = e % BLOCK_N;
            float dot = 0.f;
            if (!masked(p, kv0 + j, p.q0 + i)) {
#pragma unroll 8
                for (int d = 0; d < D; d += 2) {
                    const float2 a = __half22float2(*reinterpret_cast<const half2*>(Qs + T::at(i, d)));
                    const float2 b = __half22float2(*reinterpret_cast<const half2*>(Ks + T::at(j, d)));
                    dot = fmaf(a.x, b.x, fmaf(a.y, b.y, dot));
                }
            }
            Ss[i * s_ld + j] = dot;
        }
#elif QK == 1
        using namespace nvcuda;
#pragma unroll 1
        for (int t = threadIdx.x / 32; t < (BLOCK_M / 16) * (BLOCK_N / 16); t += WARPS) {
            const int mt = t / (BLOCK_N / 16), nt = t % (BLOCK_N / 16);
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
            wmma::fill_fragment(c, 0.f);
#pragma unroll
            for (int k = 0; k < D; k += 16) {
                wmma::load_matrix_sync(a, Qs + mt * 16 * ld + k, ld);
                wmma::load_matrix_sync(b, Ks + nt * 16 * ld + k, ld);
                wmma::mma_sync(c, a, b, c);
            }
            wmma::store_matrix_sync(Ss + mt * 16 * s_ld + nt * 16, c, s_ld, wmma::mem_row_major);
        }
#else
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll 1
        for (int t = warp; t < (BLOCK_M / 16) * (BLOCK_N / 8); t += WARPS) {
            const int mt = t / (BLOCK_N / 8), nt = t % (BLOCK_N / 8);
            float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int k = 0; k < D; k += 16) {
                uint32_t a[4], b[2];
                load_a<D>(a, Qs, mt * 16, k);
                ldsm_x2(b, Ks + T::at(nt * 8 + (lane & 7), k + ((lane >> 3) & 1) * 8));
                mma16816(c, a, b[0], b[1]);
            }
            float* row = Ss + (mt * 16 + g) * s_ld + nt * 8 + 2 * tq;
            row[0] = c[0];
            row[1] = c[1];
            row[8 * s_ld] = c[2];
            row[8 * s_ld + 1] = c[3];
        }
#endif
    }

    // one row of the tile: scale, mask, new max, p = exp(s - max), rescale factor, running sum
    __device__ __forceinline__ float prob(const Problem& p, int kv0, int i, int j, float reference) {
        const float s = Ss[i * s_ld + j] * p.logit_scale;
        return masked(p, kv0 + j, p.q0 + i) ? 0.f : exp_base(s - reference);
    }
    __device__ __forceinline__ void store_p(int i, int j, float value) {
#if PV == 0
        Ss[i * s_ld + j] = value;
#else
        Ps[i * p_ld + j] = __float2half(value);
#endif
    }

    __device__ void softmax(const Problem& p, int kv0) {
#if REDUCE == 0
        for (int i = threadIdx.x; i < BLOCK_M; i += THREADS) {
            const float previous = row_max[i];
            float m = previous;
            for (int j = 0; j < BLOCK_N; ++j)
                if (!masked(p, kv0 + j, p.q0 + i)) m = fmaxf(m, Ss[i * s_ld + j] * p.logit_scale);
            const float reference = m == -CUDART_INF_F ? 0.f : m;  // a row with no key yet
            float sum = 0.f;
            for (int j = 0; j < BLOCK_N; ++j) {
                const float value = prob(p, kv0, i, j, reference);
                store_p(i, j, value);
                sum += value;
            }
            const float r = exp_base(previous - reference);
            rescale[i] = r;
            row_sum[i] = row_sum[i] * r + sum;
            row_max[i] = m;
        }
#else
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        for (int i = warp; i < BLOCK_M; i += WARPS) {
            const float previous = row_max[i];
            float m = previous;
            for (int j = lane; j < BLOCK_N; j += 32)
                if (!masked(p, kv0 + j, p.q0 + i)) m = fmaxf(m, Ss[i * s_ld + j] * p.logit_scale);
            m = quad_reduce_max(m, 32);
            const float reference = m == -CUDART_INF_F ? 0.f : m;
            float sum = 0.f;
            for (int j = lane; j < BLOCK_N; j += 32) {
                const float value = prob(p, kv0, i, j, reference);
                store_p(i, j, value);
                sum += value;
            }
            sum = quad_reduce_sum(sum, 32);
            if (lane == 0) {
                const float r = exp_base(previous - reference);
                rescale[i] = r;
                row_sum[i] = row_sum[i] * r + sum;
                row_max[i] = m;
            }
        }
#endif
    }

    // O = O * rescale + P V
    __device__ void accumulate(const half* Vs) {
#if PV == 0
#pragma unroll
        for (int a = 0; a < acc_count; ++a) acc[a] *= rescale[(threadIdx.x + a * THREADS) / D];
#pragma unroll 1
        for (int j = 0; j < BLOCK_N; ++j) {
#pragma unroll
            for (int a = 0; a < acc_count; ++a) {
                const int e = threadIdx.x + a * THREADS, i = e / D, d = e % D;
                acc[a] = fmaf(Ss[i * s_ld + j], __half2float(Vs[T::at(j, d)]), acc[a]);
            }
        }
#elif PV == 1
        using namespace nvcuda;
        for (int e = threadIdx.x; e < BLOCK_M * D; e += THREADS) Os[(e / D) * o_ld + e % D] *= rescale[e / D];
        __syncthreads();
#pragma unroll 1
        for (int t = threadIdx.x / 32; t < (BLOCK_M / 16) * (D / 16); t += WARPS) {
            const int mt = t / (D / 16), nt = t % (D / 16);
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
            float* o = Os + mt * 16 * o_ld + nt * 16;
            wmma::load_matrix_sync(c, o, o_ld, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < BLOCK_N; k += 16) {
                wmma::load_matrix_sync(a, Ps + mt * 16 * p_ld + k, p_ld);
                wmma::load_matrix_sync(b, Vs + k * ld + nt * 16, ld);
                wmma::mma_sync(c, a, b, c);
            }
            wmma::store_matrix_sync(o, c, o_ld, wmma::mem_row_major);
        }
#else
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
#pragma unroll
        for (int t = 0; t < acc_tiles; ++t) {
            const int mt = (warp * acc_tiles + t) / (D / 8);
            const float r0 = rescale[mt * 16 + g], r1 = rescale[mt * 16 + g + 8];
            acc[t][0] *= r0;
            acc[t][1] *= r0;
            acc[t][2] *= r1;
            acc[t][3] *= r1;
        }
#pragma unroll
        for (int k = 0; k < BLOCK_N; k += 16) {
#pragma unroll
            for (int t = 0; t < acc_tiles; ++t) {
                const int tile = warp * acc_tiles + t, mt = tile / (D / 8), nt = tile % (D / 8);
                uint32_t a[4], b[2];
                ldsm_x4(a, Ps + (mt * 16 + (lane & 15)) * p_ld + k + (lane >> 4) * 8);
                ldsm_x2_trans(b, Vs + T::at(k + (lane & 7) + ((lane >> 3) & 1) * 8, nt * 8));
                mma16816(acc[t], a, b[0], b[1]);
            }
        }
#endif
    }

    // S = Q K^T, then the softmax: P in shared memory (the caller syncs before accumulate(Vs))
    __device__ void score(const half* Ks, const Problem& p, int kv0) {
        scores(Ks, p, kv0);
        __syncthreads();
        softmax(p, kv0);
    }

    __device__ void finish(half* O, const Problem& p, unsigned char*) {
        __syncthreads();
#if PV == 0
#pragma unroll
        for (int a = 0; a < acc_count; ++a) {
            const int e = threadIdx.x + a * THREADS, i = e / D, d = e % D;
            if (p.q0 + i < p.S) O[(size_t)(p.q0 + i) * D + d] = __float2half(acc[a] / row_sum[i]);
        }
#elif PV == 1
        for (int e = threadIdx.x; e < BLOCK_M * D; e += THREADS) {
            const int i = e / D, d = e % D;
            if (p.q0 + i < p.S) O[(size_t)(p.q0 + i) * D + d] = __float2half(Os[i * o_ld + d] / row_sum[i]);
        }
#else
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
        for (int t = 0; t < acc_tiles; ++t) {
            const int tile = warp * acc_tiles + t, mt = tile / (D / 8), nt = tile % (D / 8);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = mt * 16 + g + 8 * h;
                if (p.q0 + i < p.S) {
                    const float inv = 1.f / row_sum[i];
                    *reinterpret_cast<half2*>(O + (size_t)(p.q0 + i) * D + nt * 8 + 2 * tq) =
                        __floats2half2_rn(acc[t][2 * h] * inv, acc[t][2 * h + 1] * inv);
                }
            }
        }
#endif
    }
};

#endif  // SOFTMAX == 0
