// FlashCore, fused path: merging the partial rows of the warps (and blocks) that split a query
// block's keys. Part of the source flashcore.cu; the family concatenates the parts.

#if SOFTMAX == 1
// Four columns of one row's partial result: the raw row max `top` of the keys seen, the sum of the
// row's exponentials and its unnormalised O, both relative to `top`; merged as split-K softmax does.
// A split that saw no key (top = -inf) adds nothing.
struct Partial {
    float top, sum;
    float4 o;

    __device__ static Partial none() { return {-CUDART_INF_F, 0.f, make_float4(0.f, 0.f, 0.f, 0.f)}; }

    // add another split's (max, sum) and O of the same row and columns
    __device__ __forceinline__ void add(float2 stats, float4 v, float logit_scale) {
        const float next = fmaxf(top, stats.x);
        if (next == -CUDART_INF_F) return;
        const float mine = exp_base((top - next) * logit_scale), theirs = exp_base((stats.x - next) * logit_scale);
        o = make_float4(o.x * mine + v.x * theirs, o.y * mine + v.y * theirs, o.z * mine + v.z * theirs,
                        o.w * mine + v.w * theirs);
        sum = sum * mine + stats.y * theirs;
        top = next;
    }

    // the four fp16 outputs O / sum
    __device__ __forceinline__ void write(half* out) const {
        const float inv = reciprocal(sum);
        half2* pair = reinterpret_cast<half2*>(out);
        pair[0] = __floats2half2_rn(o.x * inv, o.y * inv);
        pair[1] = __floats2half2_rn(o.z * inv, o.w * inv);
    }
};

// The KV_SPLIT warps of a block that share a row group (no cluster, no grid split) merge through
// the group's named barrier alone: the row groups finish independently. Each split leaves its
// whole partial result in shared memory in its own register order (a float4 per lane and step:
// conflict-free): its O, then per 16 rows (max, max, sum, sum) of its two row halves, the sums
// already added over the quad. After the barrier every split weighs all the splits' rows (one
// exponential per split and row) and merges and writes its own DT / KV_SPLIT column chunks of O.
template <int D, int MT, int GROUPS>  // GROUPS: row groups of 16 * MT rows, each of KV_SPLIT warps
struct SplitMerge {
    static constexpr int DT = D / 8, OWN = DT / KV_SPLIT, O_QUADS = MT * DT, RECORD = (O_QUADS + MT) * 32;
    static_assert(DT % KV_SPLIT == 0, "every split merges whole column chunks");
    using Fragments = float[MT][DT][4];

    // shared memory: KV_SPLIT * GROUPS records of RECORD float4s (Plan's merge region holds them)
    __device__ void merge(const Fragments& o, const float (&row_max)[MT][2], const float (&row_sum)[MT][2],
                          float* region, half* O, const Problem& p, int row0, int split) {
        const int lane = threadIdx.x % 32, group = row0 / (16 * MT);
        float4* base = reinterpret_cast<float4*>(region) + group * RECORD + lane;  // split 0's record, this lane
        float sums[MT][2];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) sums[m][h] = row_sum[m][h];
#pragma unroll
        for (int offset = 1; offset < 4; offset *= 2)  // the quad sharing a row, both halves side by side
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) sums[m][h] += __shfl_xor_sync(0xffffffffu, sums[m][h], offset);
        float4* mine = base + split * GROUPS * RECORD;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
            for (int d = 0; d < DT; ++d) mine[(m * DT + d) * 32] = make_float4(o[m][d][0], o[m][d][1], o[m][d][2], o[m][d][3]);
            mine[(O_QUADS + m) * 32] = make_float4(row_max[m][0], row_max[m][1], sums[m][0], sums[m][1]);
        }
        named_barrier_sync(1 + group, KV_SPLIT * 32);
        // the rest with this split's index a template argument (its fragments stay in registers)
        if (split == 0) write_columns<0>(o, base, O, p, row0);
        if (KV_SPLIT > 1 && split == 1) write_columns<(KV_SPLIT > 1 ? 1 : 0)>(o, base, O, p, row0);
        if (KV_SPLIT > 2 && split == 2) write_columns<(KV_SPLIT > 2 ? 2 : 0)>(o, base, O, p, row0);
        if (KV_SPLIT > 3 && split == 3) write_columns<(KV_SPLIT > 3 ? 3 : 0)>(o, base, O, p, row0);
    }

    // column chunks SPLIT * OWN .. + OWN of the group's rows: every split's statistics and chunks
    // loaded at once, weighed (one exponential per split and row), added, normalised and stored
    template <int SPLIT>
    __device__ __forceinline__ void write_columns(const Fragments& o, const float4* records, half* O, const Problem& p,
                                                  int row0) const {
        const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
        float4 stats[KV_SPLIT][MT], theirs[KV_SPLIT][MT][OWN];
#pragma unroll
        for (int k = 0; k < KV_SPLIT; ++k)
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                stats[k][m] = records[k * GROUPS * RECORD + (O_QUADS + m) * 32];
#pragma unroll
                for (int j = 0; j < OWN; ++j)
                    if (k != SPLIT) theirs[k][m][j] = records[k * GROUPS * RECORD + (m * DT + SPLIT * OWN + j) * 32];
            }
        half2 out[MT][2][OWN];  // both row halves computed before either is stored: their chains overlap
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float top = -CUDART_INF_F, sum = 0.f, weight[KV_SPLIT];
#pragma unroll
                for (int k = 0; k < KV_SPLIT; ++k) top = fmaxf(top, h ? stats[k][m].y : stats[k][m].x);
#pragma unroll
                for (int k = 0; k < KV_SPLIT; ++k) {  // a split that saw no key of the row (max -inf) adds nothing
                    const float split_max = h ? stats[k][m].y : stats[k][m].x;
                    weight[k] = split_max == -CUDART_INF_F ? 0.f : exp_base((split_max - top) * p.logit_scale);
                    sum += (h ? stats[k][m].w : stats[k][m].z) * weight[k];
                }
                const float inv = reciprocal(sum);
#pragma unroll
                for (int j = 0; j < OWN; ++j) {
                    const int d = SPLIT * OWN + j;
                    float x = o[m][d][2 * h] * weight[SPLIT], y = o[m][d][2 * h + 1] * weight[SPLIT];
#pragma unroll
                    for (int k = 0; k < KV_SPLIT; ++k)
                        if (k != SPLIT) {
                            x += (h ? theirs[k][m][j].z : theirs[k][m][j].x) * weight[k];
                            y += (h ? theirs[k][m][j].w : theirs[k][m][j].y) * weight[k];
                        }
                    out[m][h][j] = __floats2half2_rn(x * inv, y * inv);
                }
            }
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int query = p.q0 + row0 + m * 16 + g + 8 * h;
                if (query < p.S)
#pragma unroll
                    for (int j = 0; j < OWN; ++j)
                        *reinterpret_cast<half2*>(O + (size_t)query * D + (SPLIT * OWN + j) * 8 + 2 * tq) = out[m][h][j];
            }
    }
};
#endif  // SOFTMAX == 1
