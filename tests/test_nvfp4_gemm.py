"""nvfp4_gemm: every knob value compiles for sm_90a and passes the ptxas screen (CPU CI, with nvcc);
design points are correct on every shape and scale layout (GPU)."""

import pytest

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from tests.sampling import covering_sample

from evo.seeds.nvfp4_gemm.designs import (  # noqa: F401 - the design points the tests use
    FAMILY,
    SEED,
    SPLIT,
    WIDE,
    SHARED,
    WGMMA,
    WGMMA_WIDE,
    SWAPPED,
    SWAPPED_NARROW,
    SWAPPED_DIRECT_STORE,
    PREPASS,
    CLUSTER,
    CLUSTER_MMA_SYNC,
    TMA_CLUSTER,
    TMA_IN_FLIGHT,
    TMA_SHORT_K,
    TMA_MBARRIERS,
    BYTES,
    BYTES_IN_FLIGHT,
    BYTES_SHARED,
    SPREAD,
    SPREAD_MMA_SYNC,
    K_SPLIT,
    K_SPLIT_TWO_BLOCKS,
    K_SPLIT_SHORT_K,
    K_SPLIT_WIDE,
    CLUSTER_L2,
    K_SPLIT_L2,
    ONE_WARPGROUP,
    ONE_WARPGROUP_CLUSTER,
    PRODUCER,
    PRODUCER_CLUSTER_L2,
    PRODUCER_SHORT_K,
    SKINNY,
    SKINNY_WIDE,
    SKINNY_NARROW,
    DESIGN_POINTS,
)


def test_covering_sample_covers_every_value():
    sample = covering_sample(FAMILY.space)
    for knob in FAMILY.space.knobs:
        assert {g[knob.name] for g in sample} == set(knob.values)


