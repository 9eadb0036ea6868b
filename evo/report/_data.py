"""What a lineage report says about one run, read from the store (no charts, no formats here)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from evo.db import EvaluationRow, RunInfo, Store

OK = "ok"


@dataclass(frozen=True)
class Step:
    """One step of the best individual's ancestry: how it was made from its closest parent."""

    individual_id: int
    genome_id: str
    generation: int
    operator: str  # "seed", "random", "mutation", "crossover+repair", ...
    parent_ids: tuple[int, ...]  # every parent; the first is the closest, compared below
    changed: dict  # knob -> [value in the closest parent, value here]
    fitness_s: float | None
    parent_fitness_s: float | None
    unread: tuple[str, ...] = ()  # changed knobs that the fitness shape's kernel does not read

    @property
    def speedup(self) -> float | None:
        """Closest parent's time over this one's (> 1: this step made it faster)."""
        if self.fitness_s and self.parent_fitness_s:
            return self.parent_fitness_s / self.fitness_s
        return None

    @property
    def only_unread(self) -> bool:
        """Every knob this step changed is one the kernel does not read: its speedup is timing spread."""
        return bool(self.changed) and set(self.changed) <= set(self.unread)


@dataclass(frozen=True)
class Point:
    """One finished evaluation on the convergence chart."""

    index: int  # 1-based, in the order evaluations finished
    elapsed_s: float  # since the run started
    status: str
    fitness_s: float | None
    best_so_far_s: float | None


@dataclass(frozen=True)
class GenerationSpread:
    generation: int
    evaluated: int
    correct: int
    best_s: float | None
    median_s: float | None
    worst_s: float | None


@dataclass(frozen=True)
class ValueEffect:
    value: object
    evaluated: int
    correct: int
    best_s: float | None
    median_s: float | None


@dataclass(frozen=True)
class KnobEffect:
    knob: str
    importance: float | None  # share of the explained variation (sums to 1 over knobs), None if unknown
    best_value: object  # the value the fastest correct kernel had
    values: tuple[ValueEffect, ...]
    read: bool = True  # False: the kernel timed for the fitness never reads this knob (no importance given)


@dataclass(frozen=True)
class Edge:
    parent_id: int
    child_id: int
    operator: str
    changed_knobs: tuple[str, ...]


@dataclass(frozen=True)
class LineageReport:
    run: RunInfo
    anchor_s: float | None
    target_s: float | None
    best_id: int | None
    best_genome: dict | None
    best_s: float | None
    steps: tuple[Step, ...]  # seed first, the best individual last
    ancestors: frozenset[int]  # every individual the best one descends from (itself included)
    edges: tuple[Edge, ...]  # the whole run's lineage DAG
    labels: dict = field(default_factory=dict)  # individual id -> (generation, origin, status, fitness_s)
    points: tuple[Point, ...] = ()
    generations: tuple[GenerationSpread, ...] = ()
    failures: dict = field(default_factory=dict)  # status -> count (ok included)
    knobs: tuple[KnobEffect, ...] = ()
    importance_method: str = ""
    fitness_shape: str = ""  # the shape whose time is the fitness (the mission, or a workload's primary)
    dispatch: object | None = None  # a workload run's DispatchReport (evo/dispatch.py)


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)


def _spread(times: list[float]) -> tuple[float | None, float | None, float | None]:
    if not times:
        return None, None, None
    return min(times), statistics.median(times), max(times)


def build_report(store: Store, run_id: int, mission_anchor_s: float | None) -> LineageReport:
    """Everything the report shows for ``run_id``; raises ValueError if the run does not exist. In a
    workload run the lineage is that of the kernel winning the most weight of the workload."""
    from evo.dispatch import dispatch_table
    from evo.seeds import get_family, parse_workload

    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"run {run_id} does not exist")
    family = get_family(run.family)
    workload = parse_workload(family, run.config["workload"], f"run {run.id}'s workload") \
        if (run.config or {}).get("workload") else None
    fitness_shape = workload.primary if workload else family.mission_shape
    table = dispatch_table(store, run_id, family, workload) if workload else None
    history = {h.individual_id: h for h in store.history(run_id)}
    evaluations = store.evaluations(run_id)
    edges = tuple(Edge(p, c, op, tuple(k)) for p, c, op, k in store.lineage(run_id))
    parents: dict[int, list[Edge]] = {}
    for edge in edges:
        parents.setdefault(edge.child_id, []).append(edge)
    best = store.best(run_id, limit=1)
    best_id = best[0][0].id if best else None
    if table is not None and any(r.individual_id for r in table.rows):
        won: Counter = Counter()
        for r in table.rows:
            if r.individual_id:
                won[r.individual_id] += r.weight * (2 if r.chosen else 1)  # the op's kernels first
        best_id = won.most_common(1)[0][0]
    steps = _ancestry(best_id, history, parents, family.knobs_read(fitness_shape)) if best_id else ()
    labels = {i: (h.generation, h.origin, h.status, h.fitness_s) for i, h in history.items()}
    return LineageReport(
        run=run, anchor_s=mission_anchor_s, target_s=run.target_seconds, best_id=best_id,
        best_genome=history[best_id].genome if best_id else None,
        best_s=history[best_id].fitness_s if best_id else None, steps=steps,
        ancestors=frozenset(_all_ancestors(best_id, parents)) if best_id else frozenset(),
        edges=edges, labels=labels, points=_points(run, evaluations), generations=_generations(evaluations),
        failures=dict(Counter(e.status for e in evaluations)),
        knobs=_knob_effects(evaluations, family.knobs_read(fitness_shape)),
        importance_method=IMPORTANCE_METHOD.format(shape=fitness_shape.name), fitness_shape=fitness_shape.name,
        dispatch=table)


