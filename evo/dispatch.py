"""A workload run's dispatch table, read from the store: for every shape, the fastest verified kernel,
its time and the anchor's (PyTorch's whole computation) timed in the same process, and what the op
runs there: the kernel where it is faster than PyTorch by at least ``MARGIN``, PyTorch otherwise.

A kernel's figure at a shape is its confirmation's where it passed one (the winners are re-verified
and re-timed beside the anchor in a few rounds at the end of a search: the median of those rounds),
its search measurement otherwise. Only a confirmed kernel is chosen, and only if it beat the anchor in
every round; a kernel whose confirmation failed at a shape (wrong, or rounds that disagree) is out there. Kernels are ranked by their time over the anchor's timed in the
same process, so that evaluators on different GPUs compare fairly. The run summary, `evo show`, the
lineage report and `evo export` all read this one table.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from evo.db import MeasurementRow, Store
from evo.seeds import KernelFamily, Workload

MARGIN = 0.01  # the op runs a kernel only where it is at least 1% faster than PyTorch (else noise decides)


@dataclass(frozen=True)
class ShapeChoice:
    shape: str
    dims: dict
    weight: float
    anchor_s: float | None  # PyTorch's whole computation, timed beside the kernel
    kernel_s: float | None  # the fastest verified kernel (None: none was timed in full here)
    individual_id: int | None
    genome_id: str | None
    genome: dict | None
    confirmed: bool  # kernel_s and anchor_s come from the end-of-search confirmation rounds
    chosen: bool  # the op runs the kernel here (else PyTorch)
    bytes_moved: float = 0.0  # a memory-bound family's bytes at this shape (else 0)

    @property
    def speedup(self) -> float | None:
        """The best kernel's speedup over the anchor (below 1: slower)."""
        return self.anchor_s / self.kernel_s if self.anchor_s and self.kernel_s else None

    @property
    def op_s(self) -> float | None:
        return self.kernel_s if self.chosen else self.anchor_s

    @property
    def op_speedup(self) -> float:
        return self.speedup if self.chosen and self.speedup else 1.0


@dataclass(frozen=True)
class DispatchReport:
    """A workload run's outcome per shape: the kernel chosen or PyTorch, with both times (what `evo show` and
    the summary print; the exported op's own table is evo.runtime.dispatch.DispatchTable)."""

    workload: Workload
    fallback: str  # what the op runs where no kernel is chosen
    rows: tuple[ShapeChoice, ...]
    read_bandwidth: float | None = None  # a memory-bound family's: the evaluator's GPU's, bytes a second

    def _geomean(self, values: list[tuple[float, float]]) -> float | None:
        total = sum(w for _, w in values)
        return math.exp(sum(w * math.log(v) for v, w in values) / total) if values and total else None

    @property
    def kernel_geomean(self) -> float | None:
        """Weighted geometric mean of the best kernels' speedups over the anchor (shapes without one left out)."""
        return self._geomean([(r.speedup, r.weight) for r in self.rows if r.speedup])

    @property
    def op_geomean(self) -> float | None:
        """Weighted geometric mean of the op's speedup over the anchor (1 where it runs PyTorch)."""
        return self._geomean([(r.op_speedup, r.weight) for r in self.rows if r.anchor_s])

    @property
    def wins(self) -> int:
        return sum(r.chosen for r in self.rows)

    @property
    def kernels(self) -> dict[str, dict]:
        """Every chosen kernel: genome id -> genome."""
        return {r.genome_id: r.genome for r in self.rows if r.chosen}

    def summary(self) -> str:
        op, kernels = self.op_geomean, self.kernel_geomean
        return (f"evolved kernels win {self.wins} of {len(self.rows)} shapes ({len(self.kernels)} distinct); "
                f"weighted geometric-mean speedup over {self.fallback}: op {_x(op)}, best kernels {_x(kernels)}")


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


@dataclass(frozen=True)
class _Figure:
    seconds: float
    anchor_s: float | None
    confirmed: bool
    worst_ratio: float | None = None  # confirmed: the kernel's time over the anchor's in its worst round

    @property
    def ratio(self) -> float:
        return self.seconds / self.anchor_s if self.anchor_s else self.seconds

    def beats(self, anchor_s: float | None) -> bool:
        """Faster than the anchor by ``MARGIN``: in every round of its confirmation where it has one."""
        if self.worst_ratio is not None:
            return self.worst_ratio < 1 - MARGIN
        return anchor_s is not None and self.seconds < anchor_s * (1 - MARGIN)


