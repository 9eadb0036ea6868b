"""NVFP4Linear (an exported nvfp4_gemm op's drop-in for nn.Linear) against the bf16 nn.Linear it was made from, as a
model calls it (eager, CUDA events around calls back to back, in turns), on the GPU:

    python benchmarks/nvfp4_linear.py OP_DIR [N,K ...]

OP_DIR: a package `evo export` wrote for an nvfp4_gemm workload. Prints per (N, K, M): the relative L2 error against
the bf16 layer and the time of each (the NVFP4 layer quantises its activations every call, in PyTorch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from op_in_models import load, paired  # noqa: E402


def main() -> int:
    op = load(sys.argv[1])
    layers = [tuple(int(v) for v in arg.split(",")) for arg in sys.argv[2:]] or [(14336, 4096), (4096, 14336 // 2)]
    for n, k in layers:
        torch.manual_seed(0)
        linear = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
        layer = op.NVFP4Linear(linear)
        for m in (1, 16, 128, 1024):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                error = ((layer(x).float() - linear(x).float()).norm() / linear(x).float().norm()).item()
                times = paired({"nvfp4": lambda: layer(x), "bf16": lambda: linear(x)}, rounds=9)
            print(f"N {n} K {k} M {m}: relative L2 error {error:.3f}; NVFP4Linear {times['nvfp4'] * 1e6:.1f} us, "
                  f"bf16 nn.Linear {times['bf16'] * 1e6:.1f} us ({times['bf16'] / times['nvfp4']:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
