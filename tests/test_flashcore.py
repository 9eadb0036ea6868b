"""FlashCore: every knob value compiles for sm_90a and passes the ptxas screen (CPU CI, with nvcc);
sampled genomes are correct on every shape of the set (GPU)."""

import sys
from pathlib import Path

import pytest
import torch

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from evo.seeds import get_family, shape
from tests.sampling import covering_sample

from evo.seeds.flashcore.designs import (  # noqa: F401 - the design points the tests use
    FAMILY,
    FA2_LIKE,
    LARGE_TILES,
    SHARED_STAGES,
    GRID_SPLIT,
    MISSION,
    ANNOUNCED,
    CLUSTER_SPLIT,
    CLUSTER_WARP_SPLIT,
    WGMMA_PADDED,
    TMA_STAGES,
    OVERLAP,
    WGMMA_ROWS,
    WARP_SPECIALIZED,
    WS_OVERLAP,
    WS_PINGPONG,
    WS_ONE_CONSUMER,
    WS_THREE_CONSUMERS,
)


def test_covering_sample_covers_every_value():
    sample = covering_sample(FAMILY.space)
    for knob in FAMILY.space.knobs:
        assert {g[knob.name] for g in sample} == set(knob.values)
    assert all(FAMILY.space.is_valid(g) for g in sample)


def test_unsupported_head_dimension_is_rejected_clearly():
    with pytest.raises(ValueError, match="head dimension"):
        FAMILY.check_shape(shape("odd", b=1, h=1, s=64, d=96, causal=0))


