"""nvfp4_gemm at run time: inputs, reference, anchors, PyTorch's whole computation, loading and launching
a genome's kernels (launch.py), and the exported op's public function ``gemm``.

Standalone (torch, cuda.bindings, launch.py, formats.py and evo/runtime/cuda.py; never evo): the family runs
its kernels through this module, and `evo export` ships it beside the op as evo_family.py (with
nvfp4_launch.py, nvfp4_formats.py and evo_runtime/), so the package launches them exactly as the search
timed them. ``dims`` is a shape with l, m, n, k and blocked; ``genome`` a dict of knobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch

if __package__:  # seeds.nvfp4_gemm.runtime, inside evo
    from evo.runtime.cuda import CudaModule, require_capability
    from evo.seeds.nvfp4_gemm import formats, linear
    from evo.seeds.nvfp4_gemm.launch import Launcher
else:  # an exported package's evo_family.py, with the files it imports beside it
    import nvfp4_formats as formats
    import nvfp4_linear as linear
    from evo_runtime.cuda import CudaModule, require_capability
    from nvfp4_launch import Launcher

DEVICE = "cuda"
USAGE = """NVFP4 block-scaled GEMM c[l, m, n] = fp16(sum_k a*sfa * b*sfb), fp32 accumulation, for an sm_90a GPU.

    import __OP_NAME__ as k
    c = k.gemm(a, b, sfa, sfb)                # plain scales
    c = k.gemm(a, b, sfa, sfb, blocked=True)  # scales in the blocked layout of cuBLAS / CUTLASS
    c = torch.ops.evo.__OP_NAME__(a, b, sfa, sfb, False)   # the same as a torch custom op (torch.compile)

a: [L,] M x K/2 and b: [L,] N x K/2 uint8 CUDA tensors, e2m1 values two a byte (the even K index in
the low nibble), K-major; sfa: [L,] M x K/16 and sfb: [L,] N x K/16 uint8 e4m3 scales, one per 16
values of a row, or with blocked=True [L,] blocked bytes (128 x 4 tiles of scales, interleaved as
32 x 16; nvfp4_formats.to_blocked converts). K a multiple of 16, N even; the kernels take K a multiple of
128. Returns fp16 [L,] M x N."""
PUBLIC = "gemm"
SCHEMA = "(Tensor a, Tensor b, Tensor sfa, Tensor sfb, bool blocked) -> Tensor"


def make_inputs(dims: Mapping, generator) -> tuple[torch.Tensor, ...]:
    return formats.random_problem(dims, generator, "cuda")


def make_output(dims: Mapping) -> torch.Tensor:
    return torch.empty((dims["l"], dims["m"], dims["n"]), device="cuda", dtype=torch.float16)


def reference(dims: Mapping, inputs) -> torch.Tensor:
    a, b = formats.dequantized_operands(dims, inputs, torch.float64)
    return a @ b.transpose(-1, -2)


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """torch: dequantise to bf16 + matmul."""
    a, b = formats.dequantized_operands(dims, inputs, torch.bfloat16)
    return (a @ b.transpose(-1, -2)).half()


def fallback(dims: Mapping, inputs) -> torch.Tensor:
    """torch: dequantise to fp16 + matmul. bf16's 8 bits of mantissa miss the family's rtol of 1e-3; fp16
    holds every e2m1 value times its e4m3 scale exactly, and its fp16 output rounds as the kernels' does."""
    a, b = formats.dequantized_operands(dims, inputs, torch.float16)
    return a @ b.transpose(-1, -2)


_bf16_operands: dict = {}


def _bf16_matmul(dims: Mapping, inputs) -> torch.Tensor:
    """bf16 cuBLAS on operands dequantised once per input set beforehand (outside the timing)."""
    key = tuple(t.data_ptr() for t in inputs)
    if key not in _bf16_operands:
        _bf16_operands.clear()
        _bf16_operands[key] = formats.dequantized_operands(dims, inputs, torch.bfloat16)
    a, b = _bf16_operands[key]
    return a @ b.transpose(-1, -2)  # bf16 out: the matmul alone


OTHER_ANCHORS = {"bf16 cuBLAS matmul on operands dequantised beforehand": _bf16_matmul}


def takes(genome: Mapping, dims: Mapping) -> bool:
    return dims["k"] % 128 == 0  # the kernels' K tiles (N even and K a multiple of 16: any call)


def load(artifact: Path, genome: Mapping) -> Launcher:
    """The genome's Launcher: the GEMM kernel (its shared memory checked against launch.py's) and a's prepass."""
    require_capability((9, 0))
    return Launcher(CudaModule(artifact), dict(genome))


def launch(launcher: Launcher, dims: Mapping, inputs, out: torch.Tensor) -> None:
    launcher.launch(dims, *inputs, out)


