"""FlashCore at run time: inputs, reference, anchors, loading a cubin's two kernels and launching them
(tensor maps, the grid key split's workspace), and the exported op's public function ``attention``.

Standalone (torch, cuda.bindings, plan.py and seeds/_cuda.py; never evo): the family runs its kernels
through this module, and `evo export` ships it beside the op as evo_family.py (with flashcore_plan.py
and evo_cuda.py), so the package launches them exactly as the search timed them. ``dims`` is a shape
with b, h, s, d and causal; ``genome`` a dict of knobs.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Mapping

import torch

if __package__:  # seeds.flashcore.runtime, inside evo
    from seeds._cuda import (CudaModule, TensorMapBytes, panel_map, ptr, require_capability, tensor_map,
                             ticketed_workspace)
    from seeds.flashcore import plan
else:  # an exported package's evo_family.py, with the files it imports beside it
    import flashcore_plan as plan
    from evo_cuda import CudaModule, TensorMapBytes, panel_map, ptr, require_capability, tensor_map, ticketed_workspace

DEVICE = "cuda"
USAGE = """fp16 or bf16 attention O = softmax(Q K^T / sqrt(D)) V, fp32 softmax and accumulation, for an sm_90a GPU.

    import __OP_NAME__ as k
    o = k.attention(q, k_, v, causal=False)          # q [B, H, S, D], k_ and v [B, H_kv, S, D] CUDA tensors,
                                                     # fp16 or bf16, D 64 or 128, H a multiple of H_kv
    o = torch.ops.evo.__OP_NAME__(q, k_, v, False)   # the same as a torch custom op (torch.compile)"""
PUBLIC = "attention"
SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal=False) -> Tensor"


def _dtype(dims: Mapping) -> torch.dtype:
    return torch.bfloat16 if dims.get("bf16", 0) else torch.float16


def _kv_heads(dims: Mapping) -> int:
    return dims.get("h_kv", dims["h"])


def make_inputs(dims: Mapping, generator) -> tuple[torch.Tensor, ...]:
    q_sizes = (dims["b"], dims["h"], dims["s"], dims["d"])
    kv_sizes = (dims["b"], _kv_heads(dims), dims["s"], dims["d"])
    return tuple(torch.randn(sizes, generator=generator, device="cuda", dtype=_dtype(dims))
                 for sizes in (q_sizes, kv_sizes, kv_sizes))


def make_output(dims: Mapping) -> torch.Tensor:
    return torch.empty((dims["b"], dims["h"], dims["s"], dims["d"]), device="cuda", dtype=_dtype(dims))


def _sdpa(dims: Mapping, q, k, v) -> torch.Tensor:
    grouped = k.shape[1] != q.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(dims["causal"]),
                                                            **({"enable_gqa": True} if grouped else {}))


def reference(dims: Mapping, inputs) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.float() for t in inputs)
    group = q.shape[1] // k.shape[1]
    if group > 1:  # every query head's own copy of its K/V head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(dims["causal"]))


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """torch SDPA (its default backend: cuDNN on the H100; grouped heads with enable_gqa)."""
    return _sdpa(dims, *inputs)


def _flash_attention(dims: Mapping, inputs) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return _sdpa(dims, *inputs)


OTHER_ANCHORS = {"torch SDPA FLASH_ATTENTION backend (FA2)": _flash_attention}


def takes(genome: Mapping, dims: Mapping) -> bool:
    """Every kernel takes fp16 attention with as many K/V heads as query heads; bf16 and grouped heads
    only the warp-specialised design's."""
    if not (dims["d"] in plan.HEAD_DIMS and dims["s"] > 0 and dims["b"] * dims["h"] > 0):
        return False
    plain = not dims.get("bf16", 0) and _kv_heads(dims) == dims["h"]
    return plain or plan.warp_specialized(genome)


def load(artifact: Path, genome: Mapping):
    """Both head dimensions' kernels of the cubin, allowed the shared memory their plan needs, after
    checking it is what plan.py sizes; the genome; the workspaces of its launches."""
    require_capability((9, 0))
    module = CudaModule(artifact)
    planned = module.read_ints("flashcore_shared_bytes", len(plan.HEAD_DIMS))
    kernels = {}
    types = ("", "_bf16") if plan.warp_specialized(genome) else ("",)
    for d, kernel_bytes in zip(plan.HEAD_DIMS, planned):
        if kernel_bytes != plan.shared_bytes(genome, d):
            raise RuntimeError(f"the kernel plans {kernel_bytes} bytes of shared memory at D={d}, "
                               f"plan.py {plan.shared_bytes(genome, d)}: flashcore.cu and plan.py disagree")
        for name in types:
            kernel = module.kernel(f"flashcore{name}_d{d}")
            kernel.set_max_dynamic_shared(kernel_bytes)
            kernels[d, bool(name)] = (kernel, kernel_bytes)
    return kernels, dict(genome), {}


