// A test-only CUDA family: out = 2 * a + b (fp32), with a MODE knob that injects faults:
// 0 correct, 1 wrong answer, 2 NaN, 3 illegal address, 4 never finishes, 5 output never written.
#include <cuda_runtime.h>

extern "C" __global__ void __launch_bounds__(THREADS) evo_axpy(const float* __restrict__ a,
                                                               const float* __restrict__ b,
                                                               float* __restrict__ out, int n) {
    int i = blockIdx.x * THREADS + threadIdx.x;
    if (MODE == 5) return;
    if (MODE == 3 && i == 0) out[-(1L << 36)] = 1.0f;  // far outside any allocation
    if (MODE == 4) {  // a volatile global load every iteration: the compiler cannot drop the loop
        volatile const float* same = a;
        while (same[0] == same[0] || same[0] != same[0]) {
        }
    }
    for (int k = 0; k < PER_THREAD; ++k, i += gridDim.x * THREADS) {
        if (i < n) out[i] = 2.0f * a[i] + b[i] + (MODE == 1 ? 0.25f : 0.0f);
        if (MODE == 2 && i == n / 2) out[i] = __int_as_float(0x7fc00000);
    }
}
