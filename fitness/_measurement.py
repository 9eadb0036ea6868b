"""What a measurement depends on, as one key: equal keys measure the same thing (db.memory reuses them).

The key covers the family's code (every file of it: spec, runtime, kernels, workloads; Family.code_files),
evo's own verification and timing code (EVALUATOR_FILES), and the genome's
build recipe (kernel source, flags, compiler and its version: the content-addressed build key), the
shapes timed and which one is the fitness, the timing mode and method (trials, cold or warm caches,
fitness.benchmark.TIMING_METHOD), and the evaluator's hardware and software (GPU or CPU model, driver,
CUDA and torch versions; not the host's name: the same GPU model on another host measures the same).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from evo import runtime
from evo.fitness.benchmark import TIMING_METHOD
from evo.fitness.build import artifact_key
from evo.fitness.evaluate import EvalConfig
from evo.kernel_genome import Genome

HARDWARE_FIELDS = ("device_kind", "device", "driver", "cuda", "torch", "threads")


def measurement_key(family, genome: Genome, evaluation: EvalConfig, hardware: dict, mission: str) -> str:
    shapes = [[s.name, dict(s.dims)] for s in family.shapes]
    payload = json.dumps([
        family.reference_key, _code_digest(family.code_files()), _code_digest(EVALUATOR_FILES),
        artifact_key(family.build_recipe(genome)),
        shapes, mission, evaluation.trials, evaluation.cold_cache, TIMING_METHOD,
        {name: hardware.get(name) for name in HARDWARE_FIELDS},
    ], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:40]


# the code that verifies and times a kernel: a change there may change any verdict or time
EVALUATOR_FILES = (*(Path(__file__).with_name(name) for name in ("evaluate.py", "benchmark.py", "_gate.py", "records.py")),
                   *(Path(runtime.__file__).with_name(name) for name in ("queued.py", "flush.py")))


def _code_digest(paths) -> str:
    """One digest of the files' contents, each under its folder and name (not where the checkout is: the same
    code elsewhere measures the same); an unreadable file counts as such."""
    digest = hashlib.sha256()
    for path in map(Path, paths):
        try:
            stat = path.stat()
            content = _file_digest(str(path), stat.st_mtime_ns, stat.st_size)
        except OSError:
            content = "unreadable"
        digest.update("/".join(path.parts[-2:]).encode() + b"\0" + content.encode())
    return digest.hexdigest()


@lru_cache(maxsize=4096)
def _file_digest(path: str, modified_ns: int, size: int) -> str:
    """A file's content digest, read again whenever it changes (the cache is keyed on its time and size)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