def _ancestry(best_id: int, history: dict, parents: dict[int, list[Edge]], read: frozenset[str]) -> tuple[Step, ...]:
    """From the best individual back to a seed, each time through its closest parent; ``read``: the knobs
    the fitness shape's kernel reads (a step that changes none of them sped nothing up)."""
    steps: list[Step] = []
    node, seen = best_id, set()
    while node is not None and node not in seen:
        seen.add(node)
        entry = history[node]
        links = parents.get(node, [])
        if not links:
            steps.append(Step(node, entry.genome_id, entry.generation, entry.origin, (), {}, entry.fitness_s, None))
            break

        def distance(edge: Edge) -> tuple[int, int]:
            other = history[edge.parent_id].genome
            return sum(other.get(k) != v for k, v in entry.genome.items()), edge.parent_id

        ordered = sorted(links, key=distance)
        closest = history[ordered[0].parent_id]
        changed = {k: [closest.genome.get(k), v] for k, v in sorted(entry.genome.items()) if closest.genome.get(k) != v}
        steps.append(Step(node, entry.genome_id, entry.generation, ordered[0].operator,
                          tuple(e.parent_id for e in ordered), changed, entry.fitness_s, closest.fitness_s,
                          tuple(k for k in changed if k not in read)))
        node = closest.individual_id
    return tuple(reversed(steps))


def _all_ancestors(best_id: int, parents: dict[int, list[Edge]]) -> set[int]:
    found, stack = set(), [best_id]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(e.parent_id for e in parents.get(node, []))
    return found


def _points(run: RunInfo, evaluations: list[EvaluationRow]) -> tuple[Point, ...]:
    start, best, points = _naive(run.created_at), None, []
    for index, e in enumerate(evaluations, 1):
        if e.status == OK and e.fitness_s is not None and (best is None or e.fitness_s < best):
            best = e.fitness_s
        elapsed = max(0.0, (_naive(e.finished_at) - start).total_seconds())
        points.append(Point(index, elapsed, e.status, e.fitness_s, best))
    return tuple(points)


def _generations(evaluations: list[EvaluationRow]) -> tuple[GenerationSpread, ...]:
    by_generation: dict[int, list[EvaluationRow]] = {}
    for e in evaluations:
        by_generation.setdefault(e.generation, []).append(e)
    spreads = []
    for generation in sorted(by_generation):
        rows = by_generation[generation]
        times = [e.fitness_s for e in rows if e.status == OK and e.fitness_s is not None]
        spreads.append(GenerationSpread(generation, len(rows), len(times), *_spread(times)))
    return tuple(spreads)


IMPORTANCE_METHOD = ("Optuna's PED-ANOVA importance (optuna.importance.PedAnovaImportanceEvaluator) over the "
                     "correct evaluations, on log10 of the time at {shape}, among the knobs the kernel timed there "
                     "reads (the others get none)")


def _knob_effects(evaluations: list[EvaluationRow], read: frozenset[str]) -> tuple[KnobEffect, ...]:
    correct = [e for e in evaluations if e.status == OK and e.fitness_s is not None]
    knobs = sorted({k for e in evaluations for k in e.genome})
    importance = _importance(correct, [k for k in knobs if k in read])
    effects = []
    for knob in knobs:
        values = sorted({_key(e.genome.get(knob)) for e in evaluations}, key=str)
        per_value = []
        for value in values:
            rows = [e for e in evaluations if _key(e.genome.get(knob)) == value]
            times = [e.fitness_s for e in rows if e.status == OK and e.fitness_s is not None]
            best, median, _ = _spread(times)
            per_value.append(ValueEffect(value, len(rows), len(times), best, median))
        fastest = min((v for v in per_value if v.best_s is not None), key=lambda v: v.best_s, default=None)
        effects.append(KnobEffect(knob, importance.get(knob), fastest.value if fastest else None, tuple(per_value),
                                  knob in read))
    effects.sort(key=lambda k: (-(k.importance or 0.0), k.knob))
    return tuple(effects)


def _key(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def _importance(correct: list[EvaluationRow], knobs: list[str]) -> dict[str, float]:
    varying = [k for k in knobs if len({_key(e.genome.get(k)) for e in correct}) > 1]
    if len(correct) < 4 or not varying:
        return {}
    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = {k: sorted({_key(e.genome.get(k)) for e in correct}, key=str) for k in varying}
    study = optuna.create_study(direction="minimize")
    for e in correct:
        study.add_trial(optuna.trial.create_trial(
            params={k: _key(e.genome.get(k)) for k in varying},
            distributions={k: CategoricalDistribution(choices[k]) for k in varying},
            value=math.log10(e.fitness_s)))
    try:
        return dict(optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), normalize=True))
    except (ValueError, RuntimeError):  # too few distinct trials for the evaluator
        return {}
