"""When the search loop should ask its strategy for the next batch: late enough that the strategy has
heard as much as it can, early enough that no evaluator waits for a compile.

A genome asked now reaches an evaluator one build later (nvcc, about 1-3 s) and is told back one
evaluation after that. While it builds, the evaluators go on with what is built and queued. So a batch is
asked when what is building or queued would run dry within one build's time at the evaluators' pace
(Little's law: the pipeline holds throughput x latency), and never while more than ``AHEAD`` populations
per evaluator are on their way (a bound on what the strategy has not heard about yet: one population per
evaluator held flashcore's two H200s to 1.54x one's pace, builds of 2-3 s feeding evaluations of 0.2 s). Until a build
and an evaluation have been timed, and on a CPU family (compiles and timings never share the cores), the
loop keeps its first rule: a batch when the last one is built and at most a population is on its way.
"""

from __future__ import annotations

from dataclasses import dataclass

AHEAD = 2  # populations per evaluator that may be on their way at once
SMOOTHING = 0.3  # weight of the newest sample in the running means of build and evaluation time


@dataclass
class Pacing:
    """Running means of how long a build and an evaluation take, and the decision they feed."""

    build_s: float | None = None  # from the build's submission to its result (queueing included)
    evaluation_s: float | None = None  # one genome on one evaluator

    def built(self, seconds: float) -> None:
        self.build_s = _mean(self.build_s, seconds)

    def evaluated(self, seconds: float) -> None:
        self.evaluation_s = _mean(self.evaluation_s, seconds)

    def needed(self, evaluators: int) -> float | None:
        """Genomes the evaluators get through during one build, plus one each in hand; None until known."""
        if self.build_s is None or not self.evaluation_s:
            return None
        return evaluators * (self.build_s / self.evaluation_s + 1.0)

    def wants_batch(self, *, building: int, queued: int, in_flight: int, population: int, evaluators: int,
                    isolated: bool) -> bool:
        """Whether to ask for the next batch now. ``building``: genomes not built yet; ``queued``: built,
        waiting for an evaluator; ``in_flight``: everything asked and not yet told back."""
        needed = None if isolated else self.needed(evaluators)
        if needed is None:
            return building == 0 and in_flight <= population
        return building + queued < needed and in_flight <= AHEAD * population * evaluators


def _mean(mean: float | None, sample: float) -> float:
    return sample if mean is None else (1 - SMOOTHING) * mean + SMOOTHING * sample
