// NVFP4 block-scaled GEMM on Hopper (sm_90a), which has no FP4 tensor cores: the e2m1 values are
// turned into fp16 inside the main loop, multiplied by their e4m3 scale, and fed to mma.sync
// m16n8k16 with fp32 accumulation.
//
//   c[l, m, n] = fp16( sum_k a[l, m, k] * sfa[l, m, k / 16] * b[l, n, k] * sfb[l, n, k / 16] )
//
// a: [L][M][K / 2] bytes, b: [L][N][K / 2] bytes (both K-major, two e2m1 a byte, even k low);
// sfa: [L][M][K / 16], sfb: [L][N][K / 16] e4m3 codes, plain row-major (blocked = 0) or in the
// cuBLAS / CUTLASS blocked layout (blocked = 1: 128 x 4 tiles, 32-row groups interleaved).
// A product of an e2m1 value and an e4m3 scale has at most 5 significant bits and lies in
// [2^-10, 2688]: exact in fp16, so the only rounding is the fp32 accumulation and the final store.
//
// Dequantisation: an e2m1 code (s e e m) becomes the e4m3 byte (s 0 0 e e m 0 0), whose value is
// the e2m1 value times 2^-6 (subnormals included), and the hardware converts e4m3 pairs to fp16
// pairs (cvt.rn.f16x2.e4m3x2); the 2^6 goes into the scale. K may be permuted inside a row as long
// as A and B are permuted alike: a thread takes 8 consecutive values (one 32-bit word, one scale)
// of a 32-wide K span and uses them as its k slots of two m16n8k16 steps.
// Accumulation: the tensor core adds its products into the fp32 accumulator with truncation, which
// over K = 16384 drifts by up to ~1e-3 of the result (measured on the H100); so each K tile's mma
// results go to fresh accumulators that are added (IEEE fp32) to the running ones after the tile.
//
// Knobs (macros):
//   BLOCK_M, BLOCK_N, BLOCK_K   block tile (BLOCK_K in K elements: 64 or 128)
//   WARPS_M, WARPS_N            warp grid; a warp owns (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N)
//   STAGES                      cp.async pipeline depth (packed values and scales of a K tile)
//   SPLIT_K                     blocks sharing one output tile, each on a contiguous range of K
//                               tiles; each leaves its fp32 partial tile in a workspace and the last
//                               to take its tile's ticket adds the others' to its own and stores
#include <cuda_fp16.h>

constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int ROW_BYTES = BLOCK_K / 2 + 16;  // packed values of a row, padded: conflict-free words
constexpr int SCALES = BLOCK_K / 16;         // scales of a row in a K tile
constexpr int WARP_M = BLOCK_M / WARPS_M, WARP_N = BLOCK_N / WARPS_N;
constexpr int MT = WARP_M / 16, NT = WARP_N / 8;
static_assert(WARP_M % 16 == 0 && WARP_N % 8 == 0, "a warp owns whole 16 x 8 mma tiles");
static_assert(BLOCK_K % 64 == 0, "BLOCK_K is 64 or 128");

__host__ __device__ constexpr int align128(int bytes) { return (bytes + 127) / 128 * 128; }
constexpr int A_BYTES = BLOCK_M * ROW_BYTES, B_BYTES = BLOCK_N * ROW_BYTES;
constexpr int STAGE_BYTES = align128(A_BYTES + B_BYTES + (BLOCK_M + BLOCK_N) * SCALES);
constexpr int SHARED_BYTES = STAGES * STAGE_BYTES;

struct Operand {
    const unsigned char* values;  // this batch's [rows][K / 2]
    const unsigned char* scales;  // this batch's scales, plain or blocked
    int rows, first_row;          // rows of the operand; the block's first
};

// byte offset of scale (row, column) of a rows x columns scale matrix in the blocked layout
__device__ __forceinline__ int blocked_offset(int row, int column, int columns) {
    const int tile = (row / 128) * ((columns + 3) / 4) + column / 4;
    return tile * 512 + (row % 32) * 16 + (row % 128) / 32 * 4 + column % 4;
}

__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void copy4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}

