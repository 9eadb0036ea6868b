"""What a family's runtime module defines: evo's evaluators run the family's kernels through it, and
`evo export` ships it as evo_family.py beside the op (a ``RuntimeFamily`` in evo's family contract).

The runtime module (or an object with the same names) defines, for ``dims``
a shape's dimensions (a dict, name -> value) and ``genome`` a dict of knobs:
  DEVICE                            "cpu" or "cuda"
  make_inputs(dims, generator)      fresh random inputs (a tuple)
  make_output(dims)                 the output tensor (poisoned by evo before every run)
  reference(dims, inputs)           the exact answer in higher precision
  anchor(dims, inputs)              what a user would run instead; its docstring names it
  load(artifact, genome)            a handle on the built kernel (a shared library's function, a cubin's)
  launch(handle, dims, inputs, out) the kernel once on ``inputs`` into ``out``
  PUBLIC, SCHEMA, compute, fake     the exported op: ``PUBLIC`` names the public function ``PUBLIC(op, *args)``
                                    of the runtime, which checks its arguments, runs PyTorch's own
                                    computation for what no kernel takes, and hands the rest to
                                    ``op(*schema_args)``: the torch custom op of schema ``SCHEMA`` whose body
                                    is ``compute(op, *schema_args)`` (it asks ``op.choose(dims, device)`` for
                                    a kernel id, None: PyTorch, and runs it with ``op.launch_kernel(kernel_id,
                                    dims, inputs, out)``) and whose fake is ``fake(*schema_args)`` (shapes
                                    only, for torch.compile); the public function must be traceable by it
  call_with(op, dims, inputs)       the public function on the inputs ``make_inputs`` draws
  USAGE                             how to call it, for the package's docstring and README
                                    (``__OP_NAME__`` stands for the module's name)
and may define ``fallback(dims, inputs)`` (PyTorch's computation of the whole result, when the anchor
is less), ``takes(genome, dims)`` (whether a kernel can run a shape), ``bucket(dims)`` (the largest shape
of the calls one measured decision covers; default: the shape alone), ``verify_dims(dims)`` (a smaller
shape of the same kind a kernel is verified on before it is chosen), ``gradient(grad, *schema_args)`` with
``GRADIENT_SCHEMA`` and ``gradient_fake`` (the op's backward: PyTorch's gradients of the schema's tensor
arguments, a tensor each; without it the op refuses an input that requires a gradient, saying
``NO_GRADIENT``), ``surfaces(op)`` (more names for the package's module, such as drop-in modules),
``OTHER_ANCHORS`` (name -> function like ``anchor``), ``COSTLY_ANCHORS`` (names left out of a workload
op's self-check) and ``complete_dims(dims)`` (the dimensions a caller of the package's choose or prepare may
leave out, filled in).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

RUNS_WITH = ("DEVICE", "make_inputs", "make_output", "reference", "anchor", "load", "launch")  # evo's evaluators
EXPORTS_WITH = ("PUBLIC", "SCHEMA", "compute", "fake", "call_with", "USAGE")  # an exported op besides

Dims = Mapping[str, int]
Knobs = Mapping[str, Any]


@runtime_checkable
class FamilyRuntime(Protocol):
    """The names evo's evaluators need (RUNS_WITH); see the module's documentation for the rest."""

    DEVICE: str

    def make_inputs(self, dims: Dims, generator: Any) -> tuple: ...

    def make_output(self, dims: Dims) -> Any: ...

    def reference(self, dims: Dims, inputs: Sequence[Any]) -> Any: ...

    def anchor(self, dims: Dims, inputs: Sequence[Any]) -> Any: ...

    def load(self, artifact: Any, genome: Knobs) -> Any: ...

    def launch(self, handle: Any, dims: Dims, inputs: Sequence[Any], out: Any) -> None: ...

