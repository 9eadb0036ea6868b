"""Kernel families: one folder each with ``spec.py`` (defining FAMILY) and its sources."""

from evo.seeds._family import (
    BLOCK_SHARED_BYTES,
    HOPPER_NVCC_FLAGS,
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
from evo.runtime.dispatch import DispatchTable, distance
from evo.seeds._registry import (family_file, family_folder, family_folders, family_names, get_family,
                                 installed_families, is_path_reference)
from evo.seeds._workload import (Workload, check_workload, load_workload_file, parse_workload, read_toml,
                                 resolve_workload, workload)

__all__ = [
    "BLOCK_SHARED_BYTES",
    "HOPPER_NVCC_FLAGS",
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
    "family_file",
    "family_folder",
    "family_folders",
    "family_names",
    "get_family",
    "installed_families",
    "is_path_reference",
    "load_workload_file",
    "parse_workload",
    "read_toml",
    "resolve_workload",
    "shape",
    "workload",
]

