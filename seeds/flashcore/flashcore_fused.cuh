// FlashCore, fused path (SOFTMAX = 1). Part of the source flashcore.cu; the family concatenates the parts.

#if SOFTMAX == 1
// ---------------------------------------------------------------------------------------------
// Fused path: each warp owns ROWS query rows; S, P and O live in mma.sync fragments (registers),
// row statistics are reduced within the quad of threads that shares a row. With KV_SPLIT > 1,
// KV_SPLIT warps own the same rows, each taking its BLOCK_N slice of every K/V stage, and the
// block merges their (max, sum, O) at the end as split-K softmax does.
// With WGMMA_D64 the D = 64 kernel multiplies by wgmma instead (WG below): a warpgroup per key
// split, its 64 rows the block's BLOCK_M query rows and padding; Q and P are wgmma's A operand from
// registers (mma.sync's A fragments), K and V its B operand read by the tensor cores straight from
// the swizzled stages (K K-major, V N-major). A warp whose 16 rows are padding takes part in the
// wgmma and nothing else; the others are placed so that each scheduler has work.
// ---------------------------------------------------------------------------------------------
template <int D>
struct Fused {
    using T = Tile<D>;
    static constexpr bool WG = D == 64 && WGMMA_D64;  // wgmma, a warpgroup of 64 rows per key split
    static constexpr int GROUPS = WG ? 4 : WARPS / KV_SPLIT;  // warps along the query rows (WG: row slots)
    static constexpr int ROWS = WG ? 16 : BLOCK_M / GROUPS, MT = ROWS / 16, NT = BLOCK_N / 8, DT = D / 8;
    static constexpr int ROW_GROUPS = BLOCK_M / ROWS;  // the warps of a split holding real rows
    static_assert(WARPS % KV_SPLIT == 0, "KV_SPLIT must divide WARPS");
    static_assert(ROWS % 16 == 0, "the fused path needs 16 query rows per warp (BLOCK_M % (16 * WARPS / KV_SPLIT) == 0)");
    static_assert(!WG || (WARPS == 4 * KV_SPLIT && BLOCK_M <= 64 && LAYOUT == 2),
                  "wgmma: a warpgroup per key split, at most 64 rows, swizzled stages");
    float o[MT][DT][4];
    using Scores = float[MT][NT][4];
    Scores s;  // the current tile's scores, then probabilities
#if OVERLAP
    Scores s_next;  // OVERLAP: the next tile's scores, computed beside the current tile's softmax
#endif
    float row_max[MT][2], row_sum[MT][2];
#if Q_REGS
    uint32_t q[MT][D / 16][4];  // (not with wgmma: see score)
#endif
    const half* Qs;
    int row0, split;
    bool real;  // this warp's rows are query rows (WG: not padding)

    // q_landed: with TMA stages, the Q tile's mbarrier
    __device__ void init(unsigned char* smem, const half* q_tile, uint64_t* q_landed = nullptr) {
        Qs = q_tile;
        split = threadIdx.x / 32 / GROUPS;
        // WG: split s puts its real row blocks at slots s * ROW_GROUPS, ... (mod 4): every scheduler gets some
        const int slot = threadIdx.x / 32 % GROUPS;
        row0 = (WG ? (slot + 4 - split * ROW_GROUPS % 4) % 4 : slot) * ROWS;
        real = row0 < BLOCK_M;
        if (WG && threadIdx.x == 0 && smem_address(smem) % 1024 != 0) __trap();  // the 128-byte swizzle's period
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_max[m][h] = -CUDART_INF_F;
                row_sum[m][h] = 0.f;
            }
#pragma unroll
            for (int d = 0; d < DT; ++d)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[m][d][e] = 0.f;
        }
#if Q_REGS
        if constexpr (TMA_STAGES) {
            __syncthreads();  // the Q tile's mbarrier is initialised
            barrier_wait(q_landed, 0);
        } else {
#if STAGES > 1
            // the Q group (committed before the K and V groups of the prologue; the only group when the
            // cluster shares the K/V stages, which arrive by bulk copies instead)
            cp_async_wait<(KV_SHARE > 1 ? 0 : 2 * (STAGES - 1))>();
#endif
            __syncthreads();  // the Q tile has landed
        }
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int k = 0; k < D / 16; ++k)
                if (!WG) load_a<D>(q[m][k], Qs, row0 + m * 16, k * 16);
