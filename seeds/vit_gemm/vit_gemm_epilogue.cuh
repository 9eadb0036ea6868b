// vit_gemm (see vit_gemm.cu): bias and pos for the epilogue (read, prefetched by cp.async or TMA)
// and the one epilogue function of every variant.
// bias and pos of the values a thread finishes in one chunk, loaded ahead of their use
struct ChunkOperands {
#if EPILOGUE_READS == 1
    float4 bias;
    float4 pos[WG_ROWS / 8];
#else
    float2 bias[CHUNK / 8];
    float2 pos[M_TILES][2][CHUNK / 8];
#endif
};

__device__ __forceinline__ void load_operands(ChunkOperands& o, int chunk, int row0, int col0, int M, int N, int P,
                                              const float* __restrict__ bias, const float* __restrict__ pos) {
    const Place at;
    col0 += chunk * CHUNK;  // N % 8 == 0: a lane's 2 or 4 columns are all inside or all outside
#if EPILOGUE_READS == 1
    const int col = col0 + at.rowwise_col();
    o.bias = col < N ? *reinterpret_cast<const float4*>(bias + col) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < WG_ROWS / 8; ++i) {
        const int row = row0 + at.rowwise_row(i);
        o.pos[i] = col < N && row < M ? *reinterpret_cast<const float4*>(pos + (size_t)(row % P) * N + col)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#else
#pragma unroll
    for (int jj = 0; jj < CHUNK / 8; ++jj) {
        const int col = col0 + at.fragment_col(jj);
        o.bias[jj] = col < N ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int t = 0; t < M_TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + at.fragment_row(t, h);
            const float* pos_row = pos + (size_t)((row < M ? row : 0) % P) * N;
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) {
                const int col = col0 + at.fragment_col(jj);
                o.pos[t][h][jj] = col < N ? *reinterpret_cast<const float2*>(pos_row + col) : make_float2(0.f, 0.f);
            }
        }
#endif
}

// OPERAND_PREFETCH: pos of a consumer's chunk sits in shared memory in the order the consumer reads
// it: value v = (t, h, jj) of thread x at float2 (v * 128 + x), so that a warp reads 256 contiguous bytes
__device__ __forceinline__ int prefetched_index(int t, int h, int jj, int thread) {
    return ((t * 2 + h) * (CHUNK / 8) + jj) * 128 + thread;
}

// the consumer's sequence-th chunk: its buffer sequence % PREFETCH_BUFFERS, round sequence / PREFETCH_BUFFERS
__device__ __forceinline__ void take_prefetched(ChunkOperands& o, int chunk, int row0, int col0, int N, int P,
                                                const float* __restrict__ bias, const float2* buffers,
                                                uint64_t* full, uint64_t* free, int sequence) {
#if EPILOGUE_READS == 0
    const Place at;
#pragma unroll
    for (int jj = 0; jj < CHUNK / 8; ++jj) {  // the same 8 pairs for every row: hits in L1
        const int col = col0 + chunk * CHUNK + at.fragment_col(jj);
        o.bias[jj] = col < N ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.f, 0.f);
    }
    const int b = sequence % PREFETCH_BUFFERS;
    const float2* prefetched = buffers + b * (PREFETCH_BYTES / (CONSUMERS * PREFETCH_BUFFERS * 8));
    barrier_wait(full + b, (sequence / PREFETCH_BUFFERS) & 1);
#pragma unroll
    for (int t = 0; t < M_TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#if POS_TMA
            // row r of the consumer's rows: in the first buffer while row0 % P + r < P, else in the second;
            // its 16-byte column group g of a 32-column box sits at group g ^ (r % 8)
            const int r = at.fragment_row(t, h);
            const unsigned char* box = reinterpret_cast<const unsigned char*>(prefetched) +
                                       (row0 % P + r < P ? 0 : 2 * POS_BOX_BYTES) + r * 128;
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) {
                const int c = at.fragment_col(jj);  // 0..63: box c / 32, byte (c % 32) * 4 of its row
                o.pos[t][h][jj] = *reinterpret_cast<const float2*>(
                    box + (c / 32) * POS_BOX_BYTES + ((((c % 32) / 4) ^ (r % 8)) * 16) + (c % 4) * 4);
            }
