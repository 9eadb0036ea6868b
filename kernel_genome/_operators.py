"""Variation operators: random valid sample, mutation, uniform crossover, repair.

Every operator takes an explicit ``random.Random`` so that callers own reproducibility.
Operators that produce a child return an ``Offspring`` record telling how it was made.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from kernel_genome._genome import Genome
from kernel_genome._space import Space


class NoValidGenome(Exception):
    """Raised when no valid genome could be found (an over-constrained space)."""


@dataclass(frozen=True)
class Offspring:
    """A child genome and how it came about.

    ``operators`` is the chain applied, e.g. ``("crossover", "repair")``; ``origin`` is the
    last one, which is what shaped the child last.
    """

    genome: Genome
    parents: tuple[Genome, ...]
    operators: tuple[str, ...]

    @property
    def origin(self) -> str:
        return self.operators[-1]

    @property
    def operator(self) -> str:
        return "+".join(self.operators)

    def changed_knobs(self, parent: Genome) -> tuple[str, ...]:
        return parent.differing_knobs(self.genome)


def sample(space: Space, rng: random.Random, *, max_tries: int = 2000) -> Genome:
    """A uniformly random valid genome (rejection sampling, then repair as a fallback; a recorded
    space's members drawn directly)."""
    if space.members is not None:
        valid = space.valid_members()
        if not valid:
            raise NoValidGenome("no listed member meets the constraints")
        return rng.choice(valid)
    candidate = None
    for _ in range(max_tries):
        candidate = space.canonical(Genome.from_mapping({k.name: k.sample(rng) for k in space.knobs}))
        if space.is_valid(candidate):
            return candidate
    repaired = repair(space, candidate, rng)
    if repaired is None:
        raise NoValidGenome(f"no valid genome found in {max_tries} samples nor by repair")
    return repaired


def mutate(space: Space, parent: Genome, rng: random.Random, *, strength: int = 1,
           resample_probability: float = 0.2) -> Offspring:
    """Move ``strength`` distinct knobs: each to a neighbour, or (sometimes) resampled.

    The child always differs from the parent in at least one knob (when the space allows);
    an invalid child is repaired towards the nearest valid genome.
    """
    held = space.inactive(parent.as_dict())  # knobs the parent's kernel does not read: moving them changes nothing
    movable = [k for k in space.knobs if len(k.values) > 1 and k.name not in held]
    if not movable:
        raise NoValidGenome("no knob has more than one value")
    chosen = rng.sample(movable, min(max(1, strength), len(movable)))
    values = parent.as_dict()
    for knob in chosen:
        current = values[knob.name]
        if rng.random() < resample_probability:
            options = [v for v in knob.values if knob.index(v) != knob.index(current)]
        else:
            options = list(knob.neighbours(current))
        values[knob.name] = rng.choice(options)
    child = Genome.from_mapping(values)
    return _finish(space, child, (parent,), ("mutation",), rng)


def crossover(space: Space, first: Genome, second: Genome, rng: random.Random) -> Offspring:
    """Uniform crossover: each knob taken from either parent with probability 1/2."""
    a, b = first.as_dict(), second.as_dict()
    child = Genome.from_mapping({n: (a[n] if rng.random() < 0.5 else b[n]) for n in space.names})
    return _finish(space, child, (first, second), ("crossover",), rng)


def _finish(space: Space, child: Genome, parents, operators, rng) -> Offspring:
    child = space.canonical(child)
    if space.is_valid(child):
        return Offspring(child, parents, operators)
    repaired = repair(space, child, rng)
    if repaired is None:
        raise NoValidGenome(f"could not repair child {child}")
    return Offspring(space.canonical(repaired), parents, operators + ("repair",))


def repair(space: Space, genome: Genome, rng: random.Random, *, max_changed: int = 3,
           fallback_samples: int = 500) -> Genome | None:
    """The nearest valid genome to an invalid one, or ``None`` when none can be found.

    Searches single-knob changes, then pairs, then triples, nearest first (by the knobs'
    normalised index distance, ties broken at random); failing that, returns the nearest of
    ``fallback_samples`` random valid genomes.
    """
    if space.is_valid(genome):
        return genome
    if space.members is not None:  # a recorded space: the nearest of its members, directly
        return min(space.valid_members(), key=lambda g: (space.distance(genome, g), rng.random()), default=None)
    values = genome.as_dict()
    knobs = space.knobs
    # each knob's other values with their distance from the genome's (a change's cost), worked out once
    moves = {k.name: [(v, k.distance(values[k.name], v)) for v in k.values if k.index(v) != k.index(values[k.name])]
             for k in knobs}
    violated = space.violated_reads(values)  # a change must touch a knob of each violated constraint
    for size in range(1, min(max_changed, len(knobs)) + 1):
        candidates = []
        for subset in itertools.combinations(knobs, size):
            names = {k.name for k in subset}
            if not all(names & reads for reads in violated):
                continue  # it leaves some violated constraint as it was
            for combo in itertools.product(*(moves[k.name] for k in subset)):
                cost = sum(d for _, d in combo)
                candidates.append((cost, rng.random(), subset, combo))
        candidates.sort(key=lambda c: (c[0], c[1]))
        for _, _, subset, combo in candidates:
            changed = dict(values)
            changed.update({k.name: v for k, (v, _) in zip(subset, combo)})
            if space.values_valid(changed):  # a Genome (its id hashed) only for the one returned
                return Genome.from_mapping(changed)
    best, best_distance = None, float("inf")
    for _ in range(fallback_samples):
        candidate = Genome.from_mapping({k.name: k.sample(rng) for k in knobs})
        if space.is_valid(candidate):
            d = space.distance(genome, candidate)
            if d < best_distance:
                best, best_distance = candidate, d
    return best
