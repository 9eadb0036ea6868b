"""FlashDecode at run time: inputs, reference, anchors, loading a cubin's kernels and launching them (the split
count, the workspace of the splits' partial results), and the exported op's public function ``attention``.

Standalone (torch, cuda.bindings and evo's runtime package; never the rest of evo): the family runs its kernels
through this module, and `evo export` ships it beside the op as evo_family.py (with evo_runtime/), so the package
launches them exactly as the search timed them. ``dims``: b, h, h_kv, q (query tokens a sequence), kv (keys
a sequence), d, causal (SDPA's is_causal, aligned to the top left), lower_right (with causal: the mask aligned to
the lower right instead), bf16; ``genome`` a dict of knobs.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Mapping

import torch

if __package__:  # evo.seeds.flashdecode.runtime, inside evo
    from evo.runtime.attention import (ALIGNED_GRADIENT_SCHEMA, boolean_causal_mask, causal_alignment,
                                       every_query_sees_a_key, sdpa, sdpa_gradient, sdpa_gradient_fake)
    from evo.runtime.cuda import CudaModule, PreparedLaunch, current_stream, multiprocessors, require_capability
else:  # an exported package's evo_family.py, with evo_runtime/ beside it
    from evo_runtime.attention import (ALIGNED_GRADIENT_SCHEMA, boolean_causal_mask, causal_alignment,
                                       every_query_sees_a_key, sdpa, sdpa_gradient, sdpa_gradient_fake)
    from evo_runtime.cuda import CudaModule, PreparedLaunch, current_stream, multiprocessors, require_capability

DEVICE = "cuda"
HEAD_DIMS = (64, 128)
ROWS = 16  # (query head, query token) rows of a block: the m of the kernel's mma
PAD = 8  # halves after each shared row of K and V (flashdecode.cu)
USAGE = """fp16 or bf16 attention of a few query tokens over a K/V cache, O = softmax(Q K^T / sqrt(D)) V, fp32 softmax
and accumulation, for an sm_90a GPU (decode, speculative decode, cross-attention).

    import __OP_NAME__ as k
    o = k.attention(q, k_cache, v_cache, causal=False)  # q [B, H, Q, D], k_cache and v_cache [B, H_kv, KV, D]
                                                       # (H a multiple of H_kv), fp16 or bf16 CUDA tensors, D 64 or 128
    o = k.attention(q, k_cache, v_cache, causal="lower_right")  # a prefill chunk: the last Q of KV positions
    o = torch.ops.evo.__OP_NAME__(q, k_cache, v_cache, False, False)   # the custom op itself (causal, lower_right)

causal=True is SDPA's is_causal (aligned to the top left: query token i sees keys 0..i); causal="lower_right" aligns
the mask to the lower right (query token i sees keys 0..KV - Q + i), as chunked prefill and speculative decoding
need and as torch.nn.attention.bias.causal_lower_right does. What the kernels do not take
(fp32, other head dimensions, CPU tensors) runs PyTorch's SDPA, with its results. Gradients: PyTorch's backward of
SDPA."""
PUBLIC = "attention"
SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal, bool lower_right=False) -> Tensor"
GRADIENT_SCHEMA = ALIGNED_GRADIENT_SCHEMA


def _dtype(dims: Mapping) -> torch.dtype:
    return torch.bfloat16 if dims.get("bf16", 0) else torch.float16


def make_inputs(dims: Mapping, generator) -> tuple[torch.Tensor, ...]:
    q_sizes = (dims["b"], dims["h"], dims["q"], dims["d"])
    kv_sizes = (dims["b"], dims["h_kv"], dims["kv"], dims["d"])
    return tuple(torch.randn(sizes, generator=generator, device="cuda", dtype=_dtype(dims))
                 for sizes in (q_sizes, kv_sizes, kv_sizes))


def make_output(dims: Mapping) -> torch.Tensor:
    return torch.empty((dims["b"], dims["h"], dims["q"], dims["d"]), device="cuda", dtype=_dtype(dims))


def reference(dims: Mapping, inputs) -> torch.Tensor:
    """fp32, one sequence at a time (a long cache in fp32 for the whole batch would not fit): the query heads of
    each K/V head as rows against its keys, the causal mask aligned to the top left (SDPA's) or the lower right."""
    q, k, v = inputs
    b, h, queries, d = q.shape
    h_kv, keys = k.shape[1], k.shape[2]
    group = h // h_kv
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    mask = None
    if dims["causal"]:
        mask = boolean_causal_mask(queries, keys, bool(dims.get("lower_right")), q.device).repeat(group, 1)
    for i in range(b):
        rows = q[i].float().reshape(h_kv, group * queries, d)
        scores = torch.matmul(rows, k[i].float().transpose(1, 2)) / math.sqrt(d)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out[i] = torch.matmul(torch.softmax(scores, dim=-1), v[i].float()).reshape(h, queries, d)
    return out


def _sdpa(dims: Mapping, q, k, v) -> torch.Tensor:
    return sdpa(q, k, v, bool(dims["causal"]), bool(dims.get("lower_right")))


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """torch SDPA (its default backend for the call; grouped heads with enable_gqa)."""
    return _sdpa(dims, *inputs)


def _backend(name: str):
    def run(dims: Mapping, inputs) -> torch.Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, name)):
            return _sdpa(dims, *inputs)

    run.__doc__ = f"torch SDPA, {name} backend"
    return run