#else
#pragma unroll
            for (int jj = 0; jj < CHUNK / 8; ++jj) o.pos[t][h][jj] = prefetched[prefetched_index(t, h, jj, threadIdx.x % 128)];
#endif
        }
#if POS_TMA
    // the next TMA write into this buffer is in the async proxy: order these generic-proxy reads
    // before it (without the fence a read still in flight could see the next chunk: wrong pos in
    // 1-5 of 40 launches on the H100)
    fence_proxy_async();
#endif
    barrier_arrive(free + b);
#endif
}

// POS_TMA: one thread brings every chunk every consumer finishes, in the consumers' order, into the
// consumer's next buffer once the consumer has read what it held
__device__ void load_pos(const Tiles& tiles, int owned, int N, int P, const TensorMap* pos_map, unsigned char* buffers,
                         uint64_t* full, uint64_t* free) {
    int sequence[CONSUMERS] = {};
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        for (int chunk = 0; chunk < BLOCK_N / CHUNK && origin.y + chunk * CHUNK < N; ++chunk) {
#pragma unroll
            for (int c = 0; c < CONSUMERS; ++c) {
                if (SCHEDULE == 1 && i % 2 != c) continue;
                const int p0 = (origin.x + (SCHEDULE == 1 ? 0 : c * WG_ROWS)) % P;
                const int b = c * PREFETCH_BUFFERS + sequence[c] % PREFETCH_BUFFERS, round = sequence[c] / PREFETCH_BUFFERS;
                if (round > 0) barrier_wait(free + b, (round - 1) & 1);
                unsigned char* buffer = buffers + b * 4 * POS_BOX_BYTES;
                const bool wraps = p0 + WG_ROWS > P;
                barrier_expect_bytes(full + b, (wraps ? 4 : 2) * POS_BOX_BYTES);
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int col = origin.y + chunk * CHUNK + 32 * half;
                    tma_load(buffer + half * POS_BOX_BYTES, pos_map, col, p0, full + b);
                    if (wraps) tma_load(buffer + (2 + half) * POS_BOX_BYTES, pos_map, col, p0 - P, full + b);
                }
                ++sequence[c];
            }
        }
    }
}

// The prefetching warps (producer warpgroup, warps 1..3): for every chunk every consumer finishes, in
// the consumers' order, the rows of pos copied along rows (16 bytes a lane, cp.async) into the
// consumer's next buffer once the consumer has read what it held; the copies themselves arrive on the
// buffer's "full" barrier when they land
__device__ void prefetch_operands(const Tiles& tiles, int owned, int M, int N, int P, const float* __restrict__ pos,
                                  float2* buffers, uint64_t* full, uint64_t* free) {
    const int p = threadIdx.x - 32;
    int sequence[CONSUMERS] = {};
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        // chunk by chunk, each consumer's in turn: cooperative consumers finish their chunks together
        for (int chunk = 0; chunk < BLOCK_N / CHUNK && origin.y + chunk * CHUNK < N; ++chunk) {
#pragma unroll
            for (int c = 0; c < CONSUMERS; ++c) {
                if (SCHEDULE == 1 && i % 2 != c) continue;
                const int row0 = origin.x + (SCHEDULE == 1 ? 0 : c * WG_ROWS);
                const int b = c * PREFETCH_BUFFERS + sequence[c] % PREFETCH_BUFFERS, round = sequence[c] / PREFETCH_BUFFERS;
                if (round > 0) barrier_wait(free + b, (round - 1) & 1);
                float2* buffer = buffers + b * WG_ROWS * CHUNK / 2;
                for (int e = p; e < WG_ROWS * CHUNK / 4; e += PREFETCHERS) {
                    const int r = e / (CHUNK / 4), k = e % (CHUNK / 4), row = row0 + r;
                    const int col = origin.y + chunk * CHUNK + 4 * k;
                    const bool inside = row < M && col < N;
                    // row r, columns 4k..4k+3: pair jj = k / 2 of lane (r % 8) * 4 + 2 (k % 2) and the next lane
                    const int thread = (r % 64) / 16 * 32 + (r % 8) * 4 + 2 * (k % 2);
                    copy16_async(buffer + prefetched_index(r / 64, (r % 16) / 8, k / 2, thread),
                                 inside ? pos + (size_t)(row % P) * N + col : pos, inside);
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(full + b))
                             : "memory");
                ++sequence[c];
            }
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
}