#endif
    }

    // -inf for the scores past S or above the diagonal (causal)
    __device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], const Problem& p, int kv0) const {
        const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (masked(p, kv0 + n * 8 + 2 * tq + e % 2, p.q0 + row0 + m * 16 + g + 8 * (e / 2)))
                        s[m][n][e] = -CUDART_INF_F;
    }

    // S = Q K^T for this warp's slice of the K stage, then the online softmax: s holds P
    __device__ void score(const half* Ks, const Problem& p, int kv0) {
        score(Ks, p, kv0, [] {});
    }

    // the same, calling between() after Q K^T, before the softmax
    template <typename Between>
    __device__ void score(const half* Ks, const Problem& p, int kv0, Between between) {
        Ks += split * BLOCK_N * T::ld;  // this warp's slice of the stage (a multiple of 8 rows: same swizzle)
        kv0 += split * BLOCK_N;
#if WGMMA_D64
        if constexpr (WG) {
            // Q's fragments from shared memory every tile: kept in registers across the tiles, ptxas
            // (CUDA 13.0) handed their registers to later instructions once a wgmma had read them
            uint32_t qa[D / 16][4];
#pragma unroll
            for (int k = 0; k < D / 16; ++k) load_a<D>(qa[k], Qs, row0 % BLOCK_M, k * 16);  // padding: a copy
            float(&scores)[NT * 4] = reinterpret_cast<float(&)[NT * 4]>(s);
            const uint64_t keys = descriptor(Ks);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < D / 16; ++k) wgmma_qk(scores, qa[k], keys + k * 2, k > 0);  // 32 bytes a k-step
            wgmma_commit();
            wgmma_wait<0>();
            pin_registers(scores);
            pin_registers(reinterpret_cast<uint32_t(&)[D / 4]>(qa));
            if (!real) {  // padding rows: no softmax
                between();
                return;
            }
        } else
#endif
            qk(Ks, s);
        between();
        softmax(p, kv0);
    }

    // S = Q K^T by mma.sync, Ks this warp's slice of the stage
    __device__ __forceinline__ void qk(const half* Ks, Scores& s) {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[m][n][e] = 0.f;
#pragma unroll
        for (int k = 0; k < D / 16; ++k) {
            uint32_t a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
#if Q_REGS
#pragma unroll
                for (int e = 0; e < 4; ++e) a[m][e] = q[m][k][e];
#else
                load_a<D>(a[m], Qs, row0 + m * 16, k * 16);
#endif
            }
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t b[4];
                ldsm_x4(b, Ks + T::at(n * 8 + (lane & 7) + (lane >> 4) * 8, k * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma16816(s[m][n], a[m], b[0], b[1]);
                    mma16816(s[m][n + 1], a[m], b[2], b[3]);
                }
            }
        }
    }

    // the online softmax of the scores of this warp's slice (keys from kv0): s holds P
    __device__ void softmax(const Problem& p, int kv0) {
        // mask where the tile crosses S or the diagonal, online softmax per row; the row max is kept
        // in raw dot products and the scale applied inside one FFMA per score: s * scale - max * scale
        if (edge_tile(p, kv0)) mask_scores(s, p, kv0);  // a branch: the inner tiles run none of the masking arithmetic
        softmax_rows(p);
    }

    __device__ __forceinline__ bool edge_tile(const Problem& p, int kv0) const {
        return kv0 + BLOCK_N > p.S || (p.causal && kv0 + BLOCK_N - 1 > p.q0 + row0);
    }

    __device__ __forceinline__ void softmax_rows(const Problem& p) { softmax_rows(p, s); }

    __device__ __forceinline__ void softmax_rows(const Problem& p, Scores& s) {
        const float scale = p.logit_scale;
        // A warp usually has its scheduler to itself, so nothing hides a chain of dependent
        // instructions: the two row halves go side by side, and maxima and sums are trees.
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float mx[2], reference[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) mx[h] = fmaxf(row_max[m][h], pair_tree<NT>(s[m], h, [](float x, float y) { return fmaxf(x, y); }));
#pragma unroll
            for (int offset = 1; offset < 4; offset *= 2)  // the quad sharing a row
#pragma unroll
                for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], offset));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                reference[h] = mx[h] == -CUDART_INF_F ? 0.f : mx[h] * scale;
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int c = 0; c < 2; ++c) s[m][n][2 * h + c] = exp_base(fmaf(s[m][n][2 * h + c], scale, -reference[h]));
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float r = exp_base(row_max[m][h] * scale - reference[h]);
                // this thread's share of the row sum; summed over the quad at the end
                row_sum[m][h] = row_sum[m][h] * r + pair_tree<NT>(s[m], h, [](float x, float y) { return x + y; });
                row_max[m][h] = mx[h];
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    o[m][d][2 * h] *= r;
                    o[m][d][2 * h + 1] *= r;
                }
            }
        }
    }

    // O += P V for the same slice of the V stage, P taken straight from the S fragments
    __device__ void accumulate(const half* Vs) {
        Vs += split * BLOCK_N * T::ld;
#if WGMMA_D64
        if constexpr (WG) {  // P (padding rows: whatever their scores were) times V, 16 keys a wgmma
            uint32_t a[BLOCK_N / 16][4];
#pragma unroll
            for (int k = 0; k < BLOCK_N / 16; ++k) probability_fragment(a[k], s[0], k);
            float(&out)[DT * 4] = reinterpret_cast<float(&)[DT * 4]>(o);
            // V's rows of 128 bytes as an N-major operand: one swizzle atom wide (N = D = 64), so the
            // K-major descriptor's fields (8-row groups 1024 bytes apart) describe it as well
            const uint64_t values = descriptor(Vs);
            wgmma_fence();  // O was rescaled, and P written, by ordinary instructions
#pragma unroll
            for (int k = 0; k < BLOCK_N / 16; ++k) wgmma_pv(out, a[k], values + k * (2048 >> 4));  // 16 rows of 128 bytes
            wgmma_commit();
            wgmma_wait<0>();
            pin_registers(out);
            pin_registers(reinterpret_cast<uint32_t(&)[BLOCK_N / 4]>(a));
        } else
#endif
            pv(Vs, s);
    }

    // O += P V by mma.sync, Vs this warp's slice of the stage
    __device__ __forceinline__ void pv(const half* Vs, const Scores& s) {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int k = 0; k < BLOCK_N / 16; ++k) {
            uint32_t a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) probability_fragment(a[m], s[m], k);
