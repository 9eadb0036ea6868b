"""Reads and writes of runs, individuals, lineage and evaluations.

Each method is its own transaction (``Database.session``): an evaluation is committed the
moment it is recorded, so a killed driver loses nothing that had finished.
"""

from __future__ import annotations

import enum
import os
import secrets
import socket
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update

from evo.db.models import Evaluation, GateCheck, Individual, LineageEdge, Run, ShapeMeasurement, utcnow
from evo.db.session import Database
from evo.fitness.records import EvalResult, GateResult, Status, to_jsonable

class RunStatus(enum.StrEnum):
    """A run's status, as stored (a string column: the values are what older databases hold too)."""

    RUNNING = "running"
    TARGET_REACHED = "target_reached"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TIME_EXHAUSTED = "time_exhausted"
    SPACE_EXHAUSTED = "space_exhausted"
    ALL_FAILED = "all_failed"  # the first evaluations all failed one way (evo/_causes.py)
    INTERRUPTED = "interrupted"
    FAILED = "failed"


RUN_STATUSES = tuple(RunStatus)
HEARTBEAT_S = 10.0  # a running search's driver says it is alive this often
HEARTBEAT_STALE_S = 60.0  # a run not heard from for this long has lost its driver


class RunLost(Exception):
    """A write for a run whose lease another driver holds now (``evo search --resume`` took it over after this
    driver's heartbeat went stale): nothing is written, and this driver stops."""


@dataclass(frozen=True)
class ParentLink:
    genome_id: str
    operator: str
    changed_knobs: tuple[str, ...]


@dataclass(frozen=True)
class NewIndividual:
    genome_id: str
    genome: dict
    generation: int
    origin: str
    parents: tuple[ParentLink, ...] = ()


@dataclass(frozen=True)
class HistoryEntry:
    """One individual as a strategy sees it on resume (status/fitness None while unevaluated)."""

    individual_id: int
    genome_id: str
    genome: dict
    generation: int
    origin: str
    status: str | None
    fitness_s: float | None
    message: str | None = None  # the evaluation's (why it failed)


@dataclass(frozen=True)
class EvaluationRow:
    """One finished evaluation with its individual, in the order they were recorded."""

    individual_id: int
    genome_id: str
    genome: dict
    generation: int
    origin: str
    status: str
    fitness_s: float | None
    message: str
    finished_at: datetime


@dataclass(frozen=True)
class MeasurementRow:
    """One timed shape of an evaluated individual (ok evaluations only), the anchor timed beside it."""

    individual_id: int
    genome_id: str
    genome: dict
    shape: str
    dims: dict | None
    median_s: float
    p90_s: float
    runs: int
    complete: bool  # False: cut short after one sample, above the cutoff (never the best there)
    verified: bool
    anchor_s: float | None


@dataclass(frozen=True)
class RunInfo:
    id: int
    family: str
    strategy: str
    target: str | None
    target_seconds: float | None
    seed: int
    config: dict
    status: str
    message: str | None
    hardware: dict | None
    anchor: list | None
    created_at: datetime
    finished_at: datetime | None
    evaluations: int = 0
    best_fitness_s: float | None = None
    host: str | None = None
    pid: int | None = None
    heartbeat_at: datetime | None = None

    @property
    def cold_cache(self) -> bool:
        """Whether the search timed with cold caches (its configuration's ``cold_cache``)."""
        return bool((self.config or {}).get("cold_cache"))

    def heard_s(self, now: datetime | None = None) -> float | None:
        """Seconds since the driver's last heartbeat (None: it never sent one)."""
        if self.heartbeat_at is None:
            return None
        return ((now or utcnow()).replace(tzinfo=None) - self.heartbeat_at.replace(tzinfo=None)).total_seconds()

    def driver_died(self, now: datetime | None = None) -> bool:
        """A run still marked running whose driver is gone: no heartbeat for HEARTBEAT_STALE_S, none at
        all, or its process is no longer alive on this very machine."""
        if self.status != RunStatus.RUNNING:
            return False
        heard = self.heard_s(now)
        if heard is None or heard > HEARTBEAT_STALE_S:
            return True
        if self.host == socket.gethostname() and self.pid:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
        return False