// The epilogue of one consumer: its accumulators (rows row0.., columns col0..) + bias + pos, as bf16,
// one 64-column chunk at a time; the one function for every store path and every tile.
// ops[0] holds chunk 0's operands when OPERANDS_AHEAD (loaded while the last wgmma ran); then each
// chunk's successor is loaded before the chunk is finished.
__device__ __forceinline__ void epilogue(float (&acc)[M_TILES][ACC], ChunkOperands (&ops)[2], int row0, int col0,
                                         int M, int N, int P, const float* __restrict__ bias,
                                         const float* __restrict__ pos, __nv_bfloat16* __restrict__ C,
                                         const TensorMap* c_map, unsigned char* slots, int consumer,
                                         const float2* prefetched, uint64_t* prefetched_full,
                                         uint64_t* prefetched_free, int& chunk_sequence, uint64_t* table_full,
                                         int tables) {
    const Place at;
#pragma unroll
    for (int chunk = 0; chunk < BLOCK_N / CHUNK; ++chunk) {
        if (col0 + chunk * CHUNK >= N) break;  // the same for every thread of the warpgroup
        const ChunkOperands& o = ops[chunk % 2];
        if (OPERAND_PREFETCH)
            take_prefetched(ops[chunk % 2], chunk, row0, col0, N, P, bias, prefetched, prefetched_full, prefetched_free,
                            chunk_sequence);
        else if (FOLDED_TABLE) {  // bias + pos arrive in the staging
        } else if (!OPERANDS_AHEAD) load_operands(ops[chunk % 2], chunk, row0, col0, M, N, P, bias, pos);
        else if (chunk + 1 < BLOCK_N / CHUNK) load_operands(ops[(chunk + 1) % 2], chunk + 1, row0, col0, M, N, P, bias, pos);
#if EPILOGUE_READS == 1
        // the chunk to shared memory as fp32 (rows ROWWISE_STRIDE floats apart: the fragment's float2
        // writes and the rows' float4 reads meet no bank conflict), then finished row by row, 16 lanes
        // a row: the loads of bias and pos and the stores of C move whole 128-byte lines
        float* rows = reinterpret_cast<float*>(slots);
#pragma unroll
        for (int t = 0; t < M_TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const int j = chunk * CHUNK / 8 + jj;
                    *reinterpret_cast<float2*>(rows + at.fragment_row(t, h) * ROWWISE_STRIDE + at.fragment_col(jj)) =
                        make_float2(acc[t][4 * j + 2 * h], acc[t][4 * j + 2 * h + 1]);
                }
        named_sync(1 + consumer, 128);
        const int col = col0 + chunk * CHUNK + at.rowwise_col();
#pragma unroll
        for (int i = 0; i < WG_ROWS / 8; ++i) {
            const int row = row0 + at.rowwise_row(i);
            const float4 a = *reinterpret_cast<const float4*>(rows + at.rowwise_row(i) * ROWWISE_STRIDE + at.rowwise_col());
            const float4 b = o.bias, q = o.pos[i];
            if (row < M && col < N)
                *reinterpret_cast<uint2*>(C + (size_t)row * N + col) =
                    make_uint2(bf16_pair(a.x + b.x + q.x, a.y + b.y + q.y), bf16_pair(a.z + b.z + q.z, a.w + b.w + q.w));
        }
        named_sync(1 + consumer, 128);  // the rows are read before the next chunk overwrites them
#else
#if FOLDED_TABLE
        if (chunk == 0) barrier_wait(table_full, tables & 1);  // the tile's table rows are in the staging
        unsigned char* slot = slots + chunk * SLOT_BYTES;
#elif STORE == 0
        unsigned char* slot = slots + (chunk_sequence % EPI_DEPTH) * SLOT_BYTES;
        if (threadIdx.x % 128 == 0) tma_store_wait_read<EPI_DEPTH - 1>();  // the slot's previous store has read it
        named_sync(1 + consumer, 128);
#endif
#pragma unroll
        for (int t = 0; t < M_TILES; ++t) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int local_row = at.fragment_row(t, h), row = row0 + local_row;
                float2 v[CHUNK / 8];  // the finished column pairs of this row
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const int j = chunk * CHUNK / 8 + jj;
#if FOLDED_TABLE  // bias + pos where this pair's bf16 goes (the same swizzled place, below)
                    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(
                        slot + local_row * 128 + ((jj ^ (local_row % 8)) * 16) + (at.lane % 4) * 4));
                    v[jj] = make_float2(acc[t][4 * j + 2 * h] + f.x, acc[t][4 * j + 2 * h + 1] + f.y);
#else
                    v[jj] = make_float2(acc[t][4 * j + 2 * h] + o.bias[jj].x + o.pos[t][h][jj].x,
                                        acc[t][4 * j + 2 * h + 1] + o.bias[jj].y + o.pos[t][h][jj].y);
#endif
                }
