"""The family API, what users write their own kernel families against.

A family declares its knobs (a ``Space`` of ``Choice``, ``PowerOfTwo``, ``IntRange``, ``Boolean``, with
named constraints), its seed genome(s), its problem shapes (one the mission), how to make inputs, the
reference (PyTorch, higher precision) and its tolerance, the anchor (what a user would call instead), how
to build a genome and how to launch what was built. evo guarantees around it: each genome is built once
(content-addressed cache) and screened; its output is poisoned (NaN) before every run and must be fully
written; it is verified on fresh random inputs on every shape of the family before it is timed; a crash
or hang costs its evaluator process, never the search; the anchor is timed in the same process.

Two ways to write one:

- The short spec, for a C++ function or a CUDA kernel whose knobs are macros (``CppKernel``,
  ``CudaKernel``): about 15 lines, no launch code.
- A subclass of ``RuntimeFamily``, as the built-in families are: ``build_recipe`` in the class, the
  inputs, reference, anchor, load, launch and the exported op's public function in a standalone runtime
  module (see its docstring), which evo's evaluators run and `evo export` ships (so does a short spec's).
  A subclass of the bare ``KernelFamily`` with its seven methods searches, but cannot be exported.

A family is found as a folder's path (``evo search --family ./myfamily``: its ``spec.py`` defines
FAMILY), a ``module:ATTRIBUTE``, or an installed package's ``evo.families`` entry point.
See docs/FAMILIES.md.
"""

from evo._short_spec import CppKernel, CudaKernel, Scalar, Tensor
from evo.kernel_genome import Boolean, Choice, Constraint, IntRange, PowerOfTwo, Space
from evo.seeds import BuildRecipe, KernelFamily, ProblemShape, RuntimeFamily, TimingPlan, Tolerance, shape, workload

__all__ = [
    "Boolean",
    "BuildRecipe",
    "Choice",
    "Constraint",
    "CppKernel",
    "CudaKernel",
    "IntRange",
    "KernelFamily",
    "PowerOfTwo",
    "ProblemShape",
    "RuntimeFamily",
    "Scalar",
    "Space",
    "Tensor",
    "TimingPlan",
    "Tolerance",
    "shape",
    "workload",
]
