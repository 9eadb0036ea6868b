"""nvfp4_gemm design points (and any genomes given as JSON) against both anchors at every shape (GPU).

    python benchmarks/nvfp4_report.py                                  # the test design points
    python benchmarks/nvfp4_report.py '{"block_m": 128, ...}' ...      # also these genomes

Each genome is built and evaluated as in a search (verified on every shape, fresh inputs, then
timed by CUDA-graph replays); torch dequantise + matmul and bf16 cuBLAS on operands dequantised
beforehand are timed the same way in the same process.
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, screen  # noqa: E402
from evo.seeds import get_family  # noqa: E402
from evo.seeds.nvfp4_gemm.designs import DESIGN_POINTS  # noqa: E402

family = get_family("nvfp4_gemm")
genomes = list(DESIGN_POINTS) + [family.space.check(family.space.genome(json.loads(t))) for t in sys.argv[1:]]
work = Path(tempfile.mkdtemp())
builder = Builder(BuildConfig(work / "cache"))
evaluator = Evaluator(family, EvalConfig(trials=1), work / "loaded")
(bf16_name, bf16), = family.secondary_anchors().items()
torch_s = {s.name: evaluator.time_anchor(family.anchor, s).median_s for s in family.shapes}
bf16_s = {s.name: evaluator.time_anchor(bf16, s).median_s for s in family.shapes}
for genome in genomes:
    recipe = family.build_recipe(genome)
    build = builder.build(genome.id, recipe)
    result = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
    print(genome, result.status.value, result.message[:200])
    for t in result.timings:
        print(f"  {t.shape:20s} {t.median_s * 1e6:9.1f} us   torch {torch_s[t.shape] * 1e6:9.1f}   "
              f"bf16 {bf16_s[t.shape] * 1e6:9.1f}   x{torch_s[t.shape] / t.median_s:6.2f} vs torch  "
              f"{t.median_s / bf16_s[t.shape]:5.2f} of bf16")
