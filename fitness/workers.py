"""Ray workers: build tasks on CPU workers, long-lived evaluator actors (one per GPU, or one
for a CPU family), and the supervision that turns their failures into records.

``Pipeline`` takes genomes in and gives back exactly one ``Finished`` per genome, in the order
they finish; ``Pipeline.evaluate_all`` gives them in input order. Nothing raised by a
candidate crosses it: a stuck actor is a ``timeout`` record, a kernel fault the evaluator caught a
``crashed`` record, and the actor is replaced in both cases (a poisoned process is never reused).
A worker process that dies is retried once on a fresh one (Ray retries a build task; the pipeline
re-runs an evaluation on a replacement actor), then recorded as failed: ``worker_lost`` for a
build, ``crashed`` for an evaluation.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from evo.fitness._pacing import Pacing
from evo.fitness._ray import node_name
from evo.fitness._ray import short_error as _short
from evo.fitness.build import BuildConfig, Builder
from evo.fitness.evaluate import EvalConfig, Evaluator, ShapePlan
from evo.fitness.records import BuildResult, EvalResult, GateResult, ScreenResult, StageSeconds, Status, to_jsonable
from evo.fitness.screen import screen
from evo.kernel_genome import Genome
from evo.seeds import KernelFamily, get_family


@dataclass(frozen=True)
class PipelineConfig:
    """``eval_timeout_s`` is the watchdog's hard cap on one candidate's verify + benchmark; below it
    the watchdog is ``watchdog_factor`` times the wall time the evaluator took to time the anchor on
    every shape (a whole evaluation's work for a kernel as fast as the anchor), never less than
    ``watchdog_min_s``: a hung kernel costs seconds, not the cap."""

    build: BuildConfig
    evaluation: EvalConfig = EvalConfig()
    eval_timeout_s: float = 300.0
    watchdog_factor: float = 20.0
    watchdog_min_s: float = 5.0
    anchor_timeout_s: float = 600.0
    evaluators: int | None = None  # None: one per GPU (CUDA families), one (CPU families)

    def __post_init__(self) -> None:
        for name in ("eval_timeout_s", "watchdog_factor", "watchdog_min_s", "anchor_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.evaluators is not None and self.evaluators < 1:
            raise ValueError(f"evaluators must be at least 1, got {self.evaluators}")

    def watchdog_s(self, anchor_pass_s: float) -> float:
        """How long one evaluation may run on an evaluator whose anchor pass took ``anchor_pass_s``."""
        return min(self.eval_timeout_s, max(self.watchdog_min_s, self.watchdog_factor * anchor_pass_s))

    def describe_watchdog(self, anchor_pass_s: float) -> str:
        return (f"{self.watchdog_s(anchor_pass_s):.3g} s ({self.watchdog_factor:g} x the anchor's "
                f"{anchor_pass_s:.3g} s pass, at least {self.watchdog_min_s:g} s, at most {self.eval_timeout_s:g} s)")


@dataclass(frozen=True)
class Finished:
    genome: Genome
    result: EvalResult


def build_and_screen(family_ref: str, genome_json: str, config: BuildConfig) -> tuple[BuildResult, ScreenResult]:
    """Build stage then screen stage for one genome; runs in a Ray CPU task."""
    family = get_family(family_ref)
    genome = family.space.genome_from_json(genome_json)
    try:
        recipe = family.build_recipe(genome)
    except Exception as exc:  # a family that cannot render this genome: the genome's failure
        build = BuildResult(genome.id, Status.COMPILE_ERROR, f"rendering the source failed: {exc}",
                            None, None, 0.0, False)
        return build, screen(build, "", family.screen_limits)
    build = replace(Builder(config).build(genome.id, recipe), node=node_name())
    return build, screen(build, recipe.output, family.screen_limits)


class EvaluatorActor:
    """Lives in its own Ray worker process and owns one device for its whole life."""

    def __init__(self, family_ref: str, config: EvalConfig, artifact_dir: str) -> None:
        self.evaluator = Evaluator(get_family(family_ref), config, Path(artifact_dir))

    def describe(self) -> dict:
        return self.evaluator.describe()

    def anchor(self):
        """(the anchor's timings, {secondary anchor: timings}, seconds the anchor's pass took, {secondary anchor
        that could not run every shape: why}), every shape, timed in this process."""
        anchor = self.evaluator.anchor_timings()
        secondary = self.evaluator.secondary_anchor_timings()
        return anchor, secondary, self.evaluator.anchor_pass_s, self.evaluator.secondary_refused

    def evaluate(self, genome_json: str, build: BuildResult, screened: ScreenResult,
                 plan: ShapePlan | None = None) -> EvalResult:
        genome = self.evaluator.family.space.genome_from_json(genome_json)
        return self.evaluator.evaluate(genome, build, screened, plan)

    def gate(self, genome_json: str, build: BuildResult, targets, rounds: int, with_anchor: bool) -> GateResult:
        genome = self.evaluator.family.space.genome_from_json(genome_json)
        return self.evaluator.gate(genome, build, targets, rounds, with_anchor)


@dataclass(frozen=True)
class _Job:
    """A built and screened genome on its way to an evaluator; ``attempt`` 1 is its retry."""

    genome: Genome
    build: BuildResult
    screened: ScreenResult
    attempt: int = 0


@dataclass
class _Slot:
    """One evaluator actor and what it is doing."""

    actor: object
    anchor_ref: object | None = None
    anchor_started: float = 0.0
    anchor_attempt: int = 0  # 1: this actor replaces one that died timing the anchor
    job: _Job | None = None
    job_ref: object | None = None
    job_started: float = 0.0
    anchor_pass_s: float | None = None  # known once the anchor is timed; the watchdog derives from it
    hardware: dict = field(default_factory=dict)


class Pipeline:
    """``plan_for``: in a workload run, how to measure a genome (asked when it is dispatched to an
    evaluator, so that the plan's cutoffs are the best times known then)."""

    def __init__(self, family: KernelFamily, config: PipelineConfig,
                 plan_for: Callable[[Genome], ShapePlan] | None = None) -> None:
        import ray

        self._ray = ray
        self.family = family
        self.config = config
        self._plan_for = plan_for
        self._build_task = ray.remote(num_cpus=1, max_retries=1)(build_and_screen)
        resources = {"num_gpus": 1, "num_cpus": 1} if family.device == "cuda" else {"num_cpus": 1}
        self._actor_class = ray.remote(max_restarts=0, **resources)(EvaluatorActor)
        self._building: dict = {}  # ObjectRef -> (Genome, when its build was submitted)
        self.pacing = Pacing()
        self._unsubmitted: deque = deque()  # genomes whose build waits for the CPU to be free
        # On a CPU family, compiles and timings would share the cores: never run both at once.
        self._isolate_timing = family.device == "cpu"
        self._ready: deque = deque()  # (genome, build, screened) waiting for an evaluator
        self._finished: list[Finished] = []
        self._holding = False  # a gate is waiting for, or running on, an evaluator: dispatch nothing
        count = config.evaluators or self._default_evaluators()
        self._slots = [self._new_slot() for _ in range(count)]
        self.hardware: dict = {}
        self.busy_s = 0.0  # evaluator-seconds spent on evaluations and gates (how busy the evaluators were)

    def _default_evaluators(self) -> int:
        if self.family.device == "cuda":
            return max(1, int(self._ray.cluster_resources().get("GPU", 0)))
        return 1

    def _new_slot(self) -> _Slot:
        actor = self._actor_class.remote(self.family.reference_key, self.config.evaluation,
                                         str(self.config.build.cache_dir / "loaded"))
        return _Slot(actor, actor.anchor.remote(), time.monotonic())

    def _replace(self, slot: _Slot) -> None:
        self._ray.kill(slot.actor, no_restart=True)
        fresh = self._new_slot()
        slot.actor, slot.anchor_ref, slot.anchor_started = fresh.actor, fresh.anchor_ref, fresh.anchor_started
        slot.anchor_attempt, slot.job, slot.job_ref, slot.anchor_pass_s = 0, None, None, None

    # -- public API ---------------------------------------------------------------------------
    def submit(self, genomes: Sequence[Genome]) -> None:
        self._unsubmitted.extend(genomes)
        self._launch_builds()

    @property
    def builds_pending(self) -> int:
        return len(self._building) + len(self._unsubmitted)

    def wants_batch(self, population: int) -> bool:
        """Whether the loop should ask for its next batch now (see fitness._pacing)."""
        return self.pacing.wants_batch(building=self.builds_pending, queued=len(self._ready), in_flight=self.in_flight,
                                       population=population, evaluators=len(self._slots),
                                       isolated=self._isolate_timing)

    @property
    def in_flight(self) -> int:
        busy = sum(1 for s in self._slots if s.job is not None)
        return self.builds_pending + len(self._ready) + busy

    def poll(self, timeout_s: float) -> list[Finished]:
        """Advance the pipeline; return what finished (possibly nothing) within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self._finished:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.in_flight == 0 and not self._timing_anchor()):
                break
            self._step(min(remaining, 0.5))
        done, self._finished = self._finished, []
        return done

    def evaluate_all(self, genomes: Sequence[Genome]) -> list[EvalResult]:
        """Evaluate a batch; one result per genome, in the input order."""
        self.submit(genomes)
        by_id: dict[str, EvalResult] = {}
        while len(by_id) < len({g.id for g in genomes}):
            for item in self.poll(5.0):
                by_id[item.genome.id] = item.result
        return [by_id[g.id] for g in genomes]

    def gate(self, genome: Genome, targets, rounds: int, with_anchor: bool = False) -> GateResult:
        """The hard gate on one evaluated genome (``targets``: (shape, limit or None), see
        ``Evaluator.gate``), on the first evaluator that falls idle (nothing else is dispatched
        meanwhile; what finishes meanwhile is returned by the next ``poll``)."""
        targets = tuple(targets)
        target_s = targets[0][1]
        build, screened = build_and_screen(self.family.reference_key, genome.to_json(), self.config.build)
        if screened.status is not Status.OK:  # the artifact is cached: this is a lookup, not a compile
            return GateResult(genome.id, target_s, False, (), f"rebuilding for the gate: {screened.message}", targets)
        self._holding = True
        try:
            while True:
                idle = [s for s in self._slots if s.anchor_ref is None and s.job is None]
                if idle and not (self._isolate_timing and self._building):  # CPU: no compile beside timing
                    break
                self._step(0.5)
            slot = idle[0]
            ref = slot.actor.gate.remote(genome.to_json(), build, targets, rounds, with_anchor)
            limit = self._watchdog_s(slot) * rounds
            started = time.monotonic()
            ready, _ = self._ray.wait([ref], timeout=limit)
            self.busy_s += time.monotonic() - started
            if not ready:
                self._replace(slot)
                return GateResult(genome.id, target_s, False, (), f"no gate result after {limit:g} s; evaluator killed",
                                  targets)
            try:
                return self._ray.get(ref)
            except self._ray.exceptions.RayError as exc:
                self._replace(slot)
                return GateResult(genome.id, target_s, False, (), f"the gate crashed the evaluator: {_short(exc)}",
                                  targets)
        finally:
            self._holding = False

    @property
    def evaluators(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        for slot in self._slots:
            self._ray.kill(slot.actor, no_restart=True)

    # -- the machinery ----------------------------------------------------------------------
    def _timing_anchor(self) -> bool:
        return any(s.anchor_ref is not None for s in self._slots)

    def _timing_now(self) -> bool:
        return any(s.anchor_ref is not None or s.job is not None for s in self._slots)

    def _launch_builds(self) -> None:
        if self._isolate_timing and self._timing_now():
            return
        while self._unsubmitted:
            genome = self._unsubmitted.popleft()
            ref = self._build_task.remote(self.family.reference_key, genome.to_json(), self.config.build)
            self._building[ref] = genome, time.monotonic()

    def _step(self, wait_s: float) -> None:
        ray = self._ray
        refs = list(self._building)
        refs += [s.anchor_ref for s in self._slots if s.anchor_ref is not None]
        refs += [s.job_ref for s in self._slots if s.job is not None]
        if refs:
            ray.wait(refs, num_returns=1, timeout=wait_s)
        self._collect_builds()
        for slot in self._slots:
            self._check_slot(slot)
        self._dispatch()
        self._launch_builds()

    def _collect_builds(self) -> None:
        if not self._building:
            return
        done, _ = self._ray.wait(list(self._building), num_returns=len(self._building), timeout=0)
        for ref in done:
            genome, submitted = self._building.pop(ref)
            self.pacing.built(time.monotonic() - submitted)
            try:
                build, screened = self._ray.get(ref)
            except Exception as exc:  # the worker died twice (retried once by Ray)
                self._finish(genome, EvalResult(genome.id, Status.WORKER_LOST, f"build worker lost: {exc}", None))
                continue
            if screened.status is Status.OK:
                self._ready.append(_Job(genome, build, screened))
            else:
                stages = StageSeconds(build=build.seconds, screen=screened.seconds)
                self._finish(genome, EvalResult(genome.id, screened.status, screened.message, None,
                                                usage=screened.usage, stages=stages,
                                                artifact_key=build.artifact_key), build)

    def _check_slot(self, slot: _Slot) -> None:
        if slot.anchor_ref is not None:
            self._check_anchor(slot)
        elif slot.job is not None:
            self._check_job(slot)

    def _check_anchor(self, slot: _Slot) -> None:
        ray = self._ray
        ready, _ = ray.wait([slot.anchor_ref], timeout=0)
        if ready:
            try:
                anchor, secondary, slot.anchor_pass_s, refused = ray.get(slot.anchor_ref)
                slot.hardware = {**ray.get(slot.actor.describe.remote()), "anchor": anchor,
                                 "secondary_anchors": to_jsonable(secondary),
                                 **({"secondary_anchors_refused": refused} if refused else {}),
                                 "watchdog": self.config.describe_watchdog(slot.anchor_pass_s)}
            except ray.exceptions.RayActorError as exc:
                if slot.anchor_attempt:
                    raise RuntimeError(f"the evaluator died twice timing the anchor: {_short(exc)}") from exc
                self._replace(slot)  # a process killed from outside: once more on a fresh one
                slot.anchor_attempt = 1
                return
            except Exception as exc:
                raise RuntimeError(f"the evaluator could not time the anchor: {exc}") from exc
            self.hardware = self.hardware or slot.hardware
            slot.anchor_ref = None
        elif time.monotonic() - slot.anchor_started > self.config.anchor_timeout_s:
            raise RuntimeError(f"the anchor took more than {self.config.anchor_timeout_s:g} s")

    def _check_job(self, slot: _Slot) -> None:
        ray = self._ray
        job, started = slot.job, slot.job_started
        ready, _ = ray.wait([slot.job_ref], timeout=0)
        if ready:
            self.busy_s += time.monotonic() - started
            self.pacing.evaluated(time.monotonic() - started)
            try:
                result = ray.get(slot.job_ref)
            except ray.exceptions.RayActorError as exc:
                self._replace(slot)  # the process is gone; never reuse its slot's actor
                if not job.attempt:  # maybe killed from outside (OOM killer, a user): once more
                    self._ready.appendleft(replace(job, attempt=1))
                    return
                self._finish(job.genome, self._failure(
                    job, Status.CRASHED, "evaluator process died running this kernel, twice (retried once "
                    f"on a fresh evaluator): {_short(exc)}", started), job.build)
                return
            except ray.exceptions.RayError as exc:  # the evaluator itself raised: still this genome's record
                result = self._failure(job, Status.CRASHED,
                                       f"evaluator raised: {_short(exc.cause if hasattr(exc, 'cause') else exc)}",
                                       started)
            slot.job, slot.job_ref = None, None
            if result.status is Status.CRASHED:
                self._replace(slot)  # a kernel fault that may have poisoned the CUDA context
            self._finish(job.genome, result, job.build)
        elif time.monotonic() - started > self._watchdog_s(slot):
            self.busy_s += time.monotonic() - started
            watchdog = self.config.describe_watchdog(slot.anchor_pass_s)
            result = self._failure(job, Status.TIMEOUT, f"no result within the watchdog's {watchdog}; evaluator killed",
                                   started)
            self._replace(slot)
            self._finish(job.genome, result, job.build)

    def _watchdog_s(self, slot: _Slot) -> float:
        return self.config.watchdog_s(slot.anchor_pass_s) if slot.anchor_pass_s is not None else self.config.eval_timeout_s

    def _failure(self, job: _Job, status: Status, message: str, started: float) -> EvalResult:
        stages = StageSeconds(build=job.build.seconds, screen=job.screened.seconds,
                              verify=time.monotonic() - started)
        return EvalResult(job.genome.id, status, message, None, usage=job.screened.usage, stages=stages,
                          artifact_key=job.build.artifact_key)

    def _dispatch(self) -> None:
        if self._holding or (self._isolate_timing and self._building):
            return
        for slot in self._slots:
            if not self._ready:
                return
            if slot.anchor_ref is None and slot.job is None:
                job = self._ready.popleft()
                slot.job, slot.job_started = job, time.monotonic()
                plan = self._plan_for(job.genome) if self._plan_for is not None else None
                slot.job_ref = slot.actor.evaluate.remote(job.genome.to_json(), job.build, job.screened, plan)

    def _finish(self, genome: Genome, result: EvalResult, build: BuildResult | None = None) -> None:
        if build is not None and build.node:
            result = replace(result, built_on=build.node)
        self._finished.append(Finished(genome, result))
