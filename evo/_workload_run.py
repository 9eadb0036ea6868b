"""What a workload search adds to the loop in evo/search.py: the per-shape board fed from each
evaluation, the hard gate per shape, and the confirmation of the winners at the end.

- Target (``--target 1.0x``): every shape needs a kernel within the target at that shape (a ratio is
  to that shape's anchor). Once every shape has one, each winning kernel passes the hard gate at the
  shapes it wins (re-verified on every shape and re-timed ``gate_rounds`` times, each within its
  target); a (kernel, shape) that fails is not counted again and the search goes on.
- At the end (whatever stopped it, but an interrupt), each shape's ``CONFIRM_CANDIDATES`` fastest kernels
  within ``CONFIRM_RATIO`` of the anchor are confirmed: ``CONFIRM_ROUNDS`` rounds of re-verification and
  of re-timing beside the anchor, in turns. The dispatch table (evo/dispatch.py) then chooses among the
  confirmed kernels only: at shapes where kernels and PyTorch are level, the search's fastest figure is
  the luckiest one (a flashcore run confirmed 18 kernels in turn at one shape, each 2-6% slower than
  cuDNN, each replaced by the next unconfirmed figure that looked 6% faster).
"""

from __future__ import annotations

from typing import Callable

from evo.db import Store
from evo._board import ShapeBoard
from evo._headline import CONFIRM_ROUNDS
from evo.dispatch import DispatchReport, confirmations, dispatch_table, ranked_kernels
from evo.fitness import EvalResult, Status, Target, format_span
from evo.kernel_genome import Genome
from evo.seeds import KernelFamily, Workload

CONFIRM_CANDIDATES = 3  # a shape's best kernels by the search's figures that are confirmed (the best of them is chosen)
CONFIRM_RATIO = 1.1  # a best kernel slower than this times the anchor cannot win its shape: not confirmed


