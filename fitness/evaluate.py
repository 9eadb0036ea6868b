"""Verify + benchmark on one device, in the current process (the evaluator actor's process).

Verification: for every shape of the family, several trials on fresh random inputs, the output
poisoned with NaN before each run, compared with the family's reference in float64; NaN/Inf
and unwritten elements fail. Benchmark: every shape, then fitness = median at the mission shape.
The family's anchor is timed the same way in this same process (again every ``ANCHOR_REFRESH_S``).

A workload run (``EvalConfig.workload``) verifies the family's shapes, then measures the workload's
shapes as its ``ShapePlan`` says: in its order, each timed first (cut short above the plan's cutoff
or four times the anchor's time there, whichever is lower), and a shape timed in full is verified
there too; after the plan's probes it goes on only if the kernel was timed in full at one of them.
Its anchor is the family's ``fallback`` (PyTorch's whole computation), and the fitness is the time at
the workload's primary shape, which every plan times first.
"""

from __future__ import annotations

import platform
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from evo.fitness._gate import disagreement, outlier, over_target
from evo.fitness.benchmark import time_pair, time_runs
from evo.fitness.build import ARTIFACT_SUFFIX, cpu_name
from evo.fitness.records import (BuildResult, EvalResult, GateResult, GateRound, ScreenResult, ShapeCheck, ShapeTiming,
                             StageSeconds, Status)
from evo.kernel_genome import Genome
from evo.seeds import KernelFamily, ProblemShape, Workload

ANCHOR_CUTOFF = 4.0  # a kernel over this many times the anchor's time at a shape is cut short there
# The anchor is timed again after this long: on the H100 a flashcore workload evaluator timed cuDNN at 648 us at
# (4,16,4096,64) as it started and 577-611 us in every confirmation round at the search's end.
ANCHOR_REFRESH_S = 120.0
MESSAGE_CHARS = 300  # the most of an error message kept where a secondary anchor could not run


def unsteady(timings, anchor) -> str:
    """A record's word on timings that stayed unsteady (``ShapeTiming.unstable``), or ""."""
    flagged = [f"{t.shape} (p90 {t.spread:+.0%} over the median)" for t in timings if t.unstable]
    flagged += [f"the anchor at {t.shape} (p90 {t.spread:+.0%})" for t in anchor if t.unstable]
    return f"unsteady timing, measured twice: {', '.join(flagged)}" if flagged else ""


@dataclass(frozen=True)
class EvalConfig:
    trials: int = 3  # fresh random inputs per shape
    cold_cache: bool = False  # time each run after flushing the last-level cache (fitness/benchmark.py)
    workload: Workload | None = None  # the shapes a workload run times (None: the family's, fitness at the mission)
    threads: int | None = None  # a CPU family's: the threads PyTorch runs with in the evaluator (None: as it is)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be at least 1, got {self.trials}")


@dataclass(frozen=True)
class ShapePlan:
    """How a workload run measures one genome: its shapes (by name) in the order to time them, the
    first ``probes`` always, the rest only if the genome was timed in full at one of those (it was
    below the cutoff there: among the best); ``cutoffs``: per shape, the time whose first sample above
    it cuts the timing short (what the best kernels there allow), never below the shape's ``floors``."""

    order: tuple[str, ...]
    probes: int
    cutoffs: tuple[tuple[str, float], ...] = ()
    floors: tuple[tuple[str, float], ...] = ()  # per shape, a time no cutoff goes below (the shape's target)

    def __post_init__(self) -> None:
        if not self.order or not 1 <= self.probes <= len(self.order):
            raise ValueError(f"a shape plan needs shapes and 1 <= probes <= {len(self.order)}, got {self.probes}")


