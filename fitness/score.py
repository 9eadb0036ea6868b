"""Score stage: fitness (lower is better) and the search target.

Fitness is the median time at the family's mission shape (``EvalResult.fitness_s``, set by the
evaluator); a failed candidate has none.
A target is an absolute time (``40us``, ``2ms``) or a ratio to the anchor's time (``0.5x``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_TARGET = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s|x)\s*$")


@dataclass(frozen=True)
class Target:
    """Either ``seconds`` (absolute) or ``anchor_ratio`` (times the anchor's mission time)."""

    text: str
    seconds: float | None = None
    anchor_ratio: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Target":
        match = _TARGET.match(text or "")
        if not match:
            raise ValueError(f"target {text!r} is not a time like 40us / 2ms / 1.5s or an anchor ratio like 0.5x")
        number, unit = float(match.group(1)), match.group(2)
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"target {text!r} must be positive")
        if unit == "x":
            return cls(text.strip(), anchor_ratio=number)
        return cls(text.strip(), seconds=number * _UNITS[unit])

    def resolve(self, anchor_mission_s: float | None) -> float | None:
        """Target in seconds; a ratio target needs the anchor's time (None until it is known)."""
        if self.seconds is not None:
            return self.seconds
        if anchor_mission_s is None:
            return None
        return self.anchor_ratio * anchor_mission_s


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_span(seconds: list[float]) -> str:
    """``fastest..slowest`` of several timings of one kernel (e.g. the hard gate's rounds)."""
    if not seconds:
        return "no timing"
    return f"{format_seconds(min(seconds))}..{format_seconds(max(seconds))}"
