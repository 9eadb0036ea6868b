"""Checks shared by the tests of the Blackwell (sm_100a) variants, which build and screen anywhere
and run only on a compute capability 10.0 GPU."""

import pytest

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen


def assert_builds_and_passes_the_screen(family, genomes, cache_dir) -> None:
    """Every genome compiles for sm_100a and passes the family's ptxas screen without spills."""
    builder = Builder(BuildConfig(cache_dir))
    for genome in genomes:
        recipe = family.build_recipe(genome)
        assert "arch=compute_100a,code=sm_100a" in recipe.flags
        build = builder.build(genome.id, recipe)
        result = screen(build, recipe.output, family.screen_limits)
        assert result.status is Status.OK, f"{genome}: {result.message}"
        assert result.usage.registers and not result.usage.spill_store_bytes


def assert_recorded_unverified(family, genome, cache_dir, tmp_path) -> None:
    """On a machine without a compute capability 10.0 GPU a built genome is recorded unverified,
    with the screen's figures and no time."""
    if family.runs_here()[0]:
        pytest.skip("this machine has a compute capability 10.0 GPU: the kernels are verified instead")
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(cache_dir)).build(genome.id, recipe)
    result = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        genome, build, screen(build, recipe.output, family.screen_limits))
    assert result.status is Status.UNVERIFIED and result.status.failed
    assert result.fitness_s is None and not result.checks and not result.timings
    assert "built and passed the screen" in result.message and "compute capability 10.0" in result.message
    assert result.usage.registers  # the screen's figures are kept with the record


def assert_verified_or_refused(family, genomes, tmp_path, capsys) -> None:
    """On a compute capability 10.0 GPU every genome verifies on every shape; on any other GPU a
    search of the family exits 2 with the reason."""
    from tests.test_cli import run_bad

    if not family.runs_here()[0]:
        run_bad(["search", "--family", family.name, "--budget", "4"], capsys, tmp_path,
                f"family {family.name} is built but unverified on this machine: needs a GPU of compute capability 10.0")
        return
    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(family, EvalConfig(trials=2), tmp_path / "loaded")
    for genome in genomes:
        recipe = family.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
        assert result.status is Status.OK, f"{genome}: {result.message}"