// ROWS rows of one operand's K tile kt into shared memory: values (16-byte copies), scales (4 bytes:
// 4 consecutive scales of a row are contiguous in both layouts). Rows past the operand read zeros.
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned char* values, unsigned char* scales, const Operand& op, int kt,
                                          int K, int blocked) {
    constexpr int chunks = BLOCK_K / 32;  // 16-byte chunks of a row
    for (int i = threadIdx.x; i < ROWS * chunks; i += THREADS) {
        const int r = i / chunks, c = i % chunks, row = op.first_row + r;
        const bool valid = row < op.rows;
        copy16(values + r * ROW_BYTES + c * 16,
               op.values + (valid ? (size_t)row * (K / 2) + kt * (BLOCK_K / 2) + c * 16 : 0), valid);
    }
    const int columns = K / 16;
    for (int i = threadIdx.x; i < ROWS * (SCALES / 4); i += THREADS) {
        const int r = i / (SCALES / 4), c = i % (SCALES / 4), row = op.first_row + r;
        const bool valid = row < op.rows;
        const int column = kt * SCALES + c * 4;
        const size_t offset = !valid ? 0 : blocked ? blocked_offset(row, column, columns) : (size_t)row * columns + column;
        copy4(scales + r * SCALES + c * 4, op.scales + offset, valid);
    }
}

__device__ __forceinline__ uint32_t e4m3x2_to_half2(unsigned short pair) {
    uint32_t out;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(pair));
    return out;
}

__device__ __forceinline__ uint32_t mul_half2(uint32_t a, uint32_t b) {
    uint32_t out;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(a), "r"(b));
    return out;
}

// 8 e2m1 values (one word) times their e4m3 scale -> 4 fp16 pairs: {v0, v2}, {v4, v6}, {v1, v3}, {v5, v7}
__device__ __forceinline__ void dequantize8(uint32_t word, unsigned scale, uint32_t (&out)[4]) {
    const uint32_t low = word & 0x0F0F0F0Fu, high = (word >> 4) & 0x0F0F0F0Fu;
    const uint32_t e_low = ((low & 0x08080808u) << 4) | ((low & 0x07070707u) << 2);  // e4m3 bytes, value * 2^-6
    const uint32_t e_high = ((high & 0x08080808u) << 4) | ((high & 0x07070707u) << 2);
    const uint32_t factor = mul_half2(e4m3x2_to_half2(scale | (scale << 8)), 0x54005400u);  // scale * 64, twice
    out[0] = mul_half2(e4m3x2_to_half2(e_low & 0xFFFF), factor);
    out[1] = mul_half2(e4m3x2_to_half2(e_low >> 16), factor);
    out[2] = mul_half2(e4m3x2_to_half2(e_high & 0xFFFF), factor);
    out[3] = mul_half2(e4m3x2_to_half2(e_high >> 16), factor);
}

// a row's word for this thread in span s of a stage: values 32 s + 8 t .. + 7, and their scale
__device__ __forceinline__ void row_word(const unsigned char* values, const unsigned char* scales, int row, int s,
                                         uint32_t (&out)[4]) {
    const int t = threadIdx.x % 4;
    const uint32_t word = *reinterpret_cast<const uint32_t*>(values + row * ROW_BYTES + s * 16 + t * 4);
    dequantize8(word, scales[row * SCALES + 2 * s + t / 2], out);
}

// the warp's tile over one stage: two m16n8k16 steps per 32-wide span of K, into fresh accumulators
// added to acc at the end (see "Accumulation" above)
__device__ __forceinline__ void compute_stage(float (&acc)[MT][NT][4], const unsigned char* stage, int warp_row,
                                              int warp_col) {
    float tile[MT][NT][4] = {};
    const unsigned char* a_values = stage;
    const unsigned char* b_values = stage + A_BYTES;
    const unsigned char* a_scales = stage + A_BYTES + B_BYTES;
    const unsigned char* b_scales = a_scales + BLOCK_M * SCALES;
    const int g = threadIdx.x % 32 / 4;
#pragma unroll
    for (int s = 0; s < BLOCK_K / 32; ++s) {
        uint32_t a[MT][2][4], b[NT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            uint32_t top[4], bottom[4];  // rows g and g + 8 of the 16-row tile
            row_word(a_values, a_scales, warp_row + m * 16 + g, s, top);
            row_word(a_values, a_scales, warp_row + m * 16 + g + 8, s, bottom);
#pragma unroll
            for (int step = 0; step < 2; ++step) {
                a[m][step][0] = top[2 * step];
                a[m][step][1] = bottom[2 * step];
                a[m][step][2] = top[2 * step + 1];
                a[m][step][3] = bottom[2 * step + 1];
            }
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) row_word(b_values, b_scales, warp_col + n * 8 + g, s, b[n]);
#pragma unroll
        for (int step = 0; step < 2; ++step)
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < NT; ++n) mma16816(tile[m][n], a[m][step], b[n][2 * step], b[n][2 * step + 1]);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] += tile[m][n][e];
}

