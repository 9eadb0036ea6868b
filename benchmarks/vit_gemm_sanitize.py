"""Launch vit_gemm design points once per shape and check each output (GPU); for compute-sanitizer.

    compute-sanitizer --tool memcheck --report-api-errors no --kernel-name kns=vit_gemm \
        python benchmarks/vit_gemm_sanitize.py          # also --tool racecheck, --tool synccheck

The genomes of tests/test_vit_gemm.py (ping-pong, the cp.async prefetch, the row-wise epilogue,
clusters with TMA multicast, pos by TMA boxes) and the seed, on the family's two small shapes
(batch 8, and M and N multiples of no tile). Outputs are NaN-poisoned before each launch.
"""
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fitness import BuildConfig, Builder
from seeds import get_family
from test_vit_gemm import CLUSTERED, CLUSTERED_WIDE, PINGPONG, PREFETCH, PREFETCH_TMA, PREFETCH_TWO, ROWWISE, SEED

family = get_family("vit_gemm")
genomes = {"seed": SEED, "ping-pong": PINGPONG, "cp.async prefetch": PREFETCH, "two prefetch buffers": PREFETCH_TWO,
           "pos by TMA": PREFETCH_TMA, "row-wise": ROWWISE, "cluster ping-pong": CLUSTERED,
           "cluster cooperative": CLUSTERED_WIDE}
shapes = [s for s in family.shapes if not s.mission and s["m"] < 10_000]
builder = Builder(BuildConfig(Path(tempfile.mkdtemp())))
generator = torch.Generator(device="cuda").manual_seed(0)
for name, genome in genomes.items():
    build = builder.build(genome.id, family.build_recipe(genome))
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(build.artifact)
    kernel = family.load(path, genome)
    for shape in shapes:
        inputs = family.make_inputs(shape, generator)
        out = family.make_output(shape).fill_(float("nan"))
        family.launch(kernel, shape, inputs, out)
        torch.cuda.synchronize()
        error = (out.double() - family.reference(shape, inputs).double()).abs().max().item()
        print(f"{name} {genome.id} {shape.name}: max abs error {error:.4f}", flush=True)
        assert error <= family.tolerance.max_abs, (name, shape.name, error)
print("all launched")
