"""SQLAlchemy 2 models. Every schema change goes through an Alembic migration in migrations/."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family: Mapped[str] = mapped_column(String(200))
    strategy: Mapped[str] = mapped_column(String(50))
    target: Mapped[str | None] = mapped_column(String(50))  # as the user wrote it: "40us", "0.5x"
    target_seconds: Mapped[float | None] = mapped_column(Float)  # resolved once the anchor is known
    seed: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict] = mapped_column(JSON)  # the whole search configuration, to resume
    status: Mapped[str] = mapped_column(String(30))  # running/target_reached/budget_exhausted/...
    message: Mapped[str | None] = mapped_column(Text)
    hardware: Mapped[dict | None] = mapped_column(JSON)
    anchor: Mapped[list | None] = mapped_column(JSON)  # anchor timings per shape, first evaluator
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    host: Mapped[str | None] = mapped_column(String(200))  # the driver's machine and process, while it runs
    pid: Mapped[int | None] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the driver's last word
    lease: Mapped[str | None] = mapped_column(String(32))  # the owning driver's token (db.store.RunLost)

    individuals: Mapped[list["Individual"]] = relationship(back_populates="run")


class Individual(Base):
    __tablename__ = "individuals"
    __table_args__ = (UniqueConstraint("run_id", "genome_id", name="uq_individual_genome_per_run"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    genome_id: Mapped[str] = mapped_column(String(32))
    genome: Mapped[dict] = mapped_column(JSON)
    generation: Mapped[int] = mapped_column(Integer)
    origin: Mapped[str] = mapped_column(String(20))  # seed/random/mutation/crossover/repair
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    run: Mapped[Run] = relationship(back_populates="individuals")
    evaluation: Mapped["Evaluation | None"] = relationship(back_populates="individual", uselist=False)


class LineageEdge(Base):
    __tablename__ = "lineage_edges"
    __table_args__ = (Index("ix_lineage_child", "child_id"), Index("ix_lineage_parent", "parent_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    parent_id: Mapped[int] = mapped_column(ForeignKey("individuals.id", ondelete="CASCADE"))
    child_id: Mapped[int] = mapped_column(ForeignKey("individuals.id", ondelete="CASCADE"))
    operator: Mapped[str] = mapped_column(String(50))  # e.g. "mutation", "crossover+repair"
    changed_knobs: Mapped[list] = mapped_column(JSON)


class Evaluation(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id", ondelete="CASCADE"), unique=True)
    status: Mapped[str] = mapped_column(String(30), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    fitness_s: Mapped[float | None] = mapped_column(Float)  # null unless status is ok
    build_s: Mapped[float] = mapped_column(Float, default=0.0)
    screen_s: Mapped[float] = mapped_column(Float, default=0.0)
    verify_s: Mapped[float] = mapped_column(Float, default=0.0)
    benchmark_s: Mapped[float] = mapped_column(Float, default=0.0)
    build_stats: Mapped[dict | None] = mapped_column(JSON)  # registers, smem, spills, stack
    checks: Mapped[list] = mapped_column(JSON)  # per shape: passed, max abs / relative L2 error
    timings: Mapped[list] = mapped_column(JSON)  # per shape: median, p90, stdev, runs
    anchor: Mapped[list] = mapped_column(JSON)  # anchor timings measured in the same process
    artifact_key: Mapped[str | None] = mapped_column(String(64))
    worker: Mapped[str] = mapped_column(String(200), default="")  # the host that verified and timed it
    build_node: Mapped[str | None] = mapped_column(String(200))  # the host/Ray node that compiled it
    measurement_key: Mapped[str | None] = mapped_column(String(64), index=True)  # what the measurement depends on
    reused_from: Mapped[int | None] = mapped_column(Integer)  # the evaluation whose measurement this one reuses
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    individual: Mapped[Individual] = relationship(back_populates="evaluation")


class ShapeMeasurement(Base):
    """One timed shape of one evaluation, with the anchor timed at that shape in the same process.
    ``complete`` False: cut short after one sample above the plan's cutoff (and not verified there)."""

    __tablename__ = "shape_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id", ondelete="CASCADE"), index=True)
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluations.id", ondelete="CASCADE"))
    shape: Mapped[str] = mapped_column(String(200))
    dims: Mapped[dict | None] = mapped_column(JSON)
    median_s: Mapped[float] = mapped_column(Float)
    p90_s: Mapped[float] = mapped_column(Float)
    stdev_s: Mapped[float] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer)
    complete: Mapped[bool] = mapped_column(Boolean)
    verified: Mapped[bool] = mapped_column(Boolean)
    max_abs_error: Mapped[float | None] = mapped_column(Float)
    anchor_s: Mapped[float | None] = mapped_column(Float)
    anchor_p90_s: Mapped[float | None] = mapped_column(Float)


class GateCheck(Base):
    """The hard gate run on a kernel that met the target: re-verified and re-timed N times. Without any
    target (``target_s`` null) it is a workload winner's confirmation, re-timed beside the anchor."""

    __tablename__ = "gate_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id", ondelete="CASCADE"))
    passed: Mapped[bool] = mapped_column(Boolean)
    target_s: Mapped[float | None] = mapped_column(Float)  # the first shape's limit
    rounds: Mapped[list] = mapped_column(JSON)  # per round: verified, mission_s, message, times, anchor_times
    message: Mapped[str] = mapped_column(Text, default="")
    targets: Mapped[list | None] = mapped_column(JSON)  # [shape, limit or null] for every gated shape
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
