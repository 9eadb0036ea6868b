// vit_gemm (see vit_gemm.cu), FOLDED_TABLE: bias + pos folded once a launch into an fp16 table that
// the epilogue finishes the tile in, in place.
//
// table[r, n] = fp16(pos[r % P, n] + bias[n]) for r < P + WG_ROWS - 1: a consumer's WG_ROWS rows
// starting at patch p0 = row0 % P are the table's rows p0 .. p0 + WG_ROWS - 1, one TMA box per
// 64-column chunk whatever the wrap past the last patch. fp16 keeps 11 significant bits (the output
// keeps 8) for |bias + pos| < 65504; a larger sum reads as infinity and shows in C as such.

#include <cuda_fp16.h>

// The prepass: one thread per 4 columns of a table row. The GEMM is launched as this grid's
// programmatic dependent: it starts its main loops at once and waits for the table (griddepcontrol.wait)
// only where its loader first reads it.
extern "C" __global__ void __launch_bounds__(256) vit_gemm_table(const float* __restrict__ bias,
                                                                 const float* __restrict__ pos, __half* table,
                                                                 int rows, int N, int P) {
    asm volatile("griddepcontrol.launch_dependents;");
    const int quads = N / 4;  // N % 8 == 0
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < rows * quads; e += gridDim.x * blockDim.x) {
        const int r = e / quads, col = 4 * (e % quads);
        const float4 p = *reinterpret_cast<const float4*>(pos + (size_t)(r % P) * N + col);
        const float4 b = *reinterpret_cast<const float4*>(bias + col);
        const __half2 lo = __floats2half2_rn(p.x + b.x, p.y + b.y), hi = __floats2half2_rn(p.z + b.z, p.w + b.w);
        *reinterpret_cast<uint2*>(table + (size_t)r * N + col) =
            make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
    }
}

// The table's loader (one thread of the producer warpgroup): for every tile, each consumer's rows of
// it, every chunk's box into the consumer's staging (128-byte swizzle, the layout the TMA store
// reads back), once the consumer's previous tile's stores have read the staging
__device__ void load_table(const Tiles& tiles, int owned, int N, int P, const TensorMap* table_map,
                           unsigned char* staging, uint64_t* full, uint64_t* free) {
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the prepass's table is written and visible
    int round[CONSUMERS] = {};
    for (int i = 0; i < owned; ++i) {
        const int2 origin = tiles.origin(i);
        const int chunks = min(BLOCK_N / CHUNK, (N - origin.y + CHUNK - 1) / CHUNK);
#pragma unroll
        for (int c = 0; c < CONSUMERS; ++c) {
            if (SCHEDULE == 1 && i % 2 != c) continue;
            if (round[c] > 0) barrier_wait(free + c, (round[c] - 1) & 1);
            barrier_expect_bytes(full + c, chunks * SLOT_BYTES);
            const int p0 = (origin.x + (SCHEDULE == 1 ? 0 : c * WG_ROWS)) % P;
            unsigned char* mine = staging + c * (STAGING_BYTES / CONSUMERS);
            for (int j = 0; j < chunks; ++j) tma_load(mine + j * SLOT_BYTES, table_map, origin.y + j * CHUNK, p0, full + c);
            ++round[c];
        }
    }
}

// A consumer's thread 0, in the main loop of its tile after `tables` finished ones: the previous
// tile's stores have read the staging by now (a half main loop later); wait for that and hand the
// staging to the loader
__device__ __forceinline__ void free_staging(uint64_t* free, int tables) {
    if (FOLDED_TABLE && tables > 0 && threadIdx.x % 128 == 0) {
        tma_store_wait_read<0>();
        barrier_arrive(free);
    }
}