#pragma unroll
            for (int d = 0; d < DT; d += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, Vs + T::at(k * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d * 8 + (lane >> 4) * 8));
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma16816(o[m][d], a[m], b[0], b[1]);
                    mma16816(o[m][d + 1], a[m], b[2], b[3]);
                }
            }
        }
    }

#if OVERLAP
    // OVERLAP (FlashAttention-3's overlap within a warp): Q K^T of the warp's slice of a K stage into
    // `into`, masked where the tile crosses S or the diagonal; its softmax comes with the next tile's Q K^T
    __device__ void scores(const half* Ks, const Problem& p, int kv0, Scores& into) {
        qk(Ks + split * BLOCK_N * T::ld, into);
        mask_edge(into, p, kv0);
    }

    // -inf for the scores of the warp's slice of the stage from key kv0 past S or above the diagonal
    __device__ __forceinline__ void mask_edge(Scores& into, const Problem& p, int kv0) const {
        if (edge_tile(p, kv0 + split * BLOCK_N)) mask_scores(into, p, kv0 + split * BLOCK_N);
    }

    // the softmax of `ready` (an earlier tile's scores) and O += P V with its V stage, in one stretch of
    // code with Q K^T of the next tile into `next`: the tensor cores multiply while the softmax runs
    __device__ void overlapped(const half* Ks_next, const half* Vs, const Problem& p, Scores& ready, Scores& next) {
        qk(Ks_next + split * BLOCK_N * T::ld, next);
        softmax_rows(p, ready);
        pv(Vs + split * BLOCK_N * T::ld, ready);
    }

    // the last tile: its softmax and P V alone
    __device__ void last(const half* Vs, const Problem& p, Scores& ready) {
        softmax_rows(p, ready);
        pv(Vs + split * BLOCK_N * T::ld, ready);
    }
#endif

    __device__ void finish(half* O, const Problem& p, unsigned char* smem) {
        if (!real) return;  // WG: padding rows
#if KV_SPLIT == 1 && BLOCK_SPLIT == 1
        const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int query = p.q0 + row0 + m * 16 + g + 8 * h;
                const float inv = reciprocal(quad_reduce_sum(row_sum[m][h], 4));
                if (query < p.S) {
#pragma unroll
                    for (int d = 0; d < DT; ++d)
                        *reinterpret_cast<half2*>(O + (size_t)query * D + d * 8 + 2 * tq) =
                            __floats2half2_rn(o[m][d][2 * h] * inv, o[m][d][2 * h + 1] * inv);
                }
            }
        }
#else
        // the splits' partial rows and their (max, sum) meet in shared memory (Plan<D>'s merge region)
        float* partial = reinterpret_cast<float*>(smem + Plan<D>::bytes - Plan<D>::merge_bytes);
#if GRID_SPLIT == 1
        SplitMerge<D, MT, ROW_GROUPS>().merge(o, row_max, row_sum, partial, Plan<D>::merge_barriers(smem), O, p, row0,
                                              split);
