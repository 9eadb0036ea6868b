"""What a measurement depends on, as one key: equal keys measure the same thing (db.memory reuses them).

The key covers the family's Python (the file defining it: launch, reference, shapes) and the genome's
build recipe (kernel source, flags, compiler and its version: the content-addressed build key), the
shapes timed and which one is the fitness, the timing mode and method (trials, cold or warm caches,
fitness.benchmark.TIMING_METHOD), and the evaluator's hardware and software (GPU or CPU model, driver,
CUDA and torch versions; not the host's name: the same GPU model on another host measures the same).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path

from fitness.benchmark import TIMING_METHOD
from fitness.build import artifact_key
from fitness.evaluate import EvalConfig
from kernel_genome import Genome

HARDWARE_FIELDS = ("device_kind", "device", "driver", "cuda", "torch", "threads")


def measurement_key(family, genome: Genome, evaluation: EvalConfig, hardware: dict, mission: str) -> str:
    shapes = [[s.name, dict(s.dims)] for s in family.shapes]
    payload = json.dumps([
        family.reference_key, _code_digest(inspect.getfile(type(family))), artifact_key(family.build_recipe(genome)),
        shapes, mission, evaluation.trials, evaluation.cold_cache, TIMING_METHOD,
        {name: hardware.get(name) for name in HARDWARE_FIELDS},
    ], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:40]


@lru_cache(maxsize=None)
def _code_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"
