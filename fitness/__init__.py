"""fitness: build, screen, verify, benchmark and score candidates; Ray workers that run them."""

from evo.fitness._measurement import measurement_key
from evo.fitness._ray import RayUnavailable, check_ray_address, prepare_to_join, start_ray
from evo.fitness.build import BuildConfig, Builder, artifact_key, default_cache_dir
from evo.fitness.evaluate import EvalConfig, Evaluator, ShapePlan
from evo.fitness.records import (
    BuildResult,
    EvalResult,
    GateResult,
    GateRound,
    ResourceUsage,
    ScreenResult,
    ShapeCheck,
    ShapeTiming,
    StageSeconds,
    Status,
    to_jsonable,
)
from evo.fitness.score import Target, format_seconds, format_span
from evo.fitness.screen import parse_ptxas, screen

__all__ = [
    "BuildConfig",
    "BuildResult",
    "Builder",
    "EvalConfig",
    "EvalResult",
    "Evaluator",
    "GateResult",
    "GateRound",
    "ResourceUsage",
    "ScreenResult",
    "ShapeCheck",
    "ShapePlan",
    "ShapeTiming",
    "StageSeconds",
    "RayUnavailable",
    "Status",
    "Target",
    "artifact_key",
    "check_ray_address",
    "default_cache_dir",
    "format_seconds",
    "format_span",
    "measurement_key",
    "parse_ptxas",
    "prepare_to_join",
    "screen",
    "start_ray",
    "to_jsonable",
]