#else
        // every split (warps sharing rows) leaves its unnormalised O, raw row max and row sum in shared
        // memory; the rows are then merged as split-K softmax does into this block's record of the
        // workspace, merged again by grid_merge
        const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
        constexpr int o_ld = D + 4;  // [split][row][o_ld] floats, then [split][row] (max, sum)
        float* stats = partial + align128(KV_SPLIT * BLOCK_M * o_ld * 4) / 4;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + m * 16 + g + 8 * h, slot = split * BLOCK_M + row;
                const float sum = quad_reduce_sum(row_sum[m][h], 4);
                if (tq == 0) {
                    stats[2 * slot] = row_max[m][h];
                    stats[2 * slot + 1] = sum;
                }
#pragma unroll
                for (int d = 0; d < DT; ++d)
                    *reinterpret_cast<float2*>(partial + slot * o_ld + d * 8 + 2 * tq) =
                        make_float2(o[m][d][2 * h], o[m][d][2 * h + 1]);
            }
        }
        __syncthreads();
        // four columns an item; a thread loads the statistics and partial rows of BATCH items before it
        // uses any, so that the shared-memory latencies overlap instead of adding up
        constexpr int quads = D / 4, items = BLOCK_M * quads;
        constexpr int BATCH = KV_SPLIT >= 8 ? 1 : 8 / KV_SPLIT;  // <= 8 partial rows in registers
        for (int first = threadIdx.x; first < items; first += BATCH * THREADS) {
            float2 part[BATCH][KV_SPLIT];
            float4 rows_o[BATCH][KV_SPLIT];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const int e = first + b * THREADS, row = e / quads, col = e % quads * 4;
                if (e >= items) break;
#pragma unroll
                for (int k = 0; k < KV_SPLIT; ++k) {
                    part[b][k] = *reinterpret_cast<const float2*>(stats + 2 * (k * BLOCK_M + row));
                    rows_o[b][k] = *reinterpret_cast<const float4*>(partial + (k * BLOCK_M + row) * o_ld + col);
                }
            }
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const int e = first + b * THREADS, row = e / quads, col = e % quads * 4;
                if (e >= items) break;
                if (p.q0 + row >= p.S) continue;
                Partial merged = Partial::none();
#pragma unroll
                for (int k = 0; k < KV_SPLIT; ++k) merged.add(part[b][k], rows_o[b][k], p.logit_scale);
                float* record = p.workspace + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * RECORD;
                *reinterpret_cast<float4*>(record + row * D + col) = merged.o;
                if (col == 0) *reinterpret_cast<float2*>(record + BLOCK_M * D + 2 * row) = make_float2(merged.top, merged.sum);
            }
        }
        grid_merge(O, p);
#endif
#endif
    }

#if GRID_SPLIT > 1
    static constexpr int RECORD = BLOCK_M * (D + 2);  // floats: O [BLOCK_M][D], then (max, sum) of each row

    // Every block of a query block has left its record in the workspace; the last one to finish
    // (last_to_arrive, one ticket counter per query block) merges the GRID_SPLIT records and writes O.
    __device__ void grid_merge(half* O, const Problem& p) {
        if (!last_to_arrive(p.tickets + blockIdx.y * (gridDim.x / GRID_SPLIT) + blockIdx.x / GRID_SPLIT, GRID_SPLIT))
            return;
        const float* records = p.workspace + (size_t)(blockIdx.y * gridDim.x + blockIdx.x / GRID_SPLIT * GRID_SPLIT) * RECORD;
        constexpr int quads = D / 4, items = BLOCK_M * quads, BATCH = 8 / GRID_SPLIT;
        for (int first = threadIdx.x; first < items; first += BATCH * THREADS) {
            float2 part[BATCH][GRID_SPLIT];
            float4 rows_o[BATCH][GRID_SPLIT];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const int e = first + b * THREADS, row = e / quads, col = e % quads * 4;
                if (e >= items) break;
#pragma unroll
                for (int r = 0; r < GRID_SPLIT; ++r) {  // L2 reads (.cg): the records were written by other SMs
                    part[b][r] = __ldcg(reinterpret_cast<const float2*>(records + r * RECORD + BLOCK_M * D + 2 * row));
                    rows_o[b][r] = __ldcg(reinterpret_cast<const float4*>(records + r * RECORD + row * D + col));
                }
            }
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const int e = first + b * THREADS, row = e / quads, col = e % quads * 4;
                if (e >= items) break;
                if (p.q0 + row >= p.S) continue;
                Partial merged = Partial::none();
#pragma unroll
                for (int r = 0; r < GRID_SPLIT; ++r) merged.add(part[b][r], rows_o[b][r], p.logit_scale);
                merged.write(O + (size_t)(p.q0 + row) * D + col);
            }
        }
    }
#endif
};

#endif  // SOFTMAX == 1
