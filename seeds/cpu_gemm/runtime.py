"""cpu_gemm at run time: inputs, reference, anchor, loading and calling the built library, and the
exported op's public function ``gemm``.

Standalone (torch and ctypes, never evo): the family runs its kernels through this module, and `evo
export` ships it beside the op as evo_family.py, so the package runs them as the search did. ``dims``
is a shape with m, n and k (a ProblemShape or a plain dict).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Mapping

import torch

DEVICE = "cpu"
USAGE = """fp32 GEMM C = A @ B on the CPU.

    import __OP_NAME__ as k
    c = k.gemm(a, b)                     # a: [M, K], b: [K, N], float32, CPU
    c = torch.ops.evo.__OP_NAME__(a, b)  # the same as a torch custom op (torch.compile)"""
PUBLIC = "gemm"
SCHEMA = "(Tensor a, Tensor b) -> Tensor"


def make_inputs(dims: Mapping, generator) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.randn(dims["m"], dims["k"], generator=generator, dtype=torch.float32)
    b = torch.randn(dims["k"], dims["n"], generator=generator, dtype=torch.float32)
    return a, b


def make_output(dims: Mapping) -> torch.Tensor:
    return torch.empty(dims["m"], dims["n"], dtype=torch.float32)


def reference(dims: Mapping, inputs) -> torch.Tensor:
    a, b = inputs
    return a.double() @ b.double()


def anchor(dims: Mapping, inputs) -> torch.Tensor:
    """torch.matmul."""
    a, b = inputs
    return torch.matmul(a, b)


def load(artifact: Path, genome: Mapping):
    """The library's ``evo_gemm(a, b, c, m, n, k)``."""
    function = ctypes.CDLL(str(artifact)).evo_gemm
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    function.restype = None
    return function


def launch(kernel, dims: Mapping, inputs, out: torch.Tensor) -> None:
    a, b = inputs
    kernel(a.data_ptr(), b.data_ptr(), out.data_ptr(), dims["m"], dims["n"], dims["k"])


GRADIENT_SCHEMA = "(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)"


def _dims(a: torch.Tensor, b: torch.Tensor) -> dict:
    for name, t in (("a", a), ("b", b)):
        if t.dtype != torch.float32 or not t.is_cpu or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D float32 CPU tensor, got {t.dtype} {tuple(t.shape)} on {t.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: inner dimensions differ")
    return {"m": a.shape[0], "n": b.shape[1], "k": a.shape[1]}


def gemm(op, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B with the evolved kernel measured fastest for this shape (torch.matmul where none is faster)."""
    signature = op.signature((a, b))
    if signature is not None:  # a call of a signature seen before runs what it ran then (no checks, no choice)
        fast = op.fast(signature)
        if fast is not None:
            return fast(a, b)
    dims = _dims(a, b)
    out = op(a, b)
    decided = op.decided(dims, None) if signature is not None else None
    if decided is not None:
        op.remember(signature, torch.matmul if decided[0] is None else _prepared(op, decided[0], dims))
    return out


def _prepared(op, kernel: str, dims: Mapping):
    """The kernel's call for one signature, its checks and choice done once."""
    shape, loaded = (dims["m"], dims["n"]), op.loaded(kernel)

    def run(a, b):
        c = torch.empty(shape, dtype=torch.float32)
        launch(loaded, dims, (a.contiguous(), b.contiguous()), c)
        return c

    return run


def compute(op, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The custom op's body: the chosen kernel, or torch.matmul."""
    dims = _dims(a, b)
    kernel, _ = op.choose(dims) if 0 not in dims.values() else (None, "empty")
    if kernel is None:
        return torch.matmul(a, b)
    c = torch.empty((dims["m"], dims["n"]), dtype=torch.float32)
    op.launch_kernel(kernel, dims, (a.contiguous(), b.contiguous()), c)
    return c


def fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[1]))


def gradient(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    """dA = dC B^T and dB = A^T dC, by PyTorch."""
    return grad @ b.t(), a.t() @ grad


def gradient_fake(grad, a, b):
    return torch.empty_like(a), torch.empty_like(b)


def bucket(dims: Mapping) -> dict:
    """The calls one decision covers: each size rounded up to a multiple of 16."""
    return {name: -(-int(value) // 16) * 16 for name, value in dims.items()}


def call_with(op, dims: Mapping, inputs) -> torch.Tensor:
    """The public function on the inputs ``make_inputs`` draws."""
    return gemm(op, *inputs)
