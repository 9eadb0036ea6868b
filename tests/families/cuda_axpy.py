"""A test-only CUDA family with injected faults: checks the GPU path of the pipeline
(nvcc cubin, ptxas screen, cuda.bindings launch, CUDA-event timing, crash and hang isolation)."""

from __future__ import annotations

import ctypes
from pathlib import Path

from evo.kernel_genome import Choice, Space
from evo.seeds import BuildRecipe, KernelFamily, TimingPlan, Tolerance, shape

MODES = {"ok": 0, "wrong": 1, "nan": 2, "illegal_address": 3, "hang": 4, "nowrite": 5}
SOURCE = Path(__file__).with_name("cuda_axpy.cu")
SPACE = Space([Choice("mode", tuple(MODES)), Choice("threads", (64, 128, 256, 512), ordered=True),
               Choice("per_thread", (1, 2, 4), ordered=True)])


class CudaAxpy(KernelFamily):
    name = "cuda_axpy"
    description = "out = 2a + b on the GPU, with a knob that injects faults"
    device = "cuda"
    space = SPACE
    seed_genomes = (SPACE.genome({"mode": "ok", "threads": 128, "per_thread": 1}),)
    shapes = (shape("mission", n=1 << 20, mission=True), shape("odd", n=100_003))
    tolerance = Tolerance(max_abs=1e-5, max_rel_l2=1e-6)
    anchor_name = "2 * a + b in torch"
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.05)

    def build_recipe(self, genome):
        flags = ("-gencode", "arch=compute_90a,code=sm_90a", "-O3", f"-DMODE={MODES[genome['mode']]}",
                 f"-DTHREADS={genome['threads']}", f"-DPER_THREAD={genome['per_thread']}")
        return BuildRecipe(SOURCE.read_text(), SOURCE.name, "nvcc", flags, "cubin")

    def make_inputs(self, shape, generator):
        import torch

        n = shape["n"]
        return (torch.randn(n, generator=generator, device="cuda"), torch.randn(n, generator=generator, device="cuda"))

    def make_output(self, shape):
        import torch

        return torch.empty(shape["n"], device="cuda")

    def reference(self, shape, inputs):
        a, b = inputs
        return 2 * a.double() + b.double()

    def load(self, artifact: Path, genome):
        from evo.runtime.cuda import CudaModule

        return CudaModule(artifact).kernel("evo_axpy"), genome["threads"], genome["per_thread"]

    def launch(self, kernel, shape, inputs, output):
        from evo.runtime.cuda import ptr

        function, threads, per_thread = kernel
        n = shape["n"]
        blocks = (n + threads * per_thread - 1) // (threads * per_thread)
        function.launch((blocks,), (threads,), [ptr(inputs[0]), ptr(inputs[1]), ptr(output), ctypes.c_int(n)])

    def anchor(self, shape, inputs):
        a, b = inputs
        return 2 * a + b


FAMILY = CudaAxpy()
