"""Verify + benchmark on one device, in the current process (the evaluator actor's process).

Verification: for every shape of the family, several trials on fresh random inputs, the output
poisoned with NaN before each run, compared with the family's reference in float64; NaN/Inf
and unwritten elements fail. Benchmark: every shape, then fitness = median at the mission shape.
The family's anchor is timed the same way in this same process.
"""

from __future__ import annotations

import platform
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from fitness.benchmark import time_runs
from fitness.build import ARTIFACT_SUFFIX, cpu_name
from fitness.records import (BuildResult, EvalResult, GateResult, GateRound, ScreenResult, ShapeCheck, ShapeTiming,
                             StageSeconds, Status)
from kernel_genome import Genome
from seeds import KernelFamily, ProblemShape


@dataclass(frozen=True)
class EvalConfig:
    trials: int = 3  # fresh random inputs per shape
    cold_cache: bool = False  # time each run after flushing the last-level cache (fitness/benchmark.py)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be at least 1, got {self.trials}")


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
        self.anchor_pass_s: float | None = None  # wall seconds of timing the anchor on every shape
        self._secondary: dict[str, tuple[ShapeTiming, ...]] | None = None
        family.prepare_evaluator()

    # -- the device this evaluator owns ---------------------------------------------------
    def describe(self) -> dict:
        torch = self._torch
        info = {"host": platform.node(), "torch": torch.__version__, "device_kind": self.family.device}
        if self.family.device == "cuda":
            info["device"] = torch.cuda.get_device_name()
            info["cuda"] = torch.version.cuda
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
        """The anchor timed on every shape, once per evaluator process."""
        if self._anchor is None:
            started = time.perf_counter()
            self._anchor = tuple(self.time_anchor(self.family.anchor, shape) for shape in self.family.shapes)
            self.anchor_pass_s = time.perf_counter() - started
        return self._anchor

    def secondary_anchor_timings(self) -> dict[str, tuple[ShapeTiming, ...]]:
        """The family's other anchors (e.g. FA2 beside cuDNN), timed on every shape, once per process."""
        if self._secondary is None:
            self._secondary = {name: tuple(self.time_anchor(run, shape) for shape in self.family.shapes)
                               for name, run in self.family.secondary_anchors().items()}
        return self._secondary

    def time_anchor(self, anchor, shape: ProblemShape) -> ShapeTiming:
        inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
        return time_runs(lambda: anchor(shape, inputs), self.family.device, self.family.timing, shape.name,
                         self.config.cold_cache)

    def load(self, genome: Genome, build: BuildResult):
        """The family's launchable handle for a built genome."""
        return self.family.load(self._materialise(build), genome)

    # -- one candidate ------------------------------------------------------------------------
    def evaluate(self, genome: Genome, build: BuildResult, screened: ScreenResult) -> EvalResult:
        stages = StageSeconds(build=build.seconds, screen=screened.seconds)
        common = dict(usage=screened.usage, artifact_key=build.artifact_key, worker=platform.node())
        if screened.status is not Status.OK:
            return EvalResult(build.genome_id, screened.status, screened.message, None, stages=stages, **common)
        runs, why = self.family.runs_here()
        if not runs:
            return EvalResult(build.genome_id, Status.UNVERIFIED, f"built and passed the screen; not run: {why}", None,
                              stages=stages, **common)
        anchor = self.anchor_timings()
        try:
            kernel = self.load(genome, build)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"loading the artifact failed: {exc}", None,
                              anchor=anchor, stages=stages, **common)
        started = time.perf_counter()
        try:
            checks = tuple(self.verify_shape(kernel, shape) for shape in self.family.shapes)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"kernel raised during verification: {exc}", None,
                              anchor=anchor, stages=stages, **common)
        stages = StageSeconds(stages.build, stages.screen, verify=time.perf_counter() - started)
        failed = [c for c in checks if not c.passed]
        if failed:
            message = "; ".join(f"{c.shape}: {c.message}" for c in failed)
            return EvalResult(build.genome_id, Status.INCORRECT, message, None, checks=checks, anchor=anchor,
                              stages=stages, **common)
        started = time.perf_counter()
        try:
            timings = tuple(self.time_shape(kernel, shape) for shape in self.family.shapes)
        except Exception as exc:
            return EvalResult(build.genome_id, Status.CRASHED, f"kernel raised during timing: {exc}", None,
                              checks=checks, anchor=anchor, stages=stages, **common)
        stages = StageSeconds(stages.build, stages.screen, stages.verify, time.perf_counter() - started)
        mission = next(t for t in timings if t.shape == self.family.mission_shape.name)
        return EvalResult(build.genome_id, Status.OK, "", mission.median_s, checks=checks, timings=timings,
                          anchor=anchor, stages=stages, **common)

    def gate(self, genome: Genome, build: BuildResult, target_s: float, rounds: int) -> GateResult:
        """Re-verify every shape and re-time the mission ``rounds`` times; stop at the first miss."""
        kernel = self.load(genome, build)
        done: list[GateRound] = []
        mission = self.family.mission_shape
        for number in range(1, rounds + 1):
            failed = [c for c in (self.verify_shape(kernel, shape) for shape in self.family.shapes) if not c.passed]
            if failed:
                message = f"round {number}: " + "; ".join(f"{c.shape}: {c.message}" for c in failed)
                done.append(GateRound(False, None, message))
                return GateResult(genome.id, target_s, False, tuple(done), message)
            seconds = self.time_shape(kernel, mission).median_s
            done.append(GateRound(True, seconds))
            if seconds > target_s:
                message = f"round {number}: {seconds * 1e6:.2f} us is over the target {target_s * 1e6:.2f} us"
                return GateResult(genome.id, target_s, False, tuple(done), message)
        return GateResult(genome.id, target_s, True, tuple(done))

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
        torch = self._torch
        tolerance = self.family.tolerance
        worst_abs, worst_rel = 0.0, 0.0
        for trial in range(self.config.trials):
            inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
            output = self.family.make_output(shape)
            self._poison(output)
            self._synchronize()
            self.family.launch(kernel, shape, inputs, output)
            self._synchronize()
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
        return ShapeCheck(shape.name, True, worst_abs, worst_rel, self.config.trials)

    def time_shape(self, kernel, shape: ProblemShape) -> ShapeTiming:
        inputs = self.family.make_inputs(shape, self._generator(secrets.randbits(63)))
        output = self.family.make_output(shape)
        return time_runs(lambda: self.family.launch(kernel, shape, inputs, output), self.family.device,
                         self.family.timing, shape.name, self.config.cold_cache)

