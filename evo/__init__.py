"""evo: evolutionary search for fast, verified kernels (CLI, search loop, strategies).

As a library: ``evo.search(family, budget=..., target=...)``, ``evo.resume(run_id, budget=...)``,
``evo.export(run_id, out)`` (see evo.api); families are written against ``evo.family``.
"""

__version__ = "0.1.0"
__all__ = ["export", "new_search", "resume", "resumed_search", "search"]


def __getattr__(name: str):
    """The library's functions, imported on first use (importing evo.family stays light)."""
    if name in __all__:
        from evo import api

        return getattr(api, name)
    raise AttributeError(f"module 'evo' has no attribute {name!r}")
