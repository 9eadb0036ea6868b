"""Which kernel runs a shape: the distance between two shapes and a workload op's dispatch table.

Imports nothing: the family contract uses it (``KernelFamily.shape_distance``), evo's reports read
the same rule, and `evo export` ships this file beside a workload's op as evo_dispatch.py, so the
exported op chooses exactly as documented here.

The rule, for the dimensions of a call:
1. a workload shape with exactly these dimensions: its entry (a kernel, or ``None`` = PyTorch);
2. otherwise the nearest workload shape, by ``distance``: the sum over the numeric dimensions of
   |log2(a / b)| (a shape twice as long is as far as one with twice the batch), infinite where a
   categorical dimension (a flag such as causal, a head dimension, a scale layout) differs; ties go
   to the heavier shape, then to the first listed;
3. where every workload shape is infinitely far: the table's ``default`` (a single-kernel export's
   kernel, or ``None`` = PyTorch).
The op then runs the chosen kernel only if that kernel takes the shape, and PyTorch otherwise.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping


def distance(a: Mapping[str, int], b: Mapping[str, int], categorical: Iterable[str] = ()) -> float:
    """How far shape ``a`` is from shape ``b``: infinite when they name other dimensions or differ in
    a categorical one, else the sum of |log2(a_d / b_d)| over the other dimensions (values below 1
    count as 1)."""
    if set(a) != set(b):
        return math.inf
    fixed = set(categorical)
    total = 0.0
    for name in a:
        if name in fixed:
            if a[name] != b[name]:
                return math.inf
            continue
        total += abs(math.log2(max(1, int(a[name]))) - math.log2(max(1, int(b[name]))))
    return total


class DispatchTable:
    """Entries ``{"shape": name, "dims": {...}, "weight": w, "choice": kernel id or None}``, the
    family's categorical dimensions, and the default for a shape near no entry."""

    def __init__(self, entries: list[dict], categorical: Iterable[str] = (), default: str | None = None) -> None:
        self.entries = [dict(e) for e in entries]
        self.categorical = tuple(categorical)
        self.default = default
        self._exact = {self._key(e["dims"]): e for e in self.entries}

    @classmethod
    def from_dict(cls, data: Mapping) -> "DispatchTable":
        return cls(data.get("entries", []), data.get("categorical", ()), data.get("default"))

    def to_dict(self) -> dict:
        return {"entries": self.entries, "categorical": list(self.categorical), "default": self.default}

    @staticmethod
    def _key(dims: Mapping[str, int]) -> tuple:
        return tuple(sorted((k, int(v)) for k, v in dims.items()))

    def lookup(self, dims: Mapping[str, int]) -> tuple[str | None, str]:
        """(the chosen kernel id or None for PyTorch, why): exact entry, nearest entry, or the default."""
        entry = self._exact.get(self._key(dims))
        if entry is not None:
            return entry["choice"], f"workload shape {entry['shape']}"
        best, best_key = None, None
        for index, e in enumerate(self.entries):
            d = distance(dims, e["dims"], self.categorical)
            key = (d, -float(e.get("weight", 1.0)), index)
            if math.isfinite(d) and (best_key is None or key < best_key):
                best, best_key = e, key
        if best is not None:
            return best["choice"], f"nearest workload shape {best['shape']}"
        return self.default, "no workload shape of its kind: the default"


class Dispatcher:
    """What an exported op decides on each call: ``kernels`` (kernel id -> {"genome": ..., "artifact":
    ...}), the ``table`` (a DispatchTable's dict), and ``takes(genome, dims)``, the family's word on
    whether a kernel can run a shape at all (where it cannot, PyTorch runs it)."""

    def __init__(self, kernels: Mapping[str, Mapping], table: Mapping, takes) -> None:
        self.kernels = dict(kernels)
        self.table = DispatchTable.from_dict(table)
        self.takes = takes
        self._chosen: dict[tuple, tuple[str | None, str]] = {}

    def choose(self, dims: Mapping[str, int]) -> tuple[str | None, str]:
        """(kernel id, or None for PyTorch; why), remembered per shape (a call costs a dict lookup)."""
        key = tuple(dims.items())
        if key not in self._chosen:
            kernel, why = self.table.lookup(dims)
            if kernel is not None and not self.takes(self.kernels[kernel]["genome"], dims):
                kernel, why = None, f"{why}; its kernel {kernel} cannot run this shape"
            self._chosen[key] = kernel, why
        return self._chosen[key]
