"""FlashCore's search space: the knobs, the constraints between them and the seed genome; the geometry
they imply (shared memory, grid, workspace), which the kernel's Plan<D> mirrors, is seeds/flashcore/plan.py."""

from __future__ import annotations

from evo.kernel_genome import Boolean, Choice, Constraint, PowerOfTwo, Space

from evo.seeds.flashcore.plan import (  # noqa: F401 (the geometry, re-exported)
    ENGINES, HEAD_DIMS, MAX_ACCUMULATORS, MAX_FRAGMENTS, SMEM_LIMIT, STAGES, block_n, classic_warps, grid,
    grid_workspace, kv_rows, kv_share, query_blocks, rows_per_warp, shared_bytes, uses_wgmma, warps)


def _implies(condition: bool, consequence: bool) -> bool:
    return consequence or not condition


def _registers_fit(g) -> bool:
    for d in HEAD_DIMS:
        if g["softmax"] == "registers":
            if rows_per_warp(g, d) * (block_n(g, d) + d) // 32 > MAX_FRAGMENTS:
                return False
        elif g["pv"] != "wmma" and g["block_m"] * d // (classic_warps(g, d) * 32) > MAX_ACCUMULATORS:
            return False
    return True


def _warps_own_rows(g) -> bool:
    return all(classic_warps(g, d) % g["kv_split"] == 0 and g["block_m"] * g["kv_split"] % (16 * classic_warps(g, d)) == 0
               for d in HEAD_DIMS if not uses_wgmma(g, d))


def _warpgroups_cover_rows(g) -> bool:
    return g["warps_d64"] == 4 * g["kv_split"] and g["block_m"] <= 64