class Evaluator:
    """Owns one device. Not thread-safe; one instance per process (per GPU)."""

    def __init__(self, family: KernelFamily, config: EvalConfig, artifact_dir: Path) -> None:
        import torch

        self.family = family
        self.config = config
        self.artifact_dir = artifact_dir
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        self._torch = torch
        self._anchor: tuple[ShapeTiming, ...] | None = None
        self._anchor_at = 0.0  # time.monotonic() when the anchor was last timed
        self.anchor_pass_s: float | None = None  # wall seconds of timing the anchor on every shape
        self._secondary: dict[str, tuple[ShapeTiming, ...]] | None = None
        self.secondary_refused: dict[str, str] = {}  # other anchors that could not run every shape, and why
        self.workload = config.workload
        # what the anchor times and where: a workload's shapes against PyTorch's whole computation
        self.timed_shapes = self.workload.shapes if self.workload else family.shapes
        self.anchor_run = family.fallback if self.workload else family.anchor
        if family.device != "cuda" and config.threads:  # Ray pins an actor's threads to its CPU share
            torch.set_num_threads(config.threads)
        family.prepare_evaluator()

    # -- the device this evaluator owns ---------------------------------------------------
    def describe(self) -> dict:
        torch = self._torch
        info = {"host": platform.node(), "torch": torch.__version__, "device_kind": self.family.device}
        if self.family.device == "cuda":
            info["device"] = torch.cuda.get_device_name()
            info["cuda"] = torch.version.cuda
            info["driver"] = _driver_version(torch)
            if self.family.memory_bound:  # what the reports set a kernel's bytes a second against
                from evo.runtime import bandwidth

                info["read_bandwidth"], info["read_bandwidth_method"] = bandwidth.measured()
        else:
            info["device"] = cpu_name()
            info["threads"] = torch.get_num_threads()
        return info

    def _synchronize(self) -> None:
        if self.family.device == "cuda":
            self._torch.cuda.synchronize()

    def _generator(self, seed: int):
        device = "cuda" if self.family.device == "cuda" else "cpu"
        return self._torch.Generator(device=device).manual_seed(seed)

    # -- anchors ----------------------------------------------------------------------------
    def anchor_timings(self) -> tuple[ShapeTiming, ...]:
        """The anchor timed on every shape, when the evaluator starts and again every ``ANCHOR_REFRESH_S``."""
        if self._anchor is None:  # what a kernel is compared with (what the op falls back to) must itself be right
            wrong = self.anchor_mismatch()
            if wrong is not None:
                raise RuntimeError(wrong)
        if self._anchor is None or time.monotonic() - self._anchor_at > ANCHOR_REFRESH_S:
            started = time.perf_counter()
            self._anchor = tuple(self.time_anchor(self.anchor_run, shape) for shape in self.timed_shapes)
            self._anchor_at = time.monotonic()
            self.anchor_pass_s = self.anchor_pass_s or time.perf_counter() - started  # the first pass's (the watchdog's)
        return self._anchor

    def secondary_anchors(self) -> dict:
        """The other implementations timed beside the anchor: the family's secondary anchors; in a workload
        run without the costly ones, and with the family's bare anchor where the fallback is another."""
        runs = self.family.secondary_anchors()
        if self.workload is None:
            return runs
        runs = {name: run for name, run in runs.items() if name not in self.family.costly_anchors}
        return {self.family.anchor_name: self.family.anchor, **runs} if self.family.fallback_name else runs

    def secondary_anchor_timings(self) -> dict[str, tuple[ShapeTiming, ...]]:
        """The family's other anchors (e.g. FA2 beside cuDNN), timed on every shape, once per process."""
        if self._secondary is None:
            self._secondary = {}
            for name, run in self.secondary_anchors().items():
                try:
                    self._secondary[name] = tuple(self.time_anchor(run, shape) for shape in self.timed_shapes)
                except Exception as error:  # e.g. a backend that refuses one of the shapes: not timed, the run goes on
                    self.secondary_refused[name] = f"{type(error).__name__}: {error}"[:MESSAGE_CHARS]
        return self._secondary

    def time_anchor(self, anchor, shape: ProblemShape) -> ShapeTiming:
        inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
        return time_runs(lambda: anchor(shape, inputs), self.family.device, self.family.timing, shape.name,
                         self.config.cold_cache)

    def load(self, genome: Genome, build: BuildResult):
        """The family's launchable handle for a built genome."""
        return self.family.load(self._materialise(build), genome)

    # -- one candidate ------------------------------------------------------------------------
    def evaluate(self, genome: Genome, build: BuildResult, screened: ScreenResult,
                 plan: ShapePlan | None = None) -> EvalResult:
        stages = StageSeconds(build=build.seconds, screen=screened.seconds)
        common = dict(usage=screened.usage, artifact_key=build.artifact_key, worker=platform.node())
        if screened.status is not Status.OK:
            return EvalResult(build.genome_id, screened.status, screened.message, None, stages=stages, **common)
        runs, why = self.family.runs_here()
        if not runs:
            return EvalResult(build.genome_id, Status.UNVERIFIED, f"built and passed the screen; not run: {why}", None,
                              stages=stages, **common)
        taken = tuple(shape for shape in self.family.shapes if self.family.takes(genome, shape))
        mission_shape = self.family.mission_shape
        if self.workload is None and mission_shape not in taken:
            return EvalResult(build.genome_id, Status.SCREENED_OUT, f"this kernel cannot run the mission shape "
                              f"{mission_shape.name} (e.g. a dtype or layout only another design takes)", None,
                              stages=stages, **common)
        anchor = self.anchor_timings()
        try:
            kernel = self.load(genome, build)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"loading the artifact failed: {exc}", None,
                              anchor=anchor, stages=stages, **common)
        started = time.perf_counter()
        try:
            checks = tuple(self.verify_shape(kernel, shape) for shape in taken)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"kernel raised during verification: {exc}", None,
                              anchor=anchor, stages=stages, **common)
        stages = StageSeconds(stages.build, stages.screen, verify=time.perf_counter() - started)
        failed = [c for c in checks if not c.passed]
        if failed:
            message = "; ".join(f"{c.shape}: {c.message}" for c in failed)
            return EvalResult(build.genome_id, Status.INCORRECT, message, None, checks=checks, anchor=anchor,
                              stages=stages, **common)
        if self.workload is not None:
            return self._measure_workload(genome, kernel, plan or self.full_plan(), checks, stages, anchor, common)
        started = time.perf_counter()
        try:
            timings = tuple(self.time_shape(kernel, shape) for shape in taken)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"kernel raised during timing: {exc}", None,
                              checks=checks, anchor=anchor, stages=stages, **common)
        stages = StageSeconds(stages.build, stages.screen, stages.verify, time.perf_counter() - started)
        mission = next(t for t in timings if t.shape == self.family.mission_shape.name)
        return EvalResult(build.genome_id, Status.OK, unsteady(timings, anchor), mission.median_s, checks=checks,
                          timings=timings, anchor=anchor, stages=stages, **common)

    def full_plan(self) -> ShapePlan:
        """Every workload shape, the primary first, all of them probes (no early stop)."""
        primary = self.workload.primary.name
        order = (primary,) + tuple(s.name for s in self.workload.shapes if s.name != primary)
        return ShapePlan(order, len(order))

    def _measure_workload(self, genome: Genome, kernel, plan: ShapePlan, checks: tuple[ShapeCheck, ...],
                          stages: StageSeconds, anchor: tuple[ShapeTiming, ...], common: dict) -> EvalResult:
        genome_id = genome.id
        anchors = {t.shape: t.median_s for t in anchor}
        cutoffs, floors = dict(plan.cutoffs), dict(plan.floors)
        timings: list[ShapeTiming] = []
        checks = list(checks)
        competitive = False
        started, verify_s = time.perf_counter(), 0.0
        try:
            for index, name in enumerate(plan.order):
                if index == plan.probes and not competitive:
                    break
                shape = self.workload.shape(name)
                if not self.family.takes(genome, shape):  # its op runs PyTorch there
                    continue
                limits = [x for x in (cutoffs.get(name), ANCHOR_CUTOFF * anchors[name] if name in anchors else None)
                          if x is not None]
                cutoff = max(min(limits), floors.get(name, 0.0)) if limits else None
                timing = self.time_shape(kernel, shape, cutoff)
                if not timing.cut_short:
                    verify_started = time.perf_counter()
                    check = self.verify_shape(kernel, shape)
                    verify_s += time.perf_counter() - verify_started
                    checks.append(check)
                    if not check.passed:
                        stages = StageSeconds(stages.build, stages.screen, stages.verify + verify_s,
                                              time.perf_counter() - started - verify_s)
                        return EvalResult(genome_id, Status.INCORRECT,
                                          f"{check.shape}: {check.message}", None, checks=tuple(checks), anchor=anchor,
                                          stages=stages, **common)
                    competitive = True
                timings.append(timing)
        except Exception as exc:
            return EvalResult(genome_id, Status.CRASHED, f"kernel raised during the workload's shapes: {exc}", None,
                              checks=tuple(checks), anchor=anchor, stages=stages, **common)
        stages = StageSeconds(stages.build, stages.screen, stages.verify + verify_s,
                              time.perf_counter() - started - verify_s)
        primary = next((t for t in timings if t.shape == self.workload.primary.name), None)
        if primary is None:
            return EvalResult(genome_id, Status.SCREENED_OUT, f"this kernel cannot run the workload's primary shape "
                              f"{self.workload.primary.name}", None, checks=tuple(checks), anchor=anchor,
                              stages=stages, **common)
        message = unsteady(timings, anchor)
        if len(timings) < len(self.workload.shapes):
            message = "; ".join(filter(None, [f"timed at {len(timings)} of {len(self.workload.shapes)} shapes: slower "
                                              f"than the best at each of its {plan.probes} probe shapes", message]))
        return EvalResult(genome_id, Status.OK, message, primary.median_s, checks=tuple(checks), timings=tuple(timings),
                          anchor=anchor, stages=stages, **common)

    def shape_named(self, name: str) -> ProblemShape:
        """A shape of the workload (first) or of the family, by name."""
        for shape in (self.workload.shapes if self.workload else ()) + self.family.shapes:
            if shape.name == name:
                return shape
        raise KeyError(name)

    def gate(self, genome: Genome, build: BuildResult, targets, rounds: int, with_anchor: bool = False) -> GateResult:
        """Re-verify every shape (the family's and the gated ones) and re-time the gated shapes (``targets``:
        (shape name, limit in seconds or None)) ``rounds`` times, with ``with_anchor`` beside the anchor, in
        turns (``time_beside_anchor``); stop at the first miss. The rounds must agree (GATE_AGREEMENT): the
        round farthest from the others is timed again, up to a third of the rounds, before the gate fails."""
        targets = tuple((name, limit) for name, limit in targets)
        kernel = self.load(genome, build)
        gated = [self.shape_named(name) for name, _ in targets]
        checked = list(self.family.shapes) + [s for s in gated if s not in self.family.shapes]
        done: list[GateRound] = []
        message = ""
        for number in range(1, rounds + 1):
            failed = [c for c in (self.verify_shape(kernel, shape) for shape in checked) if not c.passed]
            if failed:
                message = f"round {number}: " + "; ".join(f"{c.shape}: {c.message}" for c in failed)
                done.append(GateRound(False, None, message))
                break
            done.append(self._gate_round(kernel, gated, with_anchor))
            message = over_target(done[-1], targets, number)
            if message:
                break
        retakes = 0
        while not message and (farthest := outlier(done, targets)) is not None:
            if retakes == max(1, rounds // 3):
                message = f"{disagreement(done, targets)}, {retakes} round(s) timed again"
                break
            retakes += 1
            done[farthest] = self._gate_round(kernel, gated, with_anchor)
            message = over_target(done[farthest], targets, farthest + 1)
        return GateResult(genome.id, targets[0][1], not message, tuple(done), message, targets)

    def _gate_round(self, kernel, gated, with_anchor: bool) -> GateRound:
        """One round's timings of the gated shapes, beside the anchor's with ``with_anchor``."""
        times, anchor_times = [], []
        for shape in gated:
            if with_anchor:
                own, beside = self.time_beside_anchor(kernel, shape)
                times.append((shape.name, own.median_s))
                anchor_times.append((shape.name, beside.median_s))
            else:
                times.append((shape.name, self.time_shape(kernel, shape).median_s))
        return GateRound(True, times[0][1], "", tuple(times), tuple(anchor_times))

    def _materialise(self, build: BuildResult) -> Path:
        if build.artifact is None:
            raise ValueError("the build produced no artifact")
        suffix = ARTIFACT_SUFFIX["cubin" if self.family.device == "cuda" else "shared_library"]
        path = self.artifact_dir / f"{build.artifact_key}{suffix}"
        if not path.exists():
            partial = path.with_name(path.name + f".{secrets.token_hex(4)}.tmp")
            partial.write_bytes(build.artifact)
            partial.replace(path)
        return path

    def _poison(self, output) -> None:
        if output.is_floating_point():
            output.fill_(float("nan"))
        else:
            output.fill_(-1)

    def verify_shape(self, kernel, shape: ProblemShape) -> ShapeCheck:
        """The kernel on ``trials`` fresh inputs, its output poisoned before each run, against the reference."""
        def run(inputs):
            output = self.family.make_output(shape)
            self._poison(output)
            self._synchronize()
            self.family.launch(kernel, shape, inputs, output)
            self._synchronize()
            return output

        return self._verify(shape, run, self.config.trials)

    def anchor_mismatch(self) -> str | None:
        """PyTorch's whole computation (the anchor, or the family's fallback where its anchor is only part of
        the work, e.g. vit_gemm's bare cuBLAS matmul) against the reference, once, at the family's smallest
        shape (a workload's: at each of its shapes): the first mismatch's words, or None."""
        shapes = self.timed_shapes if self.workload else [self.family.smallest_shape]
        for shape in shapes:  # the whole computation: a family whose anchor is less (a bare GEMM) names its fallback
            try:
                check = self._verify(shape, lambda inputs: self.family.fallback(shape, inputs), 1)
            except Exception as exc:  # noqa: BLE001 - the family's own code failing is the user's input failing
                return f"{self._anchor_label} could not run {shape.name}: {type(exc).__name__}: {exc}"
            if not check.passed:
                return (f"{self._anchor_label} fails the family's tolerance at {shape.name}: {check.message} (what "
                        f"every kernel is compared with must itself be right: fix the anchor or the reference)")
        return None

    @property
    def _anchor_label(self) -> str:
        return (f"PyTorch's computation ({self.family.fallback_name})" if self.family.fallback_name
                else f"the anchor ({self.family.anchor_name})")

    def _verify(self, shape: ProblemShape, run, trials: int) -> ShapeCheck:
        torch = self._torch
        tolerance = self.family.tolerance
        worst_abs, worst_rel = 0.0, 0.0
        for trial in range(trials):
            inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
            output = run(inputs)
            expected = self.family.reference(shape, inputs).double()
            got = output.double()
            if got.shape != expected.shape:
                return ShapeCheck(shape.name, False, None, None, trial + 1,
                                  f"output shape {tuple(got.shape)} != reference {tuple(expected.shape)}")
            not_finite = int((~torch.isfinite(got)).sum())
            if not_finite:
                return ShapeCheck(shape.name, False, None, None, trial + 1,
                                  f"{not_finite} of {got.numel()} outputs are NaN/Inf or were never written "
                                  f"(trial {trial + 1})")
            difference = (got - expected).abs()
            max_abs = float(difference.max())
            rel = float(difference.norm() / expected.norm().clamp_min(1e-30))
            worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, rel)
            beyond = int((difference > tolerance.max_abs + tolerance.rtol * expected.abs()).sum())
            if beyond or rel > tolerance.max_rel_l2:
                limit = f"{tolerance.max_abs:g}" + (f" + {tolerance.rtol:g} |ref|" if tolerance.rtol else "")
                return ShapeCheck(shape.name, False, worst_abs, worst_rel, trial + 1,
                                  f"max abs error {max_abs:.3g} ({beyond} outputs beyond {limit}), relative L2 "
                                  f"error {rel:.3g} (limit {tolerance.max_rel_l2:g}) in trial {trial + 1}")
        return ShapeCheck(shape.name, True, worst_abs, worst_rel, trials)

    def time_beside_anchor(self, kernel, shape: ProblemShape) -> tuple[ShapeTiming, ShapeTiming]:
        """The kernel and the anchor on the same inputs, timed in turns; the kernel writes a fresh output
        each call, as the anchor does and as an exported op does."""
        inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
        return time_pair(lambda: self.family.launch(kernel, shape, inputs, self.family.make_output(shape)),
                         lambda: self.anchor_run(shape, inputs), self.family.device, self.family.timing,
                         (shape.name, shape.name), self.config.cold_cache)

    def time_shape(self, kernel, shape: ProblemShape, cutoff_s: float | None = None) -> ShapeTiming:
        inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
        output = self.family.make_output(shape)
        return time_runs(lambda: self.family.launch(kernel, shape, inputs, output), self.family.device,
                         self.family.timing, shape.name, self.config.cold_cache, cutoff_s)


def _driver_version(torch) -> str | None:
    """The NVIDIA driver's version (its /proc line), else the CUDA driver API version torch reports."""
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        return " ".join(word for word in line.split() if word[:1].isdigit() and "." in word)[:40] or line[:80]
    except (OSError, IndexError):
        pass
    try:
        return str(torch._C._cuda_getDriverVersion())
    except Exception:  # noqa: BLE001 - a private call: absent in some builds
        return None
