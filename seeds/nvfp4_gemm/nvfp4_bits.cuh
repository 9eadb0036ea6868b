// nvfp4_gemm (see nvfp4_gemm.cu): where an e2m1 code's bits go in an fp16, for the device and the host
// (tests/test_nvfp4_bits.py runs these on the CPU). An e2m1 code (s e e m) placed as the fp16 bits
// (s 0 0 0 e e m 0...0) is the e2m1 value times 2^-14, subnormals included. A word holds 8 codes,
// value i in bits 4i..4i+3; each placement turns it into 4 fp16 pairs (pair K: low and high half),
// each value exactly once, in its own order: a and b go through the same one, so their K slots pair up.
#include <stdint.h>

// BIT_PLACEMENT 0 (shifts): pair K = {v(3 - K), v(7 - K)}; its sign bits move up 4K to bits 15 / 31, its
// e e m bits 4K - 3 to bits 9..11 / 25..27 (15 integer operations a word)
template <int K>
__host__ __device__ __forceinline__ uint32_t shifted_pair(uint32_t w) {
    if constexpr (K == 0)
        return (w & 0x80008000u) | ((w >> 3) & 0x0E000E00u);
    else
        return ((w << 4 * K) & 0x80008000u) | ((w << (4 * K - 3)) & 0x0E000E00u);
}

// prmt's default mode: byte i of the result is byte (selector >> 4i) & 7 of the 8 bytes {high, low}
__host__ __device__ __forceinline__ uint32_t permute_bytes(uint32_t low, uint32_t high, uint32_t selector) {
#ifdef __CUDA_ARCH__
    return __byte_perm(low, high, selector);
#else
    const uint64_t bytes = (uint64_t(high) << 32) | low;
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i) out |= uint32_t(bytes >> (8 * ((selector >> (4 * i)) & 7)) & 0xFF) << (8 * i);
    return out;
#endif
}

// BIT_PLACEMENT 1 (bytes): an fp16 of this form has a zero low byte and the high byte (s 0 0 0 e e m 0).
// The four even values' high bytes are made in one word and the four odd ones' in another (7 integer
// operations); prmt sets two of them above zero bytes (4 more): pairs {v0, v2}, {v4, v6}, {v1, v3}, {v5, v7}
struct BytePlacement {
    uint32_t even, odd;
    __host__ __device__ __forceinline__ explicit BytePlacement(uint32_t w)
        : even(((w << 4) & 0x80808080u) | ((w << 1) & 0x0E0E0E0Eu)),
          odd((w & 0x80808080u) | ((w >> 3) & 0x0E0E0E0Eu)) {}
    template <int K>
    __host__ __device__ __forceinline__ uint32_t pair() const {
        return permute_bytes(K < 2 ? even : odd, 0, K % 2 == 0 ? 0x1404 : 0x3424);
    }
};
