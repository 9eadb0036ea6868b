"""Lineage, convergence and knob-effect views of one run, read from the store (html/md/dot/json)."""

from evo.report._data import (
    Edge,
    GenerationSpread,
    KnobEffect,
    LineageReport,
    Point,
    Step,
    ValueEffect,
    build_report,
)
from evo.report._render import FORMATS, to_dot, to_html, to_json, to_markdown, write_report

__all__ = [
    "Edge",
    "FORMATS",
    "GenerationSpread",
    "KnobEffect",
    "LineageReport",
    "Point",
    "Step",
    "ValueEffect",
    "build_report",
    "to_dot",
    "to_html",
    "to_json",
    "to_markdown",
    "write_report",
]
