"""evo: evolutionary search for fast, verified kernels (CLI, search loop, strategies).

As a library: ``evo.tune(family, budget=..., target=...)``, ``evo.resume(run_id, budget=...)``,
``evo.export_run(run_id, out)`` (see evo.api); families are written against ``evo.family``.
"""

__version__ = "0.1.0"
__all__ = ["export_run", "new_search", "resume", "resumed_search", "tune"]


def __getattr__(name: str):
    """The library's functions, imported on first use (importing evo.family stays light)."""
    if name in __all__:
        from evo import api

        return getattr(api, name)
    raise AttributeError(f"module 'evo' has no attribute {name!r}")
