"""FlashCore at run time: inputs, reference, anchors, loading a cubin's two kernels and launching them
(tensor maps, the grid key split's workspace), and the exported op's public function ``attention``.

Standalone (torch, cuda.bindings, plan.py and evo/runtime/cuda.py; never evo): the family runs its kernels
through this module, and `evo export` ships it beside the op as evo_family.py (with flashcore_plan.py
and evo_runtime/), so the package launches them exactly as the search timed them. ``dims`` is a shape
with b, h, s, d and causal; ``genome`` a dict of knobs.
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path
from typing import Mapping

import torch

if __package__:  # seeds.flashcore.runtime, inside evo
    from evo.runtime.attention import (ALIGNED_GRADIENT_SCHEMA as GRADIENT_SCHEMA, boolean_causal_mask, causal_alignment,
                                       every_query_sees_a_key, sdpa, sdpa_gradient, sdpa_gradient_fake)
    from evo.runtime.cuda import (CudaModule, MapCache, PreparedLaunch, TensorMapBytes, box_map, current_stream, mappable,
                             require_capability, tensor_map, ticketed_workspace)
    from evo.seeds.flashcore import dropin, plan
else:  # an exported package's evo_family.py, with the files it imports beside it
    from evo_runtime.attention import (ALIGNED_GRADIENT_SCHEMA as GRADIENT_SCHEMA, boolean_causal_mask, causal_alignment,
                                       every_query_sees_a_key, sdpa, sdpa_gradient, sdpa_gradient_fake)
    import flashcore_dropin as dropin
    import flashcore_plan as plan
    from evo_runtime.cuda import (CudaModule, MapCache, PreparedLaunch, TensorMapBytes, box_map, current_stream, mappable,
                          require_capability, tensor_map, ticketed_workspace)

DEVICE = "cuda"
USAGE = """fp16 or bf16 attention O = softmax(Q K^T / sqrt(D)) V, fp32 softmax and accumulation, for an sm_90a GPU.

    import __OP_NAME__ as k
    o = k.attention(q, k_, v, causal=False)          # q [B, H, S, D], k_ and v [B, H_kv, S_kv, D], H a multiple of
                                                     # H_kv, fp16 or bf16, D 64 or 128; causal True (SDPA's top left)
                                                     # or "lower_right" (q the last S of S_kv: chunked prefill)
    o = k.scaled_dot_product_attention(q, k_, v, is_causal=True, enable_gqa=True)  # SDPA's, causal_lower_right too
    with k.patched_sdpa(): model(x)                  # torch's SDPA is this op's inside (timm's attention, say)
    k.register_with_transformers("evo")              # then AutoModel...(..., attn_implementation="evo")
    o = torch.ops.evo.__OP_NAME__(q, k_, v, False, False)  # the custom op itself (causal, lower_right)

Whatever the kernels do not take (masks but the causal ones, dropout, another scale, other head dimensions, fp32,
CPU tensors) runs PyTorch's SDPA, with its results. q, k and v may be views such as
transformers' [B, S, H, D] transposed; the output is laid out as q. Gradients: PyTorch's backward of SDPA."""
PUBLIC = "attention"
SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal, bool lower_right=False) -> Tensor"


def _dtype(dims: Mapping) -> torch.dtype:
    return torch.bfloat16 if dims.get("bf16", 0) else torch.float16


def _kv_heads(dims: Mapping) -> int:
    return dims.get("h_kv", dims["h"])


def _keys(dims: Mapping) -> int:  # K/V rows: kv, as many as the queries s where a shape does not say
    return dims.get("kv", dims["s"])


def complete_dims(dims: Mapping) -> dict:
    """A caller's dimensions with kv (keys: as many as the queries s) and lower_right (0) where left out."""
    return {**dims, "kv": _keys(dims), "lower_right": dims.get("lower_right", 0)}


def _lower_right(dims: Mapping) -> bool:
    return bool(dims["causal"] and dims.get("lower_right", 0))


