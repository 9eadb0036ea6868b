"""EvoEngineer-style evolution: elites kept, rank-based parents, mutation + crossover,
mutation strength raised while the best has stagnated (up to a bound, then again from the
start, so the search stays near the elite). Never proposes a genome twice."""

from __future__ import annotations

import random
from dataclasses import dataclass

from evo.strategies.base import Proposal, Strategy
from kernel_genome import NoValidGenome, Offspring, crossover, mutate


@dataclass(frozen=True)
class EvolutionOptions:
    elite: int = 2  # best individuals that always stay parents and each get a child per batch
    crossover_rate: float = 0.5  # share of children made by crossover (then mutated if identical)
    mutation_strength: int = 1  # knobs moved per mutation when the search is progressing
    stagnation_patience: int = 2  # batches without a new best before strength grows by one
    max_mutation_strength: int = 4  # past it the strength starts again from mutation_strength (cycles):
    # unbounded growth turned a long stagnation into random search far from the elite
    selection_pressure: float = 1.8  # linear ranking: best gets this many times the average share

    def __post_init__(self) -> None:
        if self.elite < 0:
            raise ValueError(f"elite must be >= 0, got {self.elite}")
        if not 0.0 <= self.crossover_rate <= 1.0:
            raise ValueError(f"crossover_rate must be within [0, 1], got {self.crossover_rate}")
        if self.mutation_strength < 1:
            raise ValueError(f"mutation_strength must be >= 1, got {self.mutation_strength}")
        if self.max_mutation_strength < self.mutation_strength:
            raise ValueError(f"max_mutation_strength must be >= mutation_strength ({self.mutation_strength}), "
                             f"got {self.max_mutation_strength}")
        if self.stagnation_patience < 1:
            raise ValueError(f"stagnation_patience must be >= 1, got {self.stagnation_patience}")
        if not 1.0 <= self.selection_pressure <= 2.0:
            raise ValueError(f"selection_pressure must be within [1, 2], got {self.selection_pressure}")


class EvolutionStrategy(Strategy):
    name = "evolution"
    Options = EvolutionOptions

    def stagnant_generations(self) -> int:
        """Generations since the best fitness last improved (derived from the observations)."""
        best_by_generation: dict[int, float] = {}
        for o in self.observations.values():
            if o.fitness_s is not None:
                best_by_generation[o.generation] = min(o.fitness_s, best_by_generation.get(o.generation, o.fitness_s))
        generations = sorted({o.generation for o in self.observations.values()})
        if not best_by_generation:
            return len(generations)
        best, last_improvement = float("inf"), generations[0]
        for g in generations:
            if best_by_generation.get(g, float("inf")) < best:
                best, last_improvement = best_by_generation[g], g
        return sum(1 for g in generations if g > last_improvement)

    def strength(self) -> int:
        movable = sum(1 for k in self.space.knobs if len(k.values) > 1)
        levels = self.options.max_mutation_strength - self.options.mutation_strength + 1
        steps = self.stagnant_generations() // self.options.stagnation_patience
        return max(1, min(self.options.mutation_strength + steps % levels, movable))

    def ask(self, n: int) -> list[Proposal]:
        rng = self.rng()
        pool = [o.genome for o in self.ranked()[: self.population]]
        if not pool:  # nothing works yet: vary the seeds and whatever was tried
            return self._explore(self.seed_genomes + [o.genome for o in self.observations.values()], n, rng)
        strength = self.strength()
        proposals: list[Proposal] = []
        for elite in pool[: self.options.elite]:
            if len(proposals) < n:
                self._add(proposals, self._try_mutation(elite, strength, rng))
        attempts = 0
        while len(proposals) < n and attempts < 30 * n:
            attempts += 1
            if len(pool) >= 2 and rng.random() < self.options.crossover_rate:
                first, second = self._select(pool, rng, 2)
                offspring = self._try_crossover(first, second, strength, rng)
            else:
                offspring = self._try_mutation(self._select(pool, rng, 1)[0], strength, rng)
            self._add(proposals, offspring)
        if len(proposals) < n:  # the neighbourhood is used up: jump further from the best
            proposals += self._explore(pool, n - len(proposals), rng)
        return proposals

    def _explore(self, parents: list, n: int, rng: random.Random) -> list[Proposal]:
        """Mutations of ``parents`` whose strength ramps from one knob to every knob (those
        resampled), so the batch spreads out while every child keeps its lineage; random
        genomes only when there is no parent at all."""
        if not parents:
            return self.random_proposals(n, rng)
        movable = max(1, sum(1 for k in self.space.knobs if len(k.values) > 1))
        proposals: list[Proposal] = []
        for attempt in range(30 * n):
            if len(proposals) >= n:
                break
            strength = 1 + (len(proposals) * (movable - 1)) // max(1, n - 1)
            try:
                offspring = mutate(self.space, parents[attempt % len(parents)], rng, strength=strength,
                                   resample_probability=strength / movable)
            except NoValidGenome:
                continue
            self._add(proposals, offspring)
        if len(proposals) < n:
            proposals += self.random_proposals(n - len(proposals), rng)
        return proposals

    # -- pieces -----------------------------------------------------------------------------
    def _select(self, pool: list, rng: random.Random, k: int) -> list:
        """Linear rank selection without replacement (k distinct parents when possible)."""
        size = len(pool)
        s = self.options.selection_pressure
        weights = [(2 - s) + 2 * (s - 1) * (size - 1 - i) / max(1, size - 1) for i in range(size)]
        weights = [max(w, 1e-9) for w in weights]
        chosen = []
        candidates = list(range(size))
        for _ in range(min(k, size)):
            index = rng.choices(candidates, [weights[i] for i in candidates])[0]
            candidates.remove(index)
            chosen.append(pool[index])
        return chosen

    def _try_mutation(self, parent, strength, rng) -> Offspring | None:
        try:
            return mutate(self.space, parent, rng, strength=strength)
        except NoValidGenome:
            return None

    def _try_crossover(self, first, second, strength, rng) -> Offspring | None:
        try:
            child = crossover(self.space, first, second, rng)
            if child.genome.id in (first.id, second.id) or child.genome.id in self.seen:
                moved = mutate(self.space, child.genome, rng, strength=strength)
                child = Offspring(moved.genome, child.parents, child.operators + moved.operators)
            return child
        except NoValidGenome:
            return None

    def _add(self, proposals: list[Proposal], offspring: Offspring | None) -> None:
        if offspring is None or offspring.genome.id in self.seen:
            return
        self.seen.add(offspring.genome.id)
        proposals.append(Proposal.from_offspring(offspring))
