"""What a short-spec family does at run time — inputs, output, reference, anchor, loading and launching
the kernel, the exported op's public function — from the spec's plain description (a dict of JSON types):
a ``SpecRuntime`` is the family's runtime (seeds/_family.py, ``RuntimeFamily``). Standalone (torch,
ctypes, and for CUDA cuda.py beside it), so that evo's evaluators and an exported package run the same
code: `evo export` copies evo.runtime whole as evo_runtime/ beside the op's module, and writes evo_family.py (``runtime_module``) to make the runtime from the spec.

The description: {"device": "cpu" | "cuda", "function": name, "args": [{"tensor": name, "shape": "m, k",
"dtype": ..., "output": bool} | {"scalar": name, "value": expression, "ctype": ...}], "reference": expression,
"anchor": expression, and for CUDA "grid", "block" (expressions, comma-separated up to 3) and "shared_bytes"}.
Expressions read the shape's dimensions, and for CUDA's launch also the genome's knobs (in capitals, as
the source sees them as macros).
"""

from __future__ import annotations

import ctypes
from typing import Any, Mapping

CTYPES = {"int": ctypes.c_int, "long": ctypes.c_long, "float": ctypes.c_float, "double": ctypes.c_double}
SAFE_BUILTINS = {"min": min, "max": max, "abs": abs}
CUDA_DEFAULT_SHARED = 48 * 1024  # dynamic shared memory a kernel may use without asking


from . import cuda as _CUDA


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    return eval(compile(str(expression).strip(), "<spec>", "eval"), {"__builtins__": SAFE_BUILTINS}, dict(names))


