"""FlashCore's geometry: what a genome's knobs imply for a launch (shared memory, grid, workspace), as
the kernel's Plan<D> mirrors it. ``g`` is a genome or its dict of knobs.

Imports nothing: the family's space and runtime use it, and `evo export` ships it beside an exported
package's evo_family.py as flashcore_plan.py.
"""

from __future__ import annotations

HEAD_DIMS = (64, 128)
SMEM_LIMIT = 227 * 1024  # = evo.seeds BLOCK_SHARED_BYTES (this file imports nothing: it ships alone; a test holds them equal)
MAX_ACCUMULATORS = 64  # fp32 O accumulators a thread keeps in registers on the materialised path
MAX_FRAGMENTS = 192  # fp32 S + O fragments a thread keeps in registers on the fused path
ENGINES = ("scalar", "wmma", "mma")
STAGES = {"plain": 1, "cp_async2": 2, "cp_async3": 3}


def _align128(n: int) -> int:
    return (n + 127) // 128 * 128


def block_n(g, head_dim: int) -> int:
    """Key/value rows per tile of the kernel for this head dimension."""
    return g[f"block_n_d{head_dim}"]


def warp_specialized(g) -> bool:
    """Whether the genome is the warp-specialised design (flashcore_ws.cuh): a producer warpgroup and
    block_m / 64 consumer warpgroups; the classic design's other knobs are not read."""
    try:
        return bool(g["warp_specialized"])
    except KeyError:  # a genome stored before the design existed
        return False


def classic_warps(g, head_dim: int) -> int:
    """Warps per block of the classic design's kernel for this head dimension (its knob)."""
    return g[f"warps_d{head_dim}"]


def warps(g, head_dim: int) -> int:
    """Warps per block of the kernel for this head dimension: the classic design's knob, or a producer
    warpgroup and block_m / 64 consumer warpgroups."""
    if warp_specialized(g):
        return 4 * (g["block_m"] // 64 + 1)
    return classic_warps(g, head_dim)


def kv_rows(g, head_dim: int) -> int:
    """Key/value rows of one pipeline stage (a tile for each warp sharing the query rows)."""
    return block_n(g, head_dim) * g["kv_split"]


def uses_wgmma(g, head_dim: int) -> bool:
    """Whether this head dimension's kernel multiplies by wgmma (a warpgroup of 64 rows per key split)."""
    return head_dim == 64 and g["wgmma_d64"]


def rows_per_warp(g, head_dim: int) -> int:
    """Query rows a warp owns on the fused path (warps sharing rows split the keys; wgmma: 16 of its
    warpgroup's 64, query rows or padding)."""
    return 16 if uses_wgmma(g, head_dim) else g["block_m"] * g["kv_split"] // classic_warps(g, head_dim)


def shared_bytes(g, head_dim: int) -> int:
    """Dynamic shared memory of one block; mirrors Plan<D> in flashcore_parts.cuh (WsPlan<D> in
    flashcore_ws.cuh for the warp-specialised design)."""
    if warp_specialized(g):  # Q, then STAGES K and V tiles, in panels of 64 columns; then the mbarriers
        stages = STAGES[g["kv_loads"]]
        return g["block_m"] * head_dim * 2 + 2 * stages * block_n(g, head_dim) * head_dim * 2 + _align128((1 + 4 * stages) * 8)
    bm, bn = g["block_m"], block_n(g, head_dim)
    ld = head_dim + (8 if g["layout"] == "padded" else 0)
    split = g["kv_split"]
    total = _align128(bm * ld * 2) + 2 * STAGES[g["kv_loads"]] * _align128(kv_rows(g, head_dim) * ld * 2)
    if kv_share(g, head_dim) > 1 or g["stage_wait"] == "mbarrier" or (head_dim == 64 and g["tma_stages_d64"]):
        total += _align128(3 * STAGES[g["kv_loads"]] * 8)  # full K, full V and empty mbarriers a stage
    if split > 1 or g["cluster_kv_split"] > 1 or g["grid_kv_split"] > 1:
        splits = split * g["cluster_kv_split"]  # every split's partial rows, in each block
        total += _align128(splits * bm * (head_dim + 4) * 4) + _align128(4 * splits * bm * 4)
        if g["cluster_kv_split"] > 1 and g["softmax"] == "registers":
            total += 128  # the merge's mbarriers
    if g["softmax"] == "smem":
        total += _align128(bm * (bn + 4) * 4) + _align128(3 * bm * 4)
        if g["pv"] != "scalar":
            total += _align128(bm * (bn + 8) * 2)
        if g["pv"] == "wmma":
            total += _align128(bm * (head_dim + 4) * 4)
    return total


def kv_share(g, head_dim: int) -> int:
    """Blocks of a cluster sharing the K/V stages in this head dimension's kernel (1: none)."""
    if warp_specialized(g):
        return 1
    return g["kv_share_d64"] if head_dim == 64 else 1


def query_blocks(g, s: int, head_dim: int) -> int:
    """Query blocks of one head (rounded up to whole clusters when they share K/V stages)."""
    share = kv_share(g, head_dim)
    blocks = (s + g["block_m"] - 1) // g["block_m"]
    return (blocks + share - 1) // share * share


def grid(g, s: int, heads: int, head_dim: int) -> tuple[int, int]:
    """Blocks of a launch: query blocks times the blocks sharing their rows (a cluster's or the
    grid's key split) by batch * heads."""
    if warp_specialized(g):
        return query_blocks(g, s, head_dim), heads
    return query_blocks(g, s, head_dim) * g["cluster_kv_split"] * g["grid_kv_split"], heads


def grid_workspace(g, s: int, heads: int, head_dim: int) -> tuple[int, int]:
    """What a grid key split needs in global memory: floats of partial rows (a record of
    block_m x (D + 2) per block) and ticket counters (one per query block); (0, 0) without one."""
    if g["grid_kv_split"] == 1 or warp_specialized(g):
        return 0, 0
    x, y = grid(g, s, heads, head_dim)
    return x * y * g["block_m"] * (head_dim + 2), query_blocks(g, s, head_dim) * heads
