"""Kernel families: one folder each with ``spec.py`` (defining FAMILY) and its sources."""

from seeds._family import (
    BuildRecipe,
    Device,
    KernelFamily,
    ProblemShape,
    RuntimeFamily,
    ScreenLimits,
    TimingPlan,
    Tolerance,
    shape,
)
from seeds._dispatch import DispatchTable, distance
from seeds._registry import family_names, get_family
from seeds._workload import Workload, check_workload, load_workload_file, parse_workload, resolve_workload, workload

__all__ = [
    "BuildRecipe",
    "DispatchTable",
    "Device",
    "KernelFamily",
    "ProblemShape",
    "RuntimeFamily",
    "ScreenLimits",
    "TimingPlan",
    "Tolerance",
    "Workload",
    "check_workload",
    "distance",
    "family_names",
    "get_family",
    "load_workload_file",
    "parse_workload",
    "resolve_workload",
    "shape",
    "workload",
]