def _laid_out(tensor: torch.Tensor, dims: Mapping) -> torch.Tensor:
    """[B, H, S, D] as it is, or (``strided``, a call whose tensors are views) as a [B, S, H, D] tensor's
    transposed view: transformers' layout, the one a decision for such calls is measured on."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2) if dims.get("strided") else tensor


def make_inputs(dims: Mapping, generator) -> tuple[torch.Tensor, ...]:
    q_sizes = (dims["b"], dims["h"], dims["s"], dims["d"])
    kv_sizes = (dims["b"], _kv_heads(dims), _keys(dims), dims["d"])
    return tuple(_laid_out(torch.randn(sizes, generator=generator, device="cuda", dtype=_dtype(dims)), dims)
                 for sizes in (q_sizes, kv_sizes, kv_sizes))


def make_output(dims: Mapping) -> torch.Tensor:
    return _laid_out(torch.empty((dims["b"], dims["h"], dims["s"], dims["d"]), device="cuda", dtype=_dtype(dims)), dims)


def _sdpa(dims: Mapping, q, k, v) -> torch.Tensor:
    return sdpa(q, k, v, bool(dims["causal"]), _lower_right(dims))


def reference(dims: Mapping, inputs) -> torch.Tensor:
    """fp32 attention by PyTorch's math backend, each query head with its own copy of its K/V head; causal: query
    row i sees keys 0..i (the top left), or 0..kv - s + i (lower_right)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.float() for t in inputs)
    group = q.shape[1] // k.shape[1]
    if group > 1:  # every query head's own copy of its K/V head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    mask = boolean_causal_mask(q.shape[2], k.shape[2], _lower_right(dims), q.device) if dims["causal"] else None
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """torch SDPA (its default backend for the call: cuDNN on Hopper GPUs, flash attention for the lower-right
    mask through causal_lower_right; grouped heads with enable_gqa)."""
    return _sdpa(dims, *inputs)


def _flash_attention(dims: Mapping, inputs) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return _sdpa(dims, *inputs)


OTHER_ANCHORS = {"torch SDPA FLASH_ATTENTION backend (FA2)": _flash_attention}


def takes(genome: Mapping, dims: Mapping) -> bool:
    """Every kernel takes fp16 attention with as many K/V heads as query heads and keys as queries; bf16, grouped
    heads, other key counts (chunked prefill, cross-attention), the lower-right mask and views (``strided``: read
    where they lie, by tensor maps) only the warp-specialised design's."""
    if not (dims["d"] in plan.HEAD_DIMS and min(dims["s"], _keys(dims)) > 0 and dims["b"] * dims["h"] > 0):
        return False
    if not every_query_sees_a_key(dims["s"], _keys(dims), _lower_right(dims)):
        return False
    plain = (not dims.get("bf16", 0) and _kv_heads(dims) == dims["h"] and not dims.get("strided", 0)
             and _keys(dims) == dims["s"] and not _lower_right(dims))
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


def launch(loaded, dims: Mapping, inputs, out: torch.Tensor) -> None:
    """One launch on torch's current stream (the current device's), reading q, k and v and writing ``out`` as
    they are laid out where the kernel can (the warp-specialised design: any strides a tensor map takes), else
    through contiguous copies. A launch is prepared once per shape and layout (``prepared``)."""
    run = prepared(loaded, dims, *inputs, out)
    if run is not None:
        run(*inputs, out)
        return
    target = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    inputs = [t.clone(memory_format=torch.contiguous_format) for t in inputs]  # fresh: aligned, contiguous
    prepared(loaded, dims, *inputs, target)(*inputs, target)
    if target is not out:
        out.copy_(target)


def _classic_map_rows(g: Mapping, d: int) -> tuple:
    """The classic design's tensor maps of Q, K and V: each box's rows, None where the kernel reads no map."""
    share, rows = plan.kv_share(g, d), plan.kv_rows(g, d)
    if d == 64 and g["tma_stages_d64"]:  # Q, K and V by TMA
        return g["block_m"], rows, rows
    if share > 1:  # K and V by TMA, each block of the cluster a slice of the stage
        return None, rows // share, rows // share
    return None, None, None


def prepared(loaded, dims: Mapping, q, k, v, out):
    """``run(q, k, v, out)``: the kernel's launch for this shape and these tensors' layout, its arguments but the
    addresses fixed (kept in the loaded kernel's workspaces); a call finds its tensor maps by address (encoded
    at an address's first call) and launches on the current stream. None where the layout needs copies."""
    kernels, g, workspaces = loaded
    key = ("prepared", tuple(dims.items()), *(t.stride() for t in (q, k, v, out)), q.device)
    if key not in workspaces:
        workspaces[key] = _prepare(kernels, g, workspaces, dims, q, k, v, out)
    return workspaces[key]


