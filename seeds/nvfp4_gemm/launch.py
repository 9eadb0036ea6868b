"""How nvfp4_gemm's kernels of one genome are launched: the grid, the K split, shared memory, the
workspaces, a's fp16 prepass and the TMA descriptors.

Needs torch and cuda.bindings, never the rest of evo: `evo export` copies this file beside an exported
kernel as nvfp4_launch.py (and evo.runtime as evo_runtime/), so the package launches the kernel
exactly as the search timed it. ``g`` is a genome or its dict, ``s`` a shape with l, m, n, k and
blocked (a ProblemShape or a plain dict).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Mapping

if __package__:  # seeds.nvfp4_gemm.launch, inside evo
    from evo.runtime.cuda import TensorMapBytes, box_map, current_stream, multiprocessors, ptr, ticketed_workspace
else:  # an exported kernel's nvfp4_launch.py, with evo_runtime/ beside it
    from evo_runtime.cuda import TensorMapBytes, box_map, current_stream, multiprocessors, ptr, ticketed_workspace

CLUSTERED = ("cluster", "cluster_l2")  # split_reduce values whose split tiles are one thread-block cluster


def _align128(n: int) -> int:
    return (n + 127) // 128 * 128


def shared_bytes(g) -> int:
    """Dynamic shared memory of one block; mirrors SHARED_BYTES in nvfp4_gemm_parts.cuh."""
    rows, bk = g["block_m"] + g["block_n"], g["block_k"]
    if g["a_dequant"] != "in_block":  # a stage: a's fp16 tile and b's packed rows, 1024-byte aligned
        tma = g["loads"] == "tma"  # rows unpadded, and an mbarrier a stage
        stage = g["block_m"] * bk * 2 + g["block_n"] * (bk // 2 + (0 if tma else 16) + bk // 16)
        barriers = (16 if g["stage_sync"] == "mbarriers" else 8) * g["stages"] if tma else 0
        return g["stages"] * ((stage + 1023) // 1024 * 1024) + 1024 + barriers
    packed = g["stages"] * _align128(rows * (bk // 2 + 16) + rows * bk // 16)
    # two fp16 tiles, 1024-byte aligned: of every row with dequant == shared, of a's rows with swapped wgmma
    if g["dequant"] == "shared":
        return packed + 2 * rows * g["block_k"] * 2 + 1024
    return packed + (2 * g["block_m"] * g["block_k"] * 2 + 1024 if g["mma"] == "wgmma_swapped" else 0)


def skinny_tma_rings(g) -> bool:
    """Whether a skinny genome's rings are filled by TMA boxes (in dynamic shared memory, read through tensor maps)."""
    return g.get("design") == "skinny" and g["skinny_stages"] > 1 and g.get("skinny_ring_fill") == "tma_boxes"


def skinny_dynamic_bytes(g) -> int:
    """Dynamic shared memory of a skinny block: with rings filled by TMA boxes each warp's ring and its stages'
    mbarriers; mirrors SKINNY_DYNAMIC_BYTES in nvfp4_skinny_rings.cuh."""
    if not skinny_tma_rings(g):
        return 0
    chunks = g["skinny_stage_chunks"]
    stage = chunks * (16 * 64 + 16 * 8)  # b's 16 rows and their scales
    if g["skinny_a_prepass"]:  # a's fp16 rows in the stage too: 256 bytes a chunk a row
        stage += g["skinny_tokens"] * chunks * 256
    return g["skinny_warps"] * g["skinny_stages"] * (stage + 8)


def threads(g) -> int:
    """Threads of a block: the warps that multiply, and a's producer warpgroup (a_dequant == producer)."""
    return g["warps_m"] * g["warps_n"] * 32 + (128 if g["a_dequant"] == "producer" else 0)


