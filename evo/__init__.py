"""evo: evolutionary search for fast, verified kernels (CLI, search loop, strategies).

As a library: ``evo.tune(family, budget=..., target=...)``, ``evo.resume(run_id, budget=...)``,
``evo.export_run(run_id, out)`` (see evo.api); families are written against ``evo.family``.
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

# evo's other parts live beside this folder in the repository (db/, fitness/, kernel_genome/, seeds/) and are
# its subpackages: evo.db, evo.fitness, evo.kernel_genome, evo.seeds; `evo` is the one top-level import name.
# An installed wheel holds them inside evo/ (pyproject's package-dir); in a checkout this finder maps them.
_PARTS = ("db", "fitness", "kernel_genome", "seeds")
_BESIDE = _Path(__file__).resolve().parent.parent


class _Parts:
    """Finds evo.db, evo.fitness, evo.kernel_genome and evo.seeds in the folders beside evo/ (their own
    submodules are then found through their packages' __path__)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        prefix, _, part = name.partition(".")
        if prefix != "evo" or part not in _PARTS:
            return None
        folder = _BESIDE / part
        return _util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])


if not (_Path(__file__).parent / "seeds").is_dir() and all((_BESIDE / p / "__init__.py").is_file() for p in _PARTS):
    _sys.meta_path.insert(0, _Parts)

__version__ = "0.1.0"
__all__ = ["export_run", "new_search", "resume", "resumed_search", "tune"]


def __getattr__(name: str):
    """The library's functions, imported on first use (importing evo.family stays light)."""
    if name in __all__:
        from evo import api

        return getattr(api, name)
    raise AttributeError(f"module 'evo' has no attribute {name!r}")
