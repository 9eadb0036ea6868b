"""What a kernel family is: a spec (space, seeds, shapes, reference, anchor) plus sources.

Nothing else in evo knows a family by name; the pipeline talks to families only through
``KernelFamily``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

from evo.kernel_genome import Genome, Space
from evo.runtime.protocol import EXPORTS_WITH, RUNS_WITH, FamilyRuntime

if TYPE_CHECKING:
    from evo.seeds._workload import Workload

Device = Literal["cpu", "cuda"]


# Hopper (sm_90a: H100, H200), the GPU the CUDA families are built for; declared once here
HOPPER_NVCC_FLAGS = ("-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17")
BLOCK_SHARED_BYTES = 227 * 1024  # the most shared memory one block may use on sm_90 (and sm_100)

CODE_SUFFIXES = frozenset({".py", ".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".inl", ".toml"})
_CATALOGUE = Path(__file__).resolve().parent  # seeds/: its shared helpers count for every built-in family

@dataclass(frozen=True)
class ProblemShape:
    """One problem size of a family, e.g. ``ProblemShape("mission", (("m", 256), ...))``."""

    name: str
    dims: tuple[tuple[str, int], ...]
    mission: bool = False

    def __getitem__(self, key: str) -> int:
        return dict(self.dims)[key]

    def label(self) -> str:
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in self.dims) + ")"


def shape(name: str, *, mission: bool = False, **dims: int) -> ProblemShape:
    return ProblemShape(name, tuple(dims.items()), mission)


@dataclass(frozen=True)
class Tolerance:
    """Pass when every |out - ref| <= max_abs + rtol * |ref| (rtol 0: max |out - ref| <= max_abs) and
    ||out - ref|| / ||ref|| <= max_rel_l2."""

    max_abs: float
    max_rel_l2: float
    rtol: float = 0.0


@dataclass(frozen=True)
class BuildRecipe:
    """Everything the builder needs, and everything that goes into the cache key."""

    source: str
    source_name: str
    compiler: Literal["c++", "nvcc"]
    flags: tuple[str, ...]
    output: Literal["shared_library", "cubin"]
    include_dirs: tuple[Path, ...] = field(default=())
    # the file the source was read from, where it is one (a short spec's): compile errors name it, not the
    # build's scratch copy; not part of what is built (the cache key)
    origin: Path | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TimingPlan:
    """How hard to time one shape: warm-up launches, then runs until both minimums are met."""

    warmup: int = 3
    min_runs: int = 10
    max_runs: int = 200
    min_seconds: float = 0.05


@dataclass(frozen=True)
class ScreenLimits:
    """Static limits a built kernel must meet; ``None`` means unchecked.

    Defaults are Hopper's: 255 registers a thread, 227 KiB of shared memory a block, no spills.
    """

    max_registers: int | None = 255
    max_shared_bytes: int | None = BLOCK_SHARED_BYTES
    max_spill_bytes: int | None = 0
    max_stack_bytes: int | None = None


class KernelFamily(abc.ABC):
    """A family of kernels over one problem. Subclass it in ``seeds/<name>/spec.py`` as FAMILY."""

    name: str
    description: str
    device: Device
    space: Space
    seed_genomes: tuple[Genome, ...]
    shapes: tuple[ProblemShape, ...]
    tolerance: Tolerance
    anchor_name: str
    timing: TimingPlan = TimingPlan()
    screen_limits: ScreenLimits = ScreenLimits()
    lookup_name: str = ""  # how the registry found it (a built-in name or "module:ATTRIBUTE")
    # files `evo export` copies beside the family's runtime module (``export_runtime``), (name there,
    # source): what that module imports
    export_files: tuple[tuple[str, Path], ...] = ()
    # the GPU its kernels need, e.g. (10, 0) for sm_100a code; None: any device of its kind. On
    # another GPU (or none) its genomes are built and screened, then recorded as unverified
    compute_capability: tuple[int, int] | None = None
    # bound by reading memory (``bytes_moved`` counts what it must read and write): the reports set a kernel's
    # bytes a second against the GPU's read bandwidth, measured once per device (evo/runtime/bandwidth.py)
    memory_bound: bool = False
    # named, weighted sets of shapes of real models (seeds/_workload.py): `evo search --workload NAME`
    workloads: tuple["Workload", ...] = ()
    # dimensions that are switches (0 or 1, e.g. causal); every other dimension is a size >= 1
    flag_dims: tuple[str, ...] = ()
    # dimensions a dispatching op never crosses when it picks the nearest workload shape (the flags
    # always; e.g. a head dimension), see evo/runtime/dispatch.py
    categorical_dims: tuple[str, ...] = ()
    # PyTorch's own computation of the whole result (what a workload's op falls back to, and a workload
    # run's anchor); "" when the anchor is that computation (see ``fallback``)
    fallback_name: str = ""
    # secondary anchors a workload run leaves out (each would cost minutes over many shapes, e.g. a
    # torch.compile that compiles once per shape)
    costly_anchors: frozenset[str] = frozenset()
    # a CPU family: the threads PyTorch (the anchor) runs with while timed; None: torch's default in the process
    # that started the search, as the user's own process would have them (the self-check sets the same)
    anchor_threads: int | None = None
    # the search strategy a run takes where none is named: for a kernel evo has not seen, the one chosen on a
    # corpus of public tuning spaces and proven on spaces held out (docs/JOURNAL.md, "A default that
    # generalizes"); the built-in families name the one their own GPU searches were measured with
    default_strategy: str = "portfolio"

    def code_files(self) -> tuple[Path, ...]:
        """Every file whose content can change this family's verdicts and times (measurement reuse is keyed on
        them): the file that defines its class, the sources of the folder it was found in (its spec, runtime,
        kernels, workload files), the catalogue's shared helpers (seeds/_*.py, *.cuh) and the runtime package
        (evo/runtime/: what loads, launches and times the kernels)."""
        import inspect

        from evo import runtime
        from evo.seeds._registry import family_file

        files = {Path(inspect.getfile(type(self))).resolve()}
        found = family_file(self)
        walks = [_CATALOGUE.glob("*"), Path(runtime.__file__).resolve().parent.glob("*")]
        if found is not None:
            walks.append(found.resolve().parent.rglob("*"))
        for walk in walks:
            files.update(path for path in walk if path.suffix in CODE_SUFFIXES and path.is_file()
                         and "__pycache__" not in path.parts)
        return tuple(sorted(files))

    @property
    def reference_key(self) -> str:
        """What another process passes to ``get_family`` to load this same family."""
        return self.lookup_name or self.name

    @property
    def smallest_shape(self) -> ProblemShape:
        """The family's smallest shape (by the product of its dimensions): where pre-flights run."""
        return min(self.shapes, key=lambda shape: math.prod(max(1, int(v)) for _, v in shape.dims))

    @property
    def mission_shape(self) -> ProblemShape:
        missions = [s for s in self.shapes if s.mission]
        if len(missions) != 1:
            raise ValueError(f"family {self.name!r} must mark exactly one mission shape")
        return missions[0]

    @abc.abstractmethod
    def build_recipe(self, genome: Genome) -> BuildRecipe:
        """The rendered source and compiler flags for one genome."""

    @abc.abstractmethod
    def make_inputs(self, shape: ProblemShape, generator: Any) -> tuple[Any, ...]:
        """Fresh random input tensors for ``shape`` drawn from ``generator`` (a torch.Generator)."""

    @abc.abstractmethod
    def make_output(self, shape: ProblemShape) -> Any:
        """An output tensor for ``shape`` (the evaluator poisons it before every run)."""

    @abc.abstractmethod
    def reference(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        """The exact answer, computed by PyTorch in higher precision."""

    @abc.abstractmethod
    def load(self, artifact: Path, genome: Genome) -> Any:
        """Load a built artifact (shared library or cubin) into a handle ``launch`` can run;
        the genome gives what the launch needs (grid, block, shared memory)."""

    @abc.abstractmethod
    def launch(self, kernel: Any, shape: ProblemShape, inputs: Sequence[Any], output: Any) -> None:
        """Run the kernel once on the inputs, writing ``output``."""

    @abc.abstractmethod
    def anchor(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        """What a user would run instead (e.g. torch.matmul); timed the same way as kernels."""

    def secondary_anchors(self) -> dict[str, Callable[[ProblemShape, Sequence[Any]], Any]]:
        """Other implementations to compare with (name -> callable like ``anchor``), timed the same way."""
        return {}

    def fallback(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        """PyTorch's own computation of the result the kernels compute (verified like a kernel): where a
        workload's op has no kernel faster, it runs this. Default: the anchor, when that is the whole
        computation (``fallback_name`` empty)."""
        return self.anchor(shape, inputs)

    @property
    def fallback_label(self) -> str:
        return self.fallback_name or self.anchor_name

    # -- shapes and workloads -------------------------------------------------------------------
    @property
    def dimensions(self) -> tuple[str, ...]:
        """The names of a shape's dimensions (the mission shape's)."""
        return tuple(name for name, _ in self.shapes[0].dims)

    def validate_shape(self, shape: ProblemShape) -> None:
        """ValueError unless ``shape`` names exactly the family's dimensions, whole numbers (flags 0
        or 1, sizes >= 1), and passes ``check_shape``."""
        dims = dict(shape.dims)
        unknown = [k for k in dims if k not in self.dimensions]
        if unknown:
            raise ValueError(f"unknown dimension {unknown[0]!r} ({self.name}'s dimensions: {', '.join(self.dimensions)})")
        missing = [k for k in self.dimensions if k not in dims]
        if missing:
            raise ValueError(f"missing dimension {missing[0]!r} ({self.name}'s dimensions: {', '.join(self.dimensions)})")
        for name, value in dims.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"dimension {name} must be a whole number, got {value!r}")
            if name in self.flag_dims and value not in (0, 1):
                raise ValueError(f"dimension {name} is a switch: 0 or 1, not {value}")
            if name not in self.flag_dims and value < 1:
                raise ValueError(f"dimension {name} must be at least 1, not {value}")
        self.check_shape(shape)

    def check_shape(self, shape: ProblemShape) -> None:
        """ValueError naming what the family's kernels cannot take in ``shape`` (beyond ``validate_shape``)."""

    def dimension_defaults(self, dims: Mapping[str, int]) -> dict[str, int]:
        """Values of the dimensions a workload file may leave out, given those it names (default: none)."""
        return {}

    def takes(self, genome: Genome, shape: ProblemShape) -> bool:
        """Whether this genome's kernel can run ``shape`` at all (default: every kernel takes every shape the
        family takes). A workload search skips a shape a genome cannot take; its op runs PyTorch there."""
        return True

    def shape_distance(self, a: Mapping[str, int], b: Mapping[str, int]) -> float:
        """How far two shapes are, for a dispatching op's choice of the nearest workload shape."""
        from evo.runtime.dispatch import distance

        return distance(a, b, self.flag_dims + self.categorical_dims)

    def workload(self, name: str) -> "Workload":
        """One of the family's built-in workloads; ValueError naming the known ones."""
        for w in self.workloads:
            if w.name == name:
                return w
        known = ", ".join(w.name for w in self.workloads) or "none"
        raise ValueError(f"family {self.name} has no workload {name!r} (its workloads: {known}; or give a TOML file)")

    def knobs_read(self, shape: ProblemShape) -> frozenset[str]:
        """The knobs that change the kernel this shape runs (default: all); a knob importance view
        credits only these."""
        return frozenset(k.name for k in self.space.knobs)

    def flops(self, shape: ProblemShape) -> float:
        return 0.0

    def bytes_moved(self, shape: ProblemShape) -> float:
        return 0.0

    def runs_here(self) -> tuple[bool, str]:
        """Whether this machine's GPU can run the family's kernels, and what it has (for messages)."""
        if self.compute_capability is None:
            return True, ""
        import torch

        wanted = "{}.{}".format(*self.compute_capability)
        if not torch.cuda.is_available():
            return False, f"needs a GPU of compute capability {wanted}; this machine has no CUDA GPU"
        have = torch.cuda.get_device_capability()
        if tuple(have) != tuple(self.compute_capability):
            return False, (f"needs a GPU of compute capability {wanted}; this one ({torch.cuda.get_device_name()}) "
                           f"is {have[0]}.{have[1]}")
        return True, ""

    def prepare_evaluator(self) -> None:
        """Called once in the evaluator process before anything is timed (e.g. thread counts)."""

    def knob_summary(self) -> list[tuple[str, str]]:
        return [(k.name, k.describe()) for k in self.space.knobs]

    def export_problem(self) -> str | None:
        """Why `evo export` cannot package this family's kernels (None: it can)."""
        return "it has no standalone runtime module (write it as a RuntimeFamily)"

    def export_runtime(self) -> str | None:
        """The text of the family's standalone runtime module, which `evo export` ships as evo_family.py
        (see ``RuntimeFamily``); None where ``export_problem`` says why not."""
        return None

    def check_definition(self) -> None:
        """ValueError naming the family, the item and the fix where the definition lacks something evo needs
        (called when the family is loaded)."""


class RuntimeFamily(KernelFamily):
    """A family whose inputs, reference, anchor, loading and launch live in a standalone runtime module
    (torch, cuda.bindings and the ``export_files`` beside it; never evo): evo's evaluators run its kernels
    through that module, and `evo export` ships it as evo_family.py beside one generic op module
    (evo/_templates/op.py.in), so an exported package runs its kernels as the search did, and nothing is
    written twice. Only ``build_recipe`` is left to write.

    The runtime module (``runtime``: the module, or an object with the same names) follows
    evo.runtime.protocol (``FamilyRuntime``: the names it defines, and what each does).
    """

    runtime: FamilyRuntime
    RUNS_WITH = RUNS_WITH
    EXPORTS_WITH = EXPORTS_WITH

    def missing(self, names: Sequence[str]) -> list[str]:
        """Which of ``names`` the runtime lacks (and the public function PUBLIC names, when asked for)."""
        runtime = getattr(self, "runtime", None)
        lacking = [name for name in names if not hasattr(runtime, name)]
        public = getattr(runtime, "PUBLIC", None)
        if "PUBLIC" in names and public is not None and not callable(getattr(runtime, str(public), None)):
            lacking.append(f"{public} (the function PUBLIC names)")
        return lacking

    def check_definition(self) -> None:
        lacking = self.missing(self.RUNS_WITH)
        if lacking:
            raise ValueError(f"family {self.name!r}, runtime: it lacks {', '.join(lacking)}; give the class a "
                             f"runtime module that defines them (see evo/runtime/protocol.py)")

    def make_inputs(self, shape: ProblemShape, generator: Any) -> tuple[Any, ...]:
        self.check_shape(shape)
        return self.runtime.make_inputs(dict(shape.dims), generator)

    def make_output(self, shape: ProblemShape) -> Any:
        return self.runtime.make_output(dict(shape.dims))

    def reference(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        return self.runtime.reference(dict(shape.dims), inputs)

    def anchor(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        return self.runtime.anchor(dict(shape.dims), inputs)

    def fallback(self, shape: ProblemShape, inputs: Sequence[Any]) -> Any:
        return getattr(self.runtime, "fallback", self.runtime.anchor)(dict(shape.dims), inputs)

    def load(self, artifact: Path, genome: Genome) -> Any:
        return self.runtime.load(artifact, genome.as_dict())

    def launch(self, kernel: Any, shape: ProblemShape, inputs: Sequence[Any], output: Any) -> None:
        self.runtime.launch(kernel, dict(shape.dims), inputs, output)

    def takes(self, genome: Genome, shape: ProblemShape) -> bool:
        takes = getattr(self.runtime, "takes", None)
        return True if takes is None else bool(takes(genome.as_dict(), dict(shape.dims)))

    def secondary_anchors(self) -> dict[str, Callable[[ProblemShape, Sequence[Any]], Any]]:
        return {name: (lambda shape, inputs, run=run: run(dict(shape.dims), inputs))
                for name, run in getattr(self.runtime, "OTHER_ANCHORS", {}).items()}

    @property
    def costly_anchors(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(getattr(self.runtime, "COSTLY_ANCHORS", ()))

    def export_problem(self) -> str | None:
        lacking = self.missing(self.EXPORTS_WITH)
        return f"its runtime lacks {', '.join(lacking)} (the op's public function)" if lacking else None

    def export_runtime(self) -> str | None:
        return None if self.export_problem() else Path(self.runtime.__file__).read_text()

    def export_usage(self) -> str:
        return self.runtime.USAGE
