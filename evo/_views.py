"""What a stored run says, as `evo show` and `evo lineage` print it: its fitness shape's anchor, its
hard gates and confirmations, a workload run's dispatch table."""

from __future__ import annotations

from evo.db import Store
from evo._ends import BadInput
from evo.fitness import format_seconds, format_span


def fitness_shape(run) -> str | None:
    """The shape whose time is the run's fitness: the mission shape, or a workload's primary shape."""
    try:
        from evo.seeds import get_family, parse_workload

        family = get_family(run.family)
        workload = (run.config or {}).get("workload")
        return (parse_workload(family, workload, "the run's workload").primary.name if workload
                else family.mission_shape.name)
    except ValueError:
        return None


def mission_anchor(anchor: list | None, run) -> float | None:
    """The anchor's time at the run's fitness shape."""
    if not anchor:
        return None
    mission = fitness_shape(run) or anchor[0]["shape"]
    return next((a["median_s"] for a in anchor if a["shape"] == mission), None)


def unsteady_at_fitness_shape(evaluation, run) -> bool:
    """Whether the kernel's or the anchor's timing at the fitness shape stayed unsteady (no ratio then)."""
    shape = fitness_shape(run)
    return any(t.get("unstable") and t.get("shape") == shape for t in (evaluation.timings or []) + (evaluation.anchor or []))


def gate_line(gate, individual) -> str:
    """One hard gate (or a workload winner's confirmation) of `evo show`."""
    times = [t for r in gate.rounds for t in ([s for _, s in r.get("times") or ()] or [r["mission_s"]]) if t is not None]
    shapes = [shape for shape, _ in gate.targets or ()]
    where = f" at {len(shapes)} shapes" if len(shapes) > 1 else (f" at {shapes[0]}" if shapes else "")
    what = "hard gate" if gate.target_s is not None else "confirmation beside the anchor"
    limit = f" vs target {format_seconds(gate.target_s)}" if gate.target_s is not None else ""
    ratios = [beside[0][1] / own[0][1] for r in gate.rounds if (own := r.get("times")) and (beside := r.get("anchor_times"))]
    if ratios and len(shapes) == 1:
        limit += f", speedup {min(ratios):.2f}-{max(ratios):.2f}x over the anchor timed in turns"
    return (f"{what} on individual {individual.id} ({individual.genome_id}){where}: {len(gate.rounds)} rounds, "
            f"{format_span(times)}{limit}: " + ("passed" if gate.passed else f"failed: {gate.message}"))


def run_dispatch_table(store: Store, run):
    """A workload run's dispatch table (None for a run of one mission shape)."""
    if not (run.config or {}).get("workload"):
        return None
    from evo.dispatch import dispatch_table
    from evo.seeds import get_family, parse_workload

    try:
        family = get_family(run.family)
        workload = parse_workload(family, run.config["workload"], f"run {run.id}'s workload")
    except ValueError as exc:
        raise BadInput(f"run {run.id} cannot be read: {exc}") from None
    return dispatch_table(store, run.id, family, workload)
