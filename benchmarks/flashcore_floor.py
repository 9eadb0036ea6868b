"""What the mission shape (1,8,512,64) costs at least on this GPU, timed like every kernel (GPU).

    python benchmarks/flashcore_floor.py

Trivial kernels, built with nvcc and launched through cuda.bindings exactly as a FlashCore
genome is, timed by fitness.benchmark (CUDA-graph bursts, median) beside cuDNN SDPA in the same
process: an empty kernel (one block; the mission grid of 128 blocks x 256 threads), and kernels
whose blocks each read their head's K and V (as an attention block must) and write its rows of O.
The gap between these and an attention kernel is the work itself.

``read_kv_bulk`` brings each tensor in with one bulk (TMA) copy instead of 16-byte loads, for
blocks of 32 query rows (the mission grid) and of 64 (half as many blocks, each still reading
its head's whole K and V). ``read_kv_shared2`` / ``4``: clusters of 2 or 4 query blocks of a head,
each block bulk-copying a part of K and V multicast into all of them (no ring: the whole K and V stay).
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

SOURCE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void empty_kernel(const half* q, half* o) {}

// each block reads the whole K and V of its head (S x 64 halves each) and writes 32 rows of O
extern "C" __global__ void read_kv(const half* q, const half* k, const half* v, half* o, int s) {
    const size_t head = (size_t)blockIdx.y * s * 64;
    uint4 mix = make_uint4(0, 0, 0, 0);
    for (int i = threadIdx.x; i < s * 64 / 8; i += blockDim.x) {
        const uint4 a = reinterpret_cast<const uint4*>(k + head)[i], b = reinterpret_cast<const uint4*>(v + head)[i];
        mix.x ^= a.x ^ b.x; mix.y ^= a.y ^ b.y; mix.z ^= a.z ^ b.z; mix.w ^= a.w ^ b.w;
    }
    const size_t rows = head + blockIdx.x * 32 * 64;
    for (int i = threadIdx.x; i < 32 * 64 / 8; i += blockDim.x) {
        uint4 value = reinterpret_cast<const uint4*>(q + rows)[i];
        value.x ^= mix.x ^ mix.y ^ mix.z ^ mix.w;
        reinterpret_cast<uint4*>(o + rows)[i] = value;
    }
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// once `full` completes (phase 0): K and V are in `stage`; fold a word of each into `rows` rows of O
__device__ __forceinline__ void finish_rows(unsigned long long* full, const unsigned char* stage, unsigned bytes,
                                            const half* q, half* o, size_t out_rows, int rows) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_address(full)) : "memory");
    }
    const unsigned mix = reinterpret_cast<const unsigned*>(stage)[threadIdx.x] ^
                         reinterpret_cast<const unsigned*>(stage + bytes)[threadIdx.x];
    for (int i = threadIdx.x; i < rows * 64; i += blockDim.x)
        o[out_rows + i] = __float2half(__half2float(q[out_rows + i]) + (mix & 1));
}

// like read_kv, but each tensor arrives by one bulk (TMA) copy into shared memory; blocks of `rows` query rows
extern "C" __global__ void read_kv_bulk(const half* q, const half* k, const half* v, half* o, int s, int rows) {
    extern __shared__ __align__(128) unsigned char stage[];
    __shared__ __align__(8) unsigned long long full;
    const size_t head = (size_t)blockIdx.y * s * 64;
    const unsigned bytes = s * 64 * 2;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_address(&full)));
        asm volatile("fence.proxy.async.shared::cta;");
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_address(&full)), "r"(2 * bytes));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_address(stage)), "l"(k + head), "r"(bytes), "r"(smem_address(&full)) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_address(stage + bytes)), "l"(v + head), "r"(bytes), "r"(smem_address(&full))
                     : "memory");
    }
    __syncthreads();
    finish_rows(&full, stage, bytes, q, o, head + (size_t)blockIdx.x * rows * 64, rows);
}

// like read_kv_bulk for blocks of 32 rows, but the N consecutive query blocks of a thread-block
// cluster share their head's K and V: block r bulk-copies 1/N of each tensor and multicasts it into
// every block of the cluster (L2 sends each byte once per cluster, every SM still takes in 128 KB)
#define READ_KV_SHARED(N)                                                                                   \
    extern "C" __global__ void __cluster_dims__(N, 1, 1)                                                    \
        read_kv_shared##N(const half* q, const half* k, const half* v, half* o, int s) {                     \
        extern __shared__ __align__(128) unsigned char stage[];                                             \
        __shared__ __align__(8) unsigned long long full;                                                    \
        const size_t head = (size_t)blockIdx.y * s * 64;                                                    \
        const unsigned bytes = s * 64 * 2, part = bytes / N;                                                \
        unsigned rank;                                                                                      \
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));                                       \
        if (threadIdx.x == 0) {                                                                             \
            asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_address(&full)));                   \
            asm volatile("fence.mbarrier_init.release.cluster;");                                          \
            asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_address(&full)),    \
                         "r"(2 * bytes));                                                                  \
        }                                                                                                   \
        asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory"); \
        if (threadIdx.x == 0) {                                                                             \
            const unsigned short mask = (1 << N) - 1;                                                       \
            for (int t = 0; t < 2; ++t)                                                                     \
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster " \
                             "[%0], [%1], %2, [%3], %4;"                                                   \
                             ::"r"(smem_address(stage + t * bytes + rank * part)),                           \
                             "l"((const char*)(t ? v : k) + head * 2 + rank * part), "r"(part),              \
                             "r"(smem_address(&full)), "h"(mask) : "memory");                             \
        }                                                                                                   \
        finish_rows(&full, stage, bytes, q, o, head + (size_t)blockIdx.x * 32 * 64, 32);                      \
        asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory"); \
    }
READ_KV_SHARED(2)
READ_KV_SHARED(4)
"""