@pytest.mark.nvcc
def test_every_knob_value_compiles_and_the_design_points_pass_the_screen(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    for genome in [FAMILY.seed_genomes[0], FA2_LIKE, LARGE_TILES, FA2_LIKE.replace(block_m=16, kv_split=4),
                   SHARED_STAGES, GRID_SPLIT, MISSION, ANNOUNCED, WGMMA_PADDED, WGMMA_ROWS,
                   WGMMA_ROWS.replace(block_n_d64=64), WGMMA_PADDED.replace(kv_loads="plain"), TMA_STAGES, OVERLAP,
                   OVERLAP.replace(kv_loads="cp_async2", q_in_registers=False), TMA_STAGES.replace(wgmma_d64=True, warps_d64=8),
                   WARP_SPECIALIZED, WS_OVERLAP, WS_PINGPONG, WS_ONE_CONSUMER, WS_THREE_CONSUMERS]:
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        assert result.status is Status.OK, f"{genome}: {result.message}"
        assert result.usage.spill_store_bytes == 0
    for genome in covering_sample(FAMILY.space):
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        # it compiles; a variant that spills registers is excluded by the screen, by design
        assert result.status is Status.OK or result.message.startswith("spill bytes"), f"{genome}: {result.message}"


def test_constraints_exclude_what_the_kernel_cannot_build():
    space = FAMILY.space
    assert not space.is_valid(FA2_LIKE.replace(qk="wmma"))  # register softmax needs mma fragments
    assert not space.is_valid(FA2_LIKE.replace(block_m=16))  # 4 warps cannot each own 16 of 16 rows
    assert not space.is_valid(FA2_LIKE.replace(block_m=32, warps_d128=4))  # ... at D = 128 either
    assert space.is_valid(FA2_LIKE.replace(block_m=32, warps_d64=2, warps_d128=2))
    assert not space.is_valid(LARGE_TILES.replace(warps_d128=4))  # 32 rows x (128 keys + 128 dims) a warp
    assert space.is_valid(LARGE_TILES)
    assert not space.is_valid(FA2_LIKE.replace(reduce="serial"))
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(q_in_registers=True))
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(qk="wmma", layout="swizzled"))
    assert space.is_valid(FAMILY.seed_genomes[0].replace(qk="mma", pv="wmma", layout="padded"))
    assert space.is_valid(SHARED_STAGES) and space.is_valid(SHARED_STAGES.replace(layout="plain"))
    assert not space.is_valid(SHARED_STAGES.replace(layout="padded"))  # the TMA writes rows unpadded
    assert not space.is_valid(SHARED_STAGES.replace(kv_loads="plain"))  # the stages are a pipeline
    assert not space.is_valid(SHARED_STAGES.replace(cluster_kv_split=2))  # one cluster dimension
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(kv_share_d64=2))  # fused path only
    assert space.is_valid(GRID_SPLIT) and space.is_valid(GRID_SPLIT.replace(grid_kv_split=4))
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(grid_kv_split=2))  # fused path only
    assert not space.is_valid(GRID_SPLIT.replace(cluster_kv_split=2))  # split over the grid or a cluster
    assert not space.is_valid(SHARED_STAGES.replace(grid_kv_split=2))
    assert space.is_valid(MISSION) and space.is_valid(ANNOUNCED)
    assert space.is_valid(GRID_SPLIT.replace(stage_wait="mbarrier"))
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(stage_wait="mbarrier"))  # fused path only
    assert not space.is_valid(ANNOUNCED.replace(kv_loads="plain"))  # a cp.async pipeline
    assert not space.is_valid(SHARED_STAGES.replace(stage_wait="mbarrier"))  # the TMA stages have their own
    assert space.is_valid(WGMMA_PADDED) and space.is_valid(WGMMA_ROWS)
    assert not space.is_valid(WGMMA_PADDED.replace(warps_d64=4))  # a warpgroup per key split
    assert not space.is_valid(WGMMA_ROWS.replace(block_m=128, warps_d128=8))  # a warpgroup covers <= 64 rows
    assert not space.is_valid(WGMMA_PADDED.replace(layout="padded"))  # wgmma reads the 128-byte swizzle
    assert not space.is_valid(WGMMA_PADDED.replace(stage_wait="mbarrier"))  # its stages are fenced before a barrier
    assert not space.is_valid(GRID_SPLIT.replace(wgmma_d64=True))
    assert space.is_valid(TMA_STAGES) and space.is_valid(OVERLAP) and space.is_valid(TMA_STAGES.replace(layout="plain"))
    assert not space.is_valid(MISSION.replace(overlap_tiles=True))  # the overlap runs on TMA stages
    assert not space.is_valid(TMA_STAGES.replace(layout="padded"))  # the TMA writes rows unpadded
    assert not space.is_valid(TMA_STAGES.replace(stage_wait="mbarrier"))  # its stages have their own barriers
    assert not space.is_valid(TMA_STAGES.replace(block_m=64, cluster_kv_split=2))  # the block alone on its rows
    assert not space.is_valid(TMA_STAGES.replace(block_n_d64=128, kv_split=4, warps_d64=8))  # 512 rows: not one box
    assert not space.is_valid(OVERLAP.replace(wgmma_d64=True, warps_d64=8))  # mma.sync fragments only


