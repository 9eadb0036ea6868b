"""CUDA samples queued behind a spin kernel, so that no host gap falls between a sample's two events.

A sample is timed on the GPU between two CUDA events. If the GPU is idle when the host records the first
event, every microsecond the host then takes to queue the work (a CUDA graph's launch, a launch from
Python, a thread descheduled on a machine busy compiling) is timed as if the kernel ran. On the H100 a
flashcore genome of 4.5 us timed 5.1-5.3 us inside searches whose CPUs were busy with builds, and the
same kernel twice in one search differed by 14% at the 90th percentile.

Here the GPU first runs a spin kernel, and the host queues a batch of samples (optionally with work
before each one's first event, e.g. a cache flush) while it spins and while the samples before run. A
sample is kept only if the host had queued its last event before the GPU could have reached its first:
before the spin (timed by two more events) and the samples ahead of it had run. Otherwise the batch is
queued again behind a spin twice as long.

A sample of a short kernel is a CUDA graph of a burst of back-to-back launches (``capture``), sized from
their GPU time to last at least BURST_TARGET_S (``SpinQueue.burst``), so that a graph launch's own cost
is spread thin: evo's benchmark and an exported package's self-check size and capture it here alike.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

SPIN_MIN_S = 20e-6
SPIN_MAX_S = 50e-3  # a batch still not covered by a spin this long is kept (the machine is that busy)
SPIN_MARGIN = 2.0  # the next spin lasts this many times what the last batch needed
CALIBRATION_CYCLES = 1_000_000
BURST_TARGET_S = 500e-6  # a burst should last at least this long (one graph launch's cost spread thin)
BURST_FEWEST = 2  # launches a burst holds at least
BURST_MOST = 500
BURST_PROBE = 4  # launches in the graph whose replays size a burst

Sample = tuple[Callable[[], None] | None, Callable[[], None]]  # queued before the first event, timed


class SpinQueue:
    """Batches of samples, each the GPU seconds between its two events, none holding a host gap."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self.spin_s = SPIN_MIN_S
        self.requeued = 0  # batches queued again: the host took longer than the spin
        self.uncovered = 0  # batches kept although the longest spin did not cover them
        self._cycles_per_s = _cycles_per_second(torch)

    @classmethod
    def shared(cls) -> "SpinQueue":
        """This process's queue for the current device: what its spin needed carries over between timings."""
        device = cls._device()
        if device not in _SHARED:
            _SHARED[device] = cls()
        return _SHARED[device]

    @staticmethod
    def _device() -> int:
        import torch

        return torch.cuda.current_device()

    def burst(self, run: Callable[[], None]) -> int:
        """How many launches of ``run`` a graph needs to last BURST_TARGET_S on the GPU (BURST_FEWEST to
        BURST_MOST), from the fastest of three replays of a graph of BURST_PROBE launches."""
        per_launch = max(min(self.batch([(None, capture(run, BURST_PROBE))] * 3)) / BURST_PROBE, 1e-7)
        return max(BURST_FEWEST, min(BURST_MOST, math.ceil(BURST_TARGET_S / per_launch)))

    def _events(self, count: int) -> list:
        return [self._torch.cuda.Event(enable_timing=True) for _ in range(count)]

    def batch(self, samples: Sequence[Sample]) -> list[float]:
        torch = self._torch
        spin_begin, spin_end = self._events(2)
        marks = [self._events(2) for _ in samples]
        while True:
            started = time.perf_counter()  # the spin cannot start on the GPU before the host queues it
            spin_begin.record()
            torch.cuda._sleep(int(self.spin_s * self._cycles_per_s))
            spin_end.record()
            queued = []  # when the host had queued each sample's last event
            for (before, run), (begin, end) in zip(samples, marks):
                if before is not None:
                    before()
                begin.record()
                run()
                end.record()
                queued.append(time.perf_counter() - started)
            marks[-1][1].synchronize()
            times = [begin.elapsed_time(end) * 1e-3 for begin, end in marks]
            # the spin each sample needed: the GPU reaches it no sooner than after the spin and every sample
            # ahead of it, so the host must have queued it by then
            ahead, needed = 0.0, 0.0
            for seconds, host in zip(times, queued):
                needed = max(needed, host - ahead)
                ahead += seconds
            covered = needed < spin_begin.elapsed_time(spin_end) * 1e-3
            if covered or self.spin_s >= SPIN_MAX_S:
                self.uncovered += not covered
                self.spin_s = min(SPIN_MAX_S, max(SPIN_MIN_S, SPIN_MARGIN * needed))
                return times
            self.requeued += 1
            self.spin_s = min(SPIN_MAX_S, max(2 * self.spin_s, SPIN_MARGIN * needed))


def capture(run: Callable[[], None], burst: int) -> Callable[[], None]:
    """A replay of a CUDA graph of ``burst`` back-to-back calls of ``run`` (no host launch overhead in a
    sample), warmed up off the default stream as capture requires; the plain calls where the work cannot
    be captured."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
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


_CALIBRATED: dict[int, float] = {}
_SHARED: dict[int, SpinQueue] = {}


def _cycles_per_second(torch) -> float:
    """The spin kernel's cycles a second on this device, measured once a process (the SM clock under load)."""
    device = torch.cuda.current_device()
    if device not in _CALIBRATED:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # the clocks up
        begin.record()
        torch.cuda._sleep(CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        _CALIBRATED[device] = CALIBRATION_CYCLES / max(begin.elapsed_time(end) * 1e-3, 1e-6)
    return _CALIBRATED[device]
