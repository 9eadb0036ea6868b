"""Knob types: the named, finite domains a genome picks one value from.

Every knob has an ordered tuple of values. "Ordered" knobs (integer ranges, powers of two,
choices declared ``ordered=True``) have neighbours one step away in that order; unordered
choices and booleans treat every other value as a neighbour.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

KnobValue = Union[bool, int, float, str]


@dataclass(frozen=True)
class Knob:
    """A named finite domain. Use the constructors below rather than this class directly."""

    name: str
    values: tuple[KnobValue, ...]
    ordered: bool
    kind: str
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"knob name {self.name!r} must be a Python identifier")
        if not self.values:
            raise ValueError(f"knob {self.name!r} has an empty domain")
        if len(set(map(_type_tagged, self.values))) != len(self.values):
            raise ValueError(f"knob {self.name!r} has duplicate values: {self.values!r}")

    @cached_property
    def _positions(self) -> dict[tuple[str, Any], int]:
        """Each value's type-tagged form -> its position (computed once: genomes are compared often)."""
        return {_type_tagged(v): i for i, v in enumerate(self.values)}

    def validate(self, value: Any) -> KnobValue:
        """Return ``value`` if it is in the domain, else raise ``ValueError`` naming the knob."""
        return self.values[self.index(value)]

    def index(self, value: KnobValue) -> int:
        try:
            return self._positions[_type_tagged(value)]
        except (KeyError, TypeError):  # outside the domain, or a value that cannot be one (unhashable)
            raise ValueError(
                f"knob {self.name!r}: value {value!r} is outside its domain {list(self.values)!r}"
            ) from None

    def neighbours(self, value: KnobValue) -> tuple[KnobValue, ...]:
        """Values one step away: adjacent positions for ordered knobs, all others otherwise."""
        i = self.index(value)
        if self.ordered:
            return tuple(self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values))
        return tuple(v for j, v in enumerate(self.values) if j != i)

    def distance(self, a: KnobValue, b: KnobValue) -> float:
        """Distance in [0, 1]: index distance over the domain span for ordered knobs, 0/1 else."""
        ia, ib = self.index(a), self.index(b)
        if ia == ib:
            return 0.0
        if self.ordered and len(self.values) > 1:
            return abs(ia - ib) / (len(self.values) - 1)
        return 1.0

    def sample(self, rng: random.Random) -> KnobValue:
        return rng.choice(self.values)

    def describe(self) -> str:
        if self.kind in ("int_range", "power_of_two"):
            return f"{self.kind} {self.values[0]}..{self.values[-1]} ({len(self.values)} values)"
        return f"{self.kind} {list(self.values)}"


def _type_tagged(value: Any) -> tuple[str, Any]:
    """Tag a value with its type so that True != 1 and 1 != 1.0 inside a domain."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, str):
        return ("str", value)
    raise ValueError(f"knob values must be bool, int, float or str, not {type(value).__name__}")


def Choice(name: str, values, *, ordered: bool = False, description: str = "") -> Knob:
    """One of the listed values; ``ordered=True`` makes neighbours the adjacent entries."""
    return Knob(name, tuple(values), ordered, "choice", description)


def IntRange(name: str, low: int, high: int, step: int = 1, *, description: str = "") -> Knob:
    """Integers low, low+step, ..., up to high (inclusive)."""
    if step <= 0 or high < low:
        raise ValueError(f"knob {name!r}: IntRange needs low <= high and step > 0")
    return Knob(name, tuple(range(low, high + 1, step)), True, "int_range", description)


def PowerOfTwo(name: str, low: int, high: int, *, description: str = "") -> Knob:
    """Powers of two from low to high (both powers of two, inclusive)."""
    for bound in (low, high):
        if bound <= 0 or bound & (bound - 1):
            raise ValueError(f"knob {name!r}: PowerOfTwo bound {bound} is not a power of two")
    if high < low:
        raise ValueError(f"knob {name!r}: PowerOfTwo needs low <= high")
    values, v = [], low
    while v <= high:
        values.append(v)
        v *= 2
    return Knob(name, tuple(values), True, "power_of_two", description)


def Boolean(name: str, *, description: str = "") -> Knob:
    return Knob(name, (False, True), False, "boolean", description)
