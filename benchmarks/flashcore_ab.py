"""One FlashCore genome built from several revisions of the kernel source, timed in turns (GPU).

    python benchmarks/flashcore_ab.py --rev 0c598b7 --rev HEAD --genome '{"block_m": 32, ...}'
    python benchmarks/flashcore_ab.py --rev old-tree/ --rev worktree --db evo.db --run 1 --rounds 9

A revision is a git revision (its sources read with `git show`), a directory holding a `seeds/`
tree of another checkout (e.g. `git archive REV seeds | tar x -C DIR`), or `worktree`. Each is
built with the genome's macros as the working tree's spec builds it, screened and verified on every
shape of the family's set as in a search (fresh inputs, output poisoned, float32 reference), then
timed at the mission shape in turns: each round times cuDNN SDPA and every revision once, the same
way, in this process. The medians of the rounds' medians are printed as a Markdown table.
Differences under about 2 % between processes are noise on the H100 (see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import tempfile
from pathlib import Path

from _reporting import add_genome_arguments, best_genome, evaluated
from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator
from evo.fitness.benchmark import time_runs
from evo.fitness.score import format_seconds
from evo.seeds import get_family
from evo.seeds.flashcore.spec import SOURCES

ROOT = Path(__file__).resolve().parent.parent


def source_at(revision: str, path: Path) -> str:
    """The text of source file `path` (in this checkout) at `revision`."""
    relative = path.resolve().relative_to(ROOT)
    if revision == "worktree":
        return path.read_text()
    tree = Path(revision)
    if tree.is_dir():
        return (tree / relative).read_text()
    shown = subprocess.run(["git", "show", f"{revision}:{relative.as_posix()}"], cwd=ROOT, capture_output=True,
                           text=True)
    if shown.returncode != 0:
        raise ValueError(f"--rev {revision}: {shown.stderr.strip() or 'not a revision or directory'}")
    return shown.stdout


def recipe_at(family, genome, revision: str):
    """The working tree's build recipe of `genome` with every source file as it was at `revision`."""
    recipe = family.build_recipe(genome)
    source = recipe.source
    for path in SOURCES:
        source = source.replace(path.read_text(), source_at(revision, path))
    return dataclasses.replace(recipe, source=source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_genome_arguments(parser)
    parser.add_argument("--rev", action="append", required=True, help="git revision, seeds/ tree, or 'worktree'")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of timing in turns (default 9)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    for revision in args.rev:
        try:
            source_at(revision, SOURCES[-1])
        except (ValueError, OSError) as error:
            parser.error(str(error))

    family = get_family("flashcore")
    if args.run is not None:
        genome = best_genome(args.db or "evo.db", args.run, family)
    elif len(args.genome) == 1:
        try:
            genome = family.space.genome_from_json(args.genome[0])
        except ValueError as error:
            parser.error(f"--genome: {error}")
    else:
        parser.error("give one --genome, or --db and --run")
    problems = family.space.violations(genome)
    if problems:
        parser.error(f"--genome: {'; '.join(problems)}")

    import torch

    work = Path(tempfile.mkdtemp(prefix="flashcore-ab-"))
    builder = Builder(BuildConfig(work / "cache"))
    evaluator = Evaluator(family, EvalConfig(trials=2), work / "loaded")
    kernels = {}
    for revision in args.rev:  # each built, screened and verified on every shape as in a search
        done = evaluated(family, genome, builder, evaluator, recipe_at(family, genome, revision))
        if done is None:
            raise SystemExit(f"--rev {revision}: not a correct kernel (above)")
        kernels[revision] = evaluator.load(genome, done[0])

    mission = family.mission_shape
    inputs = family.make_inputs(mission, torch.Generator(device="cuda").manual_seed(0))
    output = family.make_output(mission)
    times = {name: [] for name in ["cuDNN", *kernels]}
    for _ in range(args.rounds):
        times["cuDNN"].append(time_runs(lambda: family.anchor(mission, inputs), "cuda", family.timing,
                                        mission.name).median_s)
        for revision, kernel in kernels.items():
            times[revision].append(time_runs(lambda: family.launch(kernel, mission, inputs, output), "cuda",
                                             family.timing, mission.name).median_s)
    print(f"\n{evaluator.describe()}; genome {genome.id}, {args.rounds} rounds at {mission.name}")
    print("| source | median of rounds | fastest round | slowest round | / cuDNN |")
    print("|---|---|---|---|---|")
    anchor = statistics.median(times["cuDNN"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {format_seconds(median)} | {format_seconds(min(values))} | {format_seconds(max(values))} "
              f"| {median / anchor:.3f} |")
    print(f"genome: {genome.to_json()}")


if __name__ == "__main__":
    main()
