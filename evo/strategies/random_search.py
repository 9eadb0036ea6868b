"""Random search: uniformly random valid genomes, never one seen before (the baseline)."""

from __future__ import annotations

from evo.strategies.base import Proposal, Strategy


class RandomStrategy(Strategy):
    name = "random"

    def ask(self, n: int) -> list[Proposal]:
        return self.random_proposals(n, self.rng())