def test_the_warp_specialized_design_reads_its_own_knobs_only():
    from evo.seeds.flashcore.plan import grid, grid_workspace, shared_bytes, warps
    from evo.seeds.flashcore.runtime import takes

    space = FAMILY.space
    assert all(space.is_valid(g) for g in (WARP_SPECIALIZED, WS_OVERLAP, WS_PINGPONG, WS_ONE_CONSUMER))
    assert not space.is_valid(WARP_SPECIALIZED.replace(block_m=32))  # consumer warpgroups of 64 rows
    assert not space.is_valid(WARP_SPECIALIZED.replace(kv_loads="plain"))  # a ring of 2 or 3 stages
    assert not space.is_valid(WS_ONE_CONSUMER.replace(ws_pingpong=True))  # ping-pong takes two consumers
    assert not space.is_valid(FAMILY.seed_genomes[0].replace(ws_overlap=True))  # a knob of the design
    # the classic design's knobs are held at the seed's values: one genome, whatever they were set to
    assert space.genome(dict(WARP_SPECIALIZED.as_dict(), qk="mma", warps_d64=8, kv_split=2)) == WARP_SPECIALIZED
    assert space.genome(dict(FA2_LIKE.as_dict(), warp_specialized=True)).as_dict()["softmax"] == "smem"
    # a producer warpgroup and two consumers; Q, then 2 stages of K and V, then 9 mbarriers
    assert warps(WARP_SPECIALIZED, 64) == 12 and warps(WS_ONE_CONSUMER, 128) == 8
    assert shared_bytes(WARP_SPECIALIZED, 128) == 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 128
    assert grid(WARP_SPECIALIZED, 300, 8, 64) == (3, 8) and grid_workspace(WARP_SPECIALIZED, 300, 8, 64) == (0, 0)
    # bf16 and grouped K/V heads: only the warp-specialised kernels take them
    gqa_bf16 = dict(b=1, h=32, s=512, d=128, causal=1, h_kv=8, bf16=1)
    assert takes(WARP_SPECIALIZED.as_dict(), gqa_bf16) and not takes(FA2_LIKE.as_dict(), gqa_bf16)
    assert not takes(FA2_LIKE.as_dict(), dict(gqa_bf16, h_kv=32)) and takes(FA2_LIKE.as_dict(), dict(gqa_bf16, h_kv=32, bf16=0))
    with pytest.raises(ValueError, match="multiple of the K/V heads"):
        FAMILY.check_shape(shape("odd", b=1, h=12, s=64, d=64, causal=0, h_kv=5, bf16=0))


def test_a_mission_may_be_a_shape_of_the_family_s_workloads():
    family = get_family("flashcore@h16_s4096_d128_b4")
    assert family.mission_shape.name == "h16_s4096_d128_b4" and family.mission_shape["d"] == 128
    assert [s.name for s in family.shapes[:6]] == [s.name for s in FAMILY.shapes]  # still verified on all of them
    with pytest.raises(ValueError, match="its workloads' shapes: .*h16_s4096_b4"):
        get_family("flashcore@nowhere")


def test_a_workload_file_may_leave_out_the_k_v_heads_and_the_element_type(tmp_path):
    from evo.seeds._workload import load_workload_file

    file = tmp_path / "llama.toml"
    file.write_text('[workload]\nshapes = [ { name = "mha", b = 1, h = 8, s = 256, d = 64, causal = 0 },\n'
                    '  { name = "gqa", b = 1, h = 32, h_kv = 8, s = 512, d = 128, causal = 1, bf16 = 1 } ]\n')
    workload = load_workload_file(FAMILY, file)
    assert dict(workload.shapes[0].dims) == dict(b=1, h=8, s=256, d=64, causal=0, h_kv=8, bf16=0, kv=256, lower_right=0)
    assert workload.shapes[1]["h_kv"] == 8 and workload.shapes[1]["bf16"] == 1 and workload.shapes[1]["kv"] == 512
    file.write_text('[workload]\nshapes = [ { b = 1, h = 12, h_kv = 5, s = 256, d = 64, causal = 0 } ]\n')
    with pytest.raises(ValueError, match="multiple of the K/V heads"):
        load_workload_file(FAMILY, file)
    file.write_text('[workload]\nshapes = [ { b = 1, h = 8, s = 256, kv = 200, d = 64, causal = 1, lower_right = 1 } ]\n')
    with pytest.raises(ValueError, match="more keys than queries"):
        load_workload_file(FAMILY, file)