def knob_names(genome: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs as the source and the launch expressions see them: capitals, Booleans as 0 or 1."""
    return {name.upper(): int(value) if isinstance(value, bool) else value for name, value in genome.items()}


class SpecRuntime:
    PUBLIC = "call"
    NO_GRADIENT = "a short spec's op computes no gradients"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)
        self.DEVICE = self.spec.get("device", "cpu")  # the runtime protocol's name
        self.inputs = [a for a in self.spec["args"] if "tensor" in a and not a.get("output")]
        self.output = next(a for a in self.spec["args"] if a.get("output"))
        names = [a["tensor"] for a in self.inputs]
        self.SCHEMA = "(" + ", ".join(f"Tensor {name}" for name in names) + ") -> Tensor"
        self.USAGE = (f"{self.spec['function']}, tuned by evo.\n\n    import __OP_NAME__ as k\n"
                      f"    out = k.call({', '.join(names)})\n"
                      f"    out = torch.ops.evo.__OP_NAME__({', '.join(names)})  # the same as a torch custom op")

    # -- shapes ---------------------------------------------------------------------------------
    def sizes(self, arg: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(evaluate(part, dims)) for part in arg["shape"].split(","))

    def dims_of(self, inputs) -> dict[str, int]:
        """The dimensions, read off the inputs (each an axis of exactly that name), the inputs checked."""
        import torch

        if len(inputs) != len(self.inputs):
            raise ValueError(f"{len(inputs)} inputs given; the op takes {[a['tensor'] for a in self.inputs]}")
        for arg, tensor in zip(self.inputs, inputs):
            rank = len(arg["shape"].split(","))
            if tensor.dtype != getattr(torch, arg["dtype"]) or tensor.device.type != self.DEVICE or tensor.dim() != rank:
                raise ValueError(f"{arg['tensor']} must be a {rank}-D {arg['dtype']} tensor on {self.DEVICE}, "
                                 f"got {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}")
        dims = self.read_dims(inputs)
        for arg, tensor in zip(self.inputs, inputs):
            if self.sizes(arg, dims) != tuple(tensor.shape):
                raise ValueError(f"{arg['tensor']} is {tuple(tensor.shape)}; with {dims} it must be "
                                 f"{self.sizes(arg, dims)}")
        return dims

    def read_dims(self, inputs) -> dict[str, Any]:
        """Each dimension from the first input axis of exactly that name (sizes unchecked)."""
        dims: dict[str, Any] = {}
        for arg, tensor in zip(self.inputs, inputs):
            for part, size in zip(arg["shape"].split(","), tensor.shape):
                if part.strip().isidentifier():
                    dims.setdefault(part.strip(), size)
        return dims

    # -- data -----------------------------------------------------------------------------------
    def make_inputs(self, dims: Mapping[str, int], generator) -> tuple:
        import torch

        made = []
        for arg in self.inputs:
            dtype, sizes = getattr(torch, arg["dtype"]), self.sizes(arg, dims)
            if dtype.is_floating_point:
                made.append(torch.randn(sizes, generator=generator, dtype=torch.float32, device=generator.device)
                            .to(dtype))
            else:
                made.append(torch.randint(-100, 100, sizes, generator=generator, dtype=dtype, device=generator.device))
        return tuple(made)

    def make_output(self, dims: Mapping[str, int]):
        import torch

        return torch.empty(self.sizes(self.output, dims), dtype=getattr(torch, self.output["dtype"]), device=self.DEVICE)

    def named(self, inputs) -> dict:
        return {arg["tensor"]: tensor for arg, tensor in zip(self.inputs, inputs)}

    def reference(self, dims: Mapping[str, int], inputs):
        import torch

        wide = [t.double() if t.is_floating_point() else t for t in inputs]
        return evaluate(self.spec["reference"], {**self.named(wide), "torch": torch})

    def anchor(self, dims: Mapping[str, int], inputs):
        """The anchor, the spec's own expression."""
        import torch

        return evaluate(self.spec["anchor"], {**self.named(inputs), "torch": torch})

    # -- the kernel -----------------------------------------------------------------------------
    def load(self, artifact, genome: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        """The kernel in a built artifact (a shared library's function, or a cubin's kernel), with the
        genome whose knobs its launch reads."""
        if self.DEVICE == "cpu":
            function = getattr(ctypes.CDLL(str(artifact)), self.spec["function"])
            function.argtypes = [ctypes.c_void_p if "tensor" in a else CTYPES[a["ctype"]] for a in self.spec["args"]]
            function.restype = None
            return function, genome
        module = _CUDA.CudaModule(artifact)
        return module.kernel(self.spec["function"]), genome

    def launch(self, loaded, dims: Mapping[str, int], inputs, out) -> None:
        """The kernel on ``inputs`` into ``out``, for its genome's knobs (CUDA: its grid, block, shared bytes)."""
        kernel, genome = loaded
        tensors = iter(inputs)
        values = []
        for arg in self.spec["args"]:
            if "tensor" in arg:
                values.append(ctypes.c_void_p((out if arg.get("output") else next(tensors)).data_ptr()))
            else:
                values.append(CTYPES[arg["ctype"]](evaluate(arg["value"], dims)))
        if self.DEVICE == "cpu":
            kernel(*values)
            return
        names = {**dims, **knob_names(genome)}
        shared = int(evaluate(self.spec.get("shared_bytes", "0"), names))
        if shared > CUDA_DEFAULT_SHARED and getattr(kernel, "_evo_shared", 0) < shared:
            kernel.set_max_dynamic_shared(shared)
            kernel._evo_shared = shared
        kernel.launch(self.launch_dims("grid", names), self.launch_dims("block", names), values, shared)

    def launch_dims(self, key: str, names: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(evaluate(part, names)) for part in str(self.spec[key]).split(","))

    # -- the exported op's public function ----------------------------------------------------------
    def call(self, op, *inputs):
        """The op on the inputs (in the order of the spec's input tensors): the evolved kernel measured fastest
        for this shape, or the anchor where none is faster."""
        self.dims_of(inputs)
        return op(*inputs)

    def compute(self, op, *inputs):
        """The custom op's body: the chosen kernel, or the anchor."""
        dims = self.dims_of(inputs)
        kernel, _ = op.choose(dims)
        if kernel is None:
            return self.anchor(dims, inputs)
        out = self.make_output(dims)
        op.launch_kernel(kernel, dims, [t.contiguous() for t in inputs], out)
        return out

    def call_with(self, op, dims: Mapping[str, int], inputs):
        return self.call(op, *inputs)

    def fake(self, *inputs):
        import torch

        return inputs[0].new_empty(self.sizes(self.output, self.read_dims(inputs)), dtype=getattr(torch, self.output["dtype"]))


def runtime_module(family: str, spec: Mapping[str, Any]) -> str:
    """The text of an exported package's evo_family.py: the family's runtime, made from its spec."""
    import json

    names = ("DEVICE", "PUBLIC", "SCHEMA", "USAGE", "make_inputs", "make_output", "reference", "anchor", "load",
             "launch", "call", "compute", "call_with", "fake", "NO_GRADIENT")
    return (f'"""The runtime of family {family}: its short spec (SPEC), run by evo_runtime/spec.py as evo '
            f'ran it."""\n\nimport json\n\nfrom evo_runtime.spec import SpecRuntime\n\n'
            f"SPEC = json.loads({json.dumps(json.dumps(spec, indent=1))})\n_RUNTIME = SpecRuntime(SPEC)\n"
            + "".join(f"{name} = _RUNTIME.{name}\n" for name in names))
