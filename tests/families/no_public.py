"""cpu_gemm with a runtime that runs its kernels but gives the exported op no public function: it searches,
and its export is refused in one line."""

import types

from evo.seeds.cpu_gemm import runtime as cpu_gemm_runtime
from evo.seeds.cpu_gemm.spec import CpuGemm


class NoPublic(CpuGemm):
    name = "no_public"
    runtime = types.SimpleNamespace(**{name: getattr(cpu_gemm_runtime, name) for name in CpuGemm.RUNS_WITH})


FAMILY = NoPublic()
