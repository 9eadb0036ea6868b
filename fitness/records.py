"""Typed records passed between pipeline stages. A failure is data: a status and a message."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    SCREENED_OUT = "screened_out"
    INCORRECT = "incorrect"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"
    UNVERIFIED = "unverified"  # built and screened; no GPU here can run it (e.g. sm_100a code on an H100)

    @property
    def failed(self) -> bool:
        return self is not Status.OK


@dataclass(frozen=True)
class ResourceUsage:
    """Static resources the compiler reports (ptxas -v for CUDA)."""

    registers: int | None = None
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    constant_bytes: int | None = None


@dataclass(frozen=True)
class BuildResult:
    genome_id: str
    status: Status
    message: str
    artifact_key: str | None
    artifact: bytes | None = field(repr=False)  # travels with the record: any node can load it
    seconds: float
    cached: bool
    log: str = field(default="", repr=False)
    node: str = ""  # where it was compiled: host/Ray node (a cluster spreads builds over its nodes)


@dataclass(frozen=True)
class ScreenResult:
    genome_id: str
    status: Status
    message: str
    usage: ResourceUsage | None
    seconds: float


@dataclass(frozen=True)
class ShapeCheck:
    """Verification of one shape over several trials (worst trial reported)."""

    shape: str
    passed: bool
    max_abs_error: float | None
    rel_l2_error: float | None
    trials: int
    message: str = ""


@dataclass(frozen=True)
class ShapeTiming:
    """``cut_short``: the first sample was above the cutoff the evaluation plan gave for this shape (the
    kernel cannot be among the best there), so timing stopped after it and the shape was not verified;
    the figure is that one sample."""

    shape: str
    median_s: float
    p90_s: float
    stdev_s: float
    runs: int
    cut_short: bool = False
    unstable: bool = False  # its samples spread wide (see fitness.benchmark.UNSTABLE_SPREAD), even measured again

    @property
    def spread(self) -> float:
        """How far the slowest tenth of the samples lies above the median: p90 / median - 1."""
        return self.p90_s / self.median_s - 1 if self.median_s > 0 else 0.0


@dataclass(frozen=True)
class StageSeconds:
    build: float = 0.0
    screen: float = 0.0
    verify: float = 0.0
    benchmark: float = 0.0


@dataclass(frozen=True)
class EvalResult:
    """The whole pipeline's verdict on one genome. ``fitness_s`` is None unless status is OK."""

    genome_id: str
    status: Status
    message: str
    fitness_s: float | None
    checks: tuple[ShapeCheck, ...] = ()
    timings: tuple[ShapeTiming, ...] = ()
    anchor: tuple[ShapeTiming, ...] = ()
    usage: ResourceUsage | None = None
    stages: StageSeconds = StageSeconds()
    artifact_key: str | None = None
    worker: str = ""  # the host that verified and timed it
    built_on: str = ""  # the host/Ray node that compiled it
    reused_from: int | None = None  # the stored evaluation whose verdict this is (an earlier run measured it)

    def timing(self, shape: str) -> ShapeTiming | None:
        return next((t for t in self.timings if t.shape == shape), None)

    def anchor_timing(self, shape: str) -> ShapeTiming | None:
        return next((t for t in self.anchor if t.shape == shape), None)


@dataclass(frozen=True)
class GateRound:
    """One round of the hard gate: every shape re-verified on fresh inputs, the gated shapes re-timed
    (``mission_s``: the first of them), and with ``anchor_times`` the anchor re-timed beside them."""

    verified: bool
    mission_s: float | None
    message: str = ""
    times: tuple[tuple[str, float], ...] = ()  # (shape, seconds) for every gated shape timed this round
    anchor_times: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class GateResult:
    """The hard gate before a target is reported met: ``rounds`` consecutive rounds, each verified
    and each timed within its target (``targets``: (shape, seconds or None for no limit); ``target_s``:
    the first). A kernel that fails any round does not meet the target. With no limit at all it is a
    confirmation: the winners of a workload re-verified and re-timed beside the anchor."""

    genome_id: str
    target_s: float | None
    passed: bool
    rounds: tuple[GateRound, ...]
    message: str = ""
    targets: tuple[tuple[str, float | None], ...] = ()


def to_jsonable(value: Any) -> Any:
    """Records to plain JSON types (enums to their values), for the store."""
    if hasattr(value, "__dataclass_fields__"):
        value = asdict(value)
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items() if not isinstance(v, bytes)}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value