def test_query_and_key_lengths_apart_the_reference_the_anchor_and_which_kernels_take_them():
    """Chunked prefill and cross-attention shapes (kv != s): the fp32 reference equals SDPA with the mask aligned
    to the top left (is_causal) or the lower right (causal_lower_right); only warp-specialised kernels take them;
    flops count the scores the mask leaves."""
    from torch.nn.attention.bias import causal_lower_right

    from evo.seeds.flashcore import runtime
    from evo.seeds.flashcore.spec import attention_shape

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 40, 64, generator=generator)
    k, v = (torch.randn(2, 2, 100, 64, generator=generator) for _ in range(2))
    r = [t.repeat_interleave(4, dim=1) for t in (k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dims = dict(b=2, h=8, s=40, d=64, h_kv=2, kv=100, bf16=1)
    for causal, lower_right, expected in ((0, 0, sdpa(q, *r)), (1, 0, sdpa(q, *r, is_causal=True)),
                                          (1, 1, sdpa(q, *r, attn_mask=causal_lower_right(40, 100)))):
        case = dict(dims, causal=causal, lower_right=lower_right)
        assert torch.allclose(runtime.reference(case, (q, k, v)), expected, atol=1e-5), case
        assert torch.allclose(runtime.anchor(case, (q, k, v)), expected, atol=1e-5), case
        assert runtime.takes(WARP_SPECIALIZED.as_dict(), case)
    seed, plain = FAMILY.seed_genomes[0].as_dict(), dict(b=1, h=8, s=40, d=64, h_kv=8, kv=40, bf16=0, causal=1, lower_right=0)
    assert runtime.takes(seed, plain) and not runtime.takes(seed, dict(plain, kv=100))  # the classic design: kv = s
    assert not runtime.takes(seed, dict(plain, kv=100, lower_right=1))
    assert not runtime.takes(WARP_SPECIALIZED.as_dict(), dict(dims, s=120, causal=1, lower_right=1))  # a query sees no key
    chunk = attention_shape("chunk", 1, 8, 100, 64, kv=300, lower_right=True)
    assert chunk["causal"] == 1 and FAMILY.flops(chunk) == 4.0 * 8 * (100 * 200 + 100 * 100 / 2) * 64
    assert FAMILY.flops(attention_shape("square", 1, 8, 100, 64, causal=True)) == 4.0 * 8 * 100 * 100 / 2 * 64
    assert FAMILY.bytes_moved(chunk) == 2.0 * 2 * (8 * 100 + 8 * 300) * 64


def test_shared_stages_launch_whole_clusters_at_d64_only():
    from evo.seeds.flashcore.space import grid, shared_bytes

    assert grid(SHARED_STAGES, 300, 8, 64) == (10, 8)  # 300 rows / 32 = 10 query blocks: whole pairs
    assert grid(SHARED_STAGES.replace(kv_share_d64=4), 300, 8, 64) == (12, 8)  # rounded up to whole clusters
    assert grid(SHARED_STAGES.replace(kv_share_d64=4), 300, 8, 128) == (10, 8)  # the D = 128 kernel shares nothing
    assert shared_bytes(SHARED_STAGES, 64) == shared_bytes(SHARED_STAGES.replace(kv_share_d64=1), 64) + 128
    assert shared_bytes(SHARED_STAGES, 128) == shared_bytes(SHARED_STAGES.replace(kv_share_d64=1), 128)


def test_grid_split_launches_its_blocks_and_sizes_its_workspace():
    from evo.seeds.flashcore.space import grid, grid_workspace, shared_bytes

    assert grid(GRID_SPLIT, 512, 8, 64) == (16, 8)  # 8 query blocks of 64 rows, 2 blocks each
    assert grid(GRID_SPLIT.replace(grid_kv_split=4), 300, 8, 128) == (20, 8)  # 5 query blocks
    assert grid_workspace(GRID_SPLIT, 512, 8, 64) == (16 * 8 * 64 * 66, 8 * 8)  # a record a block, a ticket a query block
    assert grid_workspace(FA2_LIKE, 512, 8, 64) == (0, 0)
    # a block's own warps still merge in shared memory first, even with one key split among them
    one = GRID_SPLIT.replace(kv_split=1, warps_d64=4, warps_d128=4)
    assert shared_bytes(one, 64) > shared_bytes(one.replace(grid_kv_split=1), 64)


def test_runs_stored_before_the_cluster_grid_and_stage_wait_knobs_read_as_without_them():
    later = ("kv_share_d64", "grid_kv_split", "stage_wait", "wgmma_d64", "tma_stages_d64", "overlap_tiles")
    stored = {k: v for k, v in FA2_LIKE.as_dict().items() if k not in later}
    assert FAMILY.space.genome(stored) == FA2_LIKE


def test_cluster_split_holds_every_split_record_and_the_merge_barriers():
    from evo.seeds.flashcore.space import shared_bytes

    # D = 64: Q 64 x 64 halves, 2 stages of 64-key K and V tiles, then the records of the cluster's 2
    # splits (64 rows of 68 floats, and 4 floats a row) and 128 bytes of mbarriers
    assert shared_bytes(CLUSTER_SPLIT, 64) == 8192 + 2 * 2 * 64 * 128 + 2 * 64 * 68 * 4 + 4 * 2 * 64 * 4 + 128
    assert shared_bytes(CLUSTER_SPLIT.replace(cluster_kv_split=4), 64) == shared_bytes(CLUSTER_SPLIT, 64) + (
        2 * 64 * 68 * 4 + 4 * 2 * 64 * 4)


def test_announced_stages_carve_out_their_barriers():
    from evo.seeds.flashcore.space import shared_bytes

    for d in (64, 128):  # full K, full V and empty mbarriers of 3 stages: 72 bytes, one 128-byte region
        assert shared_bytes(ANNOUNCED, d) == shared_bytes(MISSION, d) + 128


def test_tma_stages_carve_out_their_barriers_at_d64_only():
    from evo.seeds.flashcore.space import shared_bytes

    # full K and full V of 3 stages and the Q tile's: 56 bytes, one 128-byte region
    assert shared_bytes(TMA_STAGES, 64) == shared_bytes(MISSION, 64) + 128
    assert shared_bytes(OVERLAP, 64) == shared_bytes(TMA_STAGES, 64)
    assert shared_bytes(TMA_STAGES, 128) == shared_bytes(MISSION, 128)  # the D = 128 kernel copies by cp.async


@pytest.mark.gpu
def test_sampled_genomes_are_correct_on_every_shape(tmp_path):
    builder = Builder(BuildConfig(tmp_path / "cache"))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=2), tmp_path / "loaded")
    verified = 0
    for genome in [FAMILY.seed_genomes[0], FA2_LIKE, LARGE_TILES, SHARED_STAGES, GRID_SPLIT,
                   GRID_SPLIT.replace(grid_kv_split=4), MISSION, ANNOUNCED, GRID_SPLIT.replace(stage_wait="mbarrier"),
                   WGMMA_PADDED, WGMMA_ROWS, WGMMA_ROWS.replace(block_n_d64=64), CLUSTER_SPLIT,
                   CLUSTER_SPLIT.replace(cluster_kv_split=4), CLUSTER_WARP_SPLIT, TMA_STAGES, OVERLAP,
                   OVERLAP.replace(kv_loads="cp_async2", q_in_registers=False), OVERLAP.replace(block_n_d64=64),
                   TMA_STAGES.replace(layout="plain", block_m=64), TMA_STAGES.replace(wgmma_d64=True, warps_d64=8),
                   WARP_SPECIALIZED, WS_OVERLAP, WS_PINGPONG, WS_ONE_CONSUMER, *covering_sample(FAMILY.space, seed=1)]:
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, FAMILY.screen_limits))
        print(genome, result.status.value, result.message[:200],
              {c.shape: round(c.max_abs_error or -1, 5) for c in result.checks},
              {t.shape: round(t.median_s * 1e6, 1) for t in result.timings})
        if result.status is Status.SCREENED_OUT:  # e.g. spills: excluded before running, by design
            continue
        assert result.status is Status.OK, f"{genome}: {result.message}"
        assert all(c.max_abs_error < 0.02 for c in result.checks)
        verified += 1
    assert verified >= 3
    anchor = {t.shape: t.median_s for t in evaluator.anchor_timings()}
    print("anchor (SDPA default) per shape, us:", {k: round(v * 1e6, 1) for k, v in anchor.items()})
    assert anchor["mission"] < 30e-6  # graph replays: the kernel, not Python's launch overhead