# (the EFFICIENT_ATTENTION backend takes no grouped K/V heads)
OTHER_ANCHORS = {"torch SDPA FLASH_ATTENTION backend": _backend("FLASH_ATTENTION")}


def takes(genome: Mapping, dims: Mapping) -> bool:
    return (dims["d"] in HEAD_DIMS and min(dims["q"], dims["kv"], dims["b"], dims["h"]) > 0
            and dims["h"] % dims["h_kv"] == 0 and every_query_sees_a_key(dims["q"], dims["kv"], dims.get("lower_right")))


def shared_bytes(genome: Mapping, d: int) -> int:
    """What the kernel of head dimension ``d`` needs (flashdecode.cu's Plan): each warp's K and V stages."""
    return genome["warps"] * genome["stages"] * 2 * genome["keys_per_warp"] * (d + PAD) * 2 + 16


def row_tiles(dims: Mapping) -> int:
    """Tiles of 16 rows (query heads of one K/V head x query tokens) a K/V head's blocks take."""
    return -(-(dims["h"] // dims["h_kv"]) * dims["q"] // ROWS)


def split_keys(genome: Mapping, dims: Mapping, resident: int | None = None) -> tuple[int, int]:
    """(keys a split takes, splits), each a whole number of the block's steps (warps x keys_per_warp keys), no
    split shorter than ``min_split_keys``. ``split_policy`` "fill": enough blocks for ``split_waves`` of them per
    SM; "balanced": of the split counts that fill the GPU's ``resident`` blocks at least ``split_waves`` times
    over, the one whose last wave is fullest (the fewest splits among equals)."""
    step = genome["warps"] * genome["keys_per_warp"]
    tiles = dims["b"] * dims["h_kv"] * row_tiles(dims)
    longest = max(1, dims["kv"] // max(genome["min_split_keys"], step))
    if genome.get("split_policy", "fill") == "balanced" and resident:
        least = min(longest, max(1, -(-resident * genome["split_waves"] // tiles)))
        splits = min(range(least, min(longest, 4 * least) + 1),
                     key=lambda s: (-(tiles * s / resident) / -(-tiles * s // resident), s))
    else:
        splits = min(longest, max(1, -(-multiprocessors() * genome["split_waves"] // tiles)))
    keys = -(-dims["kv"] // splits)
    keys = -(-keys // step) * step
    return keys, -(-dims["kv"] // keys)


class Problem(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in ("batch", "heads", "group", "queries", "keys", "causal",
                                                   "split_keys", "splits", "row_tiles")] + [("scale_log2", ctypes.c_float)]


def load(artifact: Path, genome: Mapping):
    """Each head dimension's and element type's split kernel and combine kernel, allowed the shared memory its
    plan needs, after checking it is what this module sizes; the genome; the workspaces of its launches."""
    require_capability((9, 0))
    module = CudaModule(artifact)
    planned = module.read_ints("flashdecode_shared_bytes", len(HEAD_DIMS))
    kernels = {}
    for d, kernel_bytes in zip(HEAD_DIMS, planned):
        if kernel_bytes != shared_bytes(genome, d):
            raise RuntimeError(f"the kernel plans {kernel_bytes} bytes of shared memory at D={d}, runtime.py "
                               f"{shared_bytes(genome, d)}: flashdecode.cu and runtime.py disagree")
        for bf16, name in ((False, "f16"), (True, "bf16")):
            split = module.kernel(f"flashdecode_{name}_d{d}")
            split.set_max_dynamic_shared(kernel_bytes)
            kernels[d, bf16] = (split, module.kernel(f"flashdecode_{name}_d{d}_combine"), kernel_bytes)
    return kernels, dict(genome), {}


def launch(loaded, dims: Mapping, inputs, out: torch.Tensor) -> None:
    """The split kernel and, with more than one split and a combine kernel (``combine`` other than "last_block"),
    the combine kernel, on torch's current stream; q, k, v and out as contiguous tensors (copies where they are not)."""
    q, k, v = (t if t.is_contiguous() else t.contiguous() for t in inputs)
    target = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    prepared(loaded, dims, q.device)(q, k, v, target)
    if target is not out:
        out.copy_(target)


def prepared(loaded, dims: Mapping, device: torch.device):
    """``run(q, k, v, out)`` for contiguous tensors of this shape on ``device``: the launches with their grids,
    the problem and the workspace fixed (one set per stream), only the tensors' addresses put in at each call."""
    kernels, g, workspaces = loaded
    key = (tuple(dims.items()), device)
    if key not in workspaces:
        workspaces[key] = _prepare(kernels, g, dims, device)
    return workspaces[key]


def _prepare(kernels, g: Mapping, dims: Mapping, device: torch.device):
    b, h, h_kv, queries, d = dims["b"], dims["h"], dims["h_kv"], dims["q"], dims["d"]
    split, combine, smem = kernels[d, bool(dims.get("bf16", 0))]
    with torch.cuda.device(device):
        resident = split.blocks_per_sm(g["warps"] * 32, smem) * multiprocessors()
        keys, splits = split_keys(g, dims, resident)
    tiles, rows_total = row_tiles(dims), b * h * queries
    causal = 2 if dims.get("lower_right") else int(dims["causal"])  # (flashdecode.cu's Problem::causal)
    problem = Problem(b, h, h // h_kv, queries, dims["kv"], causal, keys, splits, tiles,
                      math.log2(math.e) / math.sqrt(d))
    split_launch = PreparedLaunch(split, (splits, h_kv * tiles, b), (g["warps"] * 32,),
                                  [*(ctypes.c_void_p() for _ in range(7)), problem], smem)
    combine_launch = None
    if splits > 1 and g["combine"] != "last_block":
        combine_launch = PreparedLaunch(combine, (rows_total,), (d,), [ctypes.c_void_p(), ctypes.c_void_p(),
                                        ctypes.c_void_p(), ctypes.c_int(splits), ctypes.c_int(rows_total)],
                                        programmatic=g["combine"] == "overlapped_kernel")
    streams: dict[int, tuple] = {}  # a stream's workspace: partial results and log-sum-exps, tickets

    def workspace(stream: int) -> tuple[int, int, int]:
        if stream not in streams:
            floats = splits * rows_total * (d + 1) if splits > 1 else 0
            part = torch.empty(floats, dtype=torch.float32, device=device)
            tickets = torch.zeros(b * h_kv * tiles if splits > 1 else 0, dtype=torch.int32, device=device)
            streams[stream] = (part, tickets)  # kept: the tensors live as long as the launch may use them
        part, tickets = streams[stream]
        return part.data_ptr(), part.data_ptr() + 4 * splits * rows_total * d, tickets.data_ptr()

    def run(q, k, v, out) -> None:
        stream = current_stream(device.index)
        with split_launch.lock:
            part, lse, tickets = workspace(stream)
            for slot, address in enumerate((q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), part, lse, tickets)):
                split_launch.args[slot].value = address
            split_launch.launch(stream)
            if combine_launch is not None:
                for slot, address in enumerate((part, lse, out.data_ptr())):
                    combine_launch.args[slot].value = address
                combine_launch.launch(stream)

    return run


def _kernels_may_take(q, k, v, lower_right: bool = False) -> bool:
    """CUDA fp16/bf16 [B, H, Q, D] against [B, H_kv, KV, D] (H a multiple of H_kv), D 64 or 128, one device; a mask
    aligned to the lower right with no fewer keys than queries (else a query would see none)."""
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) and t.is_cuda and t.dim() == 4 for t in tensors):
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    b, h, queries, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d or d not in HEAD_DIMS or not (k.device == q.device == v.device):
        return False
    return (min(b, h, queries, k.shape[1], k.shape[2]) > 0 and h % k.shape[1] == 0
            and every_query_sees_a_key(queries, k.shape[2], lower_right))


def attention(op, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool | str = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v for q [B, H, Q, D] over k, v [B, H_kv, KV, D] (grouped K/V heads where
    H_kv < H; causal: False, True (SDPA's is_causal, aligned to the top left) or "lower_right"): the evolved kernel
    measured fastest for this shape, or PyTorch's SDPA (where none is, and for what no kernel takes). A plain
    eager call of a signature seen before runs what it ran then, its launch prepared (the host's cost of a decode
    step counts)."""
    causal, lower_right = causal_alignment(causal)
    signature = op.signature((q, k, v), causal, lower_right)
    if signature is not None:
        fast = op.fast(signature)
        if fast is not None:
            return fast(q, k, v)
    if _kernels_may_take(q, k, v, lower_right):
        out = op(q, k, v, causal, lower_right)
        if signature is not None:
            _remember(op, signature, q, k, v, causal, lower_right)
        return out
    if signature is not None:
        op.remember(signature, lambda q, k, v: sdpa(q, k, v, causal, lower_right))
    return sdpa(q, k, v, causal, lower_right)


def _remember(op, signature, q, k, v, causal: bool, lower_right: bool) -> None:
    """After a plain call's full path: what its signature runs from now on, where its choice is final."""
    dims, device = _dims(q, k, causal, lower_right), q.device

    def kernel_call(kernel_id: str):
        if not all(t.is_contiguous() for t in (q, k, v)):  # views: the full path
            return None
        run = prepared(op.loaded(kernel_id), dims, device)

        def call(q, k, v):
            out = torch.empty(q.shape, dtype=q.dtype, device=device)
            run(q, k, v, out)
            return out

        return call

    op.remember_choice(signature, dims, device, lambda q, k, v: sdpa(q, k, v, causal, lower_right),
                       lambda q, k, v: op(q, k, v, causal, lower_right), kernel_call)


def _dims(q: torch.Tensor, k: torch.Tensor, causal: bool, lower_right: bool = False) -> dict:
    b, h, queries, d = q.shape
    return dict(b=b, h=h, h_kv=k.shape[1], q=queries, kv=k.shape[2], d=d, causal=int(bool(causal)),
                lower_right=int(bool(causal and lower_right)), bf16=int(q.dtype == torch.bfloat16))


def compute(op, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            lower_right: bool = False) -> torch.Tensor:
    """The custom op's body: the chosen kernel, or PyTorch's SDPA."""
    dims = _dims(q, k, causal, lower_right)
    kernel, _ = op.choose(dims, q.device) if q.is_cuda else (None, "not on a GPU")
    if kernel is None:
        return sdpa(q, k, v, causal, lower_right).contiguous()
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    with torch.cuda.device(q.device):
        op.launch_kernel(kernel, dims, (q, k, v), out)
    return out


def fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, lower_right: bool = False) -> torch.Tensor:
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


gradient, gradient_fake = sdpa_gradient, sdpa_gradient_fake  # PyTorch's backward of SDPA


def bucket(dims: Mapping) -> dict:
    """The calls one decision covers: the cache length rounded up to a multiple of 256, the batch to a power of
    two; heads, query tokens, head dimension, causal and the element type as they are."""
    return dict(dims, kv=-(-dims["kv"] // 256) * 256, b=1 << max(0, int(dims["b"]) - 1).bit_length())


def verify_dims(dims: Mapping) -> dict:
    """A shape of the same kind the kernel is checked on before it is chosen: one sequence, one K/V head with
    its query heads, the same cache length."""
    return dict(dims, b=1, h_kv=1, h=dims["h"] // dims["h_kv"])


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    return attention(op, *inputs, "lower_right" if dims.get("lower_right") else bool(dims["causal"]))
