"""Genome samples the family tests share."""

import random

from evo.kernel_genome import Genome, Space


def covering_sample(space: Space, seed: int = 0) -> list[Genome]:
    """Valid genomes such that every value of every knob appears in at least one of them: random ones,
    or for a value that random genomes rarely allow, one chosen earlier with that value, or a random one
    whose other knobs are changed until no constraint is broken."""
    rng = random.Random(seed)
    chosen: dict[str, Genome] = {}
    for knob in space.knobs:
        for value in knob.values:
            if any(g[knob.name] == value and type(g[knob.name]) is type(value) for g in chosen.values()):
                continue
            candidate = _with_value(space, knob.name, value, list(chosen.values()), rng)
            if candidate is None:
                raise AssertionError(f"no valid genome has {knob.name}={value!r}")
            chosen[candidate.id] = candidate
    return list(chosen.values())


def _with_value(space: Space, name: str, value, chosen: list[Genome], rng: random.Random) -> Genome | None:
    def random_with_value() -> Genome:
        return Genome.from_mapping({k.name: rng.choice(k.values) for k in space.knobs}).replace(**{name: value})

    for _ in range(20000):
        candidate = random_with_value()
        if space.is_valid(candidate):
            return candidate
    for earlier in chosen:
        if space.is_valid(earlier.replace(**{name: value})):
            return earlier.replace(**{name: value})
    others = [k for k in space.knobs if k.name != name and len(k.values) > 1]
    for _ in range(50):  # hill-climb on the number of broken constraints, the value held
        candidate = random_with_value()
        broken = len(space.violations(candidate))
        for _ in range(2000):
            if broken == 0:
                return candidate
            knob = rng.choice(others)
            step = candidate.replace(**{knob.name: rng.choice(knob.values)})
            if len(space.violations(step)) <= broken:
                candidate, broken = step, len(space.violations(step))
    return None
