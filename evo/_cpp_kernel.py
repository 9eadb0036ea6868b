"""The short spec of a C++ kernel family: a source whose knobs are macros, a function's arguments as
expressions of a shape's dimensions, the reference and the anchor as Python expressions over the inputs
(named as the arguments; ``torch`` at hand). evo does the rest: build, load (ctypes), inputs, launch,
and the export, with nothing written twice: the exported package runs this same description.

    FAMILY = CppKernel(
        name="add", source="add.cpp", function="evo_add",
        knobs=[Choice("unroll", (1, 2, 4, 8), ordered=True)],
        shapes=[shape("mission", n=4096, mission=True), shape("odd", n=1001)],
        args=[Tensor("a", "n"), Tensor("b", "n"), Tensor("out", "n", output=True), Scalar("n")],
        reference="a + b", anchor="torch.add(a, b)",
    )

Each knob reaches the source as a macro of its name in capitals (``-DUNROLL=4``; a Boolean as 0 or 1),
also in ``#pragma`` lines. Definition errors are ``ValueError`` naming the family, the item and the fix.
"""

from __future__ import annotations

import ast
import ctypes
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from kernel_genome import Constraint, Space
from seeds import BuildRecipe, KernelFamily, ProblemShape, TimingPlan, Tolerance

CPP_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fPIC", "-shared")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
CTYPES = {"int": ctypes.c_int, "long": ctypes.c_long, "float": ctypes.c_float, "double": ctypes.c_double}
TOLERANCES = {"float32": Tolerance(max_abs=1e-4, max_rel_l2=1e-5, rtol=1e-4),
              "float64": Tolerance(max_abs=1e-10, max_rel_l2=1e-12, rtol=1e-10),
              "float16": Tolerance(max_abs=1e-2, max_rel_l2=1e-3, rtol=1e-2),
              "bfloat16": Tolerance(max_abs=5e-2, max_rel_l2=1e-2, rtol=5e-2)}
SAFE_BUILTINS = {"min": min, "max": max, "abs": abs}


@dataclass(frozen=True)
class Tensor:
    """A tensor argument: ``shape`` is its sizes as expressions of the dimensions ("m, k"); the one with
    ``output=True`` is what the function writes (poisoned before each run, compared with the reference)."""

    name: str
    shape: str
    dtype: str = "float32"
    output: bool = False

    def sizes(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(evaluate(part, dims)) for part in self.shape.split(","))


@dataclass(frozen=True)
class Scalar:
    """A scalar argument: ``value`` an expression of the dimensions (default: the dimension of its name)."""

    name: str
    value: str = ""
    ctype: str = "int"

    @property
    def expression(self) -> str:
        return self.value or self.name


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    return eval(compile(expression.strip(), "<spec>", "eval"), {"__builtins__": SAFE_BUILTINS}, dict(names))


def _names_in(expression: str) -> set[str]:
    """The free names an expression reads (attributes such as ``torch.add`` count as ``torch``)."""
    tree = ast.parse(expression.strip(), mode="eval")
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(SAFE_BUILTINS)


