"""What the report scripts share: a run's best genome, and a genome built and evaluated as in a search."""

from __future__ import annotations

import sys

from fitness import Status, screen
from fitness.score import format_seconds


def best_genome(db: str, run_id: int, family):
    """The genome of run ``run_id``'s fastest correct individual in database ``db``."""
    from db import Database, Store, resolve_url

    store = Store(Database(resolve_url(db)).open(create=False))
    best = store.best(run_id, limit=1)
    if not best:
        raise SystemExit(f"run {run_id} in {db} has no correct kernel")
    individual, evaluation = best[0]
    print(f"run {run_id}: best individual {individual.id} ({individual.genome_id}), "
          f"{format_seconds(evaluation.fitness_s)} at the mission shape during the search")
    return family.space.genome(individual.genome)


def evaluated(family, genome, builder, evaluator):
    """(the build, the evaluation) of ``genome`` as in a search (every shape verified and timed);
    None, with the reason on stderr, when it is not correct."""
    recipe = family.build_recipe(genome)
    build = builder.build(genome.id, recipe)
    result = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
    if result.status is not Status.OK:
        print(f"{genome.id}: {result.status.value}: {result.message}", file=sys.stderr)
        return None
    return build, result
