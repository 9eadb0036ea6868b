"""vit_gemm at run time: inputs, reference, anchors, PyTorch's whole computation, loading and launching a
genome's kernel (launch.py), and the exported op's public function ``patch_embed``.

Standalone (torch, cuda.bindings, launch.py, problem.py and evo/runtime/cuda.py; never evo): the family runs
its kernels through this module, and `evo export` ships it beside the op as evo_family.py (with
vit_gemm_launch.py, vit_gemm_problem.py and evo_runtime/), so the package launches them exactly as the
search timed them. ``dims`` is a shape with m, n, k and p; ``genome`` a dict of knobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch

if __package__:  # seeds.vit_gemm.runtime, inside evo
    from evo.runtime.cuda import CudaModule, require_capability
    from evo.seeds.vit_gemm import problem
    from evo.seeds.vit_gemm import timm_fusion
    from evo.seeds.vit_gemm.launch import Launcher, takes  # noqa: F401 (takes: the runtime's word on a shape)
else:  # an exported package's evo_family.py, with the files it imports beside it
    import vit_gemm_problem as problem
    import vit_gemm_timm as timm_fusion
    from evo_runtime.cuda import CudaModule, require_capability
    from vit_gemm_launch import Launcher, takes  # noqa: F401

DEVICE = "cuda"
USAGE = """ViT patch embedding c[b, p, n] = bf16(sum_k x[b, p, k] w[n, k] + bias[n] + pos[p, n]), for an sm_90a GPU.

    import __OP_NAME__ as k
    c = k.patch_embed(x, w, bias, pos)               # x [B, P, K] (or [B * P, K]), w [N, K]: bf16 CUDA tensors
    c = torch.ops.evo.__OP_NAME__(x, w, bias, pos)   # the same as a torch custom op (torch.compile)

w K-major, as nn.Linear keeps it; bias [N] and pos [P, N] in any float dtype (the kernels read fp32,
PyTorch's computation bf16: a bias or pos in another dtype is converted once and kept while neither it nor
its contents change, as parameters are). fp32 accumulation; returns bf16 [B, P, N] (or [B * P, N])."""
PUBLIC = "patch_embed"
SCHEMA = "(Tensor x, Tensor w, Tensor bias, Tensor pos) -> Tensor"
make_inputs = problem.random_inputs
reference = problem.reference
fallback = problem.fallback  # addmm with the bias, then + pos, in bf16


def make_output(dims: Mapping) -> torch.Tensor:
    return torch.empty(dims["m"], dims["n"], device="cuda", dtype=torch.bfloat16)


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """cuBLAS matmul alone (torch a @ w.t(), bf16)."""
    a, w = inputs[:2]
    return a @ w.t()


_compiled: list = []


def _compiled_eager(dims: Mapping, inputs) -> torch.Tensor:
    """torch.compile of the eager expression (compiled at a shape's first call, before the timing's samples)."""
    if not _compiled:
        _compiled.append(torch.compile(problem.eager, dynamic=False))
    return _compiled[0](dims, inputs)


OTHER_ANCHORS = {"eager PyTorch (matmul, then + bias and + pos in bf16)": problem.eager,
                 "torch.compile of the same expression": _compiled_eager}
COSTLY_ANCHORS = frozenset({"torch.compile of the same expression"})  # compiles once per shape: not over a workload


def load(artifact: Path, genome: Mapping) -> Launcher:
    """The genome's Launcher (it checks that the kernel plans the shared memory launch.py sizes)."""
    require_capability((9, 0))
    return Launcher(CudaModule(artifact), dict(genome))


def launch(launcher: Launcher, dims: Mapping, inputs, out: torch.Tensor) -> None:
    launcher.launch(dims, *inputs[:4], out)