#if STORE == 2
                // 16 bytes a lane: the 4 lanes of a quad hold a pair of each 8-column group jj; after
                // a transpose by shuffles lane q holds all 8 columns of group 4 i + q
#pragma unroll
                for (int i = 0; i < CHUNK / 32; ++i) {
                    float mine[8];
#pragma unroll
                    for (int g = 0; g < 4; ++g)
#pragma unroll
                        for (int src = 0; src < 4; ++src) {
                            const float w0 = __shfl_sync(0xffffffffu, v[4 * i + g].x, (at.lane & ~3) | src);
                            const float w1 = __shfl_sync(0xffffffffu, v[4 * i + g].y, (at.lane & ~3) | src);
                            if (at.lane % 4 == g) {
                                mine[2 * src] = w0;
                                mine[2 * src + 1] = w1;
                            }
                        }
                    const int col = col0 + chunk * CHUNK + 8 * (4 * i + at.lane % 4);
                    if (row < M && col < N)  // N % 8 == 0
                        *reinterpret_cast<uint4*>(C + (size_t)row * N + col) =
                            make_uint4(bf16_pair(mine[0], mine[1]), bf16_pair(mine[2], mine[3]),
                                       bf16_pair(mine[4], mine[5]), bf16_pair(mine[6], mine[7]));
                }
#else
#pragma unroll
                for (int jj = 0; jj < CHUNK / 8; ++jj) {
                    const unsigned value = bf16_pair(v[jj].x, v[jj].y);
#if STORE == 1
                    const int col = col0 + chunk * CHUNK + at.fragment_col(jj);
                    if (row < M && col < N) *reinterpret_cast<unsigned*>(C + (size_t)row * N + col) = value;
#else
                    // 128-byte swizzle: the 16-byte column group jj of row r sits at group jj ^ (r % 8)
                    *reinterpret_cast<unsigned*>(slot + local_row * 128 + ((jj ^ (local_row % 8)) * 16) +
                                                 (at.lane % 4) * 4) = value;
#endif
                }
#endif
            }
        }
#if STORE == 0
        fence_proxy_async();  // the TMA store reads what st.shared wrote
        named_sync(1 + consumer, 128);
        if (threadIdx.x % 128 == 0) tma_store(c_map, col0 + chunk * CHUNK, row0, slot);  // clips rows >= M, columns >= N
#endif
#endif
        ++chunk_sequence;
    }
}

