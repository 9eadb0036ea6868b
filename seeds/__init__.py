"""Kernel families: one folder each with ``spec.py`` (defining FAMILY) and its sources."""

from seeds._family import (
    BuildRecipe,
    Device,
    KernelFamily,
    ProblemShape,
    ScreenLimits,
    TimingPlan,
    Tolerance,
    shape,
)
from seeds._registry import family_names, get_family

__all__ = [
    "BuildRecipe",
    "Device",
    "KernelFamily",
    "ProblemShape",
    "ScreenLimits",
    "TimingPlan",
    "Tolerance",
    "family_names",
    "get_family",
    "shape",
]
