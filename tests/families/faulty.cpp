// A test-only family whose MODE knob picks a deliberate fault:
// 0 correct, 1 wrong answer, 2 NaN, 3 output never written, 4 segfault, 5 infinite loop,
// 6 does not compile, 7 correct for its first 50 calls in a process, wrong after (flaky);
// 8-10 correct (their faults kill the Ray worker from outside the kernel, see faulty.py);
// 11 correct, each call 200 us of wall time (a steady time however busy the machine).
// out[i] = SCALE * a[i] + b[i].
#include <chrono>
#include <cmath>

#if MODE == 6
#error "deliberate compile error (MODE 6)"
#endif

extern "C" void evo_axpy(const float* a, const float* b, float* out, int n) {
    if (MODE == 3) return;
    if (MODE == 4) {
        volatile float* nowhere = nullptr;
        *nowhere = 1.0f;
    }
    if (MODE == 5) {
        volatile int forever = 1;
        while (forever) {
        }
    }
    static int calls = 0;
    const bool wrong = MODE == 1 || (MODE == 7 && ++calls > 50);
    for (int i = 0; i < n; ++i) out[i] = SCALE * a[i] + b[i] + (wrong ? 0.5f : 0.0f);
    if (MODE == 2) out[n / 2] = NAN;
    if (MODE == 11) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        while (std::chrono::steady_clock::now() < until) {
        }
    }
}
