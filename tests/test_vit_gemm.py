"""vit_gemm (GEMM + bias + positional embedding): every knob value compiles for sm_90a and passes
the ptxas screen (CPU CI, with nvcc); sampled genomes are correct on every shape (GPU)."""

import pytest

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from evo.seeds import shape
from evo.seeds.vit_gemm.launch import block_m, shared_bytes
from tests.sampling import covering_sample

from evo.seeds.vit_gemm.designs import (  # noqa: F401 - the design points the tests use
    FAMILY,
    SEED,
    WIDE,
    PINGPONG,
    PREFETCH,
    ROWWISE,
    CLUSTERED,
    CLUSTERED_WIDE,
    CLUSTERED_PER_TILE,
    PREFETCH_TWO,
    PREFETCH_TMA,
    FOLDED,
    FOLDED_PINGPONG,
    FOLDED_PER_TILE,
    SPLIT_SMALL,
    SPLIT_FOUR,
    SPLIT_WIDE,
    PINGPONG_192,
    CLUSTERED_192,
    NAMED,
)


def test_the_space_mirrors_the_kernel_limits():
    space = FAMILY.space
    for genome in NAMED:
        assert space.is_valid(genome), space.violations(genome)
    assert block_m(WIDE) == 128 and shared_bytes(WIDE) == 4 * (128 + 128) * 128 + 8 * 8 + 2 * 2 * 8 + 1024
    assert block_m(PINGPONG) == 128  # each consumer its own tile of 2 x 64 rows
    assert shared_bytes(PINGPONG) == 4 * (128 + 128) * 128 + 2 * 2 * 128 * 128 + 12 * 8 + 1024
    assert shared_bytes(PREFETCH) == shared_bytes(PINGPONG) - 256 * 128 + 2 * 128 * 64 * 4 - 2 * 8
    assert shared_bytes(PREFETCH_TWO) == 3 * (128 + 256) * 128 + 2 * 64 * 64 * 2 + 2 * 2 * 64 * 64 * 4 + 14 * 8 + 1024
    assert not space.is_valid(PINGPONG.replace(prefetch_buffers=2))  # only with the prefetch
    assert not space.is_valid(PINGPONG.replace(pos_tma=True))
    assert shared_bytes(PREFETCH_TMA) == shared_bytes(PREFETCH_TWO) - 4 * 8  # the same bytes, one buffer (2 boxes)
    # a consumer's whole share of the tile as staging: 2 x 64 x 256 bf16 beside 3 stages of 48 KB
    assert shared_bytes(FOLDED) == 3 * (128 + 256) * 128 + 2 * 64 * 256 * 2 + 14 * 8 + 1024
    assert shared_bytes(FOLDED_PINGPONG) == shared_bytes(PINGPONG) + 4 * 8
    assert not space.is_valid(FOLDED.replace(stages=4))  # 256 KB
    assert not space.is_valid(FOLDED.replace(store="direct16"))
    assert not space.is_valid(FOLDED_PINGPONG.replace(tile_sync="syncthreads"))
    # block 0 of a split tile holds the other blocks' partial tiles: 7 x 64 x 64 fp32 beside 3 stages of 16 KB
    # and the TMA store's slot, and a barrier for them
    assert shared_bytes(SPLIT_SMALL) == 3 * (64 + 64) * 128 + 64 * 64 * 2 + 7 * 64 * 64 * 4 + (6 + 2 + 1) * 8 + 1024
    assert shared_bytes(SPLIT_WIDE) == shared_bytes(WIDE) + 2 * 64 * 128 * 4 + 2 * 8
    assert not space.is_valid(SPLIT_FOUR.replace(persistent=True))  # one tile a block
    assert not space.is_valid(SPLIT_WIDE.replace(cluster=2))
    assert not space.is_valid(PREFETCH.replace(persistent=False, split_k=2))  # the other blocks run no epilogue
    assert not space.is_valid(SPLIT_WIDE.replace(split_k=4))  # 3 partial tiles of 128 x 128 fp32: 192 KB + stages
    assert shared_bytes(PINGPONG_192) == 4 * (64 + 192) * 128 + 2 * 2 * 64 * 64 * 2 + 12 * 8 + 1024
    assert not space.is_valid(SEED.replace(block_n=256, m_tiles=2))  # 256 accumulators a thread
    assert not space.is_valid(WIDE.replace(block_n=256, m_tiles=2, consumers=1, stages=6))  # shared memory
    assert not space.is_valid(SEED.replace(schedule="pingpong"))  # one consumer cannot take turns
    assert not space.is_valid(WIDE.replace(epi_depth=2))  # staging slots only for the TMA store
    assert not space.is_valid(PINGPONG.replace(operands_ahead=True))  # 128 accumulators + 2 chunks of operands
    assert not space.is_valid(PREFETCH.replace(tile_sync="syncthreads"))
    assert not space.is_valid(SEED.replace(raster="along_m"))  # only a persistent grid has an order
    assert not space.is_valid(WIDE.replace(blocks_per_sm=2, stages=4))  # two blocks of 4 stages of 32 KB
    # a wgmma of 128 accumulators does not assemble within 2 blocks' launch bound of 128 registers,
    # whatever setmaxnreg would give the consumer at run time (found by a search: a compile error)
    assert not space.is_valid(SEED.replace(block_n=256, blocks_per_sm=2, setmaxnreg=True, persistent=True,
                                           tile_sync="local", epilogue_reads="rowwise", store="direct16"))
    with pytest.raises(ValueError, match="N a multiple of 8"):
        FAMILY.check_shape(shape("odd", m=10, n=12, k=768, p=5))
    FAMILY.check_shape(shape("k588", m=512, n=16, k=588, p=256))  # K of patch size 14: the launcher pads its rows


