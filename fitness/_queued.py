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
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

SPIN_MIN_S = 20e-6
SPIN_MAX_S = 50e-3  # a batch still not covered by a spin this long is kept (the machine is that busy)
SPIN_MARGIN = 2.0  # the next spin lasts this many times what the last batch needed
CALIBRATION_CYCLES = 1_000_000

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

    def launches_lasting(self, capture: Callable[[int], Callable[[], None]], seconds: float, fewest: int,
                         most: int, probe: int = 4) -> int:
        """How many launches a graph needs to last ``seconds`` on the GPU (between ``fewest`` and ``most``),
        from the fastest of three replays of a graph of ``probe`` launches (``capture(k)``: a graph of k)."""
        per_launch = max(min(self.batch([(None, capture(probe))] * 3)) / probe, 1e-7)
        return max(fewest, min(most, math.ceil(seconds / per_launch)))

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
