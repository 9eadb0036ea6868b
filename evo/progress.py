"""What a user sees while a search runs: a live line on a terminal, one line per evaluation
otherwise (logs, CI), and a final summary."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from evo._config import SearchConfig
from evo._outcome import LoopState, SearchOutcome, status_counts
from evo.db import RunStatus
from evo.dispatch import DispatchReport
from evo.fitness import EvalResult, format_seconds
from evo.fitness.score import format_span
from evo.kernel_genome import Genome
from evo.runtime import bandwidth
from evo.seeds import KernelFamily


def _best_line(state: LoopState) -> str:
    if state.workload_progress:
        return state.workload_progress
    best = format_seconds(state.best_fitness_s)
    parts = [f"best {best}"]
    if state.best_unsteady:
        parts.append("(unsteady timing: no speedup claimed)")
    elif state.best_fitness_s is not None and state.anchor_s:
        parts.append(f"(speedup {state.anchor_s / state.best_fitness_s:.2f}x vs anchor)")
    light = bandwidth.describe(state.fitness_bytes, state.best_fitness_s, state.read_bandwidth)
    if light:
        parts.append(f"({light})")
    if state.target_s is not None:
        parts.append(f"target {format_seconds(state.target_s)}")
    return " ".join(parts)


class ConsoleReporter:
    def __init__(self, console: Console | None = None, *, budget: int | None = None) -> None:
        self.console = console or Console()
        self.budget = budget
        self._live: Live | None = None

    def started(self, run_id: int, family: KernelFamily, config: SearchConfig, resumed: bool) -> None:
        verb = "resuming" if resumed else "starting"
        limits = []
        if config.target:
            limits.append(f"target {config.target}")
        if config.budget:
            limits.append(f"budget {config.budget} evaluations")
        if config.time_budget_s:
            limits.append(f"time budget {config.time_budget_s:g} s")
        self.console.print(f"[bold]{verb} run {run_id}[/]: family {family.name}, strategy {config.strategy}, "
                           f"population {config.population}, seed {config.seed}; " + ", ".join(limits)
                           + (f"; workload {config.workload['name']} ({len(config.workload['shapes'])} shapes), "
                              f"anchor {family.fallback_label}" if config.workload else
                              f"; anchor {family.anchor_name}; fitness: the time at {family.mission_shape.label()}")
                           + (", caches cold" if config.cold_cache else ""),
                           highlight=False, soft_wrap=True)
        if self.console.is_terminal:
            self._live = Live(Text("starting Ray and timing the anchor..."), console=self.console,
                              refresh_per_second=4, transient=True)
            self._live.start()

    def evaluated(self, state: LoopState, genome: Genome, result: EvalResult, generation: int) -> None:
        """One finished evaluation; ``generation`` is the genome's own (as stored), not the newest bred."""
        done = f"{state.evaluations}" + (f"/{self.budget}" if self.budget else "")
        if self._live is not None:
            first = state.causes.first(1)
            self._live.update(Text(f"newest generation {state.generation}  evaluations {done} ({status_counts(state.statuses)})  "
                                   + _best_line(state) + (f"\nfirst failure: {first[0].text(100)}" if first else "")))
            return
        outcome = format_seconds(result.fitness_s) if result.fitness_s is not None else result.status.value
        reused = " (reused)" if result.reused_from is not None else ""
        why = f"  ({' '.join(result.message.split())[:120]})" if result.status.failed and result.message else ""
        self.console.print(f"[{done}] gen {generation} {genome.id} {outcome:>13}{reused}  " + _best_line(state) + why,
                           highlight=False, markup=False, soft_wrap=True)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def finished(self, outcome: SearchOutcome) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if outcome.dispatch is not None:
            self.console.print(dispatch_table_view(outcome.dispatch))
        table = Table(title=f"run {outcome.run_id}: {outcome.status.replace('_', ' ')}", show_header=False)
        reused = f"; {outcome.reused} reused (the same kernel measured before)" if outcome.reused else ""
        table.add_row("evaluations", f"{outcome.evaluations} ({status_counts(outcome.statuses) or 'none'}{reused})")
        if outcome.causes:
            table.add_row("failures" if outcome.status != RunStatus.ALL_FAILED else "stopped: every evaluation failed so",
                          outcome.causes)
        if outcome.wall_s > 0 and outcome.evaluators:
            table.add_row("pace", f"{60 * outcome.evaluated_now / outcome.wall_s:.0f} evaluations a minute; "
                          f"{outcome.evaluators} evaluator(s), busy {outcome.busy:.0%} of the time")
        if outcome.dispatch is not None:
            table.add_row("workload", outcome.dispatch.summary())
            table.add_row("wall time", f"{outcome.wall_s:.1f} s")
            self.console.print(table)
            return
        table.add_row("best time (mission shape)", format_seconds(outcome.best_fitness_s))
        if outcome.speed_of_light:
            table.add_row("its bandwidth", outcome.speed_of_light)
        table.add_row("anchor time", format_seconds(outcome.anchor_s))
        if outcome.headline is not None:  # re-timed beside the anchor, in turns, at the end (evo/_headline.py)
            table.add_row(f"speedup over anchor ({outcome.headline.genome_id})", outcome.headline.text())
        table.add_row("target", format_seconds(outcome.target_s))
        table.add_row("wall time", f"{outcome.wall_s:.1f} s")
        table.add_row("best genome", str(outcome.best_genome) if outcome.best_genome else "-")
        if outcome.gated_genome is not None:
            table.add_row("passed the hard gate", f"{outcome.gated_genome.id}: {len(outcome.gate_times_s)} rounds, "
                                                  f"{format_span(list(outcome.gate_times_s))}")
            if outcome.gated_genome != outcome.best_genome:  # the fastest failed the gate, or came later
                table.add_row("its genome", str(outcome.gated_genome))
        self.console.print(table)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def dispatch_table_view(table: DispatchReport) -> Table:
    """A workload's table in the terminal: per shape, the best kernel, its time, the anchor's, and what
    the op runs there (the run summary and `evo show` print it)."""
    view = Table(title=f"workload {table.workload.name}: per shape, the fastest verified kernel against "
                       f"{table.fallback}")
    light = bool(table.read_bandwidth) and any(row.bytes_moved for row in table.rows)
    columns = ["shape", "weight", "best kernel", "time", "anchor", "speedup", "op runs"]
    if light:  # a memory-bound family: each one's bytes a second over the GPU's read bandwidth
        view.caption = f"read bandwidth {table.read_bandwidth / 1e12:.2f} TB/s (a read-only stream on the evaluator's GPU)"
        columns[5:5] = ["kernel of read bw", "anchor of read bw"]
    for column in columns:
        view.add_column(column, justify="left" if column in ("shape", "best kernel", "op runs") else "right")
    for row in table.rows:
        kernel = f"{row.genome_id} (#{row.individual_id})" if row.genome_id else "-"
        speedup = f"{row.speedup:.2f}x" if row.speedup else "-"
        runs = "kernel" if row.chosen else ("PyTorch (kernel unconfirmed)" if row.speedup and row.speedup > 1
                                            and not row.confirmed else "PyTorch")
        cells = [row.shape, f"{row.weight:g}", kernel, format_seconds(row.kernel_s), format_seconds(row.anchor_s),
                 speedup, runs]
        if light:
            cells[5:5] = [_share(row.bytes_moved, row.kernel_s, table.read_bandwidth),
                          _share(row.bytes_moved, row.anchor_s, table.read_bandwidth)]
        view.add_row(*cells)
    return view


def _share(moved: float, seconds: float | None, read: float) -> str:
    return f"{moved / seconds / read:.0%}" if seconds else "-"