@pytest.mark.gpu
def test_warp_specialized_kernels_take_bf16_grouped_heads_causal_ragged_and_chunked_shapes():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _reporting import launch_each

    from evo.seeds.flashcore.spec import attention_shape as at

    shapes = [at("gqa_bf16", 1, 8, 700, 128, causal=True, h_kv=2, bf16=True),
              at("mqa_bf16", 2, 4, 333, 64, h_kv=1, bf16=True),
              at("gqa_fp16", 1, 4, 1100, 128, causal=True, h_kv=2),
              at("tiny", 1, 2, 5, 64, causal=True),
              # queries and keys apart: a chunk the last of the keys (lower right), SDPA's top left over more keys
              # and over fewer, cross-attention without a mask
              at("chunk_lower_right", 1, 8, 300, 128, h_kv=2, bf16=True, kv=1000, lower_right=True),
              at("chunk_top_left", 1, 4, 200, 64, causal=True, kv=777),
              at("queries_past_keys", 1, 2, 300, 128, causal=True, h_kv=1, bf16=True, kv=100),
              at("cross", 2, 4, 450, 64, kv=77)]
    launch_each(FAMILY, {"ws": WARP_SPECIALIZED, "overlap": WS_OVERLAP, "ping-pong": WS_PINGPONG,
                         "one consumer": WS_ONE_CONSUMER, "three consumers": WS_THREE_CONSUMERS}, shapes, max_abs_error=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize("genome", [GRID_SPLIT.replace(grid_kv_split=4), OVERLAP], ids=["grid_split", "tma_overlap"])
def test_exported_kernel_checks_itself_in_a_fresh_process(tmp_path, genome):
    """The export carries what the kernel needs beyond its cubin (the grid split's workspace and
    tickets; the TMA stages' tensor maps of Q, K and V): its self-check verifies and times every shape
    (graph replays included), then three calls in a row on a long, few-head shape."""
    import subprocess
    import sys

    from evo.db import Database, NewIndividual, Store, resolve_url
    from evo.cli import main

    db = tmp_path / "evo.db"
    store = Store(Database(resolve_url(str(db))).open())
    run = store.create_run(family="flashcore", strategy="evolution", target=None, seed=0, config={})
    ids = store.add_individuals(run, [NewIndividual(genome.id, genome.as_dict(), 0, "seed")])
    recipe = FAMILY.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    result = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        genome, build, screen(build, recipe.output, FAMILY.screen_limits))
    assert result.status is Status.OK, result.message
    store.record_evaluation(ids[genome.id], result)
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(db), "--out", str(out)]) == 0
    check = subprocess.run([sys.executable, str(out / "selfcheck.py")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    cold = subprocess.run([sys.executable, str(out / "selfcheck.py"), "--cold-cache"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)  # each call alone after the L2 is flushed
    assert cold.returncode == 0 and "caches cold" in cold.stdout and "self-check passed" in cold.stdout, \
        cold.stdout + cold.stderr[-2000:]
    script = (f"import sys, torch; sys.path.insert(0, {str(out)!r}); import flashcore_{genome.id} as k\n"
              "q, kk, v = (torch.randn(1, 1, 4096, 64, device='cuda', dtype=torch.float16) for _ in range(3))\n"
              "ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float())\n"
              "for _ in range(3): assert (k.attention(q, kk, v).float() - ref).abs().max() < 0.02\n"
              "print('long ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0 and "long ok" in done.stdout, done.stderr[-2000:]


def test_the_shipped_plan_holds_the_contracts_shared_memory_limit():
    from evo.seeds import BLOCK_SHARED_BYTES
    from evo.seeds.flashcore import plan

    assert plan.SMEM_LIMIT == BLOCK_SHARED_BYTES
