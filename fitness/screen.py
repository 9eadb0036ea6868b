"""Screen stage: static limits checked before anything runs.

For cubins, the ``ptxas -v`` report kept in the build log gives registers, shared memory,
stack frame and spills per entry function; the worst entry counts. Shared libraries have no
static report and pass.
"""

from __future__ import annotations

import re
import time

from evo.fitness.records import BuildResult, ResourceUsage, ScreenResult, Status
from evo.seeds import ScreenLimits

_REGISTERS = re.compile(r"Used (\d+) registers")
_SHARED = re.compile(r"(\d+) bytes smem")
_CONSTANT = re.compile(r"(\d+) bytes cmem\[0\]")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> ResourceUsage | None:
    """Worst-case resource usage over the entry functions in a ``ptxas -v`` report."""
    registers = [int(m) for m in _REGISTERS.findall(log)]
    if not registers:
        return None
    frames = [tuple(map(int, m)) for m in _FRAME.findall(log)]
    return ResourceUsage(
        registers=max(registers),
        shared_bytes=max((int(m) for m in _SHARED.findall(log)), default=0),
        stack_bytes=max((f[0] for f in frames), default=0),
        spill_store_bytes=max((f[1] for f in frames), default=0),
        spill_load_bytes=max((f[2] for f in frames), default=0),
        constant_bytes=max((int(m) for m in _CONSTANT.findall(log)), default=0),
    )


def screen(build: BuildResult, output_kind: str, limits: ScreenLimits) -> ScreenResult:
    start = time.perf_counter()
    if build.status is not Status.OK:
        return ScreenResult(build.genome_id, build.status, build.message, None, 0.0)
    if output_kind != "cubin":
        return ScreenResult(build.genome_id, Status.OK, "", None, time.perf_counter() - start)
    usage = parse_ptxas(build.log)
    if usage is None:
        return ScreenResult(build.genome_id, Status.SCREENED_OUT, "no ptxas -v report in the build log",
                            None, time.perf_counter() - start)
    problems = []
    checks = [
        ("registers", usage.registers, limits.max_registers),
        ("shared memory bytes", usage.shared_bytes, limits.max_shared_bytes),
        ("spill bytes", (usage.spill_store_bytes or 0) + (usage.spill_load_bytes or 0), limits.max_spill_bytes),
        ("stack frame bytes", usage.stack_bytes, limits.max_stack_bytes),
    ]
    for what, used, limit in checks:
        if limit is not None and used is not None and used > limit:
            problems.append(f"{what} {used} > limit {limit}")
    status = Status.SCREENED_OUT if problems else Status.OK
    return ScreenResult(build.genome_id, status, "; ".join(problems), usage, time.perf_counter() - start)
