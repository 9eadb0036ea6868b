"""The short spec of a kernel family: a source whose knobs are macros, the function's arguments as
expressions of a shape's dimensions, the reference and the anchor as Python expressions over the inputs
(named as the arguments; ``torch`` at hand), and for CUDA the launch (grid, block, dynamic shared memory)
as expressions of the dimensions and the knobs. evo does the rest: build, load, inputs, launch and the
export, all through evo/runtime/spec.py, which the exported package carries too (nothing written twice).

    FAMILY = CppKernel(
        name="add", source="add.cpp", function="evo_add",
        knobs=[Choice("unroll", (1, 2, 4, 8), ordered=True)],
        shapes=[shape("mission", n=4096, mission=True), shape("odd", n=1001)],
        args=[Tensor("a", "n"), Tensor("b", "n"), Tensor("out", "n", output=True), Scalar("n")],
        reference="a + b", anchor="torch.add(a, b)",
    )
    FAMILY = CudaKernel(..., grid="(n + BLOCK - 1) // BLOCK", block="BLOCK")   # extern "C" __global__

Each knob reaches the source as a macro of its name in capitals (``-DUNROLL=4``; a Boolean as 0 or 1),
also in ``#pragma`` lines. Definition errors are ``ValueError`` naming the family, the item and the fix.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from evo.runtime.spec import CTYPES, SAFE_BUILTINS, SpecRuntime, evaluate, knob_names, runtime_module
from evo.kernel_genome import Constraint, Space
from evo.seeds import HOPPER_NVCC_FLAGS, BuildRecipe, RuntimeFamily, TimingPlan, Tolerance

CPP_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fPIC", "-shared")
NVCC_FLAGS = HOPPER_NVCC_FLAGS  # Hopper (the H100)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
TOLERANCES = {"float32": Tolerance(max_abs=1e-4, max_rel_l2=1e-5, rtol=1e-4),
              "float64": Tolerance(max_abs=1e-10, max_rel_l2=1e-12, rtol=1e-10),
              "float16": Tolerance(max_abs=1e-2, max_rel_l2=1e-3, rtol=1e-2),
              "bfloat16": Tolerance(max_abs=5e-2, max_rel_l2=1e-2, rtol=5e-2)}


@dataclass(frozen=True)
class Tensor:
    """A tensor argument: ``shape`` is its sizes as expressions of the dimensions ("m, k"); the one with
    ``output=True`` is what the function writes (poisoned before each run, compared with the reference)."""

    name: str
    shape: str
    dtype: str = "float32"
    output: bool = False


@dataclass(frozen=True)
class Scalar:
    """A scalar argument: ``value`` an expression of the dimensions (default: the dimension of its name)."""

    name: str
    value: str = ""
    ctype: str = "int"

    @property
    def expression(self) -> str:
        return self.value or self.name


def _names_in(expression: str) -> set[str]:
    """The free names an expression reads (attributes such as ``torch.add`` count as ``torch``)."""
    tree = ast.parse(expression.strip(), mode="eval")
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(SAFE_BUILTINS)


class _ShortSpec(RuntimeFamily):
    """What both short specs share; see CppKernel and CudaKernel."""

    compiler = "c++"
    output_kind = "shared_library"

    def __init__(self, *, name: str, source: str | Path, function: str, knobs, shapes, args: Sequence[Tensor | Scalar],
                 reference: str, anchor: str, constraints: Mapping[str, str] | None = None,
                 seed: Mapping[str, Any] | None = None, description: str = "", tolerance: Tolerance | None = None,
                 flags: Sequence[str], timing: TimingPlan | None = None, workloads=(),
                 anchor_name: str | None = None, launch: Mapping[str, str] | None = None) -> None:
        self.name, self.function, self.args = name, function, tuple(args)
        self.description = description or f"{function}"
        self.source_path = (_spec_folder() / source).resolve()
        self.flags = tuple(flags)
        self.shapes, self.workloads = tuple(shapes), tuple(workloads)
        self.reference_expression, self.anchor_expression = reference, anchor
        self.anchor_name = anchor_name or anchor
        self.launch_expressions = dict(launch or {})
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
        self.runtime = SpecRuntime(self.export_description())

    # -- the definition's checks ------------------------------------------------------------------
    def _error(self, item: str, text: str) -> ValueError:
        return ValueError(f"family {self.name!r}, {item}: {text}")

    def _check(self, knobs, rules: Mapping[str, str]) -> None:
        if not self.source_path.is_file():
            raise self._error("source", f"no file {self.source_path}; give its path relative to the spec file")
        knobs_by_name = {k.name for k in knobs}
        for rule, text in rules.items():
            unknown = _names_in(text) - knobs_by_name
            if unknown:
                raise self._error(f"constraint {rule!r}", f"names {sorted(unknown)}, not knobs "
                                                          f"(knobs: {sorted(knobs_by_name)})")
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
        self._check_launch(knobs_by_name)

    def _check_launch(self, knobs: set[str]) -> None:
        """CUDA's launch expressions (nothing for C++)."""

    def inferable_dims(self) -> bool:
        """Whether every dimension is the plain size of some input tensor's axis (what the export reads)."""
        plain = {part.strip() for a in self.args if isinstance(a, Tensor) and not a.output for part in a.shape.split(",")}
        return all(set(dict(s.dims)) <= plain for s in self.shapes)

    @property
    def output(self) -> Tensor:
        return next(a for a in self.args if isinstance(a, Tensor) and a.output)

    # -- what evo calls -----------------------------------------------------------------------------
    def code_files(self) -> tuple[Path, ...]:
        """Also the runtime every short spec runs on (evo/runtime/spec.py, and cuda.py it launches with)."""
        return tuple(sorted({*super().code_files(), *_spec_runtime_files()}))

    def build_recipe(self, genome) -> BuildRecipe:
        macros = tuple(f"-D{name}={value}" for name, value in knob_names(genome.as_dict()).items())
        return BuildRecipe(self.source_path.read_text(), self.source_path.name, self.compiler, self.flags + macros,
                           self.output_kind, origin=self.source_path)

    def export_runtime(self) -> str:
        return runtime_module(self.name, self.export_description())

    def export_description(self) -> dict:
        """The spec as plain data: what evo/runtime/spec.py runs, here and in an exported package."""
        return {"device": self.device, "function": self.function,
                "args": [{"tensor": a.name, "shape": a.shape, "dtype": a.dtype, "output": a.output}
                         if isinstance(a, Tensor) else {"scalar": a.name, "value": a.expression, "ctype": a.ctype}
                         for a in self.args],
                "reference": self.reference_expression, "anchor": self.anchor_expression, **self.launch_expressions}


