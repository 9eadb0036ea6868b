"""How vit_gemm's kernel of one genome is launched: shared memory, the grid (one block a tile, or a
persistent grid of the blocks that fit at once), the tensor maps and the folded bias + pos table.

Needs torch and cuda.bindings, never the rest of evo: `evo export` copies this file beside an exported
kernel as vit_gemm_launch.py (and evo.runtime as evo_runtime/), so the package launches the kernel
exactly as the search timed it. ``g`` is a genome or its dict, ``s`` a shape with m, n, k and p (a
ProblemShape or a plain dict).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Mapping

if __package__:  # seeds.vit_gemm.launch, inside evo
    from evo.runtime.cuda import MapCache, PreparedLaunch, TensorMapBytes, box_map, current_stream, multiprocessors
else:  # an exported kernel's vit_gemm_launch.py, with evo_runtime/ beside it
    from evo_runtime.cuda import MapCache, PreparedLaunch, TensorMapBytes, box_map, current_stream, multiprocessors

ROWWISE_STRIDE = 64 + 8  # floats a row of the fp32 staging (ROWWISE_STRIDE in vit_gemm_parts.cuh)


def wg_rows(g) -> int:
    """Rows of C one consumer warpgroup owns."""
    return 64 * g["m_tiles"]


def block_m(g) -> int:
    """Rows of a tile: the consumers share one (cooperative) or each has its own (ping-pong)."""
    return wg_rows(g) * (g["consumers"] if g["schedule"] == "cooperative" else 1)


def threads(g) -> int:
    """Threads of a block: the producer warpgroup and the consumers."""
    return 128 * (g["consumers"] + 1)


def stage_bytes(g) -> int:
    """One stage of the ring: a 64-deep slice of A (block_m rows) and of W (block_n rows), bf16."""
    return (block_m(g) + g["block_n"]) * 64 * 2


def staging_bytes(g) -> int:
    """Every consumer's staging: with the folded table its whole share of the tile (wg_rows x block_n
    fp16/bf16), the row-wise epilogue's fp32 chunk (wg_rows x ROWWISE_STRIDE), or the TMA store's
    epi_depth slots of wg_rows x 64 bf16, or nothing."""
    if g["folded_table"]:
        return g["consumers"] * wg_rows(g) * g["block_n"] * 2
    if g["epilogue_reads"] == "rowwise":
        return g["consumers"] * wg_rows(g) * ROWWISE_STRIDE * 4
    return g["consumers"] * g["epi_depth"] * wg_rows(g) * 64 * 2 if g["store"] == "tma" else 0


def prefetch_bytes(g) -> int:
    """The prefetched pos: prefetch_buffers 64-column chunks of fp32 a consumer (twice, by TMA: the
    rows past the last patch land in a second buffer)."""
    if not g["operand_prefetch"]:
        return 0
    return g["consumers"] * g["prefetch_buffers"] * wg_rows(g) * 64 * 4 * (2 if g["pos_tma"] else 1)


def partials_bytes(g) -> int:
    """split_k > 1: block 0's slots for the other blocks' partial accumulators, fp32, each consumer's."""
    if g["split_k"] == 1:
        return 0
    return (g["split_k"] - 1) * g["consumers"] * wg_rows(g) * g["block_n"] * 4


def shared_bytes(g) -> int:
    """Dynamic shared memory of a block; mirrors SHARED_BYTES in vit_gemm_parts.cuh."""
    barriers = (2 * g["stages"] + 2 * g["consumers"] * (g["prefetch_buffers"] + g["folded_table"])
                + g["consumers"] * (g["split_k"] > 1)) * 8
    return g["stages"] * stage_bytes(g) + staging_bytes(g) + prefetch_bytes(g) + partials_bytes(g) + barriers + 1024


def folded_table(g, s: Mapping, device):
    """The fp16 table of bias + pos that vit_gemm_table fills every launch: P + wg_rows - 1 rows (row r
    holds patch r % P), so that a consumer's rows from any patch are one box of consecutive rows."""
    import torch

    return torch.empty(s["p"] + wg_rows(g) - 1, s["n"], device=device, dtype=torch.float16)


