"""The speed of light of a memory-bound kernel: the bytes it must move over the GPU's read bandwidth.

The read bandwidth is measured once per process and device by a read-only stream, not a copy (a copy also
writes: on the H200 it moves 2.7 TB/s read + write): a kernel of our own, compiled here by NVRTC (part of
cuda.bindings), that reads a buffer far larger than the last-level cache in 16-byte loads, many in flight, and
writes nothing; in a few launch geometries, the fastest. Where NVRTC cannot run, torch's sum over the buffer
stands in (it reads slower: 4.24 TB/s on the H200). Each timed as evo times kernels (graph replays queued
behind a spin kernel). evo's evaluators record it with a run; an exported package's self-check measures it
again on the machine it runs on. Imports torch and cuda.bindings only.
"""

from __future__ import annotations

import ctypes
import statistics

from .queued import SpinQueue, capture

BUFFER_BYTES = 1 << 30  # read per sample: far beyond any GPU's L2 (50 MiB on the H200)
SAMPLES = 7
BLOCKS_PER_SM = (2, 4, 8)  # launch geometries tried (512 threads a block); the fastest counts
THREADS = 512
READ_KERNEL = r"""
extern "C" __global__ void evo_read_stream(const uint4* __restrict__ data, unsigned long long vectors, unsigned* sink) {
    unsigned acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < vectors; i += 4 * stride) {  // four 16-byte loads in flight a thread
        const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride), c = __ldcs(data + i + 2 * stride),
                    d = __ldcs(data + i + 3 * stride);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < vectors; i += stride) acc ^= __ldcs(data + i).x;
    if (acc == 0x9e3779b9u) sink[0] = acc;  // never true for the buffer's contents; keeps the loads
}
"""
METHOD = "a read-only stream kernel (NVRTC) over 1 GiB, CUDA-graph replays"
FALLBACK_METHOD = "torch.sum over 1 GiB (fp32 and bf16, the faster), CUDA-graph replays"
_MEASURED: dict[int, tuple[float, str]] = {}


def read_bandwidth(device: int | None = None) -> float:
    """Bytes a second the current (or given) CUDA device reads, measured at this process's first call."""
    return measured(device)[0]


def measured(device: int | None = None) -> tuple[float, str]:
    """(bytes a second, how they were measured) for the current (or given) CUDA device, once a process."""
    import torch

    index = torch.cuda.current_device() if device is None else int(device)
    if index not in _MEASURED:
        with torch.cuda.device(index):
            buffer = torch.zeros(BUFFER_BYTES, dtype=torch.uint8, device="cuda")
            try:
                _MEASURED[index] = _stream(buffer), METHOD
            except Exception:  # no NVRTC here: torch's reductions read nearly as fast
                _MEASURED[index] = _reductions(buffer), FALLBACK_METHOD
            del buffer
            torch.cuda.empty_cache()
    return _MEASURED[index]


def _seconds(run) -> float:
    return statistics.median(SpinQueue.shared().batch([(None, capture(run, 1))] * SAMPLES))


def _stream(buffer) -> float:
    import torch

    from .cuda import CudaModule, current_stream, multiprocessors

    kernel = CudaModule(_compiled()).kernel("evo_read_stream")
    sink = torch.zeros(1, dtype=torch.int32, device=buffer.device)
    args = [ctypes.c_void_p(buffer.data_ptr()), ctypes.c_ulonglong(BUFFER_BYTES // 16), ctypes.c_void_p(sink.data_ptr())]
    best = 0.0
    for blocks in BLOCKS_PER_SM:
        grid = (multiprocessors() * blocks,)
        best = max(best, BUFFER_BYTES / _seconds(lambda: kernel.launch(grid, (THREADS,), args, 0, current_stream())))
    return best


def _compiled() -> bytes:
    """The read kernel's cubin for the current device, from NVRTC."""
    import torch
    from cuda.bindings import nvrtc

    major, minor = torch.cuda.get_device_capability()
    error, program = nvrtc.nvrtcCreateProgram(READ_KERNEL.encode(), b"evo_read_stream.cu", 0, [], [])
    options = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    try:
        (error,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile the read kernel: {error}")
        error, size = nvrtc.nvrtcGetCUBINSize(program)
        cubin = b" " * size
        (error,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _reductions(buffer) -> float:
    import torch

    best = 0.0
    for dtype in (torch.float32, torch.bfloat16):
        view = buffer.view(dtype)
        best = max(best, BUFFER_BYTES / _seconds(lambda: view.sum(dtype=torch.float32)))
    return best


def describe(bytes_moved: float, seconds: float | None, read: float | None) -> str:
    """"3.92 TB/s, 87% of read bandwidth" for ``bytes_moved`` in ``seconds`` against ``read`` bytes a second
    (empty where a figure is missing)."""
    if not (bytes_moved and seconds and read):
        return ""
    achieved = bytes_moved / seconds
    return f"{achieved / 1e12:.2f} TB/s, {achieved / read:.0%} of read bandwidth"