def _prepare(kernels, g: Mapping, workspaces: dict, dims: Mapping, q, k, v, out):
    b, h, s, d = dims["b"], dims["h"], dims["s"], dims["d"]
    function, smem = kernels[d, bool(dims.get("bf16", 0))]
    grid, block = plan.grid(g, s, b * h, d), (plan.warps(g, d) * 32,)
    maps = MapCache()
    if plan.warp_specialized(g):  # Q, K and V in by TMA, O out by TMA, as 4-d maps [B][H][S][D] of their strides
        if not all(mappable(t) for t in (q, k, v, out)):
            return None
        rows = plan.block_n(g, d)
        encoders = [functools.partial(box_map, box=box, swizzled=True)
                    for box in ((64, g["block_m"], 1, 1), (64, rows, 1, 1), (64, rows, 1, 1), (64, 64, 1, 1))]
        keys = _keys(dims)
        offset = keys - s if _lower_right(dims) else 0  # causal: query row i sees keys 0 .. i + offset
        launch = PreparedLaunch(function, grid, block,
                                [ctypes.c_int(s), ctypes.c_int(keys), ctypes.c_int(h), ctypes.c_int(h // k.shape[1]),
                                 ctypes.c_int(int(dims["causal"])), ctypes.c_int(offset),
                                 ctypes.c_float(1.0 / math.sqrt(d) * math.log2(math.e)),
                                 *(TensorMapBytes() for _ in encoders)], smem)

        def put(q, k, v, out, stream):
            for slot, tensor in enumerate((q, k, v, out)):
                launch.put(7 + slot, maps.get((slot, tensor.data_ptr()), encoders[slot], tensor))
    else:  # pointers; the maps some stages read; a grid key split's workspace and tickets per stream
        if not all(t.is_contiguous() for t in (q, k, v, out)):
            return None
        swizzled, rows = g["layout"] == "swizzled", _classic_map_rows(g, d)
        encoders = [functools.partial(tensor_map, box_rows=r, swizzled=swizzled) for r in rows]
        launch = PreparedLaunch(function, grid, block,
                                [*(ctypes.c_void_p() for _ in range(4)), ctypes.c_int(s), ctypes.c_int(int(dims["causal"])),
                                 ctypes.c_float(1.0 / math.sqrt(d)), *(TensorMapBytes() for _ in range(3)),
                                 ctypes.c_void_p(), ctypes.c_void_p()], smem)
        sizes = plan.grid_workspace(g, s, b * h, d)

        def put(q, k, v, out, stream):
            for slot, tensor in enumerate((q, k, v, out)):
                launch.args[slot].value = tensor.data_ptr()
            for slot, tensor in enumerate((q, k, v)):
                if rows[slot]:
                    launch.put(7 + slot, maps.get((slot, tensor.data_ptr()), encoders[slot], tensor))
            records, tickets = ticketed_workspace(workspaces, (b, h, s, d, q.device, stream), *sizes, q.device)
            launch.args[10].value, launch.args[11].value = records.data_ptr(), tickets.data_ptr()

    def run(q, k, v, out):
        stream = current_stream()
        with launch.lock:
            put(q, k, v, out, stream)
            launch.launch(stream)

    return run


_SDPA = torch.nn.functional.scaled_dot_product_attention  # PyTorch's, kept before any patching (patched_sdpa)


def _kernels_may_take(q, k, v, causal: tuple[bool, bool], scale, enable_gqa: bool) -> bool:
    """Whether an evolved kernel may compute this call exactly as SDPA would (the op then measures which
    does): CUDA fp16/bf16 q [B, H, S, D] over k, v [B, H_kv, S_kv, D] with D 64 or 128, ``causal`` (causal,
    lower_right; the lower right needs S_kv >= S), the default scale, grouped K/V heads only with enable_gqa, each
    row of D contiguous."""
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) and t.is_cuda and t.dim() == 4 and t.stride(-1) == 1 for t in tensors):
        return False
    b, h, s, d = q.shape
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d or not (k.device == q.device == v.device):
        return False
    if d not in plan.HEAD_DIMS or min(s, k.shape[2], b * h) == 0:
        return False
    if not every_query_sees_a_key(s, k.shape[2], causal[1]):
        return False
    if scale is not None and abs(scale * math.sqrt(d) - 1.0) > 1e-12:
        return False
    return k.shape[1] == h or (enable_gqa and k.shape[1] > 0 and h % k.shape[1] == 0)


