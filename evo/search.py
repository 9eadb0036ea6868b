"""The loop: ask -> build -> screen -> evaluate -> store -> tell, until target or budget.

This is the one place that joins the strategy, the fitness pipeline and the store. Every
individual is stored (with its lineage) when it is asked for, every evaluation the moment it
finishes, so a killed search resumes without losing or repeating a finished evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Protocol

from evo.db import NewIndividual, ParentLink, RunLost, RunStatus, Store
from evo._asking import BackgroundAsk
from evo._config import SearchConfig
from evo._heartbeat import Heartbeat
from evo._loop_parts import KnobValues, default_threads, signals_held
from evo._outcome import (EXIT_ALL_FAILED, EXIT_BUDGET_EXHAUSTED, EXIT_SPACE_EXHAUSTED, EXIT_TARGET_REACHED, LoopState,
                          SearchOutcome, describe)
from evo._reuse import RunMemory
from evo._mission_run import MissionRun, RunMode
from evo._workload_run import WorkloadRun
from evo.strategies import Observation, Proposal, Strategy, make_strategy
from evo.fitness import (BuildConfig, EvalConfig, EvalResult, Status, Target, default_cache_dir, start_ray)
from evo.fitness.workers import Finished, Pipeline, PipelineConfig
from evo.kernel_genome import Constraint, Genome
from evo.runtime import bandwidth
from evo.seeds import KernelFamily, get_family, parse_workload
from evo.seeds import family_folder


class Reporter(Protocol):
    def started(self, run_id: int, family: KernelFamily, config: SearchConfig, resumed: bool) -> None: ...
    def evaluated(self, state: "LoopState", genome: Genome, result: EvalResult, generation: int) -> None: ...
    def message(self, text: str) -> None: ...
    def finished(self, outcome: SearchOutcome) -> None: ...


class Search:
    def __init__(self, config: SearchConfig, store: Store, reporter: Reporter, *, ray_address: str | None = None):
        self.family = get_family(config.family_reference)
        self.config = config = config.with_strategy_of(self.family)
        self.store = store
        self.reporter = reporter
        self.ray_address = ray_address
        self.target = Target.parse(config.target) if config.target else None
        self.workload = parse_workload(self.family, config.workload, "the run's workload") if config.workload else None
        # what differs between a run of one shape and a workload run, called at the same points of the loop
        self.mode: RunMode = (WorkloadRun(self.family, self.workload, self.target, store, reporter.message)
                              if self.workload else MissionRun(self.family, store, reporter.message))
        self.fitness_shape = self.workload.primary if self.workload else self.family.mission_shape
        self.runs_fitness_shape = self._runs_fitness_shape()
        self.strategy: Strategy = make_strategy(config.strategy, self.family.space.restricted(self.runs_fitness_shape),
                                                seed=config.seed, population=config.population,
                                                options=config.strategy_options,
                                                niches=self.mode.niches, reads=self.mode.reads)
        self.asker = BackgroundAsk(self.strategy)  # the loop's asks, in a thread of their own
        self.state = LoopState(fitness_bytes=self.family.bytes_moved(self.fitness_shape) if self.family.memory_bound else 0.0)
        self.evaluation = EvalConfig(config.trials, config.cold_cache, self.workload,
                                     threads=self.family.anchor_threads or default_threads())
        self.memory = RunMemory(store, self.family, self.evaluation, reuse=config.reuse)
        self._individual_ids: dict[str, int] = {}
        self._generation_of: dict[str, int] = {}
        self.run_id: int | None = None  # known once the run is written (what an interrupt message names)

    def mark_interrupted(self) -> str | None:
        """After an interrupt, wherever it came: a run still marked running is marked interrupted (unless another
        driver owns it now); its stored status is returned (None: no run was written), for the message to say."""
        if self.run_id is None:
            return None
        with signals_held():
            with contextlib.suppress(RunLost):
                if self.store.get_run(self.run_id).status == RunStatus.RUNNING:
                    self.store.update_run(self.run_id, status=RunStatus.INTERRUPTED, message="stopped by the user")
            return self.store.get_run(self.run_id).status

    def _runs_fitness_shape(self) -> Constraint:
        """That a kernel runs the shape the fitness is timed at: the run's space holds no other genome (in a bf16
        workload of flashcore, no classic one), so the strategy never proposes one."""
        family, shape = self.family, self.fitness_shape
        return Constraint("runs_the_fitness_shape", lambda values: family.takes(KnobValues(values), shape),
                          f"the kernel runs {shape.name}, the shape its fitness is timed at")

    # -- entry points -----------------------------------------------------------------------
    def start(self) -> SearchOutcome:
        """A new run. Ray is joined (or started) first: an address that cannot be joined raises
        RayUnavailable (a ValueError) before anything is written."""
        release_ray = start_ray(self.ray_address, family_folder(self.family))
        try:
            run_id = self.store.create_run(family=self.family.reference_key, strategy=self.config.strategy,
                                           target=self.config.target, seed=self.config.seed,
                                           config=self.config.to_dict())
            self.store.claim(run_id)
        except BaseException:
            release_ray()
            raise
        self.run_id = run_id
        seeds = [Proposal(g, "seed") for g in self.family.seed_genomes]
        if self.config.warm_start:  # the best earlier runs of the family found start this one too
            known = {p.genome.id for p in seeds}
            seeds += [Proposal(g, "warm_start") for g in self.memory.starting_genomes(self.config.population, run_id)
                      if g.id not in known]
        self._store_proposals(run_id, seeds, generation=0)
        self.strategy.add_seeds([p.genome for p in seeds])
        return self._loop(run_id, [p.genome for p in seeds], resumed=False, release_ray=release_ray)

    def resume(self, run_id: int) -> SearchOutcome:
        self.run_id = run_id
        history = self.store.history(run_id)
        self.strategy.add_seeds(list(self.family.seed_genomes))
        shape_times = self.mode.resume(run_id, history)  # a workload's board rebuilt; genome id -> times per shape
        finished, pending = [], []
        for entry in history:
            genome = self.family.space.genome(entry.genome)
            self._individual_ids[genome.id] = entry.individual_id
            self._generation_of[genome.id] = entry.generation
            if entry.status is None:
                pending.append(genome)
            else:
                finished.append(Observation(genome, entry.generation, entry.status, entry.fitness_s,
                                            shape_times.get(genome.id, {})))
                self._tally(genome, entry.status, entry.fitness_s, entry.message)
        self.strategy.restore(finished, pending)
        self.state.generation = max((e.generation for e in history), default=0)
        self.state.submitted = len(finished)
        run = self.store.get_run(run_id)
        self.state.target_s = run.target_seconds
        release_ray = start_ray(self.ray_address, family_folder(self.family))  # before the run is marked running again
        self.store.claim(run_id)  # a driver that held it before stops at its next write
        self.store.update_run(run_id, status=RunStatus.RUNNING, message=None)
        return self._loop(run_id, pending, resumed=True, release_ray=release_ray)

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self, run_id: int, first_batch: list[Genome], resumed: bool, release_ray) -> SearchOutcome:
        cache = Path(self.config.cache_dir) if self.config.cache_dir else default_cache_dir()
        status, dispatch, pipeline, headline = None, None, None, None
        heartbeat = Heartbeat(self.store, run_id).start()
        try:
            self.reporter.started(run_id, self.family, self.config, resumed)
            pipeline = Pipeline(self.family, PipelineConfig(
                BuildConfig(cache, self.config.build_timeout_s),
                self.evaluation,
                eval_timeout_s=self.config.eval_timeout_s, watchdog_factor=self.config.watchdog_factor),
                plan_for=self.mode.plan_for)
            self._submit(pipeline, first_batch)
            if not resumed:
                self._ask_and_submit(run_id, pipeline, self.config.population - len(first_batch), generation=0)
            status = self._drive(run_id, pipeline)
            dispatch, headline = self.mode.end(run_id, pipeline, self._individual_ids, self.state.best_genome,
                                               self.state.anchor_s)
            for item in self._poll(pipeline, 0) if self.mode.records_late else ():  # finished while it stopped
                self._record(run_id, item, pipeline)
        except KeyboardInterrupt:
            status = RunStatus.INTERRUPTED
            raise
        except RunLost:
            status = "lost"  # another driver owns the run now: nothing more is written
            raise
        except BaseException as exc:
            status = RunStatus.FAILED
            with contextlib.suppress(Exception):  # a database that failed (full, gone) may take no more writes
                self.store.update_run(run_id, status=RunStatus.FAILED, message=f"{type(exc).__name__}: {exc}"[:2000])
            raise
        finally:
            heartbeat.stop()
            self.asker.close()
            if status == RunStatus.INTERRUPTED:
                self.mark_interrupted()
            if pipeline is not None:
                pipeline.close()
            release_ray()
        outcome = dataclasses.replace(self._outcome(run_id, status), dispatch=dispatch, headline=headline,
                                      evaluators=pipeline.evaluators if pipeline else 0,
                                      evaluated_now=self.state.evaluated_now, reused=self.memory.reused,
                                      busy=pipeline.busy_s / max(1e-9, pipeline.evaluators * (time.monotonic()
                                                                 - self.state.started)) if pipeline else None)
        self.store.update_run(run_id, status=status, message=describe(outcome))
        self.reporter.finished(outcome)
        return outcome

    def _drive(self, run_id: int, pipeline: Pipeline) -> str:
        """Collect results, ask for the next batch in the background when the pipeline wants one (evo/_asking.py),
        submit it when it comes; until the run stops and nothing is left on its way (after a target reached or
        the time spent: at once)."""
        stop_reason = None
        strategy_dry = False  # the strategy had nothing new; ask again only after a new result
        try:
            while True:
                finished = self._poll(pipeline, 0.02 if self.asker.asking else 0.5)
                for item in finished:
                    self._record(run_id, item, pipeline)
                if stop_reason in (None, RunStatus.BUDGET_EXHAUSTED, RunStatus.SPACE_EXHAUSTED):
                    # a result meets the target whenever it comes: also one still on its way once the budget
                    # is all submitted, or the last of a space
                    self._gate_best_qualifier(run_id, pipeline)
                    stop_reason = self._stop_reason() if self._target_reached() or self._all_failing() else stop_reason
                strategy_dry = strategy_dry and not finished
                stop_reason = stop_reason or self._stop_reason()
                if stop_reason in (RunStatus.TIME_EXHAUSTED, RunStatus.TARGET_REACHED, RunStatus.ALL_FAILED):
                    # what is still on its way stays unevaluated (after a time budget --resume finishes it): once
                    # a kernel has met the target through the gate, timing more only spends the GPU
                    return stop_reason
                answered = self.asker.collect()
                if answered is not None and stop_reason is None:
                    proposals, generation = answered
                    self._submit_proposals(run_id, pipeline, proposals, generation)
                    strategy_dry = not proposals
                wants_batch = not self.asker.asking and not self.memory.waiting and pipeline.wants_batch(self.config.population)
                if stop_reason is None and wants_batch and not strategy_dry and (size := self._batch_size()) > 0:
                    self.asker.start(size, self.state.generation + 1)
                in_flight = pipeline.in_flight + len(self.memory.waiting) + self.asker.asking
                if stop_reason is None and strategy_dry and in_flight == 0:
                    stop_reason = RunStatus.SPACE_EXHAUSTED
                if stop_reason is not None and in_flight == 0:
                    return stop_reason
        finally:
            self.asker.settle()

    def _stop_reason(self) -> str | None:
        if self._target_reached():
            return RunStatus.TARGET_REACHED
        if self._all_failing():
            return RunStatus.ALL_FAILED
        if self.config.time_budget_s is not None and time.monotonic() - self.state.started >= self.config.time_budget_s:
            return RunStatus.TIME_EXHAUSTED
        if not self._budget_left():
            return RunStatus.BUDGET_EXHAUSTED
        return None

    def _all_failing(self) -> bool:
        """The first evaluations all failed one way (evo/_causes.py): the family's fault, not a genome's."""
        return self.state.causes.all_one_way(self.config.budget) is not None

    def _budget_left(self) -> int:
        if self.config.budget is None:
            return 1 << 30
        return max(0, self.config.budget - self.state.submitted)

    def _batch_size(self) -> int:
        return min(self.config.population, self._budget_left())

    def _target_reached(self) -> bool:
        return self.mode.passed

    def _gate_best_qualifier(self, run_id: int, pipeline: Pipeline) -> None:
        """What meets the target through the hard gate (evo/_mission_run.py, evo/_workload_run.py)."""
        if self.state.target_s is not None and not self.mode.passed:
            self.mode.gate(run_id, pipeline, self._individual_ids, self.config.gate_rounds, self.state.target_s)

    # -- pieces -----------------------------------------------------------------------------
    def _ask_and_submit(self, run_id: int, pipeline: Pipeline, n: int, generation: int) -> int:
        n = min(n, self._budget_left())
        if n <= 0:
            return 0
        proposals = self.strategy.ask(n)
        self._submit_proposals(run_id, pipeline, proposals, generation)
        return len(proposals)

    def _submit_proposals(self, run_id: int, pipeline: Pipeline, proposals: list[Proposal], generation: int) -> None:
        if proposals:
            self._store_proposals(run_id, proposals, generation)
            self._submit(pipeline, [p.genome for p in proposals])
            self.state.generation = generation

    def _store_proposals(self, run_id: int, proposals: list[Proposal], generation: int) -> None:
        rows = [NewIndividual(p.genome.id, p.genome.as_dict(), generation, p.origin,
                              tuple(ParentLink(parent.id, op, changed) for parent, op, changed in p.parents))
                for p in proposals]
        self.mode.note_parents(proposals)
        self._individual_ids.update(self.store.add_individuals(run_id, rows))
        self._generation_of.update({p.genome.id: generation for p in proposals})

    def _submit(self, pipeline: Pipeline, genomes: list[Genome]) -> None:
        self.state.submitted += len(genomes)
        self._dispatch(pipeline, genomes)

    def _poll(self, pipeline: Pipeline, timeout_s: float) -> list[Finished]:
        """What finished within ``timeout_s``. Once the evaluators' hardware is known it goes to the run's
        memory here, the one place, and the genomes held for it go out."""
        finished = pipeline.poll(timeout_s)
        if pipeline.hardware:
            held = self.memory.know_hardware(pipeline.hardware)
            if held:
                self._dispatch(pipeline, held)
        return finished

    def _dispatch(self, pipeline: Pipeline, genomes: list[Genome]) -> None:
        """To the pipeline what must be measured; what an earlier run measured is recorded from memory, and a
        genome whose kernel cannot run the shape its fitness is timed at (a seed, a warm start: the strategy
        proposes none) is screened out here, unbuilt."""
        reused, fresh = self.memory.split(genomes)
        unfit = [g for g in fresh if not self.runs_fitness_shape.holds(g.as_dict())]
        fresh = [g for g in fresh if g not in unfit]
        if fresh:
            pipeline.submit(fresh)
        for genome, result in reused:
            self._record(self.run_id, Finished(genome, result), pipeline)
        for genome in unfit:
            self._record(self.run_id, Finished(genome, EvalResult(
                genome.id, Status.SCREENED_OUT, f"this kernel cannot run {self.fitness_shape.name}, the shape its "
                f"fitness is timed at (e.g. a dtype or layout only another design takes)", None)), pipeline)

    def _record(self, run_id: int, item: Finished, pipeline: Pipeline) -> None:
        genome, result = item.genome, item.result
        self.state.evaluated_now += result.reused_from is None
        self.store.record_evaluation(self._individual_ids[genome.id], result,
                                     self.mode.dims,
                                     measurement_key=self.memory.key(genome))
        if self.state.anchor_s is None and pipeline.hardware.get("anchor"):
            self._set_anchor(run_id, pipeline.hardware)
        shape_times = self.mode.observe(genome, result)
        if any(t.unstable and t.shape == self.fitness_shape.name for t in result.timings + result.anchor):
            self.state.unsteady.add(genome.id)
        self.asker.tell([Observation(genome, self._generation_of[genome.id], result.status.value, result.fitness_s,
                                     shape_times)])
        self._tally(genome, result.status.value, None if result.status.failed else result.fitness_s, result.message)
        self.state.workload_progress = self.mode.progress()
        self.reporter.evaluated(self.state, genome, result, self._generation_of[genome.id])

    def _set_anchor(self, run_id: int, hardware: dict) -> None:
        anchor = [dataclasses.asdict(t) for t in hardware["anchor"]]
        self.mode.set_anchor(anchor)
        self.state.anchor_s = next(t["median_s"] for t in anchor if t["shape"] == self.fitness_shape.name)
        self.state.read_bandwidth = hardware.get("read_bandwidth")
        if self.target is not None:
            self.state.target_s = self.target.resolve(self.state.anchor_s)
        info = {k: v for k, v in hardware.items() if k != "anchor"}
        self.store.update_run(run_id, hardware=info, anchor=anchor, target_seconds=self.state.target_s)

    def _tally(self, genome: Genome, status: str, fitness_s: float | None, message: str | None = None) -> None:
        """One evaluated genome in the loop's state: counted by status and failure cause, and kept if it has a
        time (ok)."""
        self.state.evaluations += 1
        self.state.statuses[status] += 1
        self.state.causes.add(status, message, genome.id)
        if fitness_s is None:
            return
        self.mode.kept(genome, fitness_s)
        if self.state.best_fitness_s is None or fitness_s < self.state.best_fitness_s:
            self.state.best_fitness_s, self.state.best_genome = fitness_s, genome

    def _outcome(self, run_id: int, status: str) -> SearchOutcome:
        exit_code = {RunStatus.TARGET_REACHED: EXIT_TARGET_REACHED, RunStatus.SPACE_EXHAUSTED: EXIT_SPACE_EXHAUSTED,
                     RunStatus.ALL_FAILED: EXIT_ALL_FAILED}.get(status, EXIT_BUDGET_EXHAUSTED)
        if self.target is None and status in (RunStatus.BUDGET_EXHAUSTED, RunStatus.TIME_EXHAUSTED):
            exit_code = EXIT_TARGET_REACHED
        s = self.state
        gated, gate_times = self.mode.winner or (None, ())
        return SearchOutcome(run_id, status, exit_code, s.evaluations, s.best_genome,
                             s.best_fitness_s, s.target_s, s.anchor_s, time.monotonic() - s.started, gated, gate_times,
                             dict(s.statuses), best_unsteady=s.best_unsteady, causes=s.causes.text(),
                             speed_of_light=bandwidth.describe(s.fitness_bytes, s.best_fitness_s, s.read_bandwidth))