@pytest.mark.nvcc
def test_every_knob_value_compiles_and_passes_the_screen(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    for genome in NAMED:
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        assert result.status is Status.OK, f"{genome}: {result.message}"
    for genome in covering_sample(FAMILY.space):
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = screen(build, recipe.output, FAMILY.screen_limits)
        # it compiles, with wgmma (no serialisation warning); a variant that spills is screened out
        assert result.status is Status.OK or result.message.startswith("spill bytes"), f"{genome}: {result.message}"
        assert "serializ" not in build.log


@pytest.mark.gpu
def test_sampled_genomes_are_correct_on_every_shape(tmp_path):
    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=2), tmp_path / "loaded")
    verified = 0
    for genome in [*NAMED, *covering_sample(FAMILY.space, seed=1)]:
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, FAMILY.screen_limits))
        print(genome, result.status.value, result.message[:200],
              {c.shape: round(c.max_abs_error or -1, 4) for c in result.checks},
              {t.shape: round(t.median_s * 1e6, 1) for t in result.timings})
        if result.status is Status.SCREENED_OUT:
            continue
        assert result.status is Status.OK, f"{genome}: {result.message}"
        verified += 1
    assert verified >= 9


@pytest.mark.gpu
def test_the_folded_table_serves_any_patch_count(tmp_path):
    """The table's rows repeat the patches so that a consumer's rows from any patch are one box: P
    smaller than a consumer's rows (wrapping several times within a tile), P not dividing the tile,
    and M, N multiples of no tile; each output NaN-poisoned, checked against the float32 reference."""
    import torch

    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded")
    shapes = [shape("three_patches", m=7 * 3, n=136, k=64, p=3), shape("patches_130", m=4 * 130, n=328, k=192, p=130)]
    for genome in (FOLDED, FOLDED_PINGPONG, FOLDED_PER_TILE):
        kernel = evaluator.load(genome, builder.build(genome.id, FAMILY.build_recipe(genome)))
        for s in shapes:
            inputs = FAMILY.make_inputs(s, torch.Generator("cuda").manual_seed(s["p"]))
            output = FAMILY.make_output(s).fill_(float("nan"))
            FAMILY.launch(kernel, s, inputs, output)
            error = (output.float() - FAMILY.reference(s, inputs)).abs().max().item()
            assert error < FAMILY.tolerance.max_abs, f"{genome} at {s.name}: max abs error {error}"
