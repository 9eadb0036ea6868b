"""kernel_genome: knobs, spaces with constraints, genomes and their variation operators.

A pure model: it imports nothing else of evo's.
"""

from evo.kernel_genome._genome import Genome
from evo.kernel_genome._knobs import Boolean, Choice, IntRange, Knob, KnobValue, PowerOfTwo
from evo.kernel_genome._operators import NoValidGenome, Offspring, crossover, mutate, repair, sample
from evo.kernel_genome._space import Constraint, Space

__all__ = [
    "Boolean",
    "Choice",
    "Constraint",
    "Genome",
    "IntRange",
    "Knob",
    "KnobValue",
    "NoValidGenome",
    "Offspring",
    "PowerOfTwo",
    "Space",
    "crossover",
    "mutate",
    "repair",
    "sample",
]
