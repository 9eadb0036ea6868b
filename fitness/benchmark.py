"""Timing one callable the same way for kernels and anchors: warm-up, many runs, robust stats.

CPU: each sample is one call timed with ``perf_counter``. CUDA: each sample is one replay of a
CUDA graph holding a burst of back-to-back launches, between two CUDA events, divided by the
burst length, so that host launch overhead (tens of microseconds from Python) does not
dominate microsecond kernels.

Cold caches (``cold=True``): before every sample the last-level cache is flushed by reading a
buffer twice its size (``fitness._flush``, shared with an exported kernel's self-check), so the
operands come from memory, as when a model's weights are streamed from it on each call, not from a
cache that back-to-back launches keep warm. On CUDA each sample is then one launch between two
events; the launches and flushes of a batch are queued behind a spin kernel long enough for the host
to queue them all, so no host gap falls between a sample's events.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Callable

from fitness._flush import reading_flush
from fitness.records import ShapeTiming
from seeds import TimingPlan

CUDA_SAMPLE_TARGET_S = 500e-6  # a CUDA burst should last at least this long (one graph launch's cost spread thin)
CUDA_MIN_BURST = 2  # launches a burst holds at least
CUDA_MAX_BURST = 500
LAUNCH_SLACK_S = 1e-3  # what one launch from Python may add to a single launch timed between events (a
# launcher's host work, e.g. encoding tensor maps, lies between the events): only a far slower one is cut there


def summarize(shape: str, samples: list[float], cut_short: bool = False) -> ShapeTiming:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    return ShapeTiming(shape, statistics.median(ordered), p90, stdev, len(ordered), cut_short)


COLD_BATCH = 25  # CUDA samples queued behind one spin kernel


UNSTABLE_SPREAD = 0.25  # a timing whose p90 lies this far above its median is measured again, then flagged


def time_runs(run: Callable[[], None], device: str, plan: TimingPlan, shape: str, cold: bool = False,
              cutoff_s: float | None = None) -> ShapeTiming:
    """The median of many samples of ``run``; with ``cutoff_s``, timing stops after the first sample
    if that is above it (``cut_short``: a kernel that slow is not worth the full measurement). A timing
    whose samples spread wider than UNSTABLE_SPREAD (a machine busy with something else, clocks that
    change) is taken again; the steadier of the two is kept, flagged ``unstable`` if it still spreads."""
    timing = _time_once(run, device, plan, shape, cold, cutoff_s)
    if timing.cut_short or timing.spread <= UNSTABLE_SPREAD:
        return timing
    again = _time_once(run, device, plan, shape, cold, cutoff_s)
    steadier = min((timing, again), key=lambda t: (t.cut_short, t.spread))
    return replace(steadier, unstable=steadier.spread > UNSTABLE_SPREAD)


def _time_once(run, device: str, plan: TimingPlan, shape: str, cold: bool, cutoff_s: float | None) -> ShapeTiming:
    if device == "cuda":
        samples, cut = _cuda_cold_samples(run, plan, cutoff_s) if cold else _cuda_samples(run, plan, cutoff_s)
    else:
        samples, cut = _cpu_samples(run, plan, reading_flush("cpu") if cold else None, cutoff_s)
    return summarize(shape, samples, cut)


def _above(sample: float, cutoff_s: float | None) -> bool:
    return cutoff_s is not None and sample > cutoff_s


def _enough(samples: list[float], started: float, plan: TimingPlan) -> bool:
    if len(samples) >= plan.max_runs:
        return True
    return len(samples) >= plan.min_runs and time.perf_counter() - started >= plan.min_seconds


def _cpu_samples(run: Callable[[], None], plan: TimingPlan, flush: Callable[[], None] | None = None,
                 cutoff_s: float | None = None) -> tuple[list[float], bool]:
    """One call a sample; with a cutoff, a first (warm-up) call over twice the cutoff, or a first sample
    over it, cuts the timing short."""
    for number in range(plan.warmup):
        t0 = time.perf_counter()
        run()
        first = time.perf_counter() - t0
        if number == 0 and cutoff_s is not None and first > 2 * cutoff_s:
            return [first], True
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        if flush is not None:
            flush()
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
        if len(samples) == 1 and _above(samples[0], cutoff_s):
            return samples, True
    return samples, False


def _cuda_samples(run: Callable[[], None], plan: TimingPlan, cutoff_s: float | None = None) -> tuple[list[float], bool]:
    """Replays of a CUDA graph holding a burst of launches (no host launch overhead in the
    figure); launches issued from Python between events where the work cannot be captured. With a
    cutoff, a kernel whose single launch is far above it (twice, plus what a launch from Python adds)
    or whose first replay is above it is cut short there."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
        run()  # the first launch (it may load the kernel), then one between events
        begin.record()
        run()
        end.record()
        end.synchronize()
        first = begin.elapsed_time(end) * 1e-3
        if cutoff_s is not None and first > 2 * cutoff_s + LAUNCH_SLACK_S:
            torch.cuda.synchronize()
            return [first], True
        for _ in range(max(0, plan.warmup - 2)):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
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
        if len(samples) == 1 and _above(samples[0], cutoff_s):
            return samples, True
    return samples, False


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


