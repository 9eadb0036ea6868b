"""The state of a workload search, shape by shape: each shape's niche (its fastest kernels), how the
next genome is measured (``ShapePlan``), and where the per-shape target stands.

Everything here is rebuilt from the store on ``--resume`` (``record`` of every stored measurement,
``gated`` of every stored gate), so it keeps nothing the database does not hold.

How a genome is measured (spending GPU time where it can pay):
- in this order: the workload's primary shape (its time is the genome's fitness), then the shapes
  where its parents are among the best (a child is most likely good where they were), then the rest
  spread out (farthest first, by the family's distance between shapes);
- the first ``probes`` shapes (about the square root of their number, at least 2) always; the rest
  only if the genome made a niche's cut at one of them;
- at each shape, the first sample above ``CUTOFF_MARGIN`` times the slowest of the shape's
  ``NICHE_DEPTH`` best ends its timing there (the evaluator also cuts at 4x the anchor), never one within
  the shape's target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from evo.fitness import ShapePlan, Target
from evo.kernel_genome import Genome
from evo.seeds import KernelFamily, Workload

NICHE_DEPTH = 3  # the kernels a shape keeps as its best (parents for the strategy, the bar for a cutoff)
CUTOFF_MARGIN = 1.15  # above this times the slowest of a full niche, a first sample cuts a shape's timing short


@dataclass
class ShapeBoard:
    family: KernelFamily
    workload: Workload
    target: Target | None = None
    anchors: dict[str, float] = field(default_factory=dict)  # shape -> the anchor's time (the first evaluator's)
    _times: dict[str, dict[str, float]] = field(default_factory=dict)  # shape -> genome id -> full timing
    _genomes: dict[str, Genome] = field(default_factory=dict)
    _parents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _gated: dict[tuple[str, str], bool] = field(default_factory=dict)  # (genome id, shape) -> gate passed

    def __post_init__(self) -> None:
        self.names = tuple(s.name for s in self.workload.shapes)
        self.probes = min(len(self.names), max(2, math.ceil(math.sqrt(len(self.names)))))
        self.spread = self._farthest_first()

    # -- what was measured ----------------------------------------------------------------------
    def note_parents(self, genome_id: str, parent_ids: tuple[str, ...]) -> None:
        self._parents[genome_id] = parent_ids

    def record(self, genome: Genome, shape: str, seconds: float) -> None:
        """A verified, fully timed shape of an ok evaluation (cut-short timings never enter a niche)."""
        if shape in self.names:
            self._genomes[genome.id] = genome
            self._times.setdefault(shape, {})[genome.id] = seconds

    def shape_times(self, genome_id: str) -> dict[str, float]:
        return {shape: times[genome_id] for shape, times in self._times.items() if genome_id in times}

    def ranking(self, shape: str) -> list[tuple[float, str]]:
        """(time, genome id) of every fully timed kernel at ``shape``, fastest first."""
        return sorted((t, g) for g, t in self._times.get(shape, {}).items())

    def best(self, shape: str) -> tuple[float, Genome] | None:
        ranked = self.ranking(shape)
        return (ranked[0][0], self._genomes[ranked[0][1]]) if ranked else None

    def cutoff(self, shape: str) -> float | None:
        ranked = self.ranking(shape)
        return CUTOFF_MARGIN * ranked[NICHE_DEPTH - 1][0] if len(ranked) >= NICHE_DEPTH else None

    # -- how the next genome is measured ----------------------------------------------------------
    def plan(self, genome: Genome) -> ShapePlan:
        primary = self.workload.primary.name
        order = [primary]
        for parent in self._parents.get(genome.id, ()):
            for shape in self.names:
                niche = [g for _, g in self.ranking(shape)[:NICHE_DEPTH]]
                if parent in niche and shape not in order:
                    order.append(shape)
        order += [s for s in self.spread if s not in order]
        cutoffs = tuple((s, c) for s in order if (c := self.cutoff(s)) is not None)
        floors = tuple((s, t) for s in order if (t := self.target_s(s)) is not None)  # never cut within a target
        return ShapePlan(tuple(order), self.probes, cutoffs, floors)

    def _farthest_first(self) -> tuple[str, ...]:
        """The shapes from the primary on, each next the one farthest from all before it (a shape of
        another kind, infinitely far, comes first), ties in the workload's order."""
        shapes = {s.name: dict(s.dims) for s in self.workload.shapes}
        order = [self.workload.primary.name]
        nearest = {n: self.family.shape_distance(shapes[n], shapes[order[0]]) for n in self.names}
        while len(order) < len(self.names):
            left = [n for n in self.names if n not in order]
            chosen = max(left, key=lambda n: (nearest[n], -self.names.index(n)))
            order.append(chosen)
            for n in left:
                nearest[n] = min(nearest[n], self.family.shape_distance(shapes[n], shapes[chosen]))
        return tuple(order)

    # -- the per-shape target -------------------------------------------------------------------
    def set_anchors(self, anchors: dict[str, float]) -> None:
        self.anchors = {s: anchors[s] for s in self.names if s in anchors}

    def target_s(self, shape: str) -> float | None:
        if self.target is None:
            return None
        return self.target.resolve(self.anchors.get(shape))

    def qualifier(self, shape: str) -> tuple[float, Genome] | None:
        """The fastest kernel within the shape's target that no gate has failed there."""
        limit = self.target_s(shape)
        if limit is None:
            return None
        for seconds, genome_id in self.ranking(shape):
            if seconds > limit:
                return None
            if self._gated.get((genome_id, shape)) is not False:
                return seconds, self._genomes[genome_id]
        return None

    def met(self) -> int:
        """Shapes whose target a kernel has met (gate or not)."""
        return sum(1 for s in self.names if self.qualifier(s) is not None)

    def gate_requests(self) -> dict[str, tuple[Genome, list[str]]]:
        """Once every shape has a qualifier: each qualifying genome and the shapes it must still pass
        the gate at (empty when every pair has passed, or some shape has none)."""
        requests: dict[str, tuple[Genome, list[str]]] = {}
        for shape in self.names:
            found = self.qualifier(shape)
            if found is None:
                return {}
            genome = found[1]
            if not self._gated.get((genome.id, shape)):
                requests.setdefault(genome.id, (genome, []))[1].append(shape)
        return requests

    def reached(self) -> bool:
        return self.target is not None and all(
            (q := self.qualifier(s)) is not None and self._gated.get((q[1].id, s)) for s in self.names)

    def gated(self, genome_id: str, shapes: list[str], passed: bool) -> None:
        for shape in shapes:
            self._gated[(genome_id, shape)] = passed