KNOBS = [
    Choice("block_m", (16, 32, 64, 128, 192), ordered=True,
           description="query rows per block (192: the warp-specialised design's three consumer warpgroups only)"),
    PowerOfTwo("block_n_d64", 32, 128, description="key/value rows per tile, D = 64 kernel"),
    PowerOfTwo("warps_d64", 1, 8, description="warps per block, D = 64 kernel"),
    PowerOfTwo("block_n_d128", 32, 128, description="key/value rows per tile, D = 128 kernel"),
    PowerOfTwo("warps_d128", 1, 8, description="warps per block, D = 128 kernel"),
    Choice("qk", ENGINES, description="S = Q K^T: scalar FMA | WMMA 16x16x16 | mma.sync m16n8k16 + ldmatrix"),
    Choice("pv", ENGINES, description="O += P V: scalar FMA | WMMA 16x16x16 | mma.sync m16n8k16 + ldmatrix"),
    Choice("softmax", ("smem", "registers"),
           description="S/P tile materialised in shared memory | fused online softmax in registers"),
    Choice("reduce", ("serial", "shuffle"), description="row max/sum: one thread per row | warp shuffles"),
    Boolean("exp2", description="exp2 with log2(e) folded into the scale"),
    Choice("layout", ("plain", "padded", "swizzled"),
           description="Q/K/V rows in shared memory: plain | padded by 16 bytes | 16-byte chunks XOR-swizzled"),
    Choice("kv_loads", tuple(STAGES), description="K/V tiles: plain 16-byte loads | cp.async, 2 or 3 stages"),
    Boolean("q_in_registers", description="fused path: Q fragments loaded once into registers"),
    PowerOfTwo("kv_split", 1, 4,
               description="fused path: warps sharing query rows, each on its slice of every K/V stage, merged at the end"),
    PowerOfTwo("cluster_kv_split", 1, 4,
               description="fused path: blocks of a thread-block cluster sharing query rows, each on every n-th "
                           "K/V stage, merged through distributed shared memory"),
    PowerOfTwo("grid_kv_split", 1, 4,
               description="fused path, no cluster: blocks of the grid sharing query rows, each on every n-th "
                           "K/V stage; each leaves its partial rows in a global workspace and the last to "
                           "finish merges them"),
    Choice("stage_wait", ("block_barrier", "mbarrier"),
           description="fused path, cp.async stages: each thread waits for its own copies and the block meets "
                       "at a barrier per stage | every thread's copies of a stage end in an arrival on the "
                       "stage's mbarrier (cp.async.mbarrier.arrive), each warp waits for the stage alone and "
                       "marks it empty when done: warps run free"),
    Boolean("wgmma_d64",
            description="D = 64 kernel, fused path: Q K^T and P V by wgmma (sm_90a) instead of mma.sync: a "
                        "warpgroup per key split, its 64 rows the block's query rows and padding; Q (loaded by "
                        "ldmatrix each tile, whatever q_in_registers says) and P from registers, K and V read by "
                        "the tensor cores from the swizzled stages"),
    PowerOfTwo("kv_share_d64", 1, 4,
               description="D = 64 kernel, fused path: blocks of a thread-block cluster (consecutive query blocks "
                           "of one head) sharing every K/V stage, each bringing in 1/n of its rows by a TMA copy "
                           "multicast to all"),
    Boolean("tma_stages_d64",
            description="D = 64 kernel, fused path: each K/V stage brought in by one thread's TMA box copies, "
                        "counted on mbarriers, instead of every thread's cp.async"),
    Boolean("warp_specialized",
            description="FlashAttention-3's design (flashcore_ws.cuh), both head dimensions: a producer "
                        "warpgroup brings Q once and every K/V tile by TMA into a ring of kv_loads' stages "
                        "on mbarriers; block_m / 64 consumer warpgroups compute Q K^T and P V by wgmma "
                        "(Q, K, V from the swizzled stages, P from registers), key tiles of block_n_d64 / "
                        "block_n_d128 rows; the other knobs of the classic design are not read"),
    Boolean("ws_overlap",
            description="warp-specialised: Q K^T of tile t and P V of tile t - 1 issued together, the "
                        "softmax of tile t while P V still runs (FlashAttention-3's overlap within a warpgroup)"),
    Boolean("ws_pingpong",
            description="warp-specialised, two or three consumer warpgroups: they take turns at the tensor "
                        "cores (named barriers, round robin), one's matrix products beside the others' softmax"),
    Boolean("ws_registers",
            description="warp-specialised, two or three consumer warpgroups: setmaxnreg moves registers from "
                        "the producer (24 a thread) to the consumers (240 a thread; 160 with three)"),
    Boolean("ws_heavy_first",
            description="warp-specialised, causal: the first blocks of the grid take the last query blocks "
                        "(the most keys), so the long ones start first"),
    Boolean("overlap_tiles",
            description="fused path with TMA stages: each warp computes Q K^T of its next tile beside the "
                        "softmax and P V of the current one (FlashAttention-3's overlap within a warp)"),
]

