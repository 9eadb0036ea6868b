"""The hard gate's judgement of its rounds: over a target, and whether rounds agree (fitness.evaluate runs them)."""

from __future__ import annotations

import math
import statistics

from fitness.records import GateRound

GATE_AGREEMENT = 0.15  # the hard gate's rounds of one shape may lie at most this far apart


def over_target(round_: GateRound, targets, number: int) -> str:
    """The gate's word on a round timed over its target at some shape, or ""."""
    for (name, seconds), (_, limit) in zip(round_.times, targets):
        if limit is not None and seconds > limit:
            where = f" at {name}" if len(targets) > 1 else ""
            return f"round {number}: {seconds * 1e6:.2f} us{where} is over the target {limit * 1e6:.2f} us"
    return ""


def disagreement(done, targets) -> str:
    """The gate's word on rounds whose times at one shape lie more than GATE_AGREEMENT apart, or ""."""
    for index, (name, _) in enumerate(targets):
        seconds = [r.times[index][1] for r in done]
        if max(seconds) > min(seconds) * (1 + GATE_AGREEMENT):
            return (f"the rounds disagree at {name}: {min(seconds) * 1e6:.2f}..{max(seconds) * 1e6:.2f} us, "
                    f"more than {GATE_AGREEMENT:.0%} apart (unsteady timing)")
    return ""


def outlier(done, targets) -> int | None:
    """Where the rounds disagree (``disagreement``), the round farthest from the median at such a shape."""
    if len(done) < 2 or not disagreement(done, targets):
        return None
    farthest, index = 0.0, None
    for shape in range(len(targets)):
        seconds = [r.times[shape][1] for r in done]
        middle = statistics.median(seconds)
        for number, value in enumerate(seconds):
            if abs(math.log(value / middle)) > farthest:
                farthest, index = abs(math.log(value / middle)), number
    return index