class Store:
    """A driver's writes for a run it has claimed (``claim``) are made only while it still holds the run's lease,
    checked in the same transaction as the write (``_owned``); a lost lease raises RunLost."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._leases: dict[int, str] = {}  # run id -> this driver's token, for the runs it claimed

    def claim(self, run_id: int) -> None:
        """This store's driver owns ``run_id`` from now on: a driver that held it before stops at its next write."""
        token = secrets.token_hex(16)
        with self.database.session() as s:
            s.execute(update(Run).where(Run.id == run_id).values(lease=token))
        self._leases[run_id] = token

    def _owned(self, s, run_id: int) -> None:
        """In session ``s``, before a write for ``run_id``: where this driver claimed it, that it still holds its
        lease (a conditional write: the row is locked for the rest of the transaction), else RunLost."""
        token = self._leases.get(run_id)
        if token is None:
            return
        if s.execute(update(Run).where(Run.id == run_id, Run.lease == token).values(lease=token)).rowcount != 1:
            run = s.get(Run, run_id)
            where = f" (process {run.pid} on {run.host})" if run is not None and run.pid else ""
            raise RunLost(f"run {run_id} was taken over by another driver{where} while this one was not heard from: "
                          f"this one stops without writing")

    # -- runs -------------------------------------------------------------------------------
    def create_run(self, *, family: str, strategy: str, target: str | None, seed: int, config: dict) -> int:
        with self.database.session() as s:
            run = Run(family=family, strategy=strategy, target=target, seed=seed, config=config, status=RunStatus.RUNNING)
            s.add(run)
            s.flush()
            return run.id

    def get_run(self, run_id: int) -> RunInfo | None:
        with self.database.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                return None
            count, best = s.execute(
                select(func.count(Evaluation.id), func.min(Evaluation.fitness_s))
                .join(Individual).where(Individual.run_id == run_id)).one()
            return _run_info(run, count, best)

    def list_runs(self) -> list[RunInfo]:
        with self.database.session() as s:
            stats = dict(
                (row[0], (row[1], row[2])) for row in s.execute(
                    select(Individual.run_id, func.count(Evaluation.id), func.min(Evaluation.fitness_s))
                    .join(Evaluation).group_by(Individual.run_id)))
            return [_run_info(r, *stats.get(r.id, (0, None))) for r in s.scalars(select(Run).order_by(Run.id))]

    def beat(self, run_id: int, host: str, pid: int) -> None:
        """The driver of ``run_id`` is alive (see RunInfo.driver_died)."""
        with self.database.session() as s:
            self._owned(s, run_id)
            run = s.get(Run, run_id)
            run.host, run.pid, run.heartbeat_at = host, pid, utcnow()

    def update_run(self, run_id: int, **fields) -> None:
        status = fields.get("status")
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        with self.database.session() as s:
            self._owned(s, run_id)
            run = s.get(Run, run_id)
            for name, value in fields.items():
                setattr(run, name, value)
            if status is not None:
                run.finished_at = None if status == RunStatus.RUNNING else utcnow()

    # -- individuals and lineage ----------------------------------------------------------
    def add_individuals(self, run_id: int, individuals: list[NewIndividual]) -> dict[str, int]:
        """Insert individuals with their lineage edges in one transaction; returns their ids."""
        with self.database.session() as s:
            self._owned(s, run_id)
            known = dict(s.execute(select(Individual.genome_id, Individual.id).where(Individual.run_id == run_id)).all())
            ids = {}
            for new in individuals:
                if new.genome_id in known:
                    raise ValueError(f"genome {new.genome_id} is already an individual of run {run_id}")
                row = Individual(run_id=run_id, genome_id=new.genome_id, genome=new.genome,
                                 generation=new.generation, origin=new.origin)
                s.add(row)
                s.flush()
                known[new.genome_id] = ids[new.genome_id] = row.id
                for parent in new.parents:
                    s.add(LineageEdge(run_id=run_id, parent_id=known[parent.genome_id], child_id=row.id,
                                      operator=parent.operator, changed_knobs=list(parent.changed_knobs)))
            return ids

    def history(self, run_id: int) -> list[HistoryEntry]:
        with self.database.session() as s:
            rows = s.execute(
                select(Individual, Evaluation.status, Evaluation.fitness_s, Evaluation.message)
                .outerjoin(Evaluation).where(Individual.run_id == run_id).order_by(Individual.id)).all()
            return [HistoryEntry(i.id, i.genome_id, i.genome, i.generation, i.origin, status, fit, message)
                    for i, status, fit, message in rows]

    def lineage(self, run_id: int) -> list[tuple[int, int, str, list]]:
        with self.database.session() as s:
            return [tuple(r) for r in s.execute(
                select(LineageEdge.parent_id, LineageEdge.child_id, LineageEdge.operator, LineageEdge.changed_knobs)
                .where(LineageEdge.run_id == run_id).order_by(LineageEdge.id)).all()]

    # -- evaluations ----------------------------------------------------------------------
    def evaluations(self, run_id: int) -> list[EvaluationRow]:
        """Every finished evaluation of a run, oldest first."""
        with self.database.session() as s:
            rows = s.execute(select(Individual, Evaluation).join(Evaluation).where(Individual.run_id == run_id)
                             .order_by(Evaluation.id)).all()
            return [EvaluationRow(i.id, i.genome_id, i.genome, i.generation, i.origin, e.status, e.fitness_s,
                                  e.message, e.created_at) for i, e in rows]

    def record_evaluation(self, individual_id: int, result: EvalResult, dims: dict | None = None, *,
                          measurement_key: str | None = None) -> None:
        """The evaluation and, when it is ok, a measurement row for each shape it timed (``dims``: shape
        name -> its dimensions, stored beside each). ``measurement_key``: what the measurement depends on
        (db.memory)."""
        with self.database.session() as s:
            run_id = s.get(Individual, individual_id).run_id
            self._owned(s, run_id)
            evaluation = Evaluation(
                individual_id=individual_id, status=result.status.value, message=result.message,
                fitness_s=result.fitness_s if result.status is Status.OK else None,
                build_s=result.stages.build, screen_s=result.stages.screen, verify_s=result.stages.verify,
                benchmark_s=result.stages.benchmark,
                build_stats=to_jsonable(result.usage) if result.usage else None,
                checks=to_jsonable(result.checks), timings=to_jsonable(result.timings),
                anchor=to_jsonable(result.anchor), artifact_key=result.artifact_key, worker=result.worker,
                build_node=result.built_on or None, measurement_key=measurement_key,
                reused_from=result.reused_from)
            s.add(evaluation)
            if result.status is not Status.OK or not result.timings:
                return
            s.flush()
            checks = {c.shape: c for c in result.checks}
            for t in result.timings:
                check, anchor = checks.get(t.shape), result.anchor_timing(t.shape)
                s.add(ShapeMeasurement(
                    run_id=run_id, individual_id=individual_id, evaluation_id=evaluation.id, shape=t.shape,
                    dims=(dims or {}).get(t.shape), median_s=t.median_s, p90_s=t.p90_s, stdev_s=t.stdev_s,
                    runs=t.runs, complete=not t.cut_short, verified=bool(check and check.passed),
                    max_abs_error=check.max_abs_error if check else None,
                    anchor_s=anchor.median_s if anchor else None, anchor_p90_s=anchor.p90_s if anchor else None))

    def measurements(self, run_id: int) -> list[MeasurementRow]:
        """Every timed shape of the run's ok evaluations, in the order they were recorded."""
        with self.database.session() as s:
            rows = s.execute(select(ShapeMeasurement, Individual).join(Individual, ShapeMeasurement.individual_id
                                                                        == Individual.id)
                             .where(ShapeMeasurement.run_id == run_id).order_by(ShapeMeasurement.id)).all()
            return [MeasurementRow(m.individual_id, i.genome_id, i.genome, m.shape, m.dims, m.median_s, m.p90_s,
                                   m.runs, m.complete, m.verified, m.anchor_s) for m, i in rows]

    def record_gate(self, run_id: int, individual_id: int, result: GateResult) -> None:
        with self.database.session() as s:
            self._owned(s, run_id)
            s.add(GateCheck(run_id=run_id, individual_id=individual_id, passed=result.passed,
                            target_s=result.target_s, rounds=to_jsonable(result.rounds), message=result.message,
                            targets=to_jsonable(result.targets)))

    def gates(self, run_id: int) -> list[tuple[GateCheck, Individual]]:
        """Every hard gate run in this run, oldest first, with the individual it judged."""
        with self.database.session() as s:
            return list(s.execute(select(GateCheck, Individual).join(Individual, GateCheck.individual_id == Individual.id)
                                  .where(GateCheck.run_id == run_id).order_by(GateCheck.id)).all())

    def evaluation_count(self, run_id: int) -> int:
        with self.database.session() as s:
            return s.scalar(select(func.count(Evaluation.id)).join(Individual).where(Individual.run_id == run_id))

    def failure_counts(self, run_id: int) -> Counter:
        with self.database.session() as s:
            return Counter(dict(s.execute(
                select(Evaluation.status, func.count(Evaluation.id)).join(Individual)
                .where(Individual.run_id == run_id).group_by(Evaluation.status)).all()))

    def individual(self, run_id: int, individual_id: int) -> tuple[Individual, Evaluation | None] | None:
        """One individual of a run with its evaluation (None while unevaluated); None if not in the run."""
        with self.database.session() as s:
            row = s.execute(select(Individual, Evaluation).outerjoin(Evaluation)
                            .where(Individual.run_id == run_id, Individual.id == individual_id)).first()
            return tuple(row) if row else None

    def best(self, run_id: int, limit: int = 5) -> list[tuple[Individual, Evaluation]]:
        with self.database.session() as s:
            return list(s.execute(
                select(Individual, Evaluation).join(Evaluation).where(
                    Individual.run_id == run_id, Evaluation.status == Status.OK.value)
                .order_by(Evaluation.fitness_s, Individual.id).limit(limit)).all())


def _run_info(run: Run, evaluations: int, best: float | None) -> RunInfo:
    return RunInfo(run.id, run.family, run.strategy, run.target, run.target_seconds, run.seed, run.config,
                   run.status, run.message, run.hardware, run.anchor, run.created_at, run.finished_at,
                   evaluations, best, run.host, run.pid, run.heartbeat_at)