_converted: dict = {}  # bias and pos in the dtype a path reads: (tensor's pointer, version, dtype) -> (tensor, copy)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bias or pos in the dtype a path reads (fp32: the kernels; bf16: PyTorch's computation), converted
    once per tensor and version, as a model's parameters are at load time. The cache holds the source
    tensor too, so that its memory cannot be reused by another tensor while its key stands."""
    if t.dtype == dtype:
        return t.contiguous()
    key = (t.data_ptr(), t._version, tuple(t.shape), t.dtype, dtype)
    if key not in _converted:
        if len(_converted) >= 32:
            _converted.pop(next(iter(_converted)))
        _converted[key] = (t, t.to(dtype).contiguous())
    return _converted[key][1]


GRADIENT_SCHEMA = "(Tensor grad, Tensor x, Tensor w, Tensor bias, Tensor pos) -> (Tensor, Tensor, Tensor, Tensor)"


def _dims(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor) -> dict:
    """The problem's m, n, k, p from the operands; ValueError naming the one that is wrong (what this
    genome's launch cannot take, such as too few patches for pos_tma, the launcher refuses)."""
    for name, t in (("x", x), ("w", w), ("bias", bias), ("pos", pos)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if len({x.device, w.device, bias.device, pos.device}) != 1:
        raise ValueError("x, w, bias and pos must be on one device")
    if x.dim() not in (2, 3) or w.dim() != 2:
        raise ValueError(f"x must be [B, P, K] or [B * P, K] and w [N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    n, k = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"x's rows hold K = {x.shape[-1]} values, w's K = {k}")
    if n == 0 or k == 0:
        raise ValueError(f"N and K must be positive, not N = {n}, K = {k}")
    if tuple(bias.shape) != (n,):
        raise ValueError(f"bias must be of shape ({n},), got {tuple(bias.shape)}")
    if pos.dim() != 2 or pos.shape[1] != n or pos.shape[0] == 0:
        raise ValueError(f"pos must be of shape (P, {n}), got {tuple(pos.shape)}")
    p = pos.shape[0]
    m = x.shape[0] * x.shape[1] if x.dim() == 3 else x.shape[0]
    if x.dim() == 3 and x.shape[1] != p:
        raise ValueError(f"pos must have a row for each of x's P = {x.shape[1]} patches, got {p} rows")
    if m % p or m == 0:
        raise ValueError(f"x's {m} rows must be B > 0 groups of P = {p} patches (pos's rows)")
    return dict(m=m, n=n, k=k, p=p)


def _pytorch(dims: Mapping, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """PyTorch's computation in x's dtype: addmm with the bias, then + pos (the fallback's, for bf16)."""
    x2d = x.reshape(dims["m"], dims["k"])
    c = fallback(dims, (x2d, w.to(x.dtype), None, None, _as(bias, x.dtype), _as(pos, x.dtype)))
    return c.view(*x.shape[:-1], dims["n"])


def patch_embed(op, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x @ w^T + bias + pos: bf16 CUDA operands by the evolved kernel measured fastest for this shape (PyTorch
    where none is); any other dtype or device by PyTorch, in x's dtype."""
    signature = op.signature((x, w, bias, pos))
    if signature is not None:  # a call of a signature seen before runs what it ran then (no checks, no choice)
        fast = op.fast(signature)
        if fast is not None:
            return fast(x, w, bias, pos)
    dims = _dims(x, w, bias, pos)
    if not (x.is_cuda and x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16):
        if signature is not None:
            op.remember(signature, _pytorch_path(dims, x, w, bias, pos))
        return _pytorch(dims, x, w, bias, pos)
    out = op(x, w, bias, pos)
    decided = op.decided(dims, x.device) if signature is not None else None
    if decided is not None:
        op.remember(signature, _pytorch_path(dims, x, w, bias, pos) if decided[0] is None
                    else _prepared(op, decided[0], dims, x, w))
    return out


def _pytorch_path(dims: Mapping, x, w, bias, pos):
    """PyTorch's computation for one signature: addmm and + pos alone where every operand has x's dtype."""
    m, n, k, p = dims["m"], dims["n"], dims["k"], dims["p"]
    if not (x.is_contiguous() and w.dtype == bias.dtype == pos.dtype == x.dtype):
        return lambda *operands: _pytorch(dims, *operands)
    shape = (*x.shape[:-1], n)

    def run(x, w, bias, pos):
        out = torch.addmm(bias, x.view(m, k), w.t())
        out.view(-1, p, n).add_(pos)
        return out.view(shape)

    return run


def _prepared(op, kernel: str, dims: Mapping, x, w):
    """The kernel's call for one signature, its checks, choice and launch arguments done once."""
    m, n, k = dims["m"], dims["n"], dims["k"]
    with torch.cuda.device(x.device):
        launch = op.loaded(kernel).prepared(dims)
    if launch is None or not (x.is_contiguous() and w.is_contiguous()):
        return lambda *operands: op(*operands)
    shape, index = (*x.shape[:-1], n), x.device.index

    def run(x, w, bias, pos):
        if torch.cuda.current_device() != index:
            with torch.cuda.device(index):
                return run(x, w, bias, pos)
        c = torch.empty((m, n), device=x.device, dtype=torch.bfloat16)
        launch(x.view(m, k), w, _as(bias, torch.float32), _as(pos, torch.float32), c)
        return c.view(shape)

    return run


def compute(op, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The custom op's body: the chosen kernel, or PyTorch's computation."""
    dims = _dims(x, w, bias, pos)
    kernel, _ = op.choose(dims, x.device) if x.is_cuda else (None, "not on a GPU")
    if kernel is None:
        return _pytorch(dims, x, w, bias, pos)
    x2d = x.contiguous().view(dims["m"], dims["k"])
    c = torch.empty((dims["m"], dims["n"]), device=x.device, dtype=torch.bfloat16)
    with torch.cuda.device(x.device):
        op.launch_kernel(kernel, dims, (x2d, w.contiguous(), _as(bias, torch.float32), _as(pos, torch.float32)), c)
    return c.view(*x.shape[:-1], dims["n"])


def fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.bfloat16)


def gradient(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, pos: torch.Tensor):
    """dx = dC w, dw = dC^T x, dbias = the sum of dC's rows, dpos = the sum over the batch, by PyTorch (sums
    in fp32), each in its input's dtype."""
    n, p = w.shape[0], pos.shape[0]
    g = grad.reshape(-1, n)
    rows = g.float().view(-1, p, n)
    return ((g @ w.to(g.dtype)).view(x.shape).to(x.dtype), (g.t() @ x.reshape(-1, x.shape[-1]).to(g.dtype)).to(w.dtype),
            rows.sum((0, 1)).to(bias.dtype), rows.sum(0).to(pos.dtype))


def gradient_fake(grad, x, w, bias, pos):
    return torch.empty_like(x), torch.empty_like(w), torch.empty_like(bias), torch.empty_like(pos)


def bucket(dims: Mapping) -> dict:
    """The calls one decision covers: images of one model (n, k, p) at a batch up to the next power of two."""
    images = -(-dims["m"] // dims["p"])
    return dict(dims, m=dims["p"] << max(0, images - 1).bit_length())


def verify_dims(dims: Mapping) -> dict:
    """A shape the kernel is checked on before it is chosen: the same model at up to four images."""
    return dict(dims, m=dims["p"] * min(4, dims["m"] // dims["p"]))


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    """The public function on the inputs ``make_inputs`` draws (bias and pos in fp32, as the kernels read them)."""
    return patch_embed(op, *inputs[:4])


def surfaces(op) -> dict:
    """What the package offers besides ``patch_embed``: timm's PatchEmbed's replacement (vit_gemm_timm.py)."""
    def embed(x, w, bias, pos):
        return patch_embed(op, x, w, bias, pos)

    return dict(PatchEmbed=lambda source, pos: timm_fusion.PatchEmbed(embed, source, pos),
                fuse_into_timm=lambda model: timm_fusion.fuse_into_timm(embed, model))