class WorkloadRun:
    """A run whose fitness is a workload's shapes (evo/_mission_run.py's RunMode, as the loop calls it)."""

    reads = None  # the strategy breeds per shape (niches), not by the knobs one shape reads
    winner = None  # a workload's target is met shape by shape (the board), not by one kernel
    records_late = True  # evaluations under way when the search stopped still join the table

    def __init__(self, family: KernelFamily, workload: Workload, target: Target | None, store: Store,
                 message: Callable[[str], None]) -> None:
        self.family = family
        self.workload = workload
        self.store = store
        self.message = message
        self.board = ShapeBoard(family, workload, target)
        self.dims = {s.name: dict(s.dims) for s in family.shapes + workload.shapes}

    @property
    def niches(self) -> dict[str, float]:
        return dict(zip(self.board.names, self.workload.weights))

    @property
    def plan_for(self):
        return self.board.plan

    @property
    def passed(self) -> bool:
        """Every shape's winner through the gate: the workload's target met."""
        return self.board.reached()

    def note_parents(self, proposals) -> None:
        for proposal in proposals:
            self.board.note_parents(proposal.genome.id, tuple(parent.id for parent, _, _ in proposal.parents))

    def kept(self, genome: Genome, fitness_s: float) -> None:
        pass  # a workload's times per shape come through observe

    # -- fed by the loop --------------------------------------------------------------------------
    def observe(self, genome: Genome, result: EvalResult) -> dict[str, float]:
        """Record an evaluation's verified full timings; they are what the strategy sees per shape."""
        if result.status is not Status.OK:
            return {}
        verified = {c.shape for c in result.checks if c.passed}
        times = {t.shape: t.median_s for t in result.timings if not t.cut_short and t.shape in verified}
        for shape, seconds in times.items():
            self.board.record(genome, shape, seconds)
        return {s: t for s, t in times.items() if s in self.board.names}

    def set_anchor(self, anchor: list[dict]) -> None:
        self.board.set_anchors({a["shape"]: a["median_s"] for a in anchor})

    def wins(self) -> int:
        """Shapes where some kernel is faster than the anchor (as searched, before confirmation)."""
        return sum(1 for s in self.board.names
                   if (best := self.board.best(s)) and s in self.board.anchors and best[0] < self.board.anchors[s])

    def resume(self, run_id: int, history) -> dict[str, dict]:
        """Rebuild the board from the store (``history``: the run's individuals); returns genome id -> its
        shape times (for the strategy)."""
        genome_of = {h.individual_id: h.genome_id for h in history}
        parents: dict[str, tuple[str, ...]] = {}
        for parent, child, _, _ in self.store.lineage(run_id):
            parents[genome_of[child]] = parents.get(genome_of[child], ()) + (genome_of[parent],)
        anchor = self.store.get_run(run_id).anchor
        genomes: dict[str, Genome] = {}
        for m in self.store.measurements(run_id):
            if m.complete and m.verified:
                genome = genomes.setdefault(m.genome_id, self.family.space.genome(m.genome))
                self.board.record(genome, m.shape, m.median_s)
        for child, links in parents.items():
            self.board.note_parents(child, links)
        for gate, individual in self.store.gates(run_id):
            limits = [(shape, limit) for shape, limit in (gate.targets or ())]
            if any(limit is not None for _, limit in limits):
                self.board.gated(individual.genome_id, [shape for shape, _ in limits], gate.passed)
        if anchor:
            self.set_anchor(anchor)
        return {g: self.board.shape_times(g) for g in genomes}

    # -- the per-shape target -----------------------------------------------------------------------
    def gate(self, run_id: int, pipeline, individual_ids: dict[str, int], rounds: int, target_s=None) -> bool:
        """Gate every winner once every shape is within its target; True when the whole target is met."""
        for genome, shapes in self.board.gate_requests().values():
            targets = [(shape, self.board.target_s(shape)) for shape in shapes]
            if rounds == 0:
                self.board.gated(genome.id, shapes, True)
                continue
            self.message(f"{genome.id} meets the target at {len(shapes)} shape(s) ({', '.join(shapes[:4])}"
                         f"{', ...' if len(shapes) > 4 else ''}): hard gate, {rounds} rounds of re-verification "
                         f"and re-timing")
            result = pipeline.gate(genome, targets, rounds, with_anchor=True)
            self.store.record_gate(run_id, individual_ids[genome.id], result)
            self.board.gated(genome.id, shapes, result.passed)
            times = [t for r in result.rounds for _, t in r.times]
            self.message(f"hard gate {'passed' if result.passed else 'failed: ' + result.message} "
                         f"({format_span(times)})")
        return self.board.reached()

    def progress(self) -> str:
        target = f"; target met at {self.board.met()} of {len(self.board.names)}" if self.board.target else ""
        return f"kernels beat the anchor at {self.wins()} of {len(self.board.names)} shapes{target}"

    # -- the end ------------------------------------------------------------------------------------
    def end(self, run_id: int, pipeline, individual_ids, best, anchor_s) -> tuple[DispatchReport, None]:
        """(the dispatch table, no single headline): each shape's best kernels confirmed (``confirm``)."""
        return self.confirm(run_id, pipeline), None

    def confirm(self, run_id: int, pipeline) -> DispatchReport:
        """Confirm each shape's best kernels beside the anchor (see the module's doc); the dispatch table."""
        figures, wrong = confirmations(self.store, run_id)
        ranking = ranked_kernels(self.store.measurements(run_id), figures, wrong)
        todo: dict[str, tuple[int, dict, list[str]]] = {}
        for shape in self.board.names:
            entries = ranking.kernels.get(shape, [])[:CONFIRM_CANDIDATES]
            for figure, m in entries:
                anchor = figure.anchor_s or ranking.first_anchors.get(shape)
                if not figure.confirmed and anchor and figure.seconds <= CONFIRM_RATIO * anchor:
                    todo.setdefault(m.genome_id, (m.individual_id, m.genome, []))[2].append(shape)
        for genome_id, (individual_id, genome, shapes) in todo.items():
            self.message(f"confirming {genome_id} at {len(shapes)} shape(s): {CONFIRM_ROUNDS} rounds of "
                         f"re-verification and re-timing beside {self.family.fallback_label}")
            result = pipeline.gate(self.family.space.genome(genome), [(s, None) for s in shapes],
                                   CONFIRM_ROUNDS, with_anchor=True)
            self.store.record_gate(run_id, individual_id, result)
            if not result.passed:
                self.message(f"confirmation of {genome_id} failed: {result.message}")
        return dispatch_table(self.store, run_id, self.family, self.workload)
