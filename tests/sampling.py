"""Genome samples the family tests share."""

import random

from kernel_genome import Genome, Space


def covering_sample(space: Space, seed: int = 0) -> list[Genome]:
    """Valid genomes such that every value of every knob appears in at least one of them."""
    rng = random.Random(seed)
    chosen: dict[str, Genome] = {}
    for knob in space.knobs:
        for value in knob.values:
            if any(g[knob.name] == value and type(g[knob.name]) is type(value) for g in chosen.values()):
                continue
            for _ in range(200000):
                candidate = Genome.from_mapping({k.name: rng.choice(k.values) for k in space.knobs}).replace(**{knob.name: value})
                if space.is_valid(candidate):
                    break
            else:
                raise AssertionError(f"no valid genome has {knob.name}={value!r}")
            chosen[candidate.id] = candidate
    return list(chosen.values())
