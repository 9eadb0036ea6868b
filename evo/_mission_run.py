"""What a run of one fitness shape (the family's mission, or --mission) adds to the loop in evo/search.py; its
sibling for a workload is evo/_workload_run.py, and the loop calls either at the same points (``RunMode``):

- Target: the fastest kernel within the target that the hard gate has not judged yet goes through the gate
  (re-verified on every shape and re-timed ``gate_rounds`` times, each within the target); one that fails does
  not count and the search goes on.
- At the end (whatever stopped it, but an interrupt), the kernel through the gate, else the fastest, is
  confirmed beside the anchor (evo/_headline.py): what the summary's speedup is.
"""

from __future__ import annotations

from typing import Callable, Protocol

from evo._headline import CONFIRM_ROUNDS, Headline, confirm
from evo.db import Store
from evo.fitness import EvalResult, format_seconds, format_span
from evo.kernel_genome import Genome
from evo.seeds import KernelFamily


class RunMode(Protocol):
    """The loop's calls into what differs between a run of one shape and a workload run."""

    niches: dict[str, float] | None  # the strategy's niches (a workload's shapes and weights), or None
    reads: set[str] | None  # the knobs the fitness reads (a single shape), or None
    dims: dict[str, dict]  # shape name -> its dimensions, stored beside each measurement
    plan_for: Callable | None  # genome -> the shapes to time it at, in order (a workload), or None: all
    records_late: bool  # evaluations that finish while the run ends are recorded (a workload's table uses them)

    def resume(self, run_id: int, history) -> dict[str, dict]: ...
    def note_parents(self, proposals) -> None: ...
    def kept(self, genome: Genome, fitness_s: float) -> None: ...
    def observe(self, genome: Genome, result: EvalResult) -> dict[str, float]: ...
    def set_anchor(self, anchor: list[dict]) -> None: ...
    def progress(self) -> str: ...
    def gate(self, run_id: int, pipeline, individual_ids: dict[str, int], rounds: int, target_s: float | None) -> bool: ...
    def end(self, run_id: int, pipeline, individual_ids: dict[str, int], best: Genome | None, anchor_s: float | None): ...


class MissionRun:
    """A run whose fitness is the time at one shape."""

    niches = None
    plan_for = None
    records_late = False  # once a kernel met the target, what finishes after is not recorded (nor timed)

    def __init__(self, family: KernelFamily, store: Store, message: Callable[[str], None]) -> None:
        self.family = family
        self.store = store
        self.message = message
        self.reads = family.knobs_read(family.mission_shape)
        self.dims = {s.name: dict(s.dims) for s in family.shapes}
        self._correct: list[tuple[float, Genome]] = []  # every correct kernel's (time, genome)
        self._gated: set[str] = set()  # genome ids the hard gate has judged
        self.passed = False
        self.winner: tuple[Genome, tuple[float, ...]] | None = None  # the kernel through the gate, its rounds' times

    # -- fed by the loop --------------------------------------------------------------------------
    def resume(self, run_id: int, history) -> dict[str, dict]:
        for gate, individual in self.store.gates(run_id):
            if gate.target_s is None:  # the end-of-run confirmation, not a gate of the target
                continue
            self._gated.add(individual.genome_id)
            self.passed = self.passed or gate.passed
        return {}

    def note_parents(self, proposals) -> None:
        pass

    def kept(self, genome: Genome, fitness_s: float) -> None:
        self._correct.append((fitness_s, genome))

    def observe(self, genome: Genome, result: EvalResult) -> dict[str, float]:
        return {}

    def set_anchor(self, anchor: list[dict]) -> None:
        pass

    def progress(self) -> str:
        return ""

    # -- the target -------------------------------------------------------------------------------
    def gate(self, run_id: int, pipeline, individual_ids: dict[str, int], rounds: int, target_s: float | None) -> bool:
        """The fastest kernels within the target that the gate has not judged yet through the gate, fastest
        first, until one passes; True once one has."""
        if self.passed or target_s is None:
            return self.passed
        for seconds, _, genome in sorted((t, g.id, g) for t, g in self._correct
                                         if t <= target_s and g.id not in self._gated):
            self._gate_one(run_id, pipeline, individual_ids[genome.id], genome, seconds, target_s, rounds)
            if self.passed:
                break
        return self.passed

    def _gate_one(self, run_id: int, pipeline, individual_id: int, genome: Genome, seconds: float, target: float,
                  rounds: int) -> None:
        self._gated.add(genome.id)
        if rounds == 0:
            self.passed = True
            return
        self.message(f"{genome.id} ran in {format_seconds(seconds)} (target {format_seconds(target)}): "
                     f"hard gate, {rounds} rounds of re-verification and re-timing")
        result = pipeline.gate(genome, [(self.family.mission_shape.name, target)], rounds)
        self.store.record_gate(run_id, individual_id, result)
        times = [r.mission_s for r in result.rounds if r.mission_s is not None]
        if result.passed:
            self.passed, self.winner = True, (genome, tuple(times))
            self.message(f"hard gate passed: {len(times)}/{rounds} rounds verified, {format_span(times)}, "
                         f"all within {format_seconds(target)}")
        else:
            self.message(f"hard gate failed, search goes on: {result.message} ({format_span(times)})")

    # -- the end ----------------------------------------------------------------------------------
    def end(self, run_id: int, pipeline, individual_ids: dict[str, int], best: Genome | None,
            anchor_s: float | None) -> tuple[None, Headline | None]:
        """(no dispatch table, the run's claim against the anchor): its kernel (the one through the hard gate, else
        the fastest) re-verified and re-timed beside the anchor, in turns, in a few rounds."""
        genome = self.winner[0] if self.winner else best
        if genome is None or anchor_s is None:
            return None, None
        self.message(f"confirming {genome.id}: {CONFIRM_ROUNDS} rounds of re-verification and re-timing beside the "
                     f"anchor, in turns")
        result, headline = confirm(pipeline, genome, self.family.mission_shape.name)
        self.store.record_gate(run_id, individual_ids[genome.id], result)
        return None, headline
