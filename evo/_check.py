"""`evo check FAMILY`: the search's pre-flight as a command, and the build and ptxas screen of the seed and a
sample of the space (every genome with --all), with no GPU needed: per genome its build, registers, shared
memory, stack and spills against the family's limits, and the first compile error with the family's own file
and line. Nothing is written but the build cache.

    evo check ./my_family            # pre-flight + seed + 8 sampled genomes
    evo check flashcore --sample 32
    evo check ./my_family --all      # every genome of the space
"""

from __future__ import annotations

import random
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evo._ends import BadInput

DEFAULT_SAMPLE = 8


def _genomes(family, sample: int, every: bool) -> list:
    """The seeds, then ``sample`` distinct genomes drawn at random (every valid genome with ``every``)."""
    from evo.kernel_genome import NoValidGenome
    from evo.kernel_genome import sample as draw

    chosen = {g.id: g for g in family.seed_genomes}
    if every:
        chosen.update({g.id: g for g in family.space.enumerate()})
        return list(chosen.values())
    rng = random.Random(0)
    for _ in range(sample * 20):
        if len(chosen) >= len(family.seed_genomes) + sample:
            break
        try:
            genome = family.space.canonical(draw(family.space, rng))
        except NoValidGenome:
            break
        chosen.setdefault(genome.id, genome)
    return list(chosen.values())


def _usage(usage) -> tuple[str, str, str, str]:
    if usage is None:
        return "-", "-", "-", "-"
    spills = (usage.spill_store_bytes or 0) + (usage.spill_load_bytes or 0)
    return (str(usage.registers) if usage.registers is not None else "-",
            str(usage.shared_bytes) if usage.shared_bytes is not None else "-",
            str(usage.stack_bytes) if usage.stack_bytes is not None else "-", str(spills))


def cmd_check(args, console: Console) -> int:
    from evo._preflight import PreflightFailed, check_in_a_process_of_its_own, check_space, where
    from evo.fitness import BuildConfig, Builder, Status, default_cache_dir, screen
    from evo.seeds import get_family

    try:
        family = get_family(args.family)
        check_space(family)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if args.sample is not None and args.all:
        raise BadInput("--sample and --all: give one")
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    builder = Builder(BuildConfig(cache))
    genomes = _genomes(family, args.sample or DEFAULT_SAMPLE, args.all)
    cuda = family.device == "cuda"
    table = Table(title=f"{where(family)}: {len(genomes)} genomes built" + (" and screened (ptxas -v)" if cuda else ""))
    for column in ("genome", "origin", "build", "registers", "shared bytes", "stack bytes", "spill bytes", "message"):
        table.add_column(column)
    seeds = {g.id for g in family.seed_genomes}
    failed_seed, built = None, 0
    for genome in genomes:
        recipe = family.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        screened = screen(build, recipe.output, family.screen_limits)
        built += screened.status is Status.OK
        if genome.id in seeds and screened.status is not Status.OK and failed_seed is None:
            failed_seed = screened
        table.add_row(genome.id, "seed" if genome.id in seeds else "sample", screened.status.value,
                      *_usage(screened.usage), " ".join(screened.message.split())[:200])
    console.print(table)
    console.print(f"{built} of {len(genomes)} built" + (" and within the screen's limits" if cuda else ""),
                  highlight=False)
    if failed_seed is not None:
        raise BadInput(f"{where(family)}: its seed genome {failed_seed.genome_id} fails: {failed_seed.message}")
    try:
        check_in_a_process_of_its_own(family, cache)
    except PreflightFailed as exc:
        raise BadInput(str(exc)) from None
    runs_here, why = family.runs_here()
    if cuda:
        import torch

        runs_here, why = (runs_here, why) if torch.cuda.is_available() else (False, "no CUDA GPU here")
    console.print("pre-flight passed: " + ("the reference, the output's shape, the seed's load and one launch at "
                                          f"{family.smallest_shape.name}" if runs_here else f"build and screen only ({why})"),
                  highlight=False)
    return 0
