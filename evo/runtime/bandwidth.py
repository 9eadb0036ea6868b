"""The speed of light of a memory-bound kernel: the bytes it must move over the GPU's read bandwidth.

The read bandwidth is measured once per process and device by a read-only stream, not a copy (a copy also
writes, and on the H200 moves 2.7 TB/s read + write where reads alone reach 4.5): torch's sum over a buffer
far larger than the last-level cache, in fp32 and in bf16, timed as evo times kernels (graph replays queued
behind a spin kernel), the best of the two. evo's evaluators record it with a run; an exported package's
self-check measures it again on the machine it runs on. Imports torch only.
"""

from __future__ import annotations

import statistics

from .queued import SpinQueue, capture

BUFFER_BYTES = 1 << 30  # read per sample: far beyond any GPU's L2 (50 MiB on the H200)
SAMPLES = 7
METHOD = "torch.sum over 1 GiB (fp32 and bf16, the faster), CUDA-graph replays"
_MEASURED: dict[int, float] = {}


def read_bandwidth(device: int | None = None) -> float:
    """Bytes a second the current (or given) CUDA device reads, measured at this process's first call."""
    import torch

    index = torch.cuda.current_device() if device is None else int(device)
    if index not in _MEASURED:
        with torch.cuda.device(index):
            buffer = torch.empty(BUFFER_BYTES, dtype=torch.uint8, device="cuda")
            buffer.view(torch.float32).uniform_()
            best = 0.0
            for dtype in (torch.float32, torch.bfloat16):
                view = buffer.view(dtype)
                queue = SpinQueue.shared()
                replay = capture(lambda: view.sum(dtype=torch.float32), 1)
                seconds = statistics.median(queue.batch([(None, replay)] * SAMPLES))
                best = max(best, BUFFER_BYTES / seconds)
            del buffer
            torch.cuda.empty_cache()
        _MEASURED[index] = best
    return _MEASURED[index]


def describe(bytes_moved: float, seconds: float | None, read: float | None) -> str:
    """"3.92 TB/s, 87% of read bandwidth" for ``bytes_moved`` in ``seconds`` against ``read`` bytes a second
    (empty where a figure is missing)."""
    if not (bytes_moved and seconds and read):
        return ""
    achieved = bytes_moved / seconds
    return f"{achieved / 1e12:.2f} TB/s, {achieved / read:.0%} of read bandwidth"