# The classic design's constraints bind only classic genomes: a warp-specialised genome reads none of its
# other knobs, so one mutation (warp_specialized on) reaches the design from any classic genome
CLASSIC_CONSTRAINTS = [
    Constraint(
        "accumulators_fit_registers",
        _registers_fit,
        f"at each head dimension D: on the fused path the S and O fragments of a thread, rows a warp "
        f"owns * (block_n + D) / 32, are at most {MAX_FRAGMENTS} (the screen drops those that still "
        f"spill); on the materialised path the O accumulators, block_m * D / (warps * 32), at most "
        f"{MAX_ACCUMULATORS} (WMMA keeps O in shared memory)",
    ),
    Constraint(
        "register_softmax_needs_mma",
        lambda g: _implies(g["softmax"] == "registers", g["qk"] == "mma" and g["pv"] == "mma"),
        "softmax in registers reads S from, and feeds P to, mma.sync fragments: qk = pv = mma",
    ),
    Constraint(
        "warps_own_query_rows",
        lambda g: _implies(g["softmax"] == "registers", _warps_own_rows(g)),
        "softmax in registers: at each head dimension kv_split divides warps, and each warp owns a "
        "multiple of 16 query rows (block_m * kv_split % (16 * warps) == 0)",
    ),
    Constraint(
        "kv_split_needs_fused_path",
        lambda g: _implies(g["kv_split"] > 1, g["softmax"] == "registers"),
        "only the fused path splits key tiles between warps (kv_split = 1 unless softmax = registers)",
    ),
    Constraint(
        "cluster_split_needs_fused_path",
        lambda g: _implies(g["cluster_kv_split"] > 1, g["softmax"] == "registers"),
        "only the fused path merges partial rows across a cluster (cluster_kv_split = 1 unless softmax = registers)",
    ),
    Constraint(
        "grid_split_needs_fused_path_alone",
        lambda g: _implies(g["grid_kv_split"] > 1, g["softmax"] == "registers" and g["cluster_kv_split"] == 1
                           and g["kv_share_d64"] == 1),
        "blocks of the grid share query rows (grid_kv_split > 1) only on the fused path and without "
        "clusters (cluster_kv_split = kv_share_d64 = 1)",
    ),
    Constraint(
        "shared_stages_need_fused_pipeline",
        lambda g: _implies(g["kv_share_d64"] > 1, g["softmax"] == "registers" and g["kv_loads"] != "plain"
                           and g["layout"] != "padded" and g["cluster_kv_split"] == 1),
        "K/V stages shared across a cluster (kv_share_d64 > 1) need the fused path, a pipeline of 2 or 3 "
        "stages (kv_loads != plain), a layout the TMA writes (swizzled = its 128-byte swizzle, or plain; "
        "not padded) and no cluster key split (cluster_kv_split = 1: one cluster dimension)",
    ),
    Constraint(
        "wgmma_needs_fused_warpgroups",
        lambda g: _implies(g["wgmma_d64"], g["softmax"] == "registers"
                           and g["layout"] == "swizzled" and _warpgroups_cover_rows(g)
                           and g["cluster_kv_split"] == 1 and g["grid_kv_split"] == 1 and g["kv_share_d64"] == 1
                           and g["stage_wait"] == "block_barrier"),
        "wgmma_d64 needs the fused path, the swizzled layout (wgmma's 128-byte swizzle), "
        "a warpgroup per key split (warps_d64 = 4 * kv_split) covering the block's rows (block_m <= 64), "
        "the block alone on its rows (no cluster or grid split, no shared stages), and block barriers "
        "between the stages (stage_wait = block_barrier: the threads that copied a tile fence it for wgmma's "
        "proxy before the barrier)",
    ),
    Constraint(
        "mbarrier_stages_need_fused_pipeline",
        lambda g: _implies(g["stage_wait"] == "mbarrier", g["softmax"] == "registers" and g["kv_loads"] != "plain"
                           and g["kv_share_d64"] == 1),
        "stages announced on mbarriers (stage_wait = mbarrier) need the fused path, a cp.async pipeline "
        "(kv_loads != plain) and no cluster sharing the stages (kv_share_d64 = 1: its TMA stages have their own)",
    ),
    Constraint(
        "tma_stages_need_fused_pipeline",
        lambda g: _implies(g["tma_stages_d64"], g["softmax"] == "registers" and g["kv_loads"] != "plain"
                           and g["layout"] != "padded" and g["kv_share_d64"] == 1 and g["cluster_kv_split"] == 1
                           and g["grid_kv_split"] == 1 and g["stage_wait"] == "block_barrier"
                           and g["kv_split"] * g["block_n_d64"] <= 256),
        "K/V stages by TMA (tma_stages_d64) need the fused path, a pipeline of 2 or 3 stages, a layout the "
        "TMA writes (not padded), the block alone on its rows (no cluster or grid split, no shared stages), "
        "block barriers (stage_wait = block_barrier) and a stage of at most 256 rows (one box)"),
    Constraint(
        "overlap_needs_tma_stages",
        lambda g: _implies(g["overlap_tiles"], g["tma_stages_d64"] and not g["wgmma_d64"]),
        "overlapping tiles (overlap_tiles) needs the K/V stages by TMA (tma_stages_d64) and mma.sync (no wgmma_d64)"),
    Constraint(
        "register_softmax_reduces_by_shuffle",
        lambda g: _implies(g["softmax"] == "registers", g["reduce"] == "shuffle"),
        "softmax in registers always reduces rows with quad shuffles (reduce = shuffle)",
    ),
    Constraint(
        "q_registers_need_fused_path",
        lambda g: _implies(g["q_in_registers"], g["softmax"] == "registers"),
        "Q in registers only exists on the fused path (softmax = registers)",
    ),
    Constraint(
        "wmma_needs_row_major_smem",
        lambda g: _implies("wmma" in (g["qk"], g["pv"]), g["layout"] != "swizzled"),
        "WMMA loads need a plain row stride: no swizzled layout",
    ),
    Constraint(
        "blocks_of_powers_of_two",
        lambda g: g["block_m"] <= 128,
        "block_m 192 (three consumer warpgroups) is the warp-specialised design's only",
    ),
]

