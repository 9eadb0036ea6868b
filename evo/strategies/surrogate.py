"""Evolution guided by a learned cost model, in the manner of TVM MetaSchedule's evolutionary search: a
model trained on every evaluation so far picks which of many candidate genomes are worth a GPU's time.

Until ``warmup`` evaluations have succeeded it asks random genomes (``initial = "random"``, the default), so
that the model first sees the whole space rather than the seed's neighbourhood; each is stored as the seed
with the knobs it changed resampled, so lineage reaches back to the seed. With ``initial = "evolution"``,
and in a run warm-started from earlier runs' best genomes (more than one seed), the warm-up is evolution's
children instead. Then, for each batch, a
random forest (evo.strategies._forest) is fitted on all evaluations: a genome is the value positions of the knobs
the fitness reads (``reads``: all but flashcore's ``*_d128`` at its mission shape) and, for every two numeric
knobs, the log2 of their product and of their ratio (threads per block, a tile's area, the work per thread:
what a GPU kernel's time turns on, and what splits on one knob at a time cannot see), the target its log time; a
failure is learned as twice the slowest success, so the model steers away from what fails. The candidates are
every unseen valid genome where the space lists its members or is small enough to enumerate, else many children of the best genomes (mutations of one to three knobs, crossovers).
A candidate scores the forest's mean less ``kappa`` times the spread of its trees (a lower confidence
bound: optimism where the trees disagree); the batch takes the best scores among genomes that differ from
each other in at least ``spread`` knobs (the model's best few are often one genome with a knob it cannot
tell apart changed: a batch of them spends seven evaluations learning one thing), and ``explore`` of it are
evolution's own children, which the model has not chosen. The forest is refitted from the observations
every time, so a resumed run rebuilds it from the store.

A space of several designs (``Space(inactive=)``: which knobs a genome's kernel reads) can trap the model in
the design that is easiest to reach (flashcore's warp-specialised one at its small mission shape: 6.6 us
found in a few random draws, while the 4.7 us kernels need many knobs of the classic design right). Its best
genomes then breed every candidate, and a child switching design gets the held values of the knobs it starts
to read, a slow kernel: the model learns the other design is slow. So each design with a success also breeds
candidates from its own best genomes, and ``design_picks`` of every batch go to each design other than the
leading one (its best-scored candidates). On a synthetic space built on that trap (benchmarks/design_trap.py)
the default reached the optimum in none of 8 runs of 400 evaluations, this in all 8 (median 106); a space
of one design is unaffected.

A workload run (niches: a time per shape) is evolution's throughout: the forest learns one time per genome,
and choosing by it would breed towards one shape's fastest and starve the other shapes' elites.

Chosen by replay (``benchmarks/strategies.py``, docs/JOURNAL.md "Replay").
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from evo.strategies.base import Proposal
from evo.strategies.evolution import EvolutionOptions, EvolutionStrategy
from evo.kernel_genome import Genome, NoValidGenome, crossover, mutate

ENUMERATE_LIMIT = 20_000  # spaces up to this many knob combinations are scored whole


@dataclass(frozen=True)
class SurrogateOptions(EvolutionOptions):
    warmup: int = 8  # successful evaluations before the model chooses (replay: 8 against 16, with spread 2)
    kappa: float = 0.5  # optimism: standard deviations of the trees' spread subtracted from their mean (replay: 0.5 over 1)
    explore: float = 0.125  # share of each batch left to evolution's own children
    spread: int = 2  # knobs in which any two of a batch's model-chosen genomes differ at least
    trees: int = 40
    candidates: int = 10  # candidates bred per genome asked (where the space is not scored whole; a repair costs ms)
    initial: str = "random"  # the warm-up's asks: random genomes, or evolution's children (replay: 86% against 82%)
    design_picks: int = 1  # a batch's picks for each design other than the leading one (0: none; see above)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup < 2:
            raise ValueError(f"warmup must be >= 2, got {self.warmup}")
        if self.kappa < 0:
            raise ValueError(f"kappa must be >= 0, got {self.kappa}")
        if not 0.0 <= self.explore <= 1.0:
            raise ValueError(f"explore must be within [0, 1], got {self.explore}")
        if self.initial not in ("random", "evolution"):
            raise ValueError(f"initial must be random or evolution, got {self.initial!r}")
        if self.spread < 1:
            raise ValueError(f"spread must be >= 1, got {self.spread}")
        if self.design_picks < 0:
            raise ValueError(f"design_picks must be >= 0, got {self.design_picks}")
        if self.trees < 1 or self.candidates < 1:
            raise ValueError(f"trees and candidates must be >= 1, got {self.trees} and {self.candidates}")


class SurrogateStrategy(EvolutionStrategy):
    name = "surrogate"
    Options = SurrogateOptions

    def __init__(self, space, *, seed, population, options=None, niches=None, reads=None) -> None:
        super().__init__(space, seed=seed, population=population, options=options, niches=niches, reads=reads)
        self._whole: tuple[Genome, ...] | None = None  # the valid genomes, where the space is scored whole
        self._whole_rows: dict[str, int] = {}  # a whole-space genome's id -> its row of ``_whole_features``
        self._whole_features = None  # every whole-space genome's features, computed once
        self._tables: list | None = None  # the product and ratio ranks of every two numeric knobs' values

    def ask(self, n: int) -> list[Proposal]:
        observed = list(self.observations.values())
        if self.niches:
            return super().ask(n)
        if sum(1 for o in observed if o.fitness_s is not None) < self.options.warmup:
            if self.options.initial == "random" and len(self.seed_genomes) <= 1:  # no warm start to breed from
                return self._drawn_from_the_seed(self.random_proposals(n, self.rng()))
            return super().ask(n)
        rng = self.rng()
        others = self._other_designs()
        candidates = self._candidates(n, rng, others)
        if not candidates:
            return super().ask(n)
        scores = self._scores_of(observed, candidates, rng)
        chosen = sorted(range(len(candidates)), key=lambda i: (scores[i], candidates[i].id))
        from_model = n - round(self.options.explore * n)
        best = [o.genome for o in self.ranked()[: self.population]]  # (and each other design's best few)
        best += [g for genomes in others.values() for g in genomes[:2] if g not in best]
        proposals = []
        for genome in self._spread_out((candidates[i] for i in chosen), from_model, others):
            self.mark_asked(genome)
            parent = min(best, key=lambda g: (self.space.distance(g, genome), g.id))  # its lineage: the nearest good one
            proposals.append(Proposal(genome, "model", ((parent, "model", parent.differing_knobs(genome)),)))
        return proposals + super().ask(n - len(proposals))

    def _spread_out(self, ranked, wanted: int, others: dict) -> list[Genome]:
        """The best-ranked genomes, each differing from those taken before it in >= ``spread`` knobs; first,
        ``design_picks`` of the best-ranked of each design in ``others`` (those other than the leading one's)."""
        ranked = list(ranked)
        taken: list[Genome] = []
        if others and self.options.design_picks:
            for design in others:
                of_design = [g for g in ranked if self._design(g) == design][: self.options.design_picks]
                taken += of_design[: max(0, wanted - len(taken))]
        for genome in ranked:
            if len(taken) == wanted:
                break
            if genome not in taken and all(len(genome.differing_knobs(other)) >= self.options.spread for other in taken):
                taken.append(genome)
        return taken

    def _design(self, genome: Genome) -> frozenset:
        """Which knobs the genome's kernel does not read: its design (one design where the space has no others)."""
        return frozenset(self.space.inactive(genome.as_dict()))

    def _other_designs(self) -> dict[frozenset, list[Genome]]:
        """Each design with a success other than the leading one's: its genomes, fastest first (none where the
        space has one design)."""
        if not self.space.has_designs:
            return {}
        designs: dict[frozenset, list[Genome]] = {}
        for o in self.ranked():
            designs.setdefault(self._design(o.genome), []).append(o.genome)
        return dict(list(designs.items())[1:])

    def _drawn_from_the_seed(self, proposals: list[Proposal]) -> list[Proposal]:
        """The warm-up's random genomes, each stored as the seed with every knob it changed resampled (what it
        is: mutate at full strength), so every kernel's lineage still reaches back to the seed."""
        if not self.seed_genomes:
            return proposals
        seed = self.seed_genomes[0]
        return [Proposal(p.genome, "random", ((seed, "random", seed.differing_knobs(p.genome)),)) for p in proposals]

    def _scores_of(self, observed, candidates: list[Genome], rng: random.Random) -> list[float]:
        import numpy

        from evo.strategies._forest import Forest

        successes = [math.log(o.fitness_s) for o in observed if o.fitness_s is not None]
        failed = max(successes) + math.log(2.0)
        targets = [math.log(o.fitness_s) if o.fitness_s is not None else failed for o in observed]
        forest = Forest(self.options.trees, seed=rng.randrange(1 << 30))
        forest.fit(self._features([o.genome for o in observed]), numpy.array(targets))
        per_tree = forest.predict_each(self._candidate_features(candidates))
        return list(per_tree.mean(axis=0) - self.options.kappa * per_tree.std(axis=0))

    def _candidate_features(self, candidates: list[Genome]):
        """The candidates' features: rows of the whole space's, computed once, where it is scored whole."""
        if self._whole is None or any(g.id not in self._whole_rows for g in candidates):
            return self._features(candidates)
        if self._whole_features is None:
            self._whole_features = self._features(list(self._whole))
        return self._whole_features[[self._whole_rows[g.id] for g in candidates]]

    def _features(self, genomes: list[Genome]):
        """Each genome's knob value positions, then for every two numeric knobs the rank of the log2 of the
        product, and of the ratio, of their values (in half steps) among those the two knobs' values can
        give: the forest splits on small non-negative integers, and a column's levels are what it can take."""
        import numpy

        knobs = self._read_knobs()
        positions = numpy.array([[knob.index(genome[knob.name]) for knob in knobs] for genome in genomes], dtype=int)
        derived = [table[positions[:, a], positions[:, b]] for a, b, table in self._pair_tables()]
        return numpy.concatenate([positions, numpy.array(derived, dtype=int).T], axis=1) if derived else positions

    def _read_knobs(self) -> list:
        """The knobs the fitness reads (``reads``; all by default): the others only add noise to the model."""
        return [knob for knob in self.space.knobs if self._reads is None or knob.name in self._reads]

    def _pair_tables(self) -> list:
        """(a, b, table) for every two numeric knobs a < b: table[i, j], the rank of the product of a's value
        at position i and b's at j; then the same for their ratio."""
        if self._tables is None:
            import numpy

            knobs = self._read_knobs()
            numeric = [i for i, knob in enumerate(knobs)
                       if len(knob.values) > 1 and all(_positive_number(v) for v in knob.values)]
            self._tables = []
            for a, b in itertools.combinations(numeric, 2):
                logs_a = numpy.log2(numpy.array(knobs[a].values, dtype=float))[:, None]
                logs_b = numpy.log2(numpy.array(knobs[b].values, dtype=float))[None, :]
                for combined in (logs_a + logs_b, logs_a - logs_b):
                    steps = numpy.round(2 * combined).astype(int)
                    self._tables.append((a, b, numpy.unique(steps, return_inverse=True)[1].reshape(steps.shape)))
        return self._tables

    def _candidates(self, n: int, rng: random.Random, others: dict) -> list[Genome]:
        whole = self._whole_space()
        if whole is not None:
            return self.new_genomes(whole)
        # the best genomes bred; and, where the space has several designs, each other design's own best
        pools = [([o.genome for o in self.ranked()[: self.population]], self.options.candidates * n)]
        if self.options.design_picks:
            pools += [(genomes[: max(2, self.population // 2)], max(n, self.options.candidates * n // 2))
                      for genomes in others.values()]
        found: list[Genome] = []
        for parents, attempts in pools:
            for attempt in range(attempts):
                try:  # the better parents more often; no uniform samples (a tightly constrained space rejects them)
                    first = parents[int(rng.random() ** 2 * len(parents))]
                    if attempt % 3 == 2 and len(parents) > 1:
                        genome = crossover(self.space, first, rng.choice(parents), rng).genome
                    else:
                        genome = mutate(self.space, first, rng, strength=rng.choice((1, 1, 2, 3))).genome
                except NoValidGenome:
                    continue
                found.append(genome)
        return self.new_genomes(found)

    def _whole_space(self) -> tuple[Genome, ...] | None:
        if self._whole is None:
            if self.space.members is None and self.space.size() > ENUMERATE_LIMIT:
                return None
            self._whole = tuple(self.space.enumerate())
            self._whole_rows = {g.id: i for i, g in enumerate(self._whole)}
        return self._whole


def _positive_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
