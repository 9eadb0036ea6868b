"""Workloads: named, weighted sets of shapes of one family, the shapes a model actually runs.

A family ships built-in workloads (``KernelFamily.workloads``); a user writes one in TOML:

    [workload]
    name = "my_model"                  # optional in a file of its own (default: the file's stem)
    description = "..."                # optional
    shapes = [
      { name = "prefill", b = 1, h = 32, s = 2048, d = 128, causal = 1, weight = 3 },
      { b = 8, h = 12, s = 197, d = 64, causal = 0 },            # name and weight optional (weight 1)
    ]

or names a built-in one (``name = "flashcore"`` and no shapes). Every problem (an unknown or missing
dimension, a value the family cannot take, a weight <= 0, a repeated shape) is a ``ValueError`` that
names the workload and the shape.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from evo.seeds._family import ProblemShape

MAX_SHAPES = 1000  # shapes of one workload: each is verified (and most timed) for every kernel

if TYPE_CHECKING:
    from evo.seeds._family import KernelFamily


@dataclass(frozen=True)
class Workload:
    """Shapes with their weights (how much each matters: its share of the model's calls or time)."""

    name: str
    shapes: tuple[ProblemShape, ...]
    weights: tuple[float, ...]
    description: str = ""

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.weights) or not self.shapes:
            raise ValueError(f"workload {self.name!r} needs one weight for each of at least one shape")

    @property
    def primary(self) -> ProblemShape:
        """The heaviest shape (the first of equals): always timed, its time is an individual's fitness."""
        return self.shapes[max(range(len(self.shapes)), key=lambda i: (self.weights[i], -i))]

    def weight(self, shape_name: str) -> float:
        return self.weights[self._index(shape_name)]

    def shape(self, shape_name: str) -> ProblemShape:
        return self.shapes[self._index(shape_name)]

    def _index(self, shape_name: str) -> int:
        for index, s in enumerate(self.shapes):
            if s.name == shape_name:
                return index
        raise KeyError(shape_name)

    def to_dict(self) -> dict[str, Any]:
        """What a run's configuration stores (and ``parse_workload`` reads back)."""
        return {"name": self.name, "description": self.description,
                "shapes": [{"name": s.name, **dict(s.dims), "weight": w} for s, w in zip(self.shapes, self.weights)]}

    def describe(self) -> str:
        return f"{self.name} ({len(self.shapes)} shapes)" + (f": {self.description}" if self.description else "")


def workload(name: str, description: str, entries: Sequence[tuple[ProblemShape, float]]) -> Workload:
    """A built-in workload from (shape, weight) pairs (checked against its family by ``check_workload``)."""
    return Workload(name, tuple(s for s, _ in entries), tuple(float(w) for _, w in entries), description)


def shape_label(dims: Mapping[str, int]) -> str:
    """A name for a shape given without one: its dimensions, e.g. ``m256_n256_k256``."""
    return "_".join(f"{k}{v}" for k, v in dims.items())