class CppKernel(_ShortSpec):
    """A C++ function ``extern "C" void function(args...)`` built into a shared library."""

    device = "cpu"

    def __init__(self, *, flags: Sequence[str] = CPP_FLAGS, **spec) -> None:
        super().__init__(flags=flags, **spec)


class CudaKernel(_ShortSpec):
    """A CUDA kernel ``extern "C" __global__ void function(args...)`` built into a cubin (sm_90a by
    default) and launched through cuda.bindings: ``grid`` and ``block`` (up to three comma-separated
    expressions) and ``shared_bytes`` (dynamic shared memory) read the dimensions and the knobs in capitals."""

    device = "cuda"
    compiler = "nvcc"
    output_kind = "cubin"

    def __init__(self, *, grid: str, block: str, shared_bytes: str = "0", flags: Sequence[str] = NVCC_FLAGS,
                 **spec) -> None:
        super().__init__(flags=flags, launch={"grid": grid, "block": block, "shared_bytes": shared_bytes}, **spec)

    def _check_launch(self, knobs: set[str]) -> None:
        capitals = {k.upper() for k in knobs}
        for key, text in self.launch_expressions.items():
            for s in self.shapes:
                unknown = set().union(*(_names_in(p) for p in text.split(","))) - capitals - set(dict(s.dims))
                if unknown:
                    raise self._error(key, f"{text!r} names {sorted(unknown)}: it may use the dimensions "
                                           f"{sorted(dict(s.dims))} and the knobs in capitals {sorted(capitals)}")
        if len(self.launch_expressions["grid"].split(",")) > 3 or len(self.launch_expressions["block"].split(",")) > 3:
            raise self._error("launch", "grid and block take at most three comma-separated expressions")


def _spec_folder() -> Path:
    """The folder of the file that made the spec (the first caller outside this module)."""
    for frame in inspect.stack()[1:]:
        if Path(frame.filename).resolve() != Path(__file__).resolve():
            return Path(frame.filename).resolve().parent
    return Path.cwd()


def _predicate(text: str):
    return lambda values: bool(evaluate(text, values))


def _spec_runtime_files() -> tuple[Path, ...]:
    from evo.runtime import cuda, spec

    return tuple(Path(module.__file__).resolve() for module in (spec, cuda))
