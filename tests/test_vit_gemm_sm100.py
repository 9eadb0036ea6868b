"""vit_gemm_sm100 (Blackwell tcgen05 / TMEM): every knob value compiles for sm_100a and passes the
ptxas screen (CPU CI, with nvcc); without a compute capability 10.0 GPU its genomes are recorded as
unverified and a search is refused; on such a GPU sampled genomes are verified on every shape."""

import pytest

from evo.seeds import get_family
from evo.seeds.vit_gemm.spec import FAMILY as HOPPER
from evo.seeds.vit_gemm_sm100.spec import SMEM_LIMIT, shared_bytes
from tests.blackwell import assert_builds_and_passes_the_screen, assert_recorded_unverified, assert_verified_or_refused
from tests.sampling import covering_sample

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
    genomes = [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space)]
    assert_builds_and_passes_the_screen(FAMILY, genomes, cache_dir)


@pytest.mark.nvcc
def test_without_a_blackwell_gpu_a_built_kernel_is_recorded_unverified(cache_dir, tmp_path):
    assert_recorded_unverified(FAMILY, SEED, cache_dir, tmp_path)


@pytest.mark.gpu
def test_on_the_gpu_the_kernels_are_verified_or_the_search_is_refused(tmp_path, capsys):
    assert_verified_or_refused(FAMILY, [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space, seed=1)], tmp_path, capsys)
