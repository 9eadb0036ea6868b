"""A strategy driven as the search loop drives it, against a function of time instead of a GPU: what the
synthetic trap (design_trap.py) and the landscape of recorded runs (recorded_landscape.py) share."""

from __future__ import annotations

from typing import Callable

from evo.strategies import Observation, Strategy
from evo.kernel_genome import Genome


def evaluations_to(chosen: Strategy, first: Genome, seconds: Callable[[Genome], float | None], goal_s: float,
                   budget: int, population: int = 8) -> int | None:
    """The evaluation that first came within ``goal_s`` (None: not within ``budget``): ``first`` (the family's
    seed) evaluated first, then batches of ``population``, the next asked before the last is scored;
    ``seconds`` None is a failure (screened out)."""
    chosen.add_seeds([first])
    chosen.tell([Observation(first, 0, "ok", seconds(first))])
    told, waiting, generation = 1, [], 1
    while told < budget:
        if len(waiting) <= population and told + len(waiting) < budget:
            waiting += [(p.genome, generation) for p in chosen.ask(min(population, budget - told - len(waiting)))]
            generation += 1
        if not waiting:
            return None
        genome, born = waiting.pop(0)
        told += 1
        time = seconds(genome)
        if time is not None and time <= goal_s:
            return told
        chosen.tell([Observation(genome, born, "ok" if time is not None else "screened_out", time)])
    return None