@pytest.mark.nvcc
def test_every_knob_value_compiles_and_passes_the_screen(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    for genome in [*DESIGN_POINTS, *covering_sample(FAMILY.space)]:
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        assert result.status is Status.OK or result.message.startswith("spill bytes"), f"{genome}: {result.message}"
    for genome in DESIGN_POINTS:  # the design points do not spill
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        assert result.status is Status.OK
        if genome in (PRODUCER, PRODUCER_CLUSTER_L2, PRODUCER_SHORT_K):  # a's packed rows stay in registers
            assert result.usage.stack_bytes == 0, genome


@pytest.mark.nvcc
def test_a_skinny_genomes_kernels_do_not_depend_on_the_tile_knobs_it_holds(tmp_path):
    """A genome drawn as it is (not canonical, as the covering sample draws them) may hold a tile knob such as
    loads = tma: the skinny kernel and a's prepass it reads must compile as they do for the canonical genome (the
    prepass once wrote the TMA stages' run order for it, which the skinny kernel read as spans: every output
    wrong on the GPU)."""
    import re
    import subprocess

    from kernel_genome import Genome

    from evo.seeds.nvfp4_gemm.designs import SKINNY_PREPASS

    canonical = SKINNY_PREPASS.replace(skinny_split=8)
    tiles = dict(a_dequant="prepass", block_k=128, block_m=64, block_n=128, blocks_per_sm=2, dequant="registers",
                 loads="tma", mma="wgmma_swapped", promote=False, split_k=1, split_reduce="cluster",
                 stage_sync="block_barrier", stages=3, warpgroup_k_split=1, warps_m=4, warps_n=2, wgmma_in_flight=2)
    drawn = Genome.from_mapping({**canonical.as_dict(), **tiles})  # the covering sample's, that failed on the H200
    assert FAMILY.space.canonical(drawn) == canonical

    def entries(genome, name):
        recipe = FAMILY.build_recipe(genome)
        source = tmp_path / f"{name}.cu"
        source.write_text(recipe.source)
        subprocess.run([recipe.compiler, "-ptx", *recipe.flags, "-o", str(tmp_path / f"{name}.ptx"), str(source)],
                       check=True, capture_output=True)
        ptx = (tmp_path / f"{name}.ptx").read_text()
        return {kernel: re.search(rf"\.entry {kernel}\(.*?\n}}\n", ptx, re.S).group(0)
                for kernel in ("nvfp4_skinny", "nvfp4_dequantize_a")}

    assert entries(drawn, "drawn") == entries(canonical, "canonical")
    # and the build itself is the canonical genome's: no held knob reaches the compiler
    assert FAMILY.build_recipe(drawn) == FAMILY.build_recipe(canonical)


def test_constraints_launch_and_workspace():
    from evo.seeds.nvfp4_gemm.launch import grid, shared_bytes, split_workspace, splits

    space = FAMILY.space
    assert space.is_valid(SEED.replace(block_m=64, warps_m=4))  # 16 rows a warp
    assert not space.is_valid(SEED.replace(block_n=256, warps_m=1, warps_n=2))  # 128 x 128 a warp: 512 accumulators
    assert not space.is_valid(SEED.replace(warps_n=2))  # 64 x 64 a warp: 128 accumulators, twice
    assert not space.is_valid(SEED.replace(block_n=256, block_k=128, stages=6))  # 6 x 41 KB of stages
    assert not space.is_valid(WGMMA.replace(dequant="registers"))  # wgmma reads shared memory
    assert not space.is_valid(WGMMA.replace(warps_m=2, warps_n=4))  # a warpgroup lies along M
    assert not space.is_valid(WGMMA.replace(blocks_per_sm=2))  # 2 x 120 KB of shared memory
    assert space.is_valid(WGMMA.replace(blocks_per_sm=2, stages=3))  # 2 x 104 KB
    assert shared_bytes(SEED) == 2 * (256 * (32 + 16) + 256 * 4)
    assert shared_bytes(WGMMA) == 4 * (256 * (32 + 16) + 256 * 4) + 2 * 256 * 64 * 2 + 1024
    # TMA stages: a's fp16 tile, b's unpadded rows and scales (1024-byte aligned), and an mbarrier each
    assert shared_bytes(TMA_IN_FLIGHT) == 4 * (128 * 128 * 2 + 128 * (64 + 8)) + 1024 + 4 * 8
    assert not space.is_valid(SWAPPED.replace(loads="tma"))  # the boxes bring in a's fp16 copy
    assert not space.is_valid(SWAPPED.replace(wgmma_in_flight=2))  # a's tile must outlive two tiles' wgmmas
    assert not space.is_valid(TMA_IN_FLIGHT.replace(stages=2))  # the refilled stage is two tiles back
    assert space.is_valid(CLUSTER.replace(wgmma_in_flight=2))  # cp.async stages work with two tiles in flight
    assert not space.is_valid(TMA_CLUSTER.replace(stage_sync="mbarriers"))  # one tile in flight: a block barrier
    assert not space.is_valid(CLUSTER.replace(wgmma_in_flight=2, stage_sync="mbarriers"))  # cp.async: groups
    assert shared_bytes(TMA_MBARRIERS) == 4 * (128 * 128 * 2 + 128 * (64 + 8)) + 1024 + 4 * 16  # full and empty
    # a's producer warpgroup fills the same stages (mbarrier-handed TMA stages only), with 128 more threads
    from evo.seeds.nvfp4_gemm.launch import threads

    assert shared_bytes(PRODUCER) == shared_bytes(ONE_WARPGROUP)
    assert (threads(ONE_WARPGROUP), threads(PRODUCER), threads(PRODUCER_CLUSTER_L2)) == (128, 256, 384)
    assert not space.is_valid(PRODUCER.replace(stage_sync="block_barrier"))
    assert not space.is_valid(PRODUCER.replace(loads="cp_async", stage_sync="block_barrier"))
    assert not space.is_valid(PRODUCER.replace(mma="mma_sync"))

    # the split the launch takes: the most (up to split_k) whose grid still fits one wave
    shape = {s.name: s for s in FAMILY.shapes}
    mission = FAMILY.mission_shape
    assert splits(SPLIT, mission, 132) == 2  # 56 tiles: 112 blocks fit 132 SMs, 224 would not
    assert splits(SPLIT.replace(split_k=2), mission, 264) == 2  # never more than split_k
    assert splits(SPLIT, mission, 264) == 4
    assert splits(SPLIT, shape["square4096"], 132) == 1  # 1024 tiles fill the GPU alone
    assert splits(SPLIT, shape["ragged"], 132) == 4  # 2 x 8 x 2 tiles
    assert grid(SPLIT, mission, 2) == (56, 1, 2)
    assert grid(SPLIT, shape["batched4"], 2) == (16, 1, 8)
    assert split_workspace(SPLIT, mission, 2) == (56 * 2 * 128 * 128, 56)
    assert split_workspace(SPLIT, mission, 1) == (0, 0)
    # a cluster reduction keeps the fp32 partial tile (rows padded by 4 floats) in the stages' memory
    assert space.is_valid(CLUSTER) and space.is_valid(CLUSTER_MMA_SYNC)
    assert not space.is_valid(SEED.replace(split_reduce="cluster"))  # 2 stages of 25 KB < 128 x 132 x 4
    # ... and splits no further than the clusters of that many blocks that run at once
    fits = {2: 66, 4: 16, 8: 8}.__getitem__
    assert splits(CLUSTER, shape["m128_n4096_k7168"], 132) == 4  # 32 tiles
    assert splits(CLUSTER, shape["m128_n4096_k7168"], 132, fits) == 2  # 32 clusters of 4 would not run at once
    assert splits(PREPASS, shape["m128_n4096_k7168"], 132, fits) == 4  # the ticket reduction needs no cluster
    assert splits(CLUSTER, mission, 132, fits) == 2
    # two warpgroups to a K tile: one 64-column tile, TMA runs
    assert not space.is_valid(TMA_MBARRIERS.replace(warpgroup_k_split=2))  # 128 columns: two warpgroups each
    assert not space.is_valid(CLUSTER.replace(block_n=64, warpgroup_k_split=2))  # cp.async spans
    assert space.is_valid(K_SPLIT_TWO_BLOCKS) and shared_bytes(K_SPLIT_TWO_BLOCKS) <= 113 * 1024
    assert splits(K_SPLIT, shape["m128_n7168_k2048"], 132) == 1  # 112 tiles of 64 columns
    # pairs of warpgroups: warps_n even, two pairs on 128 columns
    assert space.is_valid(K_SPLIT_WIDE) and not space.is_valid(K_SPLIT.replace(block_n=128, warps_n=3))
    # each warpgroup of a pair holds the sums of all its 64 columns: sixteen warps at two blocks an SM
    # (64 registers a thread) cannot hold twice their 64 (ptxas refused one such genome in a search)
    crowded = K_SPLIT_WIDE.replace(block_k=64, stages=5, blocks_per_sm=2, split_k=4)
    assert [v.split("'")[1] for v in space.violations(crowded)] == ["registers_hold_the_accumulators"]
    # split tiles' warp rows handed between blocks through L2: the swapped wgmma's rows alone
    assert space.is_valid(CLUSTER_L2) and not space.is_valid(SPLIT.replace(split_reduce="cluster_l2"))
    assert not space.is_valid(TMA_MBARRIERS.replace(block_n=32, warps_n=1, warpgroup_k_split=2))
    # the spread sum needs the tile's blocks to run at once (one wave), not a cluster
    assert space.is_valid(SPREAD) and space.is_valid(SEED.replace(split_reduce="spread"))
    assert splits(SPREAD, shape["m128_n4096_k7168"], 132, fits) == 4
    assert split_workspace(SPREAD, mission, 2) == split_workspace(PREPASS, mission, 2)


def test_the_skinny_design_reads_its_own_knobs_alone():
    from evo.seeds.nvfp4_gemm.launch import skinny_grid

    space = FAMILY.space
    # a skinny genome holds the tile kernel's knobs at the seed's (one mutation reaches it from any tile genome),
    # a tile genome the skinny knobs at theirs; bit_placement is read by both
    assert space.inactive(SKINNY.as_dict())["block_m"] == SEED["block_m"]
    assert "bit_placement" not in space.inactive(SKINNY.as_dict())
    assert space.inactive(ONE_WARPGROUP.as_dict())["skinny_warps"] == SEED["skinny_warps"]
    assert space.canonical(ONE_WARPGROUP.replace(design="skinny")) == SKINNY.replace(bit_placement="bytes")
    macros = dict(flag[2:].split("=", 1) for flag in FAMILY.build_recipe(SKINNY_WIDE).flags if flag.startswith("-D"))
    assert (macros["DESIGN"], macros["SKINNY_WARPS"], macros["SKINNY_TOKENS"], macros["SKINNY_UNROLL"],
            macros["SKINNY_L2_PREFETCH"]) == ("1", "8", "16", "4", "1")
    # 16 warps of 16 tokens x 4 runs of a's fp16 pairs: more registers than a thread of 512 has
    assert not space.is_valid(SKINNY_WIDE.replace(skinny_warps=16, skinny_a_prepass=True))
    # shared-memory stages: the register loads' knobs are held, and the rings must fit static shared memory
    staged = space.canonical(SKINNY_WIDE.replace(skinny_stages=4, skinny_warps=4))
    assert (staged["skinny_unroll"], staged["skinny_l2_prefetch"]) == (SEED["skinny_unroll"], False)
    assert not space.is_valid(SKINNY.replace(skinny_stages=8, skinny_warps=8))  # 8 x 8 x 1152 bytes > 48 KiB
    macros = dict(flag[2:].split("=", 1) for flag in FAMILY.build_recipe(staged).flags if flag.startswith("-D"))
    assert (macros["SKINNY_STAGES"], macros["SKINNY_A_PREPASS"], macros["SKINNY_SPLIT"]) == ("4", "0", "1")
    shape = {s.name: s for s in FAMILY.shapes}
    assert skinny_grid(SKINNY, shape["ragged"]) == (63, 25, 2)  # N = 1000: 62.5 blocks of 16 rows; M = 200: 25 of 8
    assert skinny_grid(SKINNY_WIDE, FAMILY.mission_shape) == (448, 8, 1)  # M = 128: 8 blocks of 16 tokens


def test_skinny_rings_filled_by_tma_boxes_read_their_own_knobs():
    from evo.seeds.nvfp4_gemm.designs import SKINNY_TMA, SKINNY_TMA_PACKED
    from evo.seeds.nvfp4_gemm.launch import skinny_dynamic_bytes

    space = FAMILY.space
    # one chunk a stage by cp.async: the stage's chunk count is held; registers alone: both ring knobs are held
    assert space.canonical(SKINNY_TMA.replace(skinny_ring_fill="cp_async", skinny_stage_chunks=4))["skinny_stage_chunks"] == 1
    held = space.canonical(SKINNY_TMA.replace(skinny_stages=1, skinny_stage_chunks=4))
    assert (held["skinny_ring_fill"], held["skinny_stage_chunks"]) == ("cp_async", 1)
    assert space.canonical(SKINNY_TMA.replace(skinny_prefetch=True))["skinny_prefetch"] is False
    macros = dict(flag[2:].split("=", 1) for flag in FAMILY.build_recipe(SKINNY_TMA).flags if flag.startswith("-D"))
    assert (macros["SKINNY_TMA_BOXES"], macros["SKINNY_STAGE_CHUNKS"], macros["SKINNY_STAGES"]) == ("1", "1", "2")
    # a stage: b's 16 rows (64 bytes a chunk) and their scales (8), a's 16 fp16 rows (256) with the prepass; an
    # mbarrier a stage; rings of every warp
    assert skinny_dynamic_bytes(SKINNY_TMA.as_dict()) == 4 * 2 * (16 * 64 + 16 * 8 + 16 * 256 + 8)
    assert skinny_dynamic_bytes(SKINNY_TMA_PACKED.as_dict()) == 4 * 2 * (4 * (16 * 64 + 16 * 8) + 8)
    assert skinny_dynamic_bytes(SKINNY_TMA.replace(skinny_ring_fill="cp_async").as_dict()) == 0  # static rings
    assert not space.is_valid(SKINNY_TMA.replace(skinny_stages=8, skinny_stage_chunks=4, skinny_warps=8))  # > 227 KiB
    # 74 KiB of rings: beyond static shared memory's 48, so by cp.async they do not fit, by boxes they do
    assert space.is_valid(SKINNY_TMA_PACKED.replace(skinny_stages=8, skinny_warps=8, skinny_stage_chunks=1))
    assert not space.is_valid(SKINNY_TMA_PACKED.replace(skinny_stages=8, skinny_warps=8, skinny_ring_fill="cp_async"))


@pytest.mark.nvcc
def test_skinny_kernels_plan_the_shared_memory_the_launch_sizes(tmp_path):
    """The loader checks nvfp4_skinny_shared_bytes against launch.skinny_dynamic_bytes on the GPU; here the PTX's
    constant is read for ring designs of each kind, so a mismatch fails without one."""
    import re
    import subprocess

    from evo.seeds.nvfp4_gemm.designs import SKINNY_PREPASS_PREFETCH, SKINNY_STAGED, SKINNY_TMA, SKINNY_TMA_PACKED
    from evo.seeds.nvfp4_gemm.launch import skinny_dynamic_bytes

    for i, genome in enumerate((SKINNY_TMA, SKINNY_TMA_PACKED, SKINNY_TMA.replace(skinny_tokens=8, skinny_stages=4),
                                SKINNY_TMA_PACKED.replace(skinny_stage_chunks=2, skinny_tokens=16), SKINNY_STAGED,
                                SKINNY_PREPASS_PREFETCH)):
        recipe = FAMILY.build_recipe(genome)
        source, ptx = tmp_path / f"g{i}.cu", tmp_path / f"g{i}.ptx"
        source.write_text(recipe.source)
        subprocess.run([recipe.compiler, "-ptx", *recipe.flags, "-o", str(ptx), str(source)], check=True,
                       capture_output=True)
        planned = re.search(r"\.u32 nvfp4_skinny_shared_bytes( = (\d+))?;", ptx.read_text())  # (0: no initialiser)
        assert planned and int(planned.group(2) or 0) == skinny_dynamic_bytes(genome.as_dict()), genome


def test_a_skinny_k_split_fills_the_last_wave():
    from evo.seeds.nvfp4_gemm.launch import skinny_splits

    decode = dict(l=1, m=1, n=8192, k=28672, blocked=0)  # 512 tiles of 16 rows
    split = SKINNY.replace(skinny_split=4)
    assert skinny_splits(SKINNY, decode, 396) == 1  # skinny_split 1: never split
    # 396 slots (132 SMs x 3 blocks): 1.29 waves unsplit, 2.59 at 2, 3.88 at 3 (97% of the last filled), 5.17 at 4
    assert skinny_splits(split, decode, 396) == 3
    assert skinny_splits(split, decode, 512) == 1  # one full wave already
    # each block keeps at least a chunk of 128 values a warp: K = 2048 is 16 chunks, 8 warps take 2 splits at most
    assert skinny_splits(split, dict(decode, k=2048, n=16), 132) == 2


def test_shapes_it_cannot_compute_are_refused_clearly():
    from evo.seeds.nvfp4_gemm.spec import gemm_shape

    with pytest.raises(ValueError, match="multiple of 128"):
        FAMILY.check_shape(gemm_shape("odd", 1, 128, 128, 1000))
    with pytest.raises(ValueError, match="even N"):
        FAMILY.check_shape(gemm_shape("odd", 1, 128, 127, 1024))


@pytest.mark.gpu
def test_design_points_are_correct_on_every_shape_and_layout(tmp_path):
    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=2), tmp_path / "loaded")
    for genome in [*DESIGN_POINTS, *covering_sample(FAMILY.space, seed=1)]:
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, FAMILY.screen_limits))
        print(genome, result.status.value, result.message[:300],
              {c.shape: c.max_abs_error for c in result.checks},
              {t.shape: round(t.median_s * 1e6, 1) for t in result.timings})
        if result.status is Status.SCREENED_OUT:
            continue
        assert result.status is Status.OK, f"{genome}: {result.message}"