def output_tiles(g, s: Mapping) -> tuple[int, int, int]:
    """Output tiles along N and M, and batches."""
    return -(-s["n"] // g["block_n"]), -(-s["m"] // g["block_m"]), s["l"]


def skinny_grid(g, s: Mapping) -> tuple[int, int, int]:
    """Blocks of a skinny launch: 16 of b's rows, skinny_tokens of a's rows, one batch each."""
    return -(-s["n"] // 16), -(-s["m"] // g["skinny_tokens"]), s["l"]


def skinny_splits(g, s: Mapping, slots: int) -> int:
    """Blocks sharing a skinny tile at shape s, each on a range of K: of 1 .. skinny_split (and at least
    skinny_warps chunks of 128 values a block), the count whose grid best fills its last wave of ``slots``
    blocks (the SMs times the blocks each holds), the fewest of equals."""
    x, y, z = skinny_grid(g, s)
    best, filled = 1, 0.0
    for count in range(1, g["skinny_split"] + 1):
        if count > 1 and s["k"] // 128 // count < g["skinny_warps"]:
            break
        waves = x * y * z * count / slots
        if waves / math.ceil(waves) > filled + 1e-9:
            best, filled = count, waves / math.ceil(waves)
    return best


def splits(g, s: Mapping, multiprocessors: int, clusters_fit=None) -> int:
    """Blocks sharing an output tile at shape s: the most (a power of two, at most split_k) whose grid
    still runs in one wave of blocks_per_sm blocks on each SM (1 when the tiles alone fill it); with
    a cluster split_reduce also at most what ``clusters_fit(count)`` says run at once (clusters of
    `count` blocks lie in one GPC each, so fewer fit than SMs / count)."""
    x, y, z = output_tiles(g, s)
    slots, count = multiprocessors * g["blocks_per_sm"], 1
    while count * 2 <= g["split_k"] and x * y * z * count * 2 <= slots:
        if g["split_reduce"] in CLUSTERED and clusters_fit is not None and x * y * z > clusters_fit(count * 2):
            break
        count *= 2
    return count


def grid(g, s: Mapping, split: int) -> tuple[int, int, int]:
    """Blocks of a launch: output tiles along N and M, batches times the K split."""
    x, y, z = output_tiles(g, s)
    return x, y, z * split


def split_workspace(g, s: Mapping, split: int) -> tuple[int, int]:
    """What a K split needs in global memory: floats (a block_m x block_n partial tile per block) and
    ticket counters (one per output tile); (0, 0) without a split."""
    if split == 1:
        return 0, 0
    x, y, z = output_tiles(g, s)
    return x * y * z * split * g["block_m"] * g["block_n"], x * y * z


class Launcher:
    """One genome's GEMM kernel and a's prepass kernel, loaded from its cubin (a evo/runtime/cuda.py
    CudaModule), and what their launches keep between calls: per shape and stream the split
    workspace with its ticket counters (they count on across launches), a's fp16 copy and the
    tensor maps; per cluster size how many clusters the driver says run at once (``kept``)."""

    def __init__(self, module, genome: Mapping) -> None:
        self.genome = dict(genome)
        # only the design's own kernel is loaded and sized: the module was built from the canonical genome, whose
        # other design's knobs are held (genomes stored before the skinny design are tile genomes)
        self.skinny = self.gemm = None
        self.skinny_shared = skinny_dynamic_bytes(self.genome)  # (0 for a tile genome)
        if self.genome.get("design") == "skinny":
            self.skinny = module.sized_kernel("nvfp4_skinny", "nvfp4_skinny_shared_bytes", self.skinny_shared,
                                              "nvfp4_skinny_rings.cuh")
        else:
            self.gemm = module.sized_kernel("nvfp4_gemm", "nvfp4_shared_bytes", shared_bytes(self.genome),
                                            "nvfp4_gemm.cu")
        self.prepass = module.kernel("nvfp4_dequantize_a")
        self.kept: dict[Any, Any] = {}

    def clusters_fit(self, size: int) -> int:
        """Clusters of ``size`` blocks of this kernel that run at once (asked of the driver once per size)."""
        if ("clusters", size) not in self.kept:
            g = self.genome
            self.kept[("clusters", size)] = self.gemm.max_active_clusters(size, threads(g), shared_bytes(g),
                                                                          at_launch=True)
        return self.kept[("clusters", size)]

    def _dequantize_a(self, s: Mapping, dims, a, sfa):
        """a's fp16 copy (l * m * k halves, kept as floats) made by the prepass kernel, for a kernel launched
        next as its programmatic dependent."""
        l, m, k = s["l"], s["m"], s["k"]
        a_halves, _ = ticketed_workspace(self.kept, ("a_halves", dims), l * m * k // 2, 0, a.device)
        units = l * m * k // 32
        self.prepass.launch((min(-(-units // 256), 8 * multiprocessors()),), (256,),
                            [ptr(a), ptr(sfa), ptr(a_halves), ctypes.c_int(m), ctypes.c_int(k),
                             ctypes.c_int(s["blocked"]), ctypes.c_int(l)])
        return a_halves

    def launch(self, s: Mapping, a, b, sfa, sfb, output) -> None:
        """c = output [L, M, N] fp16 from packed a [L, M, K/2], b [L, N, K/2] (uint8, contiguous) and
        their e4m3 scales (plain [L, rows, K/16], or blocked when s["blocked"]), on torch's current stream."""
        import torch

        g = self.genome
        l, m, k = s["l"], s["m"], s["k"]
        stream = current_stream()
        dims = (l, m, s["n"], k, int(s["blocked"]), stream)
        if self.skinny is not None:  # with skinny_a_prepass a's fp16 copy first; a K split's workspace
            prepass = g["skinny_a_prepass"]
            if prepass:
                a = self._dequantize_a(s, dims, a, sfa)
            block, dynamic = 32 * g["skinny_warps"], self.skinny_shared
            if "slots" not in self.kept:
                self.kept["slots"] = multiprocessors() * self.skinny.blocks_per_sm(block, dynamic)
            split = skinny_splits(g, s, self.kept["slots"])
            x, y, z = skinny_grid(g, s)
            outputs = g["skinny_tokens"] * 64  # a tile's sums: 16 columns x skinny_tokens rows
            records, tickets = ticketed_workspace(self.kept, ("skinny", dims), x * y * z * split * outputs if split > 1
                                                  else 0, x * y * z if split > 1 else 0, a.device)
            maps = (TensorMapBytes(), TensorMapBytes())  # read only with skinny_ring_fill == tma_boxes
            if skinny_tma_rings(g):  # b's 16 rows of a stage's chunks; with the prepass a's fp16 rows (4-byte words) too
                key = (a.data_ptr(), b.data_ptr(), dims)
                if self.kept.get(("skinny_maps", stream), (None,))[0] != key:
                    chunks = g["skinny_stage_chunks"]
                    tokens = (box_map(a.view(l, m, k // 2), (chunks * 64, g["skinny_tokens"], 1), swizzled=False)
                              if prepass else TensorMapBytes())
                    self.kept[("skinny_maps", stream)] = key, (box_map(b, (chunks * 64, 16, 1), swizzled=False), tokens)
                maps = self.kept[("skinny_maps", stream)][1]
            self.skinny.launch((x, y, z * split), (block,),
                               [ptr(a), ptr(b), ptr(sfa), ptr(sfb), ptr(output), ctypes.c_int(m), ctypes.c_int(s["n"]),
                                ctypes.c_int(k), ctypes.c_int(s["blocked"]), ctypes.c_int(split), ptr(records),
                                ptr(tickets), *maps], shared_bytes=dynamic, programmatic=prepass)
            return
        cluster = g["split_reduce"] in CLUSTERED
        split = splits(g, s, multiprocessors(), self.clusters_fit if cluster else None)
        # (the sum through distributed shared memory needs no workspace)
        floats, counters = split_workspace(g, s, 1 if g["split_reduce"] == "cluster" else split)
        records, tickets = ticketed_workspace(self.kept, ("split", dims), floats, counters, a.device)
        if g["a_dequant"] == "prepass":
            a = self._dequantize_a(s, dims, a, sfa)
        maps = (TensorMapBytes(), TensorMapBytes())  # read only by a kernel with TMA loads
        if g["loads"] == "tma":  # encoded once per set of operands
            key = (a.data_ptr(), b.data_ptr(), dims)
            if self.kept.get(("maps", stream), (None,))[0] != key:
                a_map = TensorMapBytes()  # (a's producer warpgroup reads a itself)
                if g["a_dequant"] == "prepass":
                    a_map = box_map(a.view(torch.float16).view(l, m, k), (64, g["block_m"], 1), swizzled=True)
                self.kept[("maps", stream)] = key, (a_map, box_map(b, (g["block_k"] // 2, g["block_n"], 1),
                                                                   swizzled=False))
            maps = self.kept[("maps", stream)][1]
        self.gemm.launch(grid(g, s, split), (threads(g),),
                         [ptr(a), ptr(b), ptr(sfa), ptr(sfb), ptr(output), ctypes.c_int(m), ctypes.c_int(s["n"]),
                          ctypes.c_int(k), ctypes.c_int(s["blocked"]), ctypes.c_int(split), ptr(records),
                          ptr(tickets), *maps],
                         shared_bytes=shared_bytes(g), cluster=(1, 1, split) if cluster else None,
                         programmatic=g["a_dequant"] == "prepass")
