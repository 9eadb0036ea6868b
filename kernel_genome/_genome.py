"""Genome: one immutable setting of every knob of a space, with a canonical, stable id."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from evo.kernel_genome._knobs import KnobValue


@dataclass(frozen=True)
class Genome:
    """Knob values sorted by knob name. Build genomes through ``Space.genome`` to validate them."""

    items: tuple[tuple[str, KnobValue], ...]
    id: str = field(init=False, compare=False)
    _values: dict = field(init=False, compare=False, repr=False)  # name -> value, for lookups

    def __post_init__(self) -> None:
        names = [name for name, _ in self.items]
        if names != sorted(names) or len(set(names)) != len(names):
            raise ValueError("genome items must be unique and sorted by knob name")
        object.__setattr__(self, "id", _canonical_id(self.items))
        object.__setattr__(self, "_values", dict(self.items))

    @classmethod
    def from_mapping(cls, values: Mapping[str, KnobValue]) -> "Genome":
        return cls(tuple(sorted(values.items())))

    def as_dict(self) -> dict[str, KnobValue]:
        return dict(self.items)

    def __getitem__(self, name: str) -> KnobValue:
        return self._values[name]

    def to_json(self) -> str:
        return _canonical_json(self.items)

    def replace(self, **changes: KnobValue) -> "Genome":
        """A new genome with some values changed (not validated: use ``Space.genome`` for that)."""
        merged = self.as_dict()
        merged.update(changes)
        return Genome.from_mapping(merged)

    def differing_knobs(self, other: "Genome") -> tuple[str, ...]:
        mine, theirs = self.as_dict(), other.as_dict()
        return tuple(sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)
                            or type(mine.get(k)) is not type(theirs.get(k))))

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.items)


def _canonical_json(items: tuple[tuple[str, Any], ...]) -> str:
    return json.dumps(dict(items), sort_keys=True, separators=(",", ":"))


def _canonical_id(items: tuple[tuple[str, Any], ...]) -> str:
    """First 16 hex digits of SHA-256 over the canonical JSON: equal knobs, equal id, anywhere."""
    return hashlib.sha256(_canonical_json(items).encode()).hexdigest()[:16]
