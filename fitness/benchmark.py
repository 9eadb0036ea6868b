"""Timing one callable the same way for kernels and anchors: warm-up, many runs, robust stats.

CPU: each sample is one call timed with ``perf_counter``. CUDA: each sample is one replay of a
CUDA graph holding a burst of back-to-back launches, between two CUDA events, divided by the
burst length, so that host launch overhead (tens of microseconds from Python) does not
dominate microsecond kernels.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from fitness.records import ShapeTiming
from seeds import TimingPlan

CUDA_SAMPLE_TARGET_S = 500e-6  # a CUDA burst should last at least this long
CUDA_MIN_BURST = 20  # launches a burst holds at least: one graph launch's cost spread thin
CUDA_MAX_BURST = 500


def summarize(shape: str, samples: list[float]) -> ShapeTiming:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    return ShapeTiming(shape, statistics.median(ordered), p90, stdev, len(ordered))


def time_runs(run: Callable[[], None], device: str, plan: TimingPlan, shape: str) -> ShapeTiming:
    if device == "cuda":
        return summarize(shape, _cuda_samples(run, plan))
    return summarize(shape, _cpu_samples(run, plan))


def _enough(samples: list[float], started: float, plan: TimingPlan) -> bool:
    if len(samples) >= plan.max_runs:
        return True
    return len(samples) >= plan.min_runs and time.perf_counter() - started >= plan.min_seconds


def _cpu_samples(run: Callable[[], None], plan: TimingPlan) -> list[float]:
    for _ in range(plan.warmup):
        run()
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return samples


def _cuda_samples(run: Callable[[], None], plan: TimingPlan) -> list[float]:
    """Replays of a CUDA graph holding a burst of launches (no host launch overhead in the
    figure); launches issued from Python between events where the work cannot be captured."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
        for _ in range(max(1, plan.warmup)):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    singles = []
    for _ in range(5):  # the fastest of a few: a host hiccup between the events must not shrink the burst
        begin.record()
        run()
        end.record()
        end.synchronize()
        singles.append(begin.elapsed_time(end) * 1e-3)
    single = max(min(singles), 1e-7)
    burst = max(CUDA_MIN_BURST, min(CUDA_MAX_BURST, math.ceil(CUDA_SAMPLE_TARGET_S / single)))
    replay = _capture(run, burst)
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        begin.record()
        replay()
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) * 1e-3 / burst)
    return samples


def _capture(run: Callable[[], None], burst: int) -> Callable[[], None]:
    import torch

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(burst):
                run()
        torch.cuda.synchronize()
        return graph.replay
    except RuntimeError:  # not capturable: time the launches themselves
        torch.cuda.synchronize()

        def launches() -> None:
            for _ in range(burst):
                run()

        return launches