DESIGN_CONSTRAINTS = [
    Constraint(
        "shared_memory_fits",
        lambda g: all(shared_bytes(g, d) <= SMEM_LIMIT for d in HEAD_DIMS),
        f"Q tile + K/V stages + S/P/O tiles + row stats <= {SMEM_LIMIT} bytes at each head dimension",
    ),
    Constraint(
        "warp_specialized_tiles",
        lambda g: _implies(g["warp_specialized"], g["block_m"] >= 64 and g["kv_loads"] != "plain"),
        "the warp-specialised design has consumer warpgroups of 64 query rows (block_m 64, 128 or 192) and a "
        "ring of 2 or 3 stages (kv_loads != plain)"),
    Constraint(
        "warp_specialized_knobs_need_the_design",
        lambda g: _implies(g["ws_overlap"] or g["ws_pingpong"] or g["ws_registers"] or g["ws_heavy_first"],
                           g["warp_specialized"]),
        "ws_overlap, ws_pingpong, ws_registers and ws_heavy_first are knobs of the warp-specialised design"),
    Constraint(
        "two_consumers_for_pingpong_and_registers",
        lambda g: _implies(g["ws_pingpong"] or g["ws_registers"], g["block_m"] >= 128),
        "ping-pong and the register split need two or three consumer warpgroups (block_m 128 or 192)"),
    Constraint(
        "three_consumers_fit_128_registers",
        lambda g: _implies(g["block_m"] == 192, g["ws_registers"] and g["block_n_d128"] <= 64),
        "three consumer warpgroups (512 threads, 128 registers a thread) spill and serialise their wgmma (ptxas) "
        "without the register split (ws_registers), and at D = 128 with 128-key tiles (block_n_d128 <= 64)"),
]


# the classic design's own knobs at the seed's values: where a warp-specialised genome holds them
CLASSIC_HELD = dict(warps_d64=4, warps_d128=4, qk="scalar", pv="scalar", softmax="smem", reduce="serial", exp2=False,
                    layout="plain", q_in_registers=False, kv_split=1, cluster_kv_split=1, grid_kv_split=1,
                    kv_share_d64=1, stage_wait="block_barrier", wgmma_d64=False, tma_stages_d64=False,
                    overlap_tiles=False)


def _inactive(values) -> dict:
    """A warp-specialised genome reads none of the classic design's own knobs: it holds them at the seed's."""
    return CLASSIC_HELD if values["warp_specialized"] else {}


def _classic_only(constraint: Constraint) -> Constraint:
    return Constraint(constraint.name, lambda g, check=constraint.check: g["warp_specialized"] or check(g),
                      constraint.description + " (classic design: not warp_specialized)")


SPACE = Space(
    KNOBS,
    [_classic_only(c) for c in CLASSIC_CONSTRAINTS] + DESIGN_CONSTRAINTS,
    inactive=_inactive,
    # runs stored before these knobs existed built what their value 1 builds
    added_later={"warp_specialized": False, "ws_overlap": False, "ws_pingpong": False, "ws_registers": False,
                 "ws_heavy_first": False, "tma_stages_d64": False, "overlap_tiles": False, "kv_share_d64": 1, "grid_kv_split": 1, "stage_wait": "block_barrier", "wgmma_d64": False},
)

SEED = SPACE.genome(dict(CLASSIC_HELD, block_m=16, block_n_d64=64, block_n_d128=64, kv_loads="plain",
                         warp_specialized=False, ws_overlap=False, ws_pingpong=False, ws_registers=False,
                         ws_heavy_first=False))
