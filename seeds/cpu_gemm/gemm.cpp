// cpu_gemm: C[M,N] = A[M,K] @ B[K,N], fp32, row-major, any M, N, K (tails handled).
//
// Knobs arrive as macros:
//   BLOCK_M, BLOCK_N, BLOCK_K  cache tile sizes
//   LOOP_ORDER                 0 = ijk (dot products, B read down its columns)
//                              1 = ikj (row updates, B and C streamed along rows)
//                              2 = register-blocked outer products (C accumulators in registers)
//   ROWS_PER_STEP              rows of A handled together (register reuse of B), orders 1 and 2
//   VEC_WIDTH                  floats per explicit vector along N, orders 1 and 2
//   K_UNROLL                   unroll factor of the k loop
//   PACK_B                     copy each B tile into a contiguous buffer before using it
//   THREADS                    OpenMP threads over the C tiles
#include <algorithm>
#include <cstring>
#include <vector>

#ifndef BLOCK_M
#error "BLOCK_M must be defined"
#endif

#define EVO_STR2(x) #x
#define EVO_STR(x) EVO_STR2(x)
#define EVO_UNROLL _Pragma(EVO_STR(GCC unroll K_UNROLL))

typedef float vfloat __attribute__((vector_size(VEC_WIDTH * sizeof(float))));

static inline vfloat vload(const float* p) {
    vfloat v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }

// One C tile (rows x cols) += A tile (rows x depth) @ B tile (depth x cols).
static void tile_ijk(const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                     int rows, int cols, int depth) {
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
            float acc = c[i * ldc + j];
            EVO_UNROLL
            for (int k = 0; k < depth; ++k) acc += a[i * lda + k] * b[k * ldb + j];
            c[i * ldc + j] = acc;
        }
}

template <int R>
static void rows_ikj(const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                     int cols, int depth) {
    EVO_UNROLL
    for (int k = 0; k < depth; ++k) {
        float av[R];
        for (int r = 0; r < R; ++r) av[r] = a[r * lda + k];
        const float* brow = b + k * ldb;
        int j = 0;
        for (; j + VEC_WIDTH <= cols; j += VEC_WIDTH) {
            vfloat bv = vload(brow + j);
            for (int r = 0; r < R; ++r) vstore(c + r * ldc + j, vload(c + r * ldc + j) + av[r] * bv);
        }
        for (; j < cols; ++j)
            for (int r = 0; r < R; ++r) c[r * ldc + j] += av[r] * brow[j];
    }
}

template <int R>
static void rows_register(const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                          int cols, int depth) {
    int j = 0;
    for (; j + VEC_WIDTH <= cols; j += VEC_WIDTH) {
        vfloat acc[R];
        for (int r = 0; r < R; ++r) acc[r] = vload(c + r * ldc + j);
        EVO_UNROLL
        for (int k = 0; k < depth; ++k) {
            vfloat bv = vload(b + k * ldb + j);
            for (int r = 0; r < R; ++r) acc[r] += a[r * lda + k] * bv;
        }
        for (int r = 0; r < R; ++r) vstore(c + r * ldc + j, acc[r]);
    }
    for (; j < cols; ++j)
        for (int r = 0; r < R; ++r) {
            float acc = c[r * ldc + j];
            for (int k = 0; k < depth; ++k) acc += a[r * lda + k] * b[k * ldb + j];
            c[r * ldc + j] = acc;
        }
}

static void tile_rows(const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                      int rows, int cols, int depth) {
    int i = 0;
    for (; i + ROWS_PER_STEP <= rows; i += ROWS_PER_STEP) {
        if (LOOP_ORDER == 1)
            rows_ikj<ROWS_PER_STEP>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, cols, depth);
        else
            rows_register<ROWS_PER_STEP>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, cols, depth);
    }
    for (; i < rows; ++i) {  // leftover rows, one at a time
        if (LOOP_ORDER == 1)
            rows_ikj<1>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, cols, depth);
        else
            rows_register<1>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, cols, depth);
    }
}

extern "C" void evo_gemm(const float* A, const float* B, float* C, int M, int N, int K) {
    const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
#pragma omp parallel num_threads(THREADS)
    {
        std::vector<float> packed(PACK_B ? BLOCK_K * BLOCK_N : 0);
#pragma omp for schedule(static)
        for (int t = 0; t < tiles_m * tiles_n; ++t) {
            const int i0 = (t / tiles_n) * BLOCK_M, j0 = (t % tiles_n) * BLOCK_N;
            const int rows = std::min(BLOCK_M, M - i0), cols = std::min(BLOCK_N, N - j0);
            float* c = C + (long)i0 * N + j0;
            for (int i = 0; i < rows; ++i) std::memset(c + (long)i * N, 0, cols * sizeof(float));
            for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
                const int depth = std::min(BLOCK_K, K - k0);
                const float* a = A + (long)i0 * K + k0;
                const float* b = B + (long)k0 * N + j0;
                int ldb = N;
                if (PACK_B) {
                    for (int k = 0; k < depth; ++k)
                        std::memcpy(&packed[k * BLOCK_N], b + (long)k * N, cols * sizeof(float));
                    b = packed.data();
                    ldb = BLOCK_N;
                }
                if (LOOP_ORDER == 0)
                    tile_ijk(a, K, b, ldb, c, N, rows, cols, depth);
                else
                    tile_rows(a, K, b, ldb, c, N, rows, cols, depth);
            }
        }
    }
}
