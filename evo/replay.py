"""Replay: run a strategy against recorded measurements, without a GPU, in seconds.

A recorded space is every configuration that was measured, with its time or its failure: a Kernel Tuner
cache file (its JSON, gzipped or not; configurations absent from a brute-force cache are invalid, as a
restriction would have made them; failed ones cost an evaluation and give no time) or an evo run's
evaluations. The strategy proposes through its ask/tell interface exactly as in a search, and the table of
truth answers. Two ways to drive it:

- ``loop``: as the search loop does with one evaluator: the next batch is asked while the last one is
  still being evaluated, so a strategy hears of each result up to a batch late;
- ``sync``: every batch scored before the next is asked.

For each strategy, over many seeds: the evaluations needed to get within 1% and 5% of the best recorded
time (median and quartiles; a run that never gets there counts as never), and the share of runs within
5% after given budgets.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from evo.strategies import Observation, make_strategy
from evo.kernel_genome import Choice, Genome, Space

MODES = ("loop", "sync")


@dataclass(frozen=True)
class RecordedSpace:
    """A knob space and what each of its measured genomes gave: seconds, or None for a failure."""

    name: str
    space: Space
    times: Mapping[str, float | None]  # genome id -> seconds, or None when it failed

    @property
    def best_s(self) -> float:
        return min(t for t in self.times.values() if t is not None)

    def within(self, seconds: float | None, fraction: float) -> bool:
        return seconds is not None and seconds <= self.best_s * (1 + fraction)


def kernel_tuner_space(path: str | Path) -> RecordedSpace:
    """A Kernel Tuner cache file as a recorded space; ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as handle:
            data = json.load(handle)
        keys, values, cache = data["tune_params_keys"], data["tune_params"], data["cache"]
        knobs = [Choice(_name(key), tuple(values[key]), ordered=all(isinstance(v, (int, float)) for v in values[key]))
                 for key in keys]
        recorded: dict[tuple, float | None] = {}
        for entry in cache.values():
            point = tuple(entry[key] for key in keys)
            time = entry.get("time")
            recorded[point] = float(time) if isinstance(time, (int, float)) and time == time and time > 0 else None
        names = [k.name for k in knobs]
        space = Space(knobs, members=[dict(zip(names, point)) for point in recorded])  # absent ones are invalid
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
        raise ValueError(f"{path}: not a Kernel Tuner cache file ({type(exc).__name__}: {exc})"[:500]) from None
    times = {genome.id: time for genome, time in zip(space.members, recorded.values())}
    return RecordedSpace(path.name.split(".")[0], space, times)


def store_space(store, run_id: int, family) -> RecordedSpace:
    """An evo run's evaluations as a recorded space over its family's knobs (other genomes invalid)."""
    times: dict[str, float | None] = {}
    evaluated: dict[str, dict] = {}
    for entry in store.history(run_id):
        if entry.status is not None:
            genome = family.space.genome(entry.genome)
            times[genome.id] = entry.fitness_s if entry.status == "ok" else None
            evaluated[genome.id] = genome.as_dict()
    if not any(t is not None for t in times.values()):
        raise ValueError(f"run {run_id} has no successful evaluation to replay against")
    # what was not evaluated is invalid
    space = Space(family.space.knobs, family.space.constraints, members=list(evaluated.values()))
    return RecordedSpace(f"run {run_id} ({family.name})", space, times)


def replay_once(recorded: RecordedSpace, strategy: str, *, seed: int, budget: int, population: int = 8,
                mode: str = "loop", options: Mapping | None = None, stop_within: float | None = None) -> list[float | None]:
    """The times one run of ``strategy`` gets, in the order it is told them (None: a failure); with
    ``stop_within``, the run ends at the first time within that fraction of the best (what a search with that
    target would do; the evaluations needed to get there are then the list's length)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    chosen = make_strategy(strategy, recorded.space, seed=seed, population=population, options=options)
    told: list[float | None] = []
    waiting: list[tuple[Genome, int]] = []  # asked, not yet told
    generation = 0
    while len(told) < budget:
        ahead = population if mode == "loop" else 0  # the loop asks again while a batch is still out
        if len(waiting) <= ahead and len(told) + len(waiting) < budget:
            proposals = chosen.ask(min(population, budget - len(told) - len(waiting)))
            waiting += [(p.genome, generation) for p in proposals]
            generation += 1
            if not proposals and not waiting:
                break  # the space is used up
        if not waiting:
            break
        batch = waiting[:1] if mode == "loop" else waiting
        waiting = waiting[len(batch):]
        for genome, born in batch:
            seconds = recorded.times.get(genome.id)
            told.append(seconds)
            chosen.tell([Observation(genome, born, "ok" if seconds is not None else "compile_error", seconds)])
            if stop_within is not None and recorded.within(seconds, stop_within):
                return told
    return told


@dataclass(frozen=True)
class ReplaySummary:
    """One strategy on one recorded space over ``runs`` seeds."""

    space: str
    strategy: str
    mode: str
    runs: int
    to_1pct: tuple[float, float, float]  # quartiles of the evaluations needed (inf: never)
    to_5pct: tuple[float, float, float]
    success_5pct: Mapping[int, float]  # budget -> share of runs within 5% by then


def summarize(recorded: RecordedSpace, strategy: str, *, seeds: Sequence[int], budget: int, population: int = 8,
              mode: str = "loop", budgets: Sequence[int] = (50, 100, 200, 400),
              options: Mapping | None = None) -> ReplaySummary:
    needed = {0.01: [], 0.05: []}
    for seed in seeds:
        told = replay_once(recorded, strategy, seed=seed, budget=budget, population=population, mode=mode,
                           options=options)
        for fraction, counts in needed.items():
            hit = next((i + 1 for i, t in enumerate(told) if recorded.within(t, fraction)), None)
            counts.append(float("inf") if hit is None else float(hit))
    success = {b: sum(1 for n in needed[0.05] if n <= b) / len(seeds) for b in budgets if b <= budget}
    return ReplaySummary(recorded.name, strategy, mode, len(seeds), quartiles(needed[0.01]),
                         quartiles(needed[0.05]), success)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Nearest-rank quartiles (a run that never got there is inf, and sorts last)."""
    ordered = sorted(values)
    return tuple(ordered[round(q * (len(ordered) - 1))] for q in (0.25, 0.5, 0.75))


def table_rows(summaries: Sequence[ReplaySummary]) -> tuple[list[str], list[list[str]]]:
    """A table of summaries: the header and one row each (what `evo replay` and the benchmark print)."""
    budgets = sorted({b for s in summaries for b in s.success_5pct})
    header = ["space", "strategy", "mode", "runs", "evals to 1% (q1 median q3)", "evals to 5% (q1 median q3)"]
    header += [f"within 5% at {b}" for b in budgets]
    rows = [[s.space, s.strategy, s.mode, str(s.runs), _spread(s.to_1pct), _spread(s.to_5pct)]
            + [f"{s.success_5pct[b]:.0%}" if b in s.success_5pct else "" for b in budgets] for s in summaries]
    return header, rows


def markdown_table(summaries: Sequence[ReplaySummary]) -> str:
    """The table of summaries in Markdown (what the benchmarks print for docs/BENCHMARKS.md)."""
    header, rows = table_rows(summaries)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _spread(quartiles: tuple[float, float, float]) -> str:
    return " ".join("never" if q == float("inf") else f"{q:.0f}" for q in quartiles)


def _name(key: str) -> str:
    """A knob name from a tuning parameter's (knob names are identifiers)."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
    return name if name.isidentifier() else f"p_{name}"