def scaled_dot_product_attention(op, query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics: an evolved kernel where one
    takes the call and is measured faster on this GPU, PyTorch's SDPA otherwise (other masks than
    torch.nn.attention.bias's causal ones, dropout, another scale, other head dimensions, fp32, CPU tensors),
    with identical results."""
    causal = dropin.causal_mask(attn_mask, is_causal, query, key)
    if causal is None or dropout_p != 0.0:
        return _SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                     enable_gqa=enable_gqa)
    return _attend(op, query, key, value, causal, scale, enable_gqa)


def _attend(op, q, k, v, causal: tuple[bool, bool], scale, enable_gqa: bool) -> torch.Tensor:
    """A call without dropout, causal = (causal, lower_right): a plain eager call of a signature seen before runs
    what it ran then, prepared; else the custom op where a kernel may take it, PyTorch's SDPA where none can."""
    signature = op.signature((q, k, v), *causal, scale, enable_gqa)
    if signature is not None:
        fast = op.fast(signature)
        if fast is not None:
            return fast(q, k, v)
    if _kernels_may_take(q, k, v, causal, scale, enable_gqa):
        out = op(q, k, v, *causal)
        if signature is not None:
            _remember(op, signature, q, k, v, *causal)
        return out

    def pytorch(q, k, v):
        return sdpa(q, k, v, *causal, scale=scale, enable_gqa=enable_gqa)

    if signature is not None:
        op.remember(signature, pytorch)
    return pytorch(q, k, v)


def _remember(op, signature, q, k, v, causal: bool, lower_right: bool) -> None:
    """After a plain call's full path: what its signature runs from now on, where its choice is final."""
    dims = _dims(q, k, v, causal, lower_right)

    def kernel_call(kernel_id: str):
        template = torch.empty_like(q)
        run = prepared(op.loaded(kernel_id), dims, q, k, v, template)
        if run is None:  # the layout needs copies: the full path
            return None
        size, stride, dtype, device = template.shape, template.stride(), template.dtype, template.device

        def call(q, k, v):
            out = torch.empty_strided(size, stride, dtype=dtype, device=device)
            run(q, k, v, out)
            return out

        return call

    op.remember_choice(signature, dims, q.device, lambda q, k, v: sdpa(q, k, v, causal, lower_right),
                       lambda q, k, v: op(q, k, v, causal, lower_right), kernel_call)


def attention(op, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool | str = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v for q [B, H, S, D] over k, v [B, H_kv, S_kv, D], K/V heads grouped where k and v
    have fewer heads than q; causal: False, True (SDPA's is_causal, aligned to the top left) or "lower_right" (the
    queries are the last S of the S_kv positions: chunked prefill). The evolved kernel measured fastest for this
    shape, or PyTorch's SDPA (where none is, and for what no kernel takes)."""
    causal, lower_right = causal_alignment(causal)
    four = k.dim() == 4 and q.dim() == 4
    lower_right = lower_right and four and q.shape[2] != k.shape[2]
    return _attend(op, q, k, v, (causal, lower_right), None, four and k.shape[1] != q.shape[1])


def _dims(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, lower_right: bool = False) -> dict:
    """A call's shape; with ``strided`` where q, k or v is a view (a decision of its own: only kernels that read
    views where they lie are candidates, measured on views)."""
    b, h, s, d = q.shape
    dims = dict(b=b, h=h, s=s, d=d, causal=int(bool(causal)), h_kv=k.shape[1], bf16=int(q.dtype == torch.bfloat16),
                kv=k.shape[2], lower_right=int(bool(causal and lower_right and k.shape[2] != s)))
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        dims["strided"] = 1
    return dims


def compute(op, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            lower_right: bool = False) -> torch.Tensor:
    """The custom op's body: the chosen kernel into an output laid out as q is (a [B, S, H, D] view's too),
    or PyTorch's SDPA."""
    dims = _dims(q, k, v, causal, lower_right)
    kernel, _ = op.choose(dims, q.device) if q.is_cuda else (None, "not on a GPU")
    out = torch.empty_like(q)
    if kernel is None:
        result = sdpa(q, k, v, causal, lower_right)
        return result if result.stride() == out.stride() else out.copy_(result)
    if q.device.index != torch.cuda.current_device():
        with torch.cuda.device(q.device):
            op.launch_kernel(kernel, dims, (q, k, v), out)
    else:
        op.launch_kernel(kernel, dims, (q, k, v), out)
    return out


def fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, lower_right: bool = False) -> torch.Tensor:
    return torch.empty_like(q)


gradient, gradient_fake = sdpa_gradient, sdpa_gradient_fake  # PyTorch's backward of SDPA


def bucket(dims: Mapping) -> dict:
    """The calls one decision covers: query and key lengths rounded up to a multiple of 64, the batch to a power
    of two; heads, head dimension, the mask and the element type as they are."""
    rounded = dict(dims, s=-(-dims["s"] // 64) * 64, b=1 << max(0, int(dims["b"]) - 1).bit_length())
    if "kv" in dims:
        rounded["kv"] = -(-dims["kv"] // 64) * 64
    return rounded


def verify_dims(dims: Mapping) -> dict:
    """A shape of the same kind the kernel is checked on before it is chosen: one sequence of the same
    length, one K/V head with its query heads (every head runs the same code; the search verified many)."""
    return dict(dims, b=1, h_kv=1, h=dims["h"] // _kv_heads(dims))


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    """The public function on the inputs ``make_inputs`` draws."""
    return attention(op, *inputs, "lower_right" if _lower_right(dims) else bool(dims["causal"]))


def surfaces(op) -> dict:
    """What the package offers besides ``attention`` (flashcore_dropin.py): SDPA's drop-in, transformers'
    attention function and its registration, and a context that makes torch's own SDPA this op's."""
    import functools

    sdpa = functools.wraps(_SDPA)(functools.partial(scaled_dot_product_attention, op))
    sdpa.__doc__ = scaled_dot_product_attention.__doc__
    return dropin.surfaces(sdpa)