class CppKernel(KernelFamily):
    device = "cpu"
    export_template = Path(__file__).with_name("_templates") / "cpp_kernel.py.in"  # one launcher for every spec

    def __init__(self, *, name: str, source: str | Path, function: str, knobs, shapes, args: Sequence[Tensor | Scalar],
                 reference: str, anchor: str, constraints: Mapping[str, str] | None = None,
                 seed: Mapping[str, Any] | None = None, description: str = "", tolerance: Tolerance | None = None,
                 flags: Sequence[str] = CPP_FLAGS, timing: TimingPlan | None = None, workloads=(),
                 anchor_name: str | None = None) -> None:
        self.name, self.function, self.args = name, function, tuple(args)
        self.description = description or f"{function} in C++"
        here = Path(inspect.stack()[1].filename).resolve().parent  # the spec file's folder
        self.source_path = (here / source).resolve()
        self.flags = tuple(flags)
        self.shapes, self.workloads = tuple(shapes), tuple(workloads)
        self.reference_expression, self.anchor_expression = reference, anchor
        self.anchor_name = anchor_name or anchor
        if timing is not None:
            self.timing = timing
        rules = dict(constraints or {})
        self._check(knobs, rules)
        self.space = Space(list(knobs), [Constraint(rule, _predicate(text), text) for rule, text in rules.items()])
        first = {k.name: k.values[0] for k in self.space.knobs}
        try:
            self.seed_genomes = (self.space.genome({**first, **dict(seed or {})}),)
        except ValueError as exc:
            raise self._error("seed", f"{exc}; give seed= a genome that meets every constraint") from None
        self.tolerance = tolerance or TOLERANCES.get(self.output.dtype, Tolerance(max_abs=0.0, max_rel_l2=0.0))

    # -- the definition's checks ------------------------------------------------------------------
    def _error(self, item: str, text: str) -> ValueError:
        return ValueError(f"family {self.name!r}, {item}: {text}")

    def _check(self, knobs, rules: Mapping[str, str]) -> None:
        if not self.source_path.is_file():
            raise self._error("source", f"no file {self.source_path}; give its path relative to the spec file")
        knob_names = {k.name for k in knobs}
        for rule, text in rules.items():
            unknown = _names_in(text) - knob_names
            if unknown:
                raise self._error(f"constraint {rule!r}", f"names {sorted(unknown)}, not knobs "
                                                          f"(knobs: {sorted(knob_names)})")
        outputs = [a for a in self.args if isinstance(a, Tensor) and a.output]
        if len(outputs) != 1:
            raise self._error("args", f"{len(outputs)} tensors marked output=True; mark exactly one")
        for arg in self.args:
            if isinstance(arg, Tensor) and arg.dtype not in DTYPES:
                raise self._error(f"tensor {arg.name!r}", f"dtype {arg.dtype!r}; one of {DTYPES}")
            if isinstance(arg, Scalar) and arg.ctype not in CTYPES:
                raise self._error(f"scalar {arg.name!r}", f"ctype {arg.ctype!r}; one of {sorted(CTYPES)}")
        inputs = [a.name for a in self.args if isinstance(a, Tensor) and not a.output]
        for what, text in (("reference", self.reference_expression), ("anchor", self.anchor_expression)):
            unknown = _names_in(text) - set(inputs) - {"torch"}
            if unknown:
                raise self._error(what, f"{text!r} names {sorted(unknown)}; it may use the inputs {inputs} and torch")
        if not any(s.mission for s in self.shapes):
            raise self._error("shapes", "none is marked mission=True; mark the one whose time is the fitness")
        for s in self.shapes:
            for arg in self.args:
                expressions = arg.shape.split(",") if isinstance(arg, Tensor) else [arg.expression]
                missing = set().union(*(_names_in(e) for e in expressions)) - set(dict(s.dims))
                if missing:
                    raise self._error(f"shape {s.name!r}", f"has no dimension {sorted(missing)}, which "
                                                           f"{arg.name!r} needs; add it to the shape")
        if not self.inferable_dims():
            raise self._error("args", "a dimension is no input tensor's plain size; the exported op could not "
                                      "infer it (give some input an axis of exactly that name)")

    def inferable_dims(self) -> bool:
        """Whether every dimension is the plain size of some input tensor's axis (what the export reads)."""
        plain = {part.strip() for a in self.args if isinstance(a, Tensor) and not a.output for part in a.shape.split(",")}
        return all(set(dict(s.dims)) <= plain for s in self.shapes)

    @property
    def output(self) -> Tensor:
        return next(a for a in self.args if isinstance(a, Tensor) and a.output)

    # -- what evo calls -----------------------------------------------------------------------------
    def build_recipe(self, genome) -> BuildRecipe:
        macros = tuple(f"-D{name.upper()}={int(v) if isinstance(v, bool) else v}" for name, v in genome.as_dict().items())
        return BuildRecipe(self.source_path.read_text(), self.source_path.name, "c++", self.flags + macros,
                           "shared_library")

    def make_inputs(self, shape: ProblemShape, generator) -> tuple:
        return tuple(_random(a, dict(shape.dims), generator) for a in self.args if isinstance(a, Tensor) and not a.output)

    def make_output(self, shape: ProblemShape):
        import torch

        return torch.empty(self.output.sizes(dict(shape.dims)), dtype=getattr(torch, self.output.dtype))

    def reference(self, shape: ProblemShape, inputs):
        import torch

        wide = [t.double() if t.is_floating_point() else t for t in inputs]
        return evaluate(self.reference_expression, {**self._named(wide), "torch": torch})

    def anchor(self, shape: ProblemShape, inputs):
        import torch

        return evaluate(self.anchor_expression, {**self._named(inputs), "torch": torch})

    def load(self, artifact: Path, genome):
        function = getattr(ctypes.CDLL(str(artifact)), self.function)
        function.argtypes = [ctypes.c_void_p if isinstance(a, Tensor) else CTYPES[a.ctype] for a in self.args]
        function.restype = None
        return function

    def launch(self, kernel, shape: ProblemShape, inputs, output) -> None:
        tensors = iter(inputs)
        kernel(*[output.data_ptr() if isinstance(a, Tensor) and a.output else next(tensors).data_ptr()
                 if isinstance(a, Tensor) else evaluate(a.expression, dict(shape.dims)) for a in self.args])

    def _named(self, inputs) -> dict:
        return dict(zip([a.name for a in self.args if isinstance(a, Tensor) and not a.output], inputs))

    def export_description(self) -> dict:
        """What the exported package's generic launcher needs (evo/_templates/cpp_kernel.py.in)."""
        return {"function": self.function, "output": self.output.name,
                "args": [{"tensor": a.name, "shape": a.shape, "dtype": a.dtype, "output": a.output}
                         if isinstance(a, Tensor) else {"scalar": a.name, "value": a.expression, "ctype": a.ctype}
                         for a in self.args],
                "reference": self.reference_expression, "anchor": self.anchor_expression}


def _predicate(text: str):
    return lambda values: bool(evaluate(text, values))


def _random(tensor: Tensor, dims: Mapping[str, int], generator):
    import torch

    dtype = getattr(torch, tensor.dtype)
    sizes = tensor.sizes(dims)
    if dtype.is_floating_point:
        return torch.randn(sizes, generator=generator, dtype=torch.float32).to(dtype)
    return torch.randint(-100, 100, sizes, generator=generator, dtype=dtype)
