"""What a search ends with and shows as it goes: the outcome (exit codes, per-status counts, the one-line
description stored with the run) and the loop's live state. evo/search.py fills them in."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from evo._causes import Causes
from evo._headline import Headline
from evo.db import RunStatus
from evo.dispatch import DispatchReport
from evo.fitness import format_seconds
from evo.kernel_genome import Genome

EXIT_TARGET_REACHED = 0  # also: the budget ran out and no target had been set
EXIT_BUDGET_EXHAUSTED = 3
EXIT_SPACE_EXHAUSTED = 4
EXIT_ALL_FAILED = 5  # the first evaluations all failed the same way (evo/_causes.py): the family, not a genome
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class SearchOutcome:
    run_id: int
    status: str  # a run status: target_reached, budget_exhausted, ...
    exit_code: int
    evaluations: int
    best_genome: Genome | None
    best_fitness_s: float | None
    target_s: float | None
    anchor_s: float | None
    wall_s: float
    gated_genome: Genome | None = None  # the kernel that passed the hard gate (not always the fastest seen)
    gate_times_s: tuple[float, ...] = ()  # its times in the gate's rounds
    statuses: dict = field(default_factory=dict)  # evaluations by status value
    dispatch: DispatchReport | None = None  # a workload run's table: per shape, the kernel or PyTorch
    best_unsteady: bool = False  # the best time (or its anchor) would not hold still: no speedup is claimed
    evaluators: int = 0  # evaluator processes (one per GPU, or one for a CPU family)
    evaluated_now: int = 0  # evaluations finished in this process
    busy: float | None = None  # the share of their time they spent evaluating (and gating)
    reused: int = 0  # evaluations that reused an earlier run's measurement (no build, no GPU time)
    headline: Headline | None = None  # the kernel against the anchor, timed in turns at the end (no workload)
    causes: str = ""  # the first distinct failure causes, each with a genome (evo/_causes.py)
    speed_of_light: str = ""  # a memory-bound family's best: its bytes a second against the GPU's read bandwidth


def status_counts(statuses: dict) -> str:
    """Evaluations by outcome, most common first (ties by name): "21 ok, 3 screened out"."""
    ordered = sorted(statuses.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count} {status.replace('_', ' ')}" for status, count in ordered)


@dataclass
class LoopState:
    """What the live display shows; all derived from what the loop has stored."""

    generation: int = 0
    submitted: int = 0
    evaluations: int = 0
    statuses: Counter = field(default_factory=Counter)  # evaluations by status value (ok, screened_out, ...)
    best_genome: Genome | None = None
    best_fitness_s: float | None = None
    target_s: float | None = None
    anchor_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    workload_progress: str = ""  # a workload run's per-shape standing
    evaluated_now: int = 0  # evaluations finished in this process (a resumed run's stored ones left out)
    unsteady: set = field(default_factory=set)  # genomes whose timing at the fitness shape (or the anchor's) stayed unsteady
    causes: Causes = field(default_factory=Causes)  # why evaluations failed, each distinct cause once
    fitness_bytes: float = 0.0  # a memory-bound family's bytes moved at the fitness shape
    read_bandwidth: float | None = None  # the evaluator's GPU's, bytes a second (a memory-bound family's)

    @property
    def best_unsteady(self) -> bool:
        return self.best_genome is not None and self.best_genome.id in self.unsteady


def describe(outcome: SearchOutcome) -> str:
    reused = f", {outcome.reused} reused (the same kernel measured before)" if outcome.reused else ""
    text = (f"{outcome.evaluations} evaluations ({status_counts(outcome.statuses) or 'none'}{reused}); "
            f"best {format_seconds(outcome.best_fitness_s)}")
    if outcome.target_s is not None:
        text += f", target {format_seconds(outcome.target_s)}"
    if outcome.dispatch is not None:
        text += f"; {outcome.dispatch.summary()}"
    if outcome.headline is not None:
        text += f"; speedup over the anchor {outcome.headline.text()}"
    if outcome.status == RunStatus.ALL_FAILED:
        text = f"stopped: the first {outcome.evaluations} evaluations all failed the same way: {outcome.causes}"
    elif outcome.causes:
        text += f"; failures: {outcome.causes}"
    return text
