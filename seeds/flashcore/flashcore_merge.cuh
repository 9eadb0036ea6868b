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

// The splits of a query block's rows merge as split-K softmax does. A row group's splits are its
// KV_SPLIT warps in each of the CLUSTER blocks of a cluster: split k = rank * KV_SPLIT + the warp's split.
// O's column chunks are dealt out, split k < OWNERS writing chunks k * OWN .. k * OWN + OWN - 1. Every
// split sends each owner, into the owner's block, the (max, max, sum, sum) of its 16-row steps and the
// chunks that owner writes, in its own register order (a float4 per lane and step: conflict-free). Each
// owner then weighs every split (one exponential per split and row), adds, normalises and stores its
// chunks. In one block the sends are plain stores and the row group's warps meet at a named barrier.
// Across a cluster they are st.async stores, counted in bytes on an mbarrier of the receiving block per
// row group, on which its owners wait: no cluster barrier (about 1500 cycles on the H100), and nothing
// read across the cluster, so no block waits on another before it leaves. attention() initialises
// those mbarriers at entry and arrives (relaxed) on the cluster barrier; merge() waits on it before the
// first store into a peer, so every peer has started and initialised its barriers.
template <int D, int MT, int GROUPS>  // GROUPS: row groups of 16 * MT rows, each of KV_SPLIT warps
struct SplitMerge {
    static constexpr int SPLITS = KV_SPLIT * CLUSTER, DT = D / 8;
    static constexpr int OWNERS = SPLITS < DT ? SPLITS : DT, OWN = DT / OWNERS;
    static constexpr int O_QUADS = MT * DT, RECORD = (O_QUADS + MT) * 32;
    static_assert(DT % OWNERS == 0, "every owner writes whole column chunks");
    static_assert(GROUPS * 8 <= Plan<D>::merge_barrier_bytes || CLUSTER == 1, "an mbarrier per row group");
    using Fragments = float[MT][DT][4];

    // the owners that block b holds other than split k: how many, hence what k sends it
    __device__ __forceinline__ static int owners_for(int b, int k) {
        int count = 0;
#pragma unroll
        for (int j = b * KV_SPLIT; j < (b + 1) * KV_SPLIT && j < OWNERS; ++j) count += j != k;
        return count;
    }

    // bytes the splits send into block b for one row group (the owners there wait for them)
    __device__ __forceinline__ static unsigned bytes_into(int b) {
        unsigned bytes = 0;
#pragma unroll
        for (int k = 0; k < SPLITS; ++k) {
            const int owners = owners_for(b, k);
            if (owners > 0) bytes += (MT + MT * OWN * owners) * 32 * 16;
        }
        return bytes;
    }

    // region: SPLITS * GROUPS records of RECORD float4s (Plan's merge region); barriers: with CLUSTER > 1,
    // the row groups' mbarriers (Plan::merge_barriers)
    __device__ void merge(const Fragments& o, const float (&row_max)[MT][2], const float (&row_sum)[MT][2],
                          float* region, uint64_t* barriers, half* O, const Problem& p, int row0, int split) {
        const int lane = threadIdx.x % 32, group = row0 / (16 * MT), k = p.rank * KV_SPLIT + split;
        float4* base = reinterpret_cast<float4*>(region) + group * RECORD + lane;  // split 0's record, this lane
        uint64_t* landed = barriers + group;  // CLUSTER > 1: this row group's records are in
        float4 stats[MT];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float sums[2] = {row_sum[m][0], row_sum[m][1]};
#pragma unroll
            for (int offset = 1; offset < 4; offset *= 2)  // the quad sharing a row, both halves side by side
#pragma unroll
                for (int h = 0; h < 2; ++h) sums[h] += __shfl_xor_sync(0xffffffffu, sums[h], offset);
            stats[m] = make_float4(row_max[m][0], row_max[m][1], sums[0], sums[1]);
        }
        if constexpr (CLUSTER > 1) {
            cluster_wait();  // every peer has started and initialised its barriers
            if (split == 0 && lane == 0 && owners_for(p.rank, -1) > 0) barrier_expect_bytes(landed, bytes_into(p.rank));
        }
        float4* mine = base + k * GROUPS * RECORD;  // this split's record, in every block it sends to
#pragma unroll
        for (int b = 0; b < CLUSTER; ++b) {  // the owners in block b: splits b * KV_SPLIT ..
            if (owners_for(b, k) == 0) continue;
            const unsigned to = CLUSTER > 1 ? peer_address(mine, b) : 0u, bar = CLUSTER > 1 ? peer_address(landed, b) : 0u;
            auto send = [&](int step, float4 v) {  // step: a float4 of the record, 32 lanes apart
                if constexpr (CLUSTER > 1) store_async4(to + step * 32 * 16, v, bar);
                else mine[step * 32] = v;
            };
#pragma unroll
            for (int m = 0; m < MT; ++m) send(O_QUADS + m, stats[m]);
#pragma unroll
            for (int j = b * KV_SPLIT; j < (b + 1) * KV_SPLIT && j < OWNERS; ++j) {
                if (j == k) continue;
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int c = 0; c < OWN; ++c) {
                        const int d = j * OWN + c;
                        send(m * DT + d, make_float4(o[m][d][0], o[m][d][1], o[m][d][2], o[m][d][3]));
                    }
            }
        }
        if constexpr (CLUSTER == 1) named_barrier_sync(1 + group, KV_SPLIT * 32);
        if (k >= OWNERS) return;  // sent all it had
        if constexpr (CLUSTER > 1) barrier_wait(landed, 0);  // every other split's records are in
        write_owned(o, stats, base, O, p, row0, k, std::make_integer_sequence<int, OWNERS>{});
    }

    // split k, if an owner, writes its chunks (its index a template argument: its fragments stay in registers)
    template <int... OWNER>
    __device__ __forceinline__ void write_owned(const Fragments& o, const float4 (&stats)[MT], const float4* records,
                                                half* O, const Problem& p, int row0, int k,
                                                std::integer_sequence<int, OWNER...>) const {
        ((k == OWNER ? write_columns<OWNER>(o, stats, records, O, p, row0) : void()), ...);
    }

    // column chunks SPLIT * OWN .. + OWN of the group's rows: every other split's statistics and chunks
    // loaded at once, weighed (one exponential per split and row), added, normalised and stored
    template <int SPLIT>
    __device__ __forceinline__ void write_columns(const Fragments& o, const float4 (&own)[MT], const float4* records,
                                                  half* O, const Problem& p, int row0) const {
        const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
        float4 stats[SPLITS][MT], theirs[SPLITS][MT][OWN];
#pragma unroll
        for (int k = 0; k < SPLITS; ++k)
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                stats[k][m] = k == SPLIT ? own[m] : records[k * GROUPS * RECORD + (O_QUADS + m) * 32];
#pragma unroll
                for (int j = 0; j < OWN; ++j)
                    if (k != SPLIT) theirs[k][m][j] = records[k * GROUPS * RECORD + (m * DT + SPLIT * OWN + j) * 32];
            }
        half2 out[MT][2][OWN];  // both row halves computed before either is stored: their chains overlap
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float top = -CUDART_INF_F, sum = 0.f, weight[SPLITS];
#pragma unroll
                for (int k = 0; k < SPLITS; ++k) top = fmaxf(top, h ? stats[k][m].y : stats[k][m].x);
#pragma unroll
                for (int k = 0; k < SPLITS; ++k) {  // a split that saw no key of the row (max -inf) adds nothing
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
                    for (int k = 0; k < SPLITS; ++k)
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
