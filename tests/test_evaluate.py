import pytest

from fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from seeds import get_family
from tests.conftest import FAULTY


def evaluate(family, genome, tmp_path):
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    screened = screen(build, recipe.output, family.screen_limits)
    return Evaluator(family, EvalConfig(trials=2), tmp_path / "loaded").evaluate(genome, build, screened)


def test_cpu_gemm_seed_verifies_and_is_timed_with_its_anchor(tmp_path):
    family = get_family("cpu_gemm")
    result = evaluate(family, family.seed_genomes[0], tmp_path)
    assert result.status is Status.OK, result.message
    assert [c.shape for c in result.checks] == [s.name for s in family.shapes]
    assert all(c.passed and c.trials == 2 and c.rel_l2_error < 1e-6 for c in result.checks)
    assert [t.shape for t in result.timings] == [s.name for s in family.shapes]
    assert [t.shape for t in result.anchor] == [s.name for s in family.shapes]
    mission = result.timing("mission")
    assert result.fitness_s == mission.median_s > 0
    assert mission.runs >= family.timing.min_runs and mission.p90_s >= mission.median_s
    assert result.stages.verify > 0 and result.stages.benchmark > 0


@pytest.mark.parametrize("mode, fragment", [
    ("wrong", "max abs error"),
    ("nan", "NaN/Inf"),
    ("nowrite", "never written"),
])
def test_wrong_outputs_are_incorrect_records(tmp_path, mode, fragment):
    family = get_family(FAULTY)
    genome = family.space.genome({"mode": mode, "scale": 2, "pad": 0})
    result = evaluate(family, genome, tmp_path)
    assert result.status is Status.INCORRECT
    assert fragment in result.message
    assert result.fitness_s is None and result.timings == ()


def test_compile_error_reaches_the_evaluator_as_a_record(tmp_path):
    family = get_family(FAULTY)
    genome = family.space.genome({"mode": "compile_error", "scale": 2, "pad": 0})
    result = evaluate(family, genome, tmp_path)
    assert result.status is Status.COMPILE_ERROR and "deliberate compile error" in result.message