def parse_workload(family: "KernelFamily", data: Mapping[str, Any], where: str) -> Workload:
    """A workload from a TOML table or a stored configuration, checked against ``family``;
    a ``name`` without ``shapes`` is one of the family's built-in workloads."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: [workload] must be a table")
    unknown = sorted(set(data) - {"name", "description", "shapes", "family"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} in [workload]; known: description, family, name, shapes")
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"{where}: workload name must be a non-empty string, got {name!r}")
    if "family" in data and data["family"] != family.name:
        raise ValueError(f"{where}: the workload is for family {data['family']!r}, not {family.name!r}")
    if "shapes" not in data:
        if name is None:
            raise ValueError(f"{where}: [workload] needs shapes, or the name of one of {family.name}'s workloads")
        try:
            return family.workload(name)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"{where}: workload description must be a string")
    entries = data["shapes"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{where}: workload shapes must be a non-empty list of tables")
    if len(entries) > MAX_SHAPES:
        raise ValueError(f"{where}: {len(entries)} shapes; a workload takes at most {MAX_SHAPES} (each is verified and "
                         f"timed for every kernel: weight the shapes that matter, or bucket them)")
    shapes, weights = [], []
    for number, entry in enumerate(entries, 1):
        shape, weight = _parse_entry(family, entry, f"{where}: shape {number}")
        shapes.append(shape)
        weights.append(weight)
    result = Workload(name or "workload", tuple(shapes), tuple(weights), description)
    check_workload(family, result, where)
    return result


def _parse_entry(family: "KernelFamily", entry: Any, where: str) -> tuple[ProblemShape, float]:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a table of dimensions, got {entry!r}")
    entry = dict(entry)
    name = entry.pop("name", None)
    weight = entry.pop("weight", 1.0)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"{where}: name must be a non-empty string, got {name!r}")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"{where}{f' ({name})' if name else ''}: weight must be a number > 0, got {weight!r}")
    dims = {}
    for key, value in entry.items():
        if isinstance(value, bool) and key not in family.flag_dims:
            raise ValueError(f"{where}: dimension {key!r} must be a whole number, got {value!r}")
        if isinstance(value, bool):  # a flag (causal = true)
            value = int(value)
        if not isinstance(value, int):
            raise ValueError(f"{where}: dimension {key!r} must be a whole number, got {value!r}")
        dims[key] = value
    dims = {k: v for k, v in family.dimension_defaults(dims).items() if k not in dims} | dims
    ordered = {k: dims[k] for k in family.dimensions if k in dims} | dims  # the family's order first
    return ProblemShape(name or shape_label(ordered), tuple(ordered.items())), float(weight)


def check_workload(family: "KernelFamily", result: Workload, where: str) -> None:
    """Every shape one the family can take, no name or shape twice, weights > 0; ValueError naming it."""
    names, seen = set(), {}
    own = {s.name: s.dims for s in family.shapes}
    for number, (shape, weight) in enumerate(zip(result.shapes, result.weights), 1):
        label = f"{where}: shape {number} ({shape.name})"
        if not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"{label}: weight must be a number > 0, got {weight!r}")
        try:
            family.validate_shape(shape)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
        if shape.name in names:
            raise ValueError(f"{label}: the name is used twice")
        if shape.name in own and dict(own[shape.name]) != dict(shape.dims):
            raise ValueError(f"{label}: {family.name} has a shape of that name with other dimensions; rename it")
        key = tuple(sorted(shape.dims))
        if key in seen:
            raise ValueError(f"{label}: the same dimensions as shape {seen[key]!r}")
        names.add(shape.name)
        seen[key] = shape.name


def read_toml(path: Path, where: str) -> dict:
    """A TOML file's tables; ValueError starting with ``where`` (e.g. "workload file 'x.toml'") when it is
    missing, unreadable or not TOML. Experiment files are read with it too."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML: {exc}") from None


def load_workload_file(family: "KernelFamily", path: str | Path) -> Workload:
    """A workload from a TOML file holding a [workload] table (its name defaults to the file's stem)."""
    path = Path(path)
    where = f"workload file {str(path)!r}"
    data = read_toml(path, where)
    table = data.get("workload")
    if table is None or set(data) - {"workload"}:
        raise ValueError(f"{where} must hold one [workload] table and nothing else")
    if isinstance(table, dict) and "shapes" in table and "name" not in table:
        table = {**table, "name": path.stem}
    return parse_workload(family, table, where)


def resolve_workload(family: "KernelFamily", reference: str) -> Workload:
    """``--workload``'s value: one of the family's workloads by name, or a TOML file."""
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError("--workload needs a workload name or a TOML file")
    if reference.endswith(".toml") or Path(reference).is_file():
        return load_workload_file(family, reference)
    return family.workload(reference)
