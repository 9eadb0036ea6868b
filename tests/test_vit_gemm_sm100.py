"""vit_gemm_sm100 (Blackwell tcgen05 / TMEM): every knob value compiles for sm_100a and passes the
ptxas screen (CPU CI, with nvcc); without a compute capability 10.0 GPU its genomes are recorded as
unverified and a search is refused; on such a GPU sampled genomes are verified on every shape."""

import pytest

from fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from seeds import get_family
from seeds.vit_gemm.spec import FAMILY as HOPPER
from seeds.vit_gemm_sm100.spec import SMEM_LIMIT, shared_bytes
from tests.sampling import covering_sample
from tests.test_cli import run_bad

FAMILY = get_family("vit_gemm_sm100")
SEED = FAMILY.seed_genomes[0]
# two accumulator buffers (the epilogue drains one while the MMA warp fills the other), 8 epilogue
# warps, the next TMEM load in flight, descriptors broadcast by one lane
OVERLAPPED = SEED.replace(acc_buffers=2, epilogue_warps=8, tmem_load_depth=2, desc_broadcast=True, stages=4)
WIDE = SEED.replace(block_n=256, acc_buffers=2, stages=3)


def test_the_same_problem_as_vit_gemm_and_the_space_mirrors_the_kernel():
    assert FAMILY.shapes == HOPPER.shapes and FAMILY.tolerance == HOPPER.tolerance
    assert FAMILY.compute_capability == (10, 0)
    for genome in (SEED, OVERLAPPED, WIDE):
        assert FAMILY.space.is_valid(genome), FAMILY.space.violations(genome)
    assert shared_bytes(WIDE) == 3 * (128 + 256) * 128 + (6 + 4) * 8 + 16 + 1024 <= SMEM_LIMIT
    assert not FAMILY.space.is_valid(WIDE.replace(stages=5))  # 5 stages of 48 KiB


@pytest.mark.nvcc
def test_every_knob_value_compiles_for_sm100a_and_passes_the_screen(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    for genome in [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space)]:
        recipe = FAMILY.build_recipe(genome)
        assert "arch=compute_100a,code=sm_100a" in recipe.flags
        build = builder.build(genome.id, recipe)
        result = screen(build, recipe.output, FAMILY.screen_limits)
        assert result.status is Status.OK, f"{genome}: {result.message}"
        assert result.usage.registers and not result.usage.spill_store_bytes


@pytest.mark.nvcc
def test_without_a_blackwell_gpu_a_built_kernel_is_recorded_unverified(cache_dir, tmp_path):
    if FAMILY.runs_here()[0]:
        pytest.skip("this machine has a compute capability 10.0 GPU: the kernels are verified instead")
    recipe = FAMILY.build_recipe(SEED)
    build = Builder(BuildConfig(cache_dir)).build(SEED.id, recipe)
    result = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        SEED, build, screen(build, recipe.output, FAMILY.screen_limits))
    assert result.status is Status.UNVERIFIED and result.status.failed
    assert result.fitness_s is None and not result.checks and not result.timings
    assert "built and passed the screen" in result.message and "compute capability 10.0" in result.message
    assert result.usage.registers  # the screen's figures are kept with the record


@pytest.mark.gpu
def test_on_the_gpu_the_kernels_are_verified_or_the_search_is_refused(tmp_path, capsys):
    if not FAMILY.runs_here()[0]:
        run_bad(["search", "--family", "vit_gemm_sm100", "--budget", "4"], capsys, tmp_path,
                "family vit_gemm_sm100 is built but unverified on this machine: needs a GPU of compute capability 10.0")
        return
    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=2), tmp_path / "loaded")
    for genome in [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space, seed=1)]:
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, FAMILY.screen_limits))
        assert result.status is Status.OK, f"{genome}: {result.message}"