def main() -> None:
    import torch

    from evo.fitness.benchmark import time_runs
    from evo.seeds import TimingPlan
    from evo.runtime.cuda import CudaModule, ptr

    work = Path(tempfile.mkdtemp(prefix="flashcore-floor-"))
    (work / "floor.cu").write_text(SOURCE)
    subprocess.run(["nvcc", "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-o", str(work / "floor.cubin"),
                    str(work / "floor.cu")], check=True)
    module = CudaModule(work / "floor.cubin")
    plan = TimingPlan(warmup=5, min_runs=30, max_runs=200, min_seconds=0.1)
    q, k, v = (torch.randn(1, 8, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    s = ctypes.c_int(512)
    empty, read_kv, bulk = module.kernel("empty_kernel"), module.kernel("read_kv"), module.kernel("read_kv_bulk")
    bulk.set_max_dynamic_shared(2 * 512 * 128)
    empty.set_max_dynamic_shared(170 * 1024)

    def bulk_case(rows: int):
        grid, args = (512 // rows, 8), [ptr(q), ptr(k), ptr(v), ptr(o), s, ctypes.c_int(rows)]
        return (f"{grid[0]} x 8 blocks of {rows} rows, each bulk-copying (TMA) its head's K and V (128 KB)",
                lambda: bulk.launch(grid, (256,), args, shared_bytes=2 * 512 * 128))

    def shared_case(n: int):
        kernel = module.kernel(f"read_kv_shared{n}")
        kernel.set_max_dynamic_shared(2 * 512 * 128)
        args = [ptr(q), ptr(k), ptr(v), ptr(o), s]
        return (f"16 x 8 blocks of 32 rows, clusters of {n} sharing K and V by multicast bulk copies",
                lambda: kernel.launch((16, 8), (256,), args, shared_bytes=2 * 512 * 128))

    cases = [
        ("empty kernel, 1 block of 32 threads", lambda: empty.launch((1, 1), (32,), [ptr(q), ptr(o)])),
        ("empty kernel, 16 x 8 blocks of 256 threads", lambda: empty.launch((16, 8), (256,), [ptr(q), ptr(o)])),
        ("the same with 64 KB of dynamic shared memory a block",
         lambda: empty.launch((16, 8), (256,), [ptr(q), ptr(o)], shared_bytes=64 * 1024)),
        ("the same with 170 KB of dynamic shared memory a block",
         lambda: empty.launch((16, 8), (256,), [ptr(q), ptr(o)], shared_bytes=170 * 1024)),
        ("16 x 8 blocks each reading its head's K and V (128 KB)",
         lambda: read_kv.launch((16, 8), (256,), [ptr(q), ptr(k), ptr(v), ptr(o), s])),
        bulk_case(32), bulk_case(64), shared_case(2), shared_case(4),
        ("cuDNN SDPA (the anchor)", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)),
    ]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; shape (1,8,512,64) fp16")
    for name, run in cases:
        print(f"| {name} | {time_runs(run, 'cuda', plan, name).median_s * 1e6:.2f} us |")


if __name__ == "__main__":
    main()
