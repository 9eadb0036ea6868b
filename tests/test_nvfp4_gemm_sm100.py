"""nvfp4_gemm_sm100 (Blackwell tcgen05 kind::mxf4nvf4): every knob value compiles for sm_100a and
passes the ptxas screen (CPU CI, with nvcc); without a compute capability 10.0 GPU its genomes are
recorded as unverified and a search is refused; on such a GPU sampled genomes are verified on every
shape and both scale layouts."""

import pytest

from evo.seeds import get_family
from evo.seeds._family import shape
from evo.seeds.nvfp4_gemm.spec import FAMILY as HOPPER
from evo.seeds.nvfp4_gemm_sm100.spec import SMEM_LIMIT, shared_bytes, splits, tmem_columns
from tests.blackwell import assert_builds_and_passes_the_screen, assert_recorded_unverified, assert_verified_or_refused
from tests.sampling import covering_sample

FAMILY = get_family("nvfp4_gemm_sm100")
SEED = FAMILY.seed_genomes[0]
# two accumulator buffers (the epilogue drains one unit while the MMA warp fills the other), 8
# epilogue warps, the next TMEM load in flight, descriptors broadcast by one lane, a K split of 8
OVERLAPPED = SEED.replace(acc_buffers=2, epilogue_warps=8, tmem_load_depth=2, desc_broadcast=True, stages=4,
                          split_k=8)
WIDE = SEED.replace(block_n=256, stages=4, split_k=4)  # two MMAs of N 128 a K step


def test_the_same_problem_as_nvfp4_gemm_and_the_space_mirrors_the_kernel():
    assert FAMILY.shapes == HOPPER.shapes and FAMILY.tolerance == HOPPER.tolerance
    assert FAMILY.compute_capability == (10, 0)
    for genome in (SEED, OVERLAPPED, WIDE):
        assert FAMILY.space.is_valid(genome), FAMILY.space.violations(genome)
    # a stage: 128 + 256 rows of 128 bytes, the scales of 3 x 128 rows (2048 bytes each)
    assert shared_bytes(WIDE) == 4 * (384 * 128 + 3 * 2048) + (8 + 2) * 8 + 16 + 1024 <= SMEM_LIMIT
    assert not FAMILY.space.is_valid(WIDE.replace(stages=5))  # 5 stages of 54 KiB
    assert tmem_columns(WIDE.replace(acc_buffers=2)) == 512 + 4 * 48
    assert not FAMILY.space.is_valid(WIDE.replace(acc_buffers=2))  # 704 TMEM columns of 512
    assert tmem_columns(OVERLAPPED) == 2 * 128 + 4 * 32 <= 512


def test_the_k_split_fills_one_wave_and_never_exceeds_the_k_stages():
    mission = next(s for s in FAMILY.shapes if s.mission)  # M 128, N 7168: 56 tiles of 128 columns
    assert splits(OVERLAPPED.as_dict(), mission, 148) == 2  # 112 units on a B200's 148 SMs
    assert splits(OVERLAPPED.as_dict(), mission, 132) == 2
    assert splits(SEED.as_dict(), mission, 148) == 1  # split_k 1
    small = shape("small", l=1, m=128, n=256, k=512, blocked=0, mission=False)  # 2 K stages
    assert splits(OVERLAPPED.as_dict(), small, 148) == 2


def test_a_k_the_stages_do_not_divide_is_refused_with_a_message():
    with pytest.raises(ValueError, match="nvfp4_gemm_sm100 handles K a multiple of 256, not 384"):
        FAMILY.check_shape(shape("odd", l=1, m=128, n=128, k=384, blocked=0, mission=False))
    HOPPER.check_shape(shape("odd", l=1, m=128, n=128, k=384, blocked=0, mission=False))  # the H100 kernel takes it


@pytest.mark.nvcc
def test_every_knob_value_compiles_for_sm100a_and_passes_the_screen(cache_dir):
    genomes = [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space)]
    assert all("kind::mxf4nvf4.block_scale.scale_vec::4X" in FAMILY.build_recipe(g).source for g in genomes)
    assert_builds_and_passes_the_screen(FAMILY, genomes, cache_dir)


@pytest.mark.nvcc
def test_without_a_blackwell_gpu_a_built_kernel_is_recorded_unverified(cache_dir, tmp_path):
    assert_recorded_unverified(FAMILY, SEED, cache_dir, tmp_path)


@pytest.mark.gpu
def test_on_the_gpu_the_kernels_are_verified_or_the_search_is_refused(tmp_path, capsys):
    assert_verified_or_refused(FAMILY, [SEED, OVERLAPPED, WIDE, *covering_sample(FAMILY.space, seed=1)], tmp_path, capsys)
