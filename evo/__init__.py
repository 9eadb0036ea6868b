"""evo: evolutionary search for fast, verified kernels (CLI, search loop, strategies)."""

__version__ = "0.1.0"