def confirmations(store: Store, run_id: int) -> tuple[dict[tuple[int, str], _Figure], set]:
    """From the run's passed gates and confirmations: (individual, shape) -> the median of its rounds' times
    (and of the anchor's beside them); and what is out: the individuals a round found incorrect, and the
    (individual, shape) pairs whose gate or confirmation failed there."""
    times: dict[tuple[int, str], list[float]] = {}
    anchors: dict[tuple[int, str], list[float]] = {}
    ratios: dict[tuple[int, str], list[float]] = {}
    wrong: set = set()
    for gate, individual in store.gates(run_id):
        if not gate.passed:
            wrong.update((individual.id, shape) for shape, _ in gate.targets or ())
        for round_ in gate.rounds:
            if not round_.get("verified"):
                wrong.add(individual.id)
                continue
            beside = dict(round_.get("anchor_times") or ())
            for shape, seconds in round_.get("times") or () if gate.passed else ():
                times.setdefault((individual.id, shape), []).append(seconds)
                if beside.get(shape):
                    anchors.setdefault((individual.id, shape), []).append(beside[shape])
                    ratios.setdefault((individual.id, shape), []).append(seconds / beside[shape])
    figures = {key: _Figure(statistics.median(values), statistics.median(anchors[key]) if anchors.get(key) else None,
                            True, max(ratios[key]) if ratios.get(key) else None) for key, values in times.items()}
    return figures, wrong


def dispatch_table(store: Store, run_id: int, family: KernelFamily, workload: Workload) -> DispatchReport:
    figures, wrong = confirmations(store, run_id)
    table = build_table(family, workload, ranked_kernels(store.measurements(run_id), figures, wrong))
    read = (store.get_run(run_id).hardware or {}).get("read_bandwidth") if family.memory_bound else None
    return dataclasses.replace(table, read_bandwidth=read)


@dataclass(frozen=True)
class Ranking:
    """Every verified kernel timed in full at each shape, best first by its time over the anchor's (its
    confirmation's figures where it has one), and the first evaluator's anchor at each shape."""

    kernels: dict[str, list[tuple[_Figure, MeasurementRow]]]
    first_anchors: dict[str, float]


def ranked_kernels(measurements: list[MeasurementRow], figures: dict, wrong: set) -> Ranking:
    """``wrong``: individuals out everywhere, (individual, shape) pairs out at that shape (``confirmations``)."""
    kernels: dict[str, list] = {}
    anchors: dict[str, float] = {}
    for m in measurements:
        if m.anchor_s is not None:
            anchors.setdefault(m.shape, m.anchor_s)  # the first evaluator's, when nothing better is known
        if not (m.complete and m.verified) or m.individual_id in wrong or (m.individual_id, m.shape) in wrong:
            continue
        figure = figures.get((m.individual_id, m.shape))
        if figure is None or figure.anchor_s is None:
            figure = _Figure(figure.seconds if figure else m.median_s, m.anchor_s, figure is not None)
        kernels.setdefault(m.shape, []).append((figure, m))
    for entries in kernels.values():
        entries.sort(key=lambda entry: (entry[0].ratio, entry[1].individual_id))
    return Ranking(kernels, anchors)


def build_table(family: KernelFamily, workload: Workload, ranking: Ranking) -> DispatchReport:
    """Each shape's row: its best confirmed kernel where any kernel was confirmed there (a search figure that
    beats the confirmed ones is most likely noise: the winner's curse), else its best by the search's figures,
    which the op does not run (unconfirmed)."""
    anchors = ranking.first_anchors
    rows = []
    for shape, weight in zip(workload.shapes, workload.weights):
        entries = ranking.kernels.get(shape.name, [])
        found = next((e for e in entries if e[0].confirmed), entries[0] if entries else None)
        moved = family.bytes_moved(shape) if family.memory_bound else 0.0
        if found is None:
            rows.append(ShapeChoice(shape.name, dict(shape.dims), weight, anchors.get(shape.name), None, None, None,
                                    None, False, False, moved))
            continue
        figure, m = found
        anchor = figure.anchor_s if figure.anchor_s is not None else anchors.get(shape.name)
        rows.append(ShapeChoice(shape.name, dict(shape.dims), weight, anchor, figure.seconds, m.individual_id,
                                m.genome_id, m.genome, figure.confirmed, figure.confirmed and figure.beats(anchor), moved))
    return DispatchReport(workload, family.fallback_label, tuple(rows))
