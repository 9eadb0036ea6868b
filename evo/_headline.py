"""The speedup a run's summary prints: never one figure against one anchor timing taken long before, but the
kernel re-verified and re-timed beside the anchor, in turns, in CONFIRM_ROUNDS rounds at the end of the run.
The rounds' ratios must agree (fitness._gate.GATE_AGREEMENT); where they do not, or the kernel or the anchor
would not hold still, the headline says "unsteady" and gives no number. The exported self-check times the
same way (evo/_selfcheck.py: rounds of the kernel and the anchor in turns), so the two can be compared."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from evo.fitness import GateResult

CONFIRM_ROUNDS = 3  # rounds of re-verification and re-timing beside the anchor (a workload's winners get as many)


@dataclass(frozen=True)
class Headline:
    """The run's claim about its kernel against the anchor, from the rounds timed in turns with it."""

    genome_id: str
    speedup: float | None  # the median over the rounds of the anchor's time over the kernel's; None: no claim
    low: float | None  # the slowest and the fastest round's speedup
    high: float | None
    rounds: int
    why: str = ""  # where no number is claimed: why

    @classmethod
    def from_gate(cls, result: GateResult) -> "Headline":
        ratios = [anchor[1] / own[1] for r in result.rounds if r.verified and r.anchor_times
                  for own, anchor in zip(r.times[:1], r.anchor_times[:1]) if own[1] > 0]
        if not result.passed or not ratios:
            return cls(result.genome_id, None, None, None, len(result.rounds),
                       result.message or "no round timed it beside the anchor")
        return cls(result.genome_id, statistics.median(ratios), min(ratios), max(ratios), len(ratios))

    @property
    def steady(self) -> bool:
        return self.speedup is not None

    def text(self) -> str:
        if not self.steady:
            return f"unsteady: not claimed ({self.why})"
        return (f"{self.speedup:.2f}x ({self.low:.2f}-{self.high:.2f}x over {self.rounds} rounds timed in turns "
                f"with the anchor)")


def confirm(pipeline, genome, shape: str, rounds: int = CONFIRM_ROUNDS) -> tuple[GateResult, Headline]:
    """The kernel of ``genome`` re-verified on every shape and re-timed beside the anchor at ``shape``."""
    result = pipeline.gate(genome, [(shape, None)], rounds, with_anchor=True)
    return result, Headline.from_gate(result)
