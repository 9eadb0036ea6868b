"""The ask/tell contract every strategy follows.

The framework owns the loop, the batches and the parallelism; a strategy only proposes
genomes (``ask``) and learns from finished evaluations (``tell``). A strategy keeps no state
that ``restore`` cannot rebuild from the database's rows: its random stream is derived from
the run seed and how many genomes it has seen, so a resumed run carries on where it stopped.
"""

from __future__ import annotations

import abc
import dataclasses
import random
from dataclasses import dataclass
from collections import Counter
from typing import Any, ClassVar, Collection, Hashable, Mapping, Sequence

from evo.kernel_genome import Genome, NoValidGenome, Offspring, Space, sample


@dataclass(frozen=True)
class Proposal:
    """A genome to evaluate, and where it came from (parents with operator and changed knobs)."""

    genome: Genome
    origin: str  # seed / random / mutation / crossover / repair
    parents: tuple[tuple[Genome, str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_offspring(cls, offspring: Offspring) -> "Proposal":
        links = tuple((p, offspring.operator, offspring.changed_knobs(p)) for p in offspring.parents)
        return cls(offspring.genome, offspring.origin, links)


@dataclass(frozen=True)
class Observation:
    """A finished evaluation as a strategy sees it: ``fitness_s`` is None when it failed; in a workload
    run ``shape_times`` holds its verified time at each shape it was timed at in full."""

    genome: Genome
    generation: int
    status: str
    fitness_s: float | None
    shape_times: Mapping[str, float] = dataclasses.field(default_factory=dict)


class Strategy(abc.ABC):
    name: ClassVar[str]
    Options: ClassVar[type] = None  # a frozen dataclass of the strategy's options

    def __init__(self, space: Space, *, seed: int, population: int, options: Mapping[str, Any] | None = None,
                 niches: Mapping[str, float] | None = None, reads: Collection[str] | None = None) -> None:
        """``niches``: in a workload run, its shapes and their weights (a strategy may keep the best of
        each shape apart, see EvolutionStrategy); None: one fitness, ``fitness_s``. ``reads``: the knobs
        the fitness depends on, where it depends on fewer than all (flashcore's mission shape, D = 64,
        runs no ``*_d128`` knob): of genomes equal on them, one is asked, and while it has not failed the
        others are not (they would time the same kernel); None: every knob."""
        if population < 1:
            raise ValueError(f"population must be at least 1, got {population}")
        names = {k.name for k in space.knobs}
        unknown = sorted(set(reads or ()) - names)
        if unknown:
            raise ValueError(f"reads names knobs the space does not have: {unknown}")
        self.space = space
        self._reads = None if reads is None or set(reads) == names else tuple(sorted(reads))
        self._fitness_keys: Counter[Hashable] = Counter()  # of genomes asked, or told, and not failed
        self._counted: set[str] = set()
        self.niches = dict(niches or {})
        self.seed = seed
        self.population = population
        self.options = parse_options(self.Options, options or {}, self.name)
        self.seen: set[str] = set()  # asked or told: never proposed again in this run
        self.observations: dict[str, Observation] = {}
        self.seed_genomes: list[Genome] = []

    # -- the contract ---------------------------------------------------------------------
    @abc.abstractmethod
    def ask(self, n: int) -> list[Proposal]:
        """Up to ``n`` new genomes (fewer only when the space has no unseen genome left)."""

    def tell(self, observations: Sequence[Observation]) -> None:
        for observation in observations:
            self.seen.add(observation.genome.id)
            self.observations[observation.genome.id] = observation
            self._count(observation.genome, observation.fitness_s is not None)

    def restore(self, finished: Sequence[Observation], pending: Sequence[Genome]) -> None:
        """Rebuild the state of a resumed run from the store's rows."""
        for genome in pending:
            self.mark_asked(genome)
        self.tell(finished)

    # -- genomes the fitness cannot tell apart ----------------------------------------------
    def fitness_key(self, genome: Genome) -> Hashable:
        """Equal for genomes whose fitness is the same kernel (equal on every knob it reads)."""
        return genome.id if self._reads is None else tuple(genome[name] for name in self._reads)

    def is_new(self, genome: Genome) -> bool:
        """Never asked or told, and no genome of the same fitness key asked or told without failing."""
        return genome.id not in self.seen and (self._reads is None or self.fitness_key(genome) not in self._fitness_keys)

    def new_genomes(self, genomes) -> list[Genome]:
        """The new ones (``is_new``), one of each fitness key, in their order."""
        found: dict[Hashable, Genome] = {}
        for genome in genomes:
            if self.is_new(genome):
                found.setdefault(self.fitness_key(genome), genome)
        return list(found.values())

    def mark_asked(self, genome: Genome) -> None:
        self.seen.add(genome.id)
        self._count(genome, True)

    def _count(self, genome: Genome, standing: bool) -> None:
        if self._reads is None:
            return
        if standing and genome.id not in self._counted:
            self._counted.add(genome.id)
            self._fitness_keys[self.fitness_key(genome)] += 1
        elif not standing and genome.id in self._counted:
            self._counted.discard(genome.id)
            key = self.fitness_key(genome)
            self._fitness_keys[key] -= 1
            if not self._fitness_keys[key]:
                del self._fitness_keys[key]

    def add_seeds(self, genomes: Sequence[Genome]) -> None:
        """The family's seed genomes, evaluated by the framework itself: never proposed again,
        and available as parents before any result is in."""
        self.seen.update(g.id for g in genomes)
        self.seed_genomes.extend(g for g in genomes if g not in self.seed_genomes)

    # -- helpers for subclasses -----------------------------------------------------------
    def rng(self) -> random.Random:
        """A random stream that depends only on the run seed and how much has been seen."""
        return random.Random(f"{self.name}:{self.seed}:{len(self.seen)}")

    def ranked(self) -> list[Observation]:
        """Successful observations, fastest first (ties: earliest generation first)."""
        ok = [o for o in self.observations.values() if o.fitness_s is not None]
        return sorted(ok, key=lambda o: (o.fitness_s, o.generation, o.genome.id))

    def random_proposals(self, n: int, rng: random.Random, max_tries: int = 200) -> list[Proposal]:
        """Up to ``n`` unseen random valid genomes. In a tightly constrained space one draw can miss
        (rejection sampling and repair both find nothing): that draw is retried, up to ``max_tries``
        a proposal, rather than ending the batch (an empty batch stops the search as exhausted)."""
        proposals: list[Proposal] = []
        for _ in range(n):
            for _ in range(max_tries):
                try:
                    genome = sample(self.space, rng)
                except NoValidGenome:
                    continue
                if self.is_new(genome):
                    self.mark_asked(genome)
                    proposals.append(Proposal(genome, "random"))
                    break
            else:
                genome = self._first_unseen()
                if genome is None:
                    return proposals
                self.mark_asked(genome)
                proposals.append(Proposal(genome, "random"))
        return proposals

    def _first_unseen(self, limit: int = 200_000) -> Genome | None:
        if self.space.size() > limit:
            return None
        fallback = None  # the first unseen genome, where every unseen one times a kernel already standing
        for genome in self.space.enumerate():
            if genome.id in self.seen:
                continue
            if self.is_new(genome):
                return genome
            if fallback is None:
                fallback = genome
        return fallback


def parse_options(options_class, values: Mapping[str, Any], strategy: str):
    """Build the strategy's options dataclass; an unknown or ill-typed option is a ValueError."""
    if options_class is None:
        if values:
            raise ValueError(f"strategy {strategy!r} takes no options, got {sorted(values)}")
        return None
    fields = {f.name: f for f in dataclasses.fields(options_class)}
    for key, value in values.items():
        if key not in fields:
            raise ValueError(f"strategy {strategy!r} has no option {key!r}; options: {sorted(fields)}")
        expected = type(fields[key].default)
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or isinstance(value, bool) != (expected is bool):
            raise ValueError(f"strategy option {key!r} must be {expected.__name__}, got {value!r}")
    return options_class(**{k: (float(v) if type(fields[k].default) is float else v) for k, v in values.items()})