def _cuda_cold_samples(run: Callable[[], None], plan: TimingPlan, cutoff_s: float | None = None) -> tuple[list[float], bool]:
    """One launch per sample between two events, each after the L2 cache is flushed by reads; with a
    cutoff, cut short after the first batch if its median is above it."""
    import torch

    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = reading_flush("cuda")
    for _ in range(max(1, plan.warmup)):
        flush()
        run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()  # what the host takes to queue one sample, to size the spin kernel
    for _ in range(3):
        flush()
        run()
    host_s = (time.perf_counter() - t0) / 3
    torch.cuda.synchronize()
    cycles_per_s = getattr(properties, "clock_rate", 0) * 1e3 or 2e9
    spin_cycles = int(min(4 * COLD_BATCH * host_s, 0.5) * cycles_per_s)
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(min(COLD_BATCH, plan.max_runs - len(samples)))]
        torch.cuda._sleep(spin_cycles)
        for begin, end in events:
            flush()
            begin.record()
            run()
            end.record()
        events[-1][1].synchronize()
        samples.extend(begin.elapsed_time(end) * 1e-3 for begin, end in events)
        if len(samples) == len(events) and _above(statistics.median(samples), cutoff_s):
            return samples, True
    return samples, False


def time_pair(first: Callable[[], None], second: Callable[[], None], device: str, plan: TimingPlan, shapes: tuple[str, str],
              cold: bool = False) -> tuple[ShapeTiming, ShapeTiming]:
    """Two callables timed in turns, sample by sample (which goes first alternates), so that a drift of
    the clocks or of the caches touches both alike: a kernel beside its anchor when the two are compared
    (a workload's confirmation and hard gate). Samples as ``time_runs`` takes them: CUDA graph replays of
    a burst lasting at least CUDA_SAMPLE_TARGET_S (one launch after the flush, cold), or single calls."""
    runs = [first, second]
    flush = reading_flush(device) if cold else None
    burst, events = 1, None
    if device != "cuda":
        for run in runs * max(1, plan.warmup):
            run()
    else:
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
            for run in runs * max(1, plan.warmup):
                run()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if not cold:
            single = min(_cuda_single(run, events) for run in runs)
            burst = max(CUDA_MIN_BURST, min(CUDA_MAX_BURST, math.ceil(CUDA_SAMPLE_TARGET_S / max(single, 1e-7))))
            runs = [_capture(run, burst) for run in runs]
    samples: tuple[list[float], list[float]] = ([], [])
    started = time.perf_counter()
    while not _enough(samples[0], started, plan):
        for index in (0, 1) if len(samples[0]) % 2 == 0 else (1, 0):
            if flush is not None:
                flush()
            samples[index].append(_cuda_single(runs[index], events) / burst if events else _cpu_single(runs[index]))
    return tuple(replace(t, unstable=t.spread > UNSTABLE_SPREAD)
                 for t in (summarize(shapes[0], samples[0]), summarize(shapes[1], samples[1])))


def _cuda_single(run: Callable[[], None], events) -> float:
    begin, end = events
    begin.record()
    run()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) * 1e-3


def _cpu_single(run: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0