def blocks(g, s: Mapping, resident: int) -> int:
    """Blocks of a launch: one a tile (whole clusters; split_k of them a tile), or at most ``resident`` with a
    persistent grid."""
    count = -(-s["m"] // (block_m(g) * g["cluster"])) * -(-s["n"] // g["block_n"]) * g["cluster"] * g["split_k"]
    return min(count, resident) if g["persistent"] else count


def takes(g, s: Mapping) -> bool:
    """Whether this genome's kernel can run shape ``s``: N a multiple of 8 (16-byte rows of C and pos for the
    TMA), and with pos_tma at least a consumer's rows of patches (its two boxes of pos)."""
    return s["n"] % 8 == 0 and (not g["pos_tma"] or s["p"] >= wg_rows(g))


def pad_k(matrix):
    """A copy of a bf16 [rows, K] matrix whose rows are padded with zeros to a multiple of 8 values (16
    bytes, the TMA's stride unit); one pass over it (K = 588, patch size 14, needs it)."""
    import torch.nn.functional as F

    return F.pad(matrix, (0, -matrix.shape[1] % 8))


class Launcher:
    """One genome's kernel, loaded from its cubin (a evo/runtime/cuda.py CudaModule), and what its launches
    keep between calls: per shape its prepared launch (with the tensor maps of the buffers it has seen and, per
    stream, the folded table)."""

    def __init__(self, module, genome: Mapping) -> None:
        self.genome = g = dict(genome)
        self.kernel = module.sized_kernel("vit_gemm", "vit_gemm_shared_bytes", shared_bytes(g), "vit_gemm.cu")
        self.table_kernel = module.kernel("vit_gemm_table") if g["folded_table"] else None
        if g["cluster"] > 1:  # the clusters that fit at once (SMs pair up within a GPC only)
            self.resident = self.kernel.max_active_clusters(g["cluster"], threads(g), shared_bytes(g)) * g["cluster"]
        else:
            self.resident = multiprocessors() * g["blocks_per_sm"]
        self.launches: dict[Any, Any] = {}  # (m, n, k, p) -> the prepared launch of that shape
        self.padded_weights: dict[Any, Any] = {}  # (w's pointer, version, shape) -> (w, w padded), see launch

    def _padded_weight(self, w):
        """w with its rows padded (``pad_k``), once per weight tensor and version, as a model pads its
        parameters once at load time; the entry holds w itself, so that its memory cannot be reused by
        another tensor while the entry stands."""
        key = (w.data_ptr(), w._version, tuple(w.shape))
        if key not in self.padded_weights:
            if len(self.padded_weights) >= 8:
                self.padded_weights.pop(next(iter(self.padded_weights)))
            self.padded_weights[key] = (w, pad_k(w))
        return self.padded_weights[key][1]

    def launch(self, s: Mapping, a, w, bias, pos, output) -> None:
        """output [M, N] bf16 = a [M, K] bf16 @ w [N, K]^T + bias [N] fp32 + pos [P, N] fp32 (row
        b * P + p adds pos[p]); contiguous CUDA tensors, on torch's current stream. N a multiple of 8;
        K anything (not a multiple of 8: a is copied with its rows padded each launch, ``pad_k``, and w once
        per weight, ``_padded_weight``)."""
        g = self.genome
        if not takes(g, s):
            raise ValueError(f"this kernel cannot run N = {s['n']}, P = {s['p']}: it needs N a multiple of 8"
                             + (f" and P >= {wg_rows(g)} (pos_tma)" if g["pos_tma"] else ""))
        if s["k"] % 8:  # rows of K values are not 16 bytes apart: the TMA reads copies padded with zeros
            a, w = pad_k(a), self._padded_weight(w)
            s = {"m": s["m"], "n": s["n"], "k": a.shape[1], "p": s["p"]}
        self._launch_for(s)(a, w, bias, pos, output)

    def prepared(self, s: Mapping):
        """The launch for shape ``s`` with everything but the addresses fixed (PreparedLaunch): ``run(a, w, bias,
        pos, output)`` as ``launch`` takes them; tensor maps cached by address. None where ``launch`` must do more
        per call (K not a multiple of 8: the operands are padded)."""
        return None if not takes(self.genome, s) or s["k"] % 8 else self._launch_for(s)

    def _launch_for(self, s: Mapping):
        """Shape ``s``'s prepared launch, made at its first call."""
        key = (s["m"], s["n"], s["k"], s["p"])
        if key not in self.launches:
            self.launches[key] = self._prepare(s)
        return self.launches[key]

    def _prepare(self, s: Mapping):
        g = self.genome
        m, n, k, p = s["m"], s["n"], s["k"], s["p"]
        boxes = ((64, block_m(g)), (64, g["block_n"] // g["cluster"]), (64, wg_rows(g)),
                 (64, wg_rows(g)) if g["folded_table"] else (32, wg_rows(g)))
        main = PreparedLaunch(self.kernel, (blocks(g, s, self.resident),), (threads(g),),
                              [*(TensorMapBytes() for _ in boxes), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(),
                               ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(p)],
                              shared_bytes(g), programmatic=g["folded_table"])
        prepass, maps, tables = None, MapCache(), {}
        if g["folded_table"]:
            rows = p + wg_rows(g) - 1
            prepass = PreparedLaunch(self.table_kernel, (min(-(-rows * n // 4 // 256), 4 * multiprocessors()),), (256,),
                                     [ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int(rows),
                                      ctypes.c_int(n), ctypes.c_int(p)])

        encoders = [functools.partial(box_map, box=box, swizzled=True) for box in boxes]

        def run(a, w, bias, pos, output) -> None:
            stream = current_stream()
            operand = pos
            if prepass is not None:  # bias + pos folded into the fp16 table every launch: a table per stream
                if stream not in tables:
                    tables[stream] = folded_table(g, s, pos.device)
                operand = tables[stream]
            with main.lock:
                if prepass is not None:
                    for slot, tensor in enumerate((bias, pos, operand)):
                        prepass.args[slot].value = tensor.data_ptr()
                    prepass.launch(stream)
                for slot, tensor in enumerate((a, w, output, operand)):
                    main.put(slot, maps.get((slot, tensor.data_ptr()), encoders[slot], tensor))
                for slot, tensor in enumerate((bias, pos, output)):
                    main.args[4 + slot].value = tensor.data_ptr()
                main.launch(stream)

        return run
