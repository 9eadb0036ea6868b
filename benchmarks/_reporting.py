"""What the report scripts share: a run's best genome, and a genome built and evaluated as in a search."""

from __future__ import annotations

import sys

from evo.fitness import Status, screen
from evo.fitness.score import format_seconds


def best_genome(db: str, run_id: int, family):
    """The genome of run ``run_id``'s fastest correct individual in database ``db``."""
    from evo.db import Database, Store, resolve_url

    store = Store(Database(resolve_url(db)).open(create=False))
    best = store.best(run_id, limit=1)
    if not best:
        raise SystemExit(f"run {run_id} in {db} has no correct kernel")
    individual, evaluation = best[0]
    print(f"run {run_id}: best individual {individual.id} ({individual.genome_id}), "
          f"{format_seconds(evaluation.fitness_s)} at the mission shape during the search")
    return family.space.genome(individual.genome)


def evaluated(family, genome, builder, evaluator, recipe=None):
    """(the build, the evaluation) of ``genome`` as in a search (every shape verified and timed);
    None, with the reason on stderr, when it is not correct. ``recipe``: another build of the genome
    than the family's (e.g. other source revisions)."""
    recipe = recipe or family.build_recipe(genome)
    build = builder.build(genome.id, recipe)
    result = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
    if result.status is not Status.OK:
        print(f"{genome.id}: {result.status.value}: {result.message}", file=sys.stderr)
        return None
    return build, result


def add_genome_arguments(parser) -> None:
    """The report scripts' ways of naming kernels: a run's best, genomes as JSON, the seed."""
    parser.add_argument("--db", help="database of a search run (with --run)")
    parser.add_argument("--run", type=int, help="run id whose best kernel to report")
    parser.add_argument("--genome", action="append", default=[], help="a genome as JSON (repeatable)")
    parser.add_argument("--seed", action="store_true", help="include the seed genome")


def launch_each(family, genomes: dict, shapes, max_abs_error: float, launches: int = 2) -> None:
    """Build each genome, launch it `launches` times per shape, each on fresh inputs into a NaN-poisoned
    output, and check every output against the family's reference (what compute-sanitizer watches;
    the second launch meets whatever state a kernel keeps between launches, e.g. ticket counters)."""
    import tempfile
    from pathlib import Path

    import torch

    from evo.fitness import BuildConfig, Builder

    builder = Builder(BuildConfig(Path(tempfile.mkdtemp())))
    generator = torch.Generator(device="cuda").manual_seed(0)
    for name, genome in genomes.items():
        assert family.space.is_valid(genome), (name, family.space.violations(genome))
        build = builder.build(genome.id, family.build_recipe(genome))
        path = Path(tempfile.mkdtemp()) / "k.cubin"
        path.write_bytes(build.artifact)
        kernel = family.load(path, genome)
        for shape in [s for s in shapes for _ in range(launches)]:
            inputs = family.make_inputs(shape, generator)
            out = family.make_output(shape).fill_(float("nan"))
            family.launch(kernel, shape, inputs, out)
            torch.cuda.synchronize()
            error = (out.double() - family.reference(shape, inputs).double()).abs().max().item()
            print(f"{name} {genome.id} {shape.name}: max abs error {error:.5f}", flush=True)
            assert error < max_abs_error, (name, shape.name, error)
    print("all launched")