def _dims(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, blocked: bool) -> dict:
    """The problem's l, m, n, k, blocked from the operands; ValueError naming the one that is wrong."""
    for name, t in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb)):
        if t.dtype != torch.uint8:
            raise ValueError(f"{name} must be a uint8 tensor, got {t.dtype}")
    if a.dim() not in (2, 3) or b.dim() != a.dim():
        raise ValueError(f"a and b must both be [M, K/2] / [N, K/2] or [L, M, K/2] / [L, N, K/2], got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if len({a.device, b.device, sfa.device, sfb.device}) != 1:
        raise ValueError("a, b, sfa and sfb must be on one device")
    l = a.shape[0] if a.dim() == 3 else 1
    m, n, k = a.shape[-2], b.shape[-2], 2 * a.shape[-1]
    if b.dim() == 3 and b.shape[0] != l:
        raise ValueError(f"b has {b.shape[0]} batches, a {l}")
    if 2 * b.shape[-1] != k:
        raise ValueError(f"b's rows hold K = {2 * b.shape[-1]} values, a's K = {k}")
    if k % 16 or k == 0:
        raise ValueError(f"K must be a positive multiple of 16 (one scale per 16 values), not {k}")
    if n % 2 or n == 0 or m == 0:
        raise ValueError(f"M must be positive and N positive and even, not M = {m}, N = {n}")
    batch = (l,) if a.dim() == 3 else ()
    for name, t, rows in (("sfa", sfa, m), ("sfb", sfb, n)):
        wanted = batch + ((formats.blocked_size(rows, k // 16),) if blocked else (rows, k // 16))
        if tuple(t.shape) != wanted:
            raise ValueError(f"{name} must be {'blocked ' if blocked else ''}scales of shape {wanted}, "
                             f"got {tuple(t.shape)}")
    return dict(l=l, m=m, n=n, k=k, blocked=int(blocked))


NO_GRADIENT = "NVFP4's packed uint8 operands have none"


def gemm(op, a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor,
         blocked: bool = False) -> torch.Tensor:
    """fp16 a*sfa @ (b*sfb)^T with the evolved kernel measured fastest for this shape (PyTorch where none is). A
    plain eager call of a signature seen before runs what it ran then, straight to the launch (no custom op's
    dispatch, no second check of the operands): at few tokens the host's cost of a call is the call's cost."""
    blocked = bool(blocked)
    signature = op.signature((a, b, sfa, sfb), blocked)
    if signature is not None:
        fast = op.fast(signature)
        if fast is not None:
            return fast(a, b, sfa, sfb)
    dims = _dims(a, b, sfa, sfb, blocked)
    if not a.is_cuda:  # PyTorch's computation on the CPU
        return _pytorch(dims, a, b, sfa, sfb, blocked)
    c = op(a, b, sfa, sfb, blocked)
    if signature is not None:
        _remember(op, signature, dims, a, b, sfa, sfb)
    return c


def _remember(op, signature, dims: Mapping, a, b, sfa, sfb) -> None:
    """After a plain call's full path: what its signature runs from now on, where its choice is final."""
    blocked, device, batched = bool(dims["blocked"]), a.device, a.dim() == 3
    shape = (dims["l"], dims["m"], dims["n"])

    def kernel_call(kernel_id: str):
        if not all(t.is_contiguous() for t in (a, b, sfa, sfb)):  # views: the full path
            return None
        launcher = op.loaded(kernel_id)

        def call(a, b, sfa, sfb):
            c = torch.empty(shape, device=device, dtype=torch.float16)
            if batched:
                launcher.launch(dims, a, b, sfa, sfb, c)
                return c
            # 2-d operands: with a batch dimension (views), as _batched makes them
            launcher.launch(dims, a.unsqueeze(0), b.unsqueeze(0), sfa.unsqueeze(0), sfb.unsqueeze(0), c)
            return c[0]

        return call

    op.remember_choice(signature, dims, device, lambda a, b, sfa, sfb: _pytorch(dims, a, b, sfa, sfb, blocked),
                       lambda a, b, sfa, sfb: op(a, b, sfa, sfb, blocked), kernel_call)


def compute(op, a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, blocked: bool) -> torch.Tensor:
    """The custom op's body: the chosen kernel, or PyTorch's dequantisation + matmul."""
    dims = _dims(a, b, sfa, sfb, blocked)
    kernel, _ = op.choose(dims, a.device) if a.is_cuda else (None, "not on a GPU")
    if kernel is None:
        return _pytorch(dims, a, b, sfa, sfb, blocked)
    operands, scales = _batched(dims, a, b, sfa, sfb, blocked)
    c = torch.empty((dims["l"], dims["m"], dims["n"]), device=a.device, dtype=torch.float16)
    with torch.cuda.device(a.device):
        op.launch_kernel(kernel, dims, (*operands, *scales), c)
    return c if a.dim() == 3 else c[0]


def _batched(dims: Mapping, a, b, sfa, sfb, blocked: bool) -> tuple[list, list]:
    """The operands and scales with a batch dimension, contiguous."""
    l = dims["l"]
    operands = [t.contiguous().reshape(l, *t.shape[-2:]) for t in (a, b)]
    scales = [t.contiguous().reshape(l, -1) if blocked else t.contiguous().reshape(l, *t.shape[-2:]) for t in (sfa, sfb)]
    return operands, scales


def _pytorch(dims: Mapping, a, b, sfa, sfb, blocked: bool) -> torch.Tensor:
    """PyTorch's computation (``fallback``), on any device."""
    c = fallback(dims, tuple(sum(_batched(dims, a, b, sfa, sfb, blocked), [])))
    return c if a.dim() == 3 else c[0]


def bucket(dims: Mapping) -> dict:
    """The calls one decision covers: tokens (m) up to the next power of two; the layer (n, k) as it is."""
    return dict(dims, m=1 << max(0, int(dims["m"]) - 1).bit_length())


def fake(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, blocked: bool) -> torch.Tensor:
    return a.new_empty((*a.shape[:-1], b.shape[-2]), dtype=torch.float16)


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    """The public function on the inputs ``make_inputs`` draws."""
    return gemm(op, *inputs, bool(dims["blocked"]))


def surfaces(op) -> dict:
    """What the package offers besides ``gemm``: ``NVFP4Linear(nn.Linear)``, an nn.Linear on NVFP4 (nvfp4_linear.py)."""
    def nvfp4_linear(module: torch.nn.Linear) -> torch.nn.Module:
        return linear.NVFP4Linear(lambda *operands: gemm(op, *operands), module)

    return dict(NVFP4Linear=nvfp4_linear)
