"""Timing one callable the same way for kernels and anchors: warm-up, many runs, robust stats.

CPU: each sample is one call timed with ``perf_counter``. CUDA: each sample is one replay of a
CUDA graph holding a burst of back-to-back launches (sized from their GPU time to last
evo.runtime.queued's BURST_TARGET_S), between two CUDA events, divided by the burst length, so that host launch
overhead (tens of microseconds from Python) does not dominate microsecond kernels. The samples are
queued behind a spin kernel (``evo.runtime.queued``), so that no host gap (the graph's launch, a thread
descheduled on a busy machine) falls between a sample's events.

Cold caches (``cold=True``): before every sample the last-level cache is flushed by reading a
buffer twice its size (``evo.runtime.flush``, shared with an exported kernel's self-check), so the
operands come from memory, as when a model's weights are streamed from it on each call, not from a
cache that back-to-back launches keep warm. On CUDA each sample is then one launch between two
events, flushes and launches queued behind the spin kernel in the same way.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Callable

from evo.fitness.records import ShapeTiming
from evo.runtime.flush import reading_flush
from evo.runtime.queued import SpinQueue, capture
from evo.seeds import TimingPlan

# how CUDA samples are taken, part of a measurement's key (fitness._measurement): a new method measures
# again instead of reusing what an older one measured
TIMING_METHOD = "graph bursts sized by GPU time, queued behind a spin kernel"
LAUNCH_SLACK_S = 1e-3  # what one launch from Python may add to a single launch timed between events (a
# launcher's host work, e.g. encoding tensor maps, lies between the events): only a far slower one is cut there


def summarize(shape: str, samples: list[float], cut_short: bool = False) -> ShapeTiming:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    return ShapeTiming(shape, statistics.median(ordered), p90, stdev, len(ordered), cut_short)


COLD_BATCH = 25  # cold CUDA samples queued behind one spin kernel
QUEUED_BATCH = 8  # graph replays queued behind one spin kernel


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
    """Replays of a CUDA graph holding a burst of launches (no host launch overhead in the figure),
    queued behind a spin kernel (no host gap either: evo.runtime.queued); launches issued from Python where
    the work cannot be captured. With a cutoff, a kernel whose single launch is far above it (twice, plus
    what a launch from Python adds) or whose first replay is above it is cut short there."""
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
    queue = SpinQueue.shared()
    burst = queue.burst(run)
    replay = capture(run, burst)
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        count = min(QUEUED_BATCH, plan.max_runs - len(samples)) if samples else 1
        samples.extend(t / burst for t in queue.batch([(None, replay)] * count))
        if len(samples) == 1 and _above(samples[0], cutoff_s):
            return samples, True
    return samples, False


def _cuda_cold_samples(run: Callable[[], None], plan: TimingPlan, cutoff_s: float | None = None) -> tuple[list[float], bool]:
    """One launch per sample between two events, each after the L2 cache is flushed by reads, the batch
    queued behind a spin kernel; with a cutoff, cut short after the first batch if its median is above it."""
    import torch

    flush = reading_flush("cuda")
    for _ in range(max(1, plan.warmup)):
        flush()
        run()
    torch.cuda.synchronize()
    queue = SpinQueue.shared()
    samples: list[float] = []
    started = time.perf_counter()
    while not _enough(samples, started, plan):
        batch = queue.batch([(flush, run)] * min(COLD_BATCH, plan.max_runs - len(samples)))
        samples.extend(batch)
        if len(samples) == len(batch) and _above(statistics.median(samples), cutoff_s):
            return samples, True
    return samples, False


def time_pair(first: Callable[[], None], second: Callable[[], None], device: str, plan: TimingPlan, shapes: tuple[str, str],
              cold: bool = False) -> tuple[ShapeTiming, ShapeTiming]:
    """Two callables timed in turns, sample by sample (which goes first alternates), so that a drift of
    the clocks or of the caches touches both alike: a kernel beside its anchor when the two are compared
    (a workload's confirmation and hard gate). Samples as ``time_runs`` takes them: CUDA graph replays of
    a burst lasting at least BURST_TARGET_S (one launch after the flush, cold), or single calls."""
    runs = [first, second]
    flush = reading_flush(device) if cold else None
    burst, queue = 1, None
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
        queue = SpinQueue.shared()
        if not cold:
            burst = min(queue.burst(run) for run in runs)
            runs = [capture(run, burst) for run in runs]
    samples: tuple[list[float], list[float]] = ([], [])
    started = time.perf_counter()
    while not _enough(samples[0], started, plan):
        order = (0, 1) if len(samples[0]) % 2 == 0 else (1, 0)  # which goes first alternates, pair by pair
        if queue is not None:
            pairs = min(QUEUED_BATCH, plan.max_runs - len(samples[0]))
            indices = [i for p in range(pairs) for i in (order if p % 2 == 0 else order[::-1])]
            for index, seconds in zip(indices, queue.batch([(flush, runs[i]) for i in indices])):
                samples[index].append(seconds / burst)
            continue
        for index in order:
            if flush is not None:
                flush()
            samples[index].append(_cpu_single(runs[index]))
    return tuple(replace(t, unstable=t.spread > UNSTABLE_SPREAD)
                 for t in (summarize(shapes[0], samples[0]), summarize(shapes[1], samples[1])))


def _cpu_single(run: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0

