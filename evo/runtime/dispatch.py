"""A workload op's dispatch table, and the distance between two shapes.

Imports nothing: the family contract uses it (``KernelFamily.shape_distance``), evo's reports read
the same table, and an exported op reads it (part of evo.runtime, shipped whole as evo_runtime/).

What the exported op does with it (op.py, ``Op.choose``): a call of a workload shape measures that
shape's kernel against PyTorch (``exact``; PyTorch where the search found none faster); any other call
measures the kernels of the nearest workload shapes (``nearest``: by ``distance``, the sum over the
numeric dimensions of |log2(a / b)|, infinite where a categorical dimension such as causal, a head
dimension or a scale layout differs; ties to the heavier shape, then the first listed) and, in a single
kernel's package, its ``default`` kernel. The measured decision is kept per device model and shape bucket.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping


def distance(a: Mapping[str, int], b: Mapping[str, int], categorical: Iterable[str] = ()) -> float:
    """How far shape ``a`` is from shape ``b``: infinite when ``a`` lacks one of ``b``'s dimensions or they
    differ in a categorical one, else the sum of |log2(a_d / b_d)| over ``b``'s other dimensions (values below
    1 count as 1; what ``a`` adds, such as a call's layout, is not a distance)."""
    if not set(b) <= set(a):
        return math.inf
    fixed = set(categorical)
    total = 0.0
    for name in b:
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

    def exact(self, dims: Mapping[str, int]) -> dict | None:
        """The workload shape with exactly these dimensions, if any."""
        return self._exact.get(self._key(dims))

    def nearest(self, dims: Mapping[str, int]) -> list[dict]:
        """The workload shapes of the same kind (no categorical dimension differs), nearest first."""
        keyed = []
        for index, e in enumerate(self.entries):
            d = distance(dims, e["dims"], self.categorical)
            if math.isfinite(d):
                keyed.append(((d, -float(e.get("weight", 1.0)), index), e))
        return [e for _, e in sorted(keyed, key=lambda pair: pair[0])]
