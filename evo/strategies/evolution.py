"""EvoEngineer-style evolution: elites kept, rank-based parents, mutation + crossover,
mutation strength raised while the best has stagnated (up to a bound, then again from the
start, so the search stays near the elite). Never proposes a genome twice.

In a workload run every shape is a niche: the pool is the best of every shape, taken in turns (each
shape's best, then each one's second, ...), the elites are the kernels that win the most weight, and
a parent is drawn by first drawing a shape (by its weight), then a rank among that shape's best; a
crossover thus often joins the winners of two shapes. Progress is a new best at any shape."""

from __future__ import annotations

import random
from dataclasses import dataclass

from evo.strategies.base import Proposal, Strategy
from evo.kernel_genome import NoValidGenome, Offspring, crossover, mutate


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

    def _scores(self, o) -> dict[str, float]:
        """What counts as progress for one observation: its time per niche (or its fitness)."""
        if self.niches:
            return dict(o.shape_times)
        return {"": o.fitness_s} if o.fitness_s is not None else {}

    def stagnant_generations(self) -> int:
        """Generations since the best fitness (in a workload run: any shape's best) last improved
        (derived from the observations)."""
        best_by_generation: dict[int, dict[str, float]] = {}
        for o in self.observations.values():
            bests = best_by_generation.setdefault(o.generation, {})
            for key, value in self._scores(o).items():
                bests[key] = min(value, bests.get(key, value))
        generations = sorted({o.generation for o in self.observations.values()})
        if not any(best_by_generation.values()):
            return len(generations)
        best: dict[str, float] = {}
        last_improvement = generations[0]
        for g in generations:
            improved = False
            for key, value in best_by_generation.get(g, {}).items():
                if value < best.get(key, float("inf")):
                    best[key], improved = value, True
            if improved:
                last_improvement = g
        return sum(1 for g in generations if g > last_improvement)

    def niche_rankings(self) -> dict[str, list]:
        """Per workload shape, the genomes timed in full there, fastest first."""
        ranked: dict[str, list] = {shape: [] for shape in self.niches}
        for o in sorted(self.observations.values(), key=lambda o: (o.generation, o.genome.id)):
            for shape, seconds in o.shape_times.items():
                if shape in ranked:
                    ranked[shape].append((seconds, o.genome))
        return {shape: [g for _, g in sorted(entries, key=lambda e: (e[0], e[1].id))] for shape, entries in ranked.items()}

    def _pool(self, rankings: dict[str, list]) -> list:
        """The parents: the best ``population`` genomes; in a workload run each shape's best in turns
        (every shape's best first, those winning the most weight leading; then each shape's second, ...),
        every genome once, at least every shape's best."""
        if not self.niches:
            return [o.genome for o in self.ranked()[: self.population]]
        wins: dict[str, float] = {}
        for shape, ranked in rankings.items():
            if ranked:
                wins[ranked[0].id] = wins.get(ranked[0].id, 0.0) + self.niches[shape]
        firsts = {g.id: g for ranked in rankings.values() for g in ranked[:1]}
        pool = sorted(firsts.values(), key=lambda g: (-wins[g.id], g.id))
        for rank in range(1, self.population):
            for shape in sorted(rankings, key=lambda s: -self.niches[s]):
                ranked = rankings[shape]
                if rank < len(ranked) and ranked[rank].id not in firsts and ranked[rank] not in pool:
                    pool.append(ranked[rank])
        return pool[: max(self.population, len(firsts))]

    def strength(self) -> int:
        movable = sum(1 for k in self.space.knobs if len(k.values) > 1)
        levels = self.options.max_mutation_strength - self.options.mutation_strength + 1
        steps = self.stagnant_generations() // self.options.stagnation_patience
        return max(1, min(self.options.mutation_strength + steps % levels, movable))

    def ask(self, n: int) -> list[Proposal]:
        rng = self.rng()
        rankings = self.niche_rankings() if self.niches else {}
        pool = self._pool(rankings)
        if not pool and self.niches:  # no shape timed in full yet: the fastest at the primary shape
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
                first, second = self._select(pool, rng, 2, rankings)
                offspring = self._try_crossover(first, second, strength, rng)
            else:
                offspring = self._try_mutation(self._select(pool, rng, 1, rankings)[0], strength, rng)
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
    def _select(self, pool: list, rng: random.Random, k: int, rankings: dict[str, list]) -> list:
        """Linear rank selection without replacement (k distinct parents when possible); in a workload
        run each parent from a shape drawn by its weight, by rank among that shape's best."""
        shapes = [s for s in rankings if rankings[s]]
        if shapes:
            chosen: list = []
            for _ in range(30 * k):
                if len(chosen) == k:
                    break
                shape = rng.choices(shapes, [self.niches[s] for s in shapes])[0]
                parent = self._linear_rank(rankings[shape][: self.population], rng, 1)[0]
                if parent not in chosen:
                    chosen.append(parent)
            return chosen or self._linear_rank(pool, rng, k)
        return self._linear_rank(pool, rng, k)

    def _linear_rank(self, pool: list, rng: random.Random, k: int) -> list:
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
            if child.genome.id in (first.id, second.id) or not self.is_new(child.genome):
                moved = mutate(self.space, child.genome, rng, strength=strength)
                child = Offspring(moved.genome, child.parents, child.operators + moved.operators)
            return child
        except NoValidGenome:
            return None

    def _add(self, proposals: list[Proposal], offspring: Offspring | None) -> None:
        if offspring is None or not self.is_new(offspring.genome):
            return
        self.mark_asked(offspring.genome)
        proposals.append(Proposal.from_offspring(offspring))
