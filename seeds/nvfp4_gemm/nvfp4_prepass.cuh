// nvfp4_gemm (see nvfp4_gemm.cu), A_PREPASS: a dequantised once, by a first kernel, into an fp16
// copy that every block of the swapped-wgmma GEMM streams into its stages as it is (instead of each
// of the N / BLOCK_N blocks sharing a K tile dequantising a's rows again).

// bytes of one batch's scales of a rows x K operand, plain or in the blocked layout (128 x 4 tiles)
__host__ __device__ __forceinline__ size_t scale_matrix_bytes(int rows, int K, int blocked) {
    return blocked ? (size_t)(rows + 127) / 128 * 128 * ((K / 16 + 3) / 4 * 4) : (size_t)rows * (K / 16);
}

// a [L][M][K / 2] packed, sfa plain or blocked -> out [L][M][K] fp16, each value times its scale
// times 2^-7 (as the in-block dequantisation makes them); a row's K runs in spans of 32, each
// span's values in dequantize_span's chunk order (for the skinny kernel, DESIGN 1, word by word, see below). A unit
// is (batch, row, span): 16 bytes in, 64 out.
extern "C" __global__ void __launch_bounds__(256)
nvfp4_dequantize_a(const unsigned char* a, const unsigned char* sfa, half* out, int M, int K, int blocked, int L) {
    // the GEMM, launched as this grid's programmatic dependent, may start now: it requests b's first
    // stages and waits (griddepcontrol.wait) for this grid to complete before it reads `out`
    asm volatile("griddepcontrol.launch_dependents;");
#if TMA_LOADS && DESIGN == 0  // the tile kernel's TMA stages; the skinny kernel (DESIGN 1) reads spans, whatever
                              // a genome holds its tile knobs at (a genome built as drawn, not canonical, may hold
                              // loads = tma: its prepass wrote the run order, and the skinny kernel read it as spans)
    // the run order (nvfp4_tma.cuh): a unit is a thread's run, BLOCK_K / 4 values (RUN_WORDS words) of a
    // K tile; pair c of word w of run t goes to columns run_column(w, c, t), + 1 of the tile
    const int runs = K / (BLOCK_K / 4);
    const size_t units = (size_t)L * M * runs, scale_bytes = scale_matrix_bytes(M, K, blocked);
    for (size_t unit = (size_t)blockIdx.x * blockDim.x + threadIdx.x; unit < units; unit += (size_t)gridDim.x * blockDim.x) {
        const int r = unit % runs, row = unit / runs % M, batch = unit / runs / M, t = r % 4;
        const unsigned char* scales = sfa + batch * scale_bytes;
        const int first_scale = r * (BLOCK_K / 64);  // word w's scale: first_scale + w / 2
        const size_t first = blocked ? blocked_offset(row, first_scale, K / 16) : (size_t)row * (K / 16) + first_scale;
        const unsigned char* words = a + ((size_t)batch * M + row) * (K / 2) + r * (RUN_WORDS * 4);
        uint32_t* to = reinterpret_cast<uint32_t*>(out + ((size_t)batch * M + row) * K + r / 4 * BLOCK_K + 2 * t);
#pragma unroll
        for (int w = 0; w < RUN_WORDS; ++w) {
            uint32_t pairs[4];
            dequantize8(reinterpret_cast<const uint32_t*>(words)[w], scale_factor(scales[first + w / 2]), pairs);
#pragma unroll
            for (int c = 0; c < 4; ++c) to[run_column(w, c, 0) / 2] = pairs[c];  // `to` is at run_column(0, 0, t)
        }
    }
#else
    const int spans = K / 32;
    const size_t units = (size_t)L * M * spans, scale_bytes = scale_matrix_bytes(M, K, blocked);
    for (size_t unit = (size_t)blockIdx.x * blockDim.x + threadIdx.x; unit < units; unit += (size_t)gridDim.x * blockDim.x) {
        const int s = unit % spans, row = unit / spans % M, batch = unit / spans / M;
        const unsigned char* scales = sfa + batch * scale_bytes;
        const size_t first = blocked ? blocked_offset(row, 2 * s, K / 16) : (size_t)row * (K / 16) + 2 * s;
        uint32_t chunks[4][4];
        dequantize_span(*reinterpret_cast<const uint4*>(a + ((size_t)batch * M + row) * (K / 2) + s * 16),
                        scales[first], scales[first + 1], chunks);
#if DESIGN == 1  // the skinny kernel's order: in each chunk of 4 spans (128 values), word w of span t at 16 bytes
                 // w * 4 + t, its 4 pairs (one load gives an mma's two B pairs; the 4 lanes of a row load 64 bytes)
        uint4* to = reinterpret_cast<uint4*>(out + ((size_t)batch * M + row) * K + s / 4 * 128) + s % 4;
#pragma unroll
        for (int w = 0; w < 4; ++w) to[w * 4] = make_uint4(chunks[0][w], chunks[1][w], chunks[2][w], chunks[3][w]);
#else
        uint4* to = reinterpret_cast<uint4*>(out + ((size_t)batch * M + row) * K + s * 32);
#pragma unroll
        for (int c = 0; c < 4; ++c) to[c] = make_uint4(chunks[c][0], chunks[c][1], chunks[c][2], chunks[c][3]);
#endif
    }
#endif
}

#if A_PREPASS
// The copies of a K tile of a's fp16 copy (ROWS rows from first_row) into the stage's swizzled fp16
// tile, 16 bytes each: a thread keeps one chunk column and walks rows THREADS / CHUNKS apart, so its
// sources are one pointer plus a row step and its destinations compile-time offsets. Rows past the
// operand read zeros.
template <int ROWS>
struct HalfTileLoader {
    static constexpr int CHUNKS = BLOCK_K / 8, STEP = THREADS / CHUNKS, PASSES = (ROWS + STEP - 1) / STEP;
    static_assert(THREADS % CHUNKS == 0 && STEP % 8 == 0, "a thread keeps its chunk column and swizzle row");
    const unsigned char* source;  // this thread's first row and chunk, K tile 0
    size_t row_step;              // bytes between its rows
    int first_offset, valid_rows;

    __device__ HalfTileLoader(const unsigned char* halves, int rows, int first_row, int K) {
        const int r = threadIdx.x / CHUNKS, c = threadIdx.x % CHUNKS;
        source = halves + ((size_t)(first_row + r) * K + c * 8) * 2;
        row_step = (size_t)STEP * K * 2;
        first_offset = chunk_offset(r, c, ROWS);
        valid_rows = rows - first_row - r;  // passes p with p * STEP < valid_rows read the operand
    }

    __device__ __forceinline__ void load(unsigned char* tile, int kt) const {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            if (ROWS % STEP != 0 && threadIdx.x / CHUNKS + p * STEP >= ROWS) break;
            const bool valid = p * STEP < valid_rows;
            copy16_async(tile + first_offset + p * STEP * 128, valid ? source + p * row_step + kt * BLOCK_K * 2 : source, valid);
        }
    }
};
#endif
