"""The hard gate's judgement of its rounds: over a target, and whether rounds agree (fitness.evaluate runs them)."""

from __future__ import annotations

import math
import statistics

from evo.fitness.records import GateRound

GATE_AGREEMENT = 0.15  # the hard gate's rounds of one shape may lie at most this far apart


def over_target(round_: GateRound, targets, number: int) -> str:
    """The gate's word on a round timed over its target at some shape, or ""."""
    for (name, seconds), (_, limit) in zip(round_.times, targets):
        if limit is not None and seconds > limit:
            where = f" at {name}" if len(targets) > 1 else ""
            return f"round {number}: {seconds * 1e6:.2f} us{where} is over the target {limit * 1e6:.2f} us"
    return ""


def _compared(done, index: int) -> tuple[list[float], bool]:
    """What the rounds compare at the ``index``-th gated shape: the kernel's times, or where the anchor was
    timed beside it (a workload winner's confirmation), its time over the anchor's (a claim of speed is a
    ratio; a machine that slows down for a while slows both)."""
    if all(r.anchor_times for r in done):
        return [r.times[index][1] / r.anchor_times[index][1] for r in done], True
    return [r.times[index][1] for r in done], False


def disagreement(done, targets) -> str:
    """The gate's word on rounds whose times (or ratios to the anchor) at one shape lie more than
    GATE_AGREEMENT apart, or ""."""
    for index, (name, _) in enumerate(targets):
        values, ratios = _compared(done, index)
        if max(values) > min(values) * (1 + GATE_AGREEMENT):
            span = (f"kernel/anchor {min(values):.3f}..{max(values):.3f}" if ratios
                    else f"{min(values) * 1e6:.2f}..{max(values) * 1e6:.2f} us")
            return f"the rounds disagree at {name}: {span}, more than {GATE_AGREEMENT:.0%} apart (unsteady timing)"
    return ""


def outlier(done, targets) -> int | None:
    """Where the rounds disagree (``disagreement``), the round farthest from the median at such a shape."""
    if len(done) < 2 or not disagreement(done, targets):
        return None
    farthest, index = 0.0, None
    for shape in range(len(targets)):
        values, _ = _compared(done, shape)
        middle = statistics.median(values)
        for number, value in enumerate(values):
            if abs(math.log(value / middle)) > farthest:
                farthest, index = abs(math.log(value / middle)), number
    return index