// each accumulator pair's place in the block tile: row, column of acc[m][n][2h], acc[m][n][2h + 1]
#define FOR_EACH_PAIR(...)                                                              \
    _Pragma("unroll") for (int m = 0; m < MT; ++m)                                       \
    _Pragma("unroll") for (int n = 0; n < NT; ++n)                                       \
    _Pragma("unroll") for (int h = 0; h < 2; ++h) {                                      \
        const int row = warp_row + m * 16 + lane / 4 + 8 * h;                            \
        const int col = warp_col + n * 8 + lane % 4 * 2;                                 \
        __VA_ARGS__                                                                      \
    }

extern "C" __global__ void __launch_bounds__(THREADS)
nvfp4_gemm(const unsigned char* a, const unsigned char* b, const unsigned char* sfa, const unsigned char* sfb,
           half* c, int M, int N, int K, int blocked, float* workspace, unsigned* tickets) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int batch = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;
    const int m0 = blockIdx.y * BLOCK_M, n0 = blockIdx.x * BLOCK_N;
    const size_t a_scale_bytes = blocked ? (size_t)(M + 127) / 128 * 128 * ((K / 16 + 3) / 4 * 4) : (size_t)M * (K / 16);
    const size_t b_scale_bytes = blocked ? (size_t)(N + 127) / 128 * 128 * ((K / 16 + 3) / 4 * 4) : (size_t)N * (K / 16);
    const Operand A{a + (size_t)batch * M * (K / 2), sfa + batch * a_scale_bytes, M, m0};
    const Operand B{b + (size_t)batch * N * (K / 2), sfb + batch * b_scale_bytes, N, n0};
    const int k_tiles = K / BLOCK_K, begin = split * k_tiles / SPLIT_K, end = (split + 1) * k_tiles / SPLIT_K;

    auto load_stage = [&](int kt) {
        unsigned char* stage = smem + (kt - begin) % STAGES * STAGE_BYTES;
        load_tile<BLOCK_M>(stage, stage + A_BYTES + B_BYTES, A, kt, K, blocked);
        load_tile<BLOCK_N>(stage + A_BYTES, stage + A_BYTES + B_BYTES + BLOCK_M * SCALES, B, kt, K, blocked);
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (begin + s < end) load_stage(begin + s);
        cp_async_commit();
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / WARPS_N * WARP_M, warp_col = warp % WARPS_N * WARP_N;
    float acc[MT][NT][4] = {};
    for (int kt = begin; kt < end; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and everyone is done with the stage refilled next
        if (kt + STAGES - 1 < end) load_stage(kt + STAGES - 1);
        cp_async_commit();
        compute_stage(acc, smem + (kt - begin) % STAGES * STAGE_BYTES, warp_row, warp_col);
    }

    half* out = c + (size_t)batch * M * N;
#if SPLIT_K > 1
    // this block's partial tile into its record; the last of the tile's SPLIT_K blocks adds the others'
    const size_t tile = ((size_t)batch * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    float* records = workspace + tile * SPLIT_K * BLOCK_M * BLOCK_N;
    FOR_EACH_PAIR(*reinterpret_cast<float2*>(records + split * BLOCK_M * BLOCK_N + row * BLOCK_N + col) =
                      make_float2(acc[m][n][2 * h], acc[m][n][2 * h + 1]);)
    if (!last_to_arrive(tickets + tile, SPLIT_K)) return;
    for (int other = 0; other < SPLIT_K; ++other) {
        if (other == split) continue;
        FOR_EACH_PAIR(const float2 v = __ldcg(reinterpret_cast<const float2*>(
                          records + other * BLOCK_M * BLOCK_N + row * BLOCK_N + col));
                      acc[m][n][2 * h] += v.x; acc[m][n][2 * h + 1] += v.y;)
    }
#endif
    FOR_EACH_PAIR(if (m0 + row < M && n0 + col < N) *reinterpret_cast<half2*>(
                      out + (size_t)(m0 + row) * N + n0 + col) = __floats2half2_rn(acc[m][n][2 * h], acc[m][n][2 * h + 1]);)
}

// what the kernel carves out of shared memory, read back by the family's load() to check spec.py
extern "C" __constant__ int nvfp4_shared_bytes = SHARED_BYTES;
