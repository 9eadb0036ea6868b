"""Space: named knobs plus constraints between them."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from evo.kernel_genome._genome import Genome
from evo.kernel_genome._knobs import Knob, KnobValue


@dataclass(frozen=True)
class Constraint:
    """A named predicate over a genome's values, e.g. ``block_m * block_n * 4 <= 49152``."""

    name: str
    check: Callable[[Mapping[str, KnobValue]], bool] = field(compare=False)
    description: str = ""

    def holds(self, values: Mapping[str, KnobValue]) -> bool:
        return bool(self.check(values))

    def message(self) -> str:
        return f"constraint {self.name!r} violated" + (f": {self.description}" if self.description else "")


class _Reads(dict):
    """A genome's values that remember which of them a constraint read."""

    def __init__(self, values: Mapping[str, KnobValue]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> KnobValue:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default=None):
        self.read.add(name)
        return super().get(name, default)


class _Undecided(Exception):
    """A constraint read a knob that has no value yet."""


class _Partial(dict):
    """Some of a genome's values: reading one that is missing leaves the constraint undecided."""

    def __getitem__(self, name: str) -> KnobValue:
        if name not in self:
            raise _Undecided(name)
        return super().__getitem__(name)

    def get(self, name: str, default=None):
        return self[name]


class Space:
    """An immutable set of knobs and constraints; the factory and judge of genomes.

    ``added_later`` names knobs added to a space after genomes of it were stored, each with the
    value that reproduces what those genomes built (the knob's "off" setting): a stored genome
    without such a knob reads as having that value.
    """

    def __init__(self, knobs: list[Knob] | tuple[Knob, ...], constraints=(),
                 added_later: Mapping[str, KnobValue] | None = None, members=None,
                 inactive: Callable[[Mapping[str, KnobValue]], Mapping[str, KnobValue]] | None = None) -> None:
        """``members``: where only some listed settings exist (the configurations a table of measurements
        holds), those settings; every other genome is invalid, and sampling draws from them.
        ``inactive``: given a genome's values, the knobs its kernel does not read (e.g. the knobs of
        another design), each with the value a genome holds there: genomes that differ only in them are
        one genome (``canonical``), and mutation leaves them alone."""
        names = [k.name for k in knobs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate knob names: {duplicates}")
        if not knobs:
            raise ValueError("a space needs at least one knob")
        self._knobs: dict[str, Knob] = {k.name: k for k in sorted(knobs, key=lambda k: k.name)}
        self._constraints: tuple[Constraint, ...] = tuple(constraints)
        self._added_later = {name: self.knob(name).validate(value) for name, value in (added_later or {}).items()}
        self._members: tuple[Genome, ...] | None = None
        self._member_ids: frozenset[str] = frozenset()
        self._valid_members: tuple[Genome, ...] | None = None
        self._inactive = inactive
        self._reads: list[str] | None = None
        if members is not None:
            self._members = tuple(self.genome(values) for values in members)
            self._member_ids = frozenset(g.id for g in self._members)
            if not self._members:
                raise ValueError("a space of listed members needs at least one")

    @property
    def members(self) -> tuple[Genome, ...] | None:
        """The listed settings of a recorded space, or None where every knob combination exists."""
        return self._members

    def valid_members(self) -> tuple[Genome, ...]:
        """The members that meet every constraint (computed once; empty where no members are listed)."""
        if self._valid_members is None:
            self._valid_members = tuple(g for g in self._members or () if not self._violated(g))
        return self._valid_members

    @property
    def knobs(self) -> tuple[Knob, ...]:
        return tuple(self._knobs.values())

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        return self._constraints

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._knobs)

    def knob(self, name: str) -> Knob:
        try:
            return self._knobs[name]
        except KeyError:
            raise ValueError(f"unknown knob {name!r}; known knobs: {list(self._knobs)}") from None

    def size(self) -> int:
        """Number of knob combinations before constraints (a recorded space: its members)."""
        if self._members is not None:
            return len(self._members)
        return math.prod(len(k.values) for k in self._knobs.values())

    def genome(self, values: Mapping[str, Any]) -> Genome:
        """Validate a full setting of every knob (not the constraints) and return its genome.

        Raises ``ValueError`` naming an unknown knob, a missing knob or a value outside a domain.
        A missing knob the space added later reads as its ``added_later`` value.
        """
        if not isinstance(values, Mapping):
            raise ValueError(f"a genome must be a mapping of knob names to values, not {type(values).__name__}")
        for name in values:
            if name not in self._knobs:
                raise ValueError(f"unknown knob {name!r}; known knobs: {list(self._knobs)}")
        values = {**self._added_later, **values}
        missing = [n for n in self._knobs if n not in values]
        if missing:
            raise ValueError(f"genome is missing knob(s) {missing}")
        return self.canonical(Genome.from_mapping({n: k.validate(values[n]) for n, k in self._knobs.items()}))

    def inactive(self, values: Mapping[str, KnobValue]) -> Mapping[str, KnobValue]:
        """The knobs this setting's kernel does not read, with the values they are held at."""
        return self._inactive(values) if self._inactive is not None else {}

    def restricted(self, constraint: Constraint) -> "Space":
        """This space with one more constraint (a run's own requirement: e.g. that a kernel runs the shape its
        fitness is timed at)."""
        members = None if self._members is None else [g.as_dict() for g in self._members]
        return Space(list(self._knobs.values()), self._constraints + (constraint,), added_later=self._added_later,
                     members=members, inactive=self._inactive)

    @property
    def has_designs(self) -> bool:
        """Whether some genomes leave knobs unread (the space was given ``inactive``)."""
        return self._inactive is not None

    def reads_of_constraints(self) -> list[str]:
        """Every knob each constraint reads (over a few random settings), once per constraint reading it."""
        if self._reads is None:
            rng = random.Random(0)
            settings = [{n: k.sample(rng) for n, k in self._knobs.items()} for _ in range(32)]
            self._reads = []
            for c in self._constraints:
                read: set[str] = set()
                for values in settings:
                    reads = _Reads(values)
                    try:
                        c.check(reads)
                    except Exception:
                        pass
                    read |= reads.read
                self._reads.extend(sorted(read))
        return self._reads

    def undecided_or_holds(self, partial: Mapping[str, KnobValue]) -> bool:
        """Whether a partial setting (some knobs not drawn yet) breaks no constraint it already decides."""
        values = _Partial(partial)
        for c in self._constraints:
            try:
                if not c.check(values):
                    return False
            except _Undecided:
                continue
            except Exception:
                return False
        return True

    def canonical(self, genome: Genome) -> Genome:
        """The genome with its inactive knobs at their held values (itself when they are already)."""
        held = self.inactive(genome.as_dict())
        if all(genome[name] == value for name, value in held.items()):
            return genome
        return genome.replace(**held)

    def genome_from_json(self, text: str) -> Genome:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"genome JSON is malformed: {exc}") from None
        return self.genome(values)

    def violations(self, genome: Genome) -> list[str]:
        """Messages naming each violated constraint (empty when the genome is valid)."""
        out = []
        if self._members is not None and genome.id not in self._member_ids:
            out.append("not one of the space's listed members (no measurement of it)")
        return out + self._violated(genome)

    def _violated(self, genome: Genome) -> list[str]:
        values = genome.as_dict()
        out = []
        for c in self._constraints:
            try:
                ok = c.holds(values)
            except Exception as exc:  # a constraint that cannot be evaluated is violated
                out.append(f"{c.message()} (evaluating it raised {type(exc).__name__}: {exc})")
                continue
            if not ok:
                out.append(c.message())
        return out

    def is_valid(self, genome: Genome) -> bool:
        if self._members is not None and genome.id not in self._member_ids:
            return False
        return self._holds(genome.as_dict())

    def values_valid(self, values: Mapping[str, KnobValue]) -> bool:
        """Whether a complete mapping of knob values is a valid genome, without building a Genome (its id
        hashed) where the space has no listed members, nor any message: the operators' repair asks this
        of hundreds of candidates a child."""
        if self._members is not None:
            return self.is_valid(Genome.from_mapping(values))
        return self._holds(values)

    def _holds(self, values: Mapping[str, KnobValue]) -> bool:
        """Every constraint holds (one that raises does not)."""
        for c in self._constraints:
            try:
                if not c.check(values):
                    return False
            except Exception:
                return False
        return True

    def violated_reads(self, values: Mapping[str, KnobValue]) -> list[frozenset[str]]:
        """For each constraint ``values`` violate, the knobs it read to say so. A change that touches none
        of a violated constraint's knobs leaves it violated (it reads the same values the same way), so a
        repair need only try changes that touch every set."""
        out = []
        for c in self._constraints:
            reads = _Reads(values)
            try:
                ok = c.check(reads)
            except Exception:
                ok = False
            if not ok:
                out.append(frozenset(reads.read))
        return out

    def check(self, genome: Genome) -> Genome:
        """Return the genome if it satisfies every constraint, else raise ``ValueError``."""
        problems = self.violations(genome)
        if problems:
            raise ValueError("; ".join(problems))
        return genome

    def distance(self, a: Genome, b: Genome) -> float:
        return sum(self._knobs[n].distance(a[n], b[n]) for n in self._knobs)

    def enumerate(self) -> Iterator[Genome]:
        """Every valid genome (use only on small spaces)."""
        if self._members is not None:
            yield from self.valid_members()
            return
        names = list(self._knobs)
        for combo in itertools.product(*(self._knobs[n].values for n in names)):
            genome = Genome.from_mapping(dict(zip(names, combo)))
            if self.is_valid(genome):
                yield genome
