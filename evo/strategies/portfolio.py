"""A portfolio: each batch shared between the surrogate (a random forest over the knobs) and Optuna's TPE (a
density model per knob, what treats unordered categorical knobs as categories), both told every result.

Two models of different kinds fail on different spaces: on public tuning spaces the surrogate was ahead where
a few numeric knobs interact (GEMM) and behind where the best configurations sit in a corner of boolean and
categorical knobs (convolution on AMD GPUs: 4 of 4,362 configurations within 5%). A share ``tpe_share`` of
every batch goes to TPE, the rest to the surrogate; each is told every evaluation, whoever asked for it, so
each models everything measured, and neither proposes a genome the other has on its way. The split is fixed by
the options (no state the store cannot rebuild: a resumed run tells both arms its history again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evo.strategies.base import Observation, Proposal, Strategy
from evo.strategies.optuna_sampler import OptunaStrategy
from evo.strategies.surrogate import SurrogateStrategy


@dataclass(frozen=True)
class PortfolioOptions:
    tpe_share: float = 0.5  # share of each batch asked of TPE (the rest: the surrogate)

    def __post_init__(self) -> None:
        if not 0.0 <= self.tpe_share <= 1.0:
            raise ValueError(f"tpe_share must be within [0, 1], got {self.tpe_share}")


class PortfolioStrategy(Strategy):
    name = "portfolio"
    Options = PortfolioOptions

    def __init__(self, space, *, seed, population, options=None, niches=None, reads=None) -> None:
        super().__init__(space, seed=seed, population=population, options=options, niches=niches, reads=reads)
        self.arms = (SurrogateStrategy(space, seed=seed, population=population, niches=niches, reads=reads),
                     OptunaStrategy(space, seed=seed, population=population, niches=niches, reads=reads))

    def ask(self, n: int) -> list[Proposal]:
        surrogate, tpe = self.arms
        from_tpe = round(self.options.tpe_share * n) if not self.niches else 0  # a workload run: evolution's niches
        proposals = self._ask(surrogate, n - from_tpe) + self._ask(tpe, from_tpe)
        if len(proposals) < n:  # one arm ran short (a small space): the surrogate fills the batch
            proposals += self._ask(surrogate, n - len(proposals))
        return proposals

    def _ask(self, arm: Strategy, n: int) -> list[Proposal]:
        """``n`` proposals of ``arm``, marked asked in the portfolio and in every other arm."""
        proposals = arm.ask(n) if n > 0 else []
        for proposal in proposals:
            for strategy in (self, *self.arms):
                if strategy is not arm:
                    strategy.mark_asked(proposal.genome)
        return proposals

    def tell(self, observations: Sequence[Observation]) -> None:
        super().tell(observations)
        for arm in self.arms:
            arm.tell(observations)

    def restore(self, finished: Sequence[Observation], pending) -> None:
        super().restore(finished, pending)
        for arm in self.arms:
            arm.restore(finished, pending)

    def add_seeds(self, genomes) -> None:
        super().add_seeds(genomes)
        for arm in self.arms:
            arm.add_seeds(genomes)