def _launch_warp_specialized(function, smem: int, g: Mapping, dims: Mapping, inputs, out: torch.Tensor) -> None:
    """The warp-specialised design: Q, K and V in by TMA, O out by TMA, in 64-column panels (a consumer
    warpgroup's 64 rows a box of O); K/V head h // group."""
    b, h, s, d = dims["b"], dims["h"], dims["s"], dims["d"]
    q, k, v = inputs
    maps = [panel_map(q, g["block_m"]), panel_map(k, plan.block_n(g, d)), panel_map(v, plan.block_n(g, d)),
            panel_map(out, 64)]
    function.launch(plan.grid(g, s, b * h, d), (plan.warps(g, d) * 32,),
                    [ctypes.c_int(s), ctypes.c_int(h), ctypes.c_int(h // k.shape[1]),
                     ctypes.c_int(int(dims["causal"])), ctypes.c_float(1.0 / math.sqrt(d) * math.log2(math.e)), *maps],
                    shared_bytes=smem)


def launch(loaded, dims: Mapping, inputs, out: torch.Tensor) -> None:
    """One launch on torch's current stream. A grid key split's partial rows and ticket counters are kept
    per shape, device and stream (the tickets count on across launches and are never reset)."""
    kernels, g, workspaces = loaded
    b, h, s, d = dims["b"], dims["h"], dims["s"], dims["d"]
    function, smem = kernels[d, bool(dims.get("bf16", 0))]
    if plan.warp_specialized(g):
        _launch_warp_specialized(function, smem, g, dims, inputs, out)
        return
    q, k, v = inputs
    share = plan.kv_share(g, d)
    swizzled = g["layout"] == "swizzled"
    if d == 64 and g["tma_stages_d64"]:  # Q, K and V by TMA
        maps = [tensor_map(q, g["block_m"], swizzled=swizzled),
                *(tensor_map(t, plan.kv_rows(g, d), swizzled=swizzled) for t in (k, v))]
    elif share > 1:  # K and V by TMA, each block of the cluster a slice of the stage
        maps = [TensorMapBytes(), *(tensor_map(t, plan.kv_rows(g, d) // share, swizzled=swizzled) for t in (k, v))]
    else:
        maps = [TensorMapBytes()] * 3  # not read by a kernel without TMA copies
    key = (b, h, s, d, q.device, torch.cuda.current_stream().cuda_stream)
    records, tickets = ticketed_workspace(workspaces, key, *plan.grid_workspace(g, s, b * h, d), q.device)
    function.launch(plan.grid(g, s, b * h, d), (plan.warps(g, d) * 32,),
                    [ptr(q), ptr(k), ptr(v), ptr(out), ctypes.c_int(s), ctypes.c_int(int(dims["causal"])),
                     ctypes.c_float(1.0 / math.sqrt(d)), *maps, ptr(records), ptr(tickets)],
                    shared_bytes=smem)


def _dims(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> dict:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in (torch.float16, torch.bfloat16) or not t.is_cuda or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D fp16 or bf16 CUDA tensor [B, H, S, D], got {t.dtype} {tuple(t.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, s, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[2:] != q.shape[2:] or k.shape[1] < 1 or h % k.shape[1]:
        raise ValueError(f"k and v must be [B, H_kv, S, D] with H a multiple of H_kv, for q {tuple(q.shape)}; got "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if len({q.device, k.device, v.device}) != 1:
        raise ValueError("q, k and v must be on one device")
    return dict(b=b, h=h, s=s, d=d, causal=int(bool(causal)), h_kv=k.shape[1], bf16=int(q.dtype == torch.bfloat16))


def attention(op, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with the evolved kernel chosen for this shape (PyTorch's SDPA where none is)."""
    dims = _dims(q, k, v, causal)
    kernel, _ = op.choose(dims)
    if kernel is None:
        return anchor(dims, (q, k, v))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    with torch.cuda.device(q.device):
        op.launch_kernel(kernel, dims, (q, k, v), o)
    return o


def fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    return torch.empty_like(q)


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    """The public function on the inputs ``make_inputs`` draws."""
    return attention(op, *inputs, bool(dims["causal"]))
