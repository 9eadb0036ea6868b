"""Memory across runs: measurements kept with what they depend on, found again by a later run.

An evaluation may carry a measurement key (fitness.measurement_key: the family's code and build recipe,
the genome, the shapes, the GPU model, compiler and driver versions, the timing mode). A later run that
would measure the same thing reuses the stored verdict instead; what is reused is the deterministic part
of a verdict (a time, a compile error, a screen rejection, a wrong result), never a crash or a timeout,
which may not happen twice. A run can also start from the best genomes earlier runs of its family found.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from evo.db.models import Evaluation, Individual, Run
from evo.db.store import Store
from evo.fitness.records import EvalResult, ResourceUsage, ShapeCheck, ShapeTiming, StageSeconds, Status

REUSABLE = (Status.OK, Status.COMPILE_ERROR, Status.SCREENED_OUT, Status.INCORRECT)


@dataclass(frozen=True)
class Remembered:
    """A stored measurement a run can reuse: the evaluation it was first taken in, and its verdict."""

    evaluation_id: int
    run_id: int
    result: EvalResult


class Memory:
    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, measurement_key: str, genome_id: str) -> Remembered | None:
        """The newest reusable measurement with this key (of the first evaluation that took it)."""
        with self.store.database.session() as s:
            row = s.execute(select(Evaluation, Individual).join(Individual)
                            .where(Evaluation.measurement_key == measurement_key,
                                   Evaluation.status.in_([status.value for status in REUSABLE]))
                            .order_by(Evaluation.id.desc()).limit(1)).first()
            if row is None:
                return None
            evaluation, individual = row
            if evaluation.reused_from is not None:  # itself a copy: the evaluation that measured it
                first = s.execute(select(Evaluation, Individual).join(Individual)
                                  .where(Evaluation.id == evaluation.reused_from)).first()
                if first is not None:
                    evaluation, individual = first
            return Remembered(evaluation.id, individual.run_id, _result(genome_id, evaluation))

    def family_measured(self, family: str) -> bool:
        """Whether any run of this family left a measurement a later run could reuse."""
        with self.store.database.session() as s:
            return s.execute(select(Evaluation.id).join(Individual).join(Run)
                             .where(Run.family == family, Evaluation.measurement_key.is_not(None)).limit(1)).first() is not None

    def best_genomes(self, family: str, limit: int, *, exclude_run: int | None = None) -> list[dict]:
        """The fastest distinct genomes earlier runs of this family measured (their knob values), fastest first."""
        with self.store.database.session() as s:
            rows = s.execute(select(Individual.genome_id, Individual.genome, Evaluation.fitness_s)
                             .join(Evaluation).join(Run)
                             .where(Run.family == family, Run.id != (exclude_run or -1),
                                    Evaluation.status == Status.OK.value)
                             .order_by(Evaluation.fitness_s, Individual.id)).all()
        chosen: dict[str, dict] = {}
        for genome_id, genome, _ in rows:
            if len(chosen) >= limit:
                break
            chosen.setdefault(genome_id, genome)
        return list(chosen.values())


def _result(genome_id: str, evaluation: Evaluation) -> EvalResult:
    """The verdict a stored evaluation holds, as the pipeline gave it (no GPU time spent this time)."""
    return EvalResult(
        genome_id, Status(evaluation.status), evaluation.message, evaluation.fitness_s,
        checks=tuple(ShapeCheck(**c) for c in evaluation.checks or ()),
        timings=tuple(ShapeTiming(**t) for t in evaluation.timings or ()),
        anchor=tuple(ShapeTiming(**t) for t in evaluation.anchor or ()),
        usage=ResourceUsage(**evaluation.build_stats) if evaluation.build_stats else None,
        stages=StageSeconds(), artifact_key=evaluation.artifact_key, worker=evaluation.worker,
        built_on=evaluation.build_node or "", reused_from=evaluation.id)
