"""Variation operators: random valid sample, mutation, uniform crossover, repair.

Every operator takes an explicit ``random.Random`` so that callers own reproducibility.
Operators that produce a child return an ``Offspring`` record telling how it was made.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from evo.kernel_genome._genome import Genome
from evo.kernel_genome._space import Space


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
    """A random valid genome: rejection sampling, then repair as a fallback; a recorded space's members drawn
    directly; a space of several designs (``Space(inactive=)``) drawn a knob at a time.

    Rejection sampling would be biased there: a design that leaves most knobs unread is valid once those are
    held, whatever they were drawn as, while another whose constraints reject nearly every draw (flashcore's
    classic one: none in 5,000) would only be reached by repair, which mends it by switching design."""
    if space.members is not None:
        valid = space.valid_members()
        if not valid:
            raise NoValidGenome("no listed member meets the constraints")
        return rng.choice(valid)
    if space.has_designs:
        for _ in range(20):
            built = _knob_by_knob(space, rng)
            if built is not None and space.is_valid(space.canonical(built)):
                return space.canonical(built)
        raise NoValidGenome("no valid genome found drawing knob by knob")
    candidate = None
    for _ in range(max_tries):
        candidate = Genome.from_mapping({k.name: k.sample(rng) for k in space.knobs})
        if space.is_valid(candidate):
            return candidate
    repaired = repair(space, candidate, rng)
    if repaired is None:
        raise NoValidGenome(f"no valid genome found in {max_tries} samples nor by repair")
    return repaired


def _knob_by_knob(space: Space, rng: random.Random, budget: int = 5000) -> Genome | None:
    """A valid setting drawn a knob at a time, each knob a random value among those that break no constraint
    decidable so far (backtracking where none is left); the knobs most constraints read first, so that the
    one choosing the design is drawn before the knobs it constrains. None when ``budget`` checks ran out."""
    order = _most_read_first(space)
    values: dict = {}
    checks = 0

    def extend(index: int) -> bool:
        nonlocal checks
        if index == len(order):
            return True
        knob = order[index]
        for value in rng.sample(list(knob.values), len(knob.values)):
            checks += 1
            if checks > budget:
                return False
            values[knob.name] = value
            if space.undecided_or_holds(values) and extend(index + 1):
                return True
        values.pop(knob.name, None)
        return False

    return Genome.from_mapping(values) if extend(0) else None


def _most_read_first(space: Space) -> list:
    reads = {k.name: 0 for k in space.knobs}
    for name in space.reads_of_constraints():
        reads[name] += 1
    return sorted(space.knobs, key=lambda k: (-reads[k.name], k.name))


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
    ``fallback_samples`` random valid genomes. Changes that switch the genome to another design (change which
    knobs its kernel reads) come only after every change within its design failed: switching design would
    otherwise mend any constraint of the old design at once, and every repaired child would leave it.
    """
    if space.is_valid(genome):
        return genome
    if space.members is not None:  # a recorded space: the nearest of its members, directly
        return min(space.valid_members(), key=lambda g: (space.distance(genome, g), rng.random()), default=None)
    values = genome.as_dict()
    knobs = space.knobs
    design = frozenset(space.inactive(values))
    # each knob's other values with their distance from the genome's (a change's cost), worked out once, those
    # that keep the design apart from those that switch it
    moves: dict[bool, dict[str, list]] = {False: {}, True: {}}
    for k in knobs:
        for v in k.values:
            if k.index(v) != k.index(values[k.name]):
                switches = frozenset(space.inactive({**values, k.name: v})) != design
                moves[switches].setdefault(k.name, []).append((v, k.distance(values[k.name], v)))
    violated = space.violated_reads(values)  # a change must touch a knob of each violated constraint
    for allowed in ((moves[False],) if not moves[True] else (moves[False], _merged(moves[False], moves[True]))):
        found = _nearest_change(space, values, knobs, allowed, violated, max_changed, rng)
        if found is not None:
            return found
    best, best_distance = None, float("inf")
    for _ in range(fallback_samples):
        candidate = Genome.from_mapping({k.name: k.sample(rng) for k in knobs})
        if space.is_valid(candidate):
            d = space.distance(genome, candidate)
            if d < best_distance:
                best, best_distance = candidate, d
    return best


def _merged(first: dict[str, list], second: dict[str, list]) -> dict[str, list]:
    return {name: first.get(name, []) + second.get(name, []) for name in {**first, **second}}


def _nearest_change(space: Space, values: dict, knobs, moves: dict[str, list], violated, max_changed: int,
                    rng: random.Random) -> Genome | None:
    """The cheapest change of one, two or three knobs (among ``moves``) that makes ``values`` valid."""
    movable = [k for k in knobs if moves.get(k.name)]
    for size in range(1, min(max_changed, len(movable)) + 1):
        candidates = []
        for subset in itertools.combinations(movable, size):
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
    return None
