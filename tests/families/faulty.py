"""A test-only CPU family with deliberate faults, so that CI covers every failure record."""

from __future__ import annotations

import ctypes
import os
import signal
import tempfile
from pathlib import Path

import torch

from evo.kernel_genome import Choice, Constraint, Space
from evo.seeds import BuildRecipe, KernelFamily, TimingPlan, Tolerance, shape

MODES = {"ok": 0, "wrong": 1, "nan": 2, "nowrite": 3, "segfault": 4, "hang": 5, "compile_error": 6, "flaky": 7,
         # Correct kernels whose Ray worker process is killed from outside (as by the OOM killer):
         # the evaluator's process the first time this genome is loaded in a Ray instance; the build
         # worker's the first time, or every time, this genome is built.
         "evaluator_killed_once": 8, "builder_killed_once": 9, "builder_killed": 10,
         # Correct, and each call takes 200 us of wall time: a steady time on a machine others share.
         "steady": 11}
SOURCE = Path(__file__).with_name("faulty.cpp")

SPACE = Space(
    [Choice("mode", tuple(MODES)), Choice("scale", (1, 2, 3), ordered=True), Choice("pad", (0, 1, 2, 3), ordered=True)],
    [Constraint("scale_two", lambda g: g["scale"] == 2, "the reference computes 2*a + b")],
)


class FaultyFamily(KernelFamily):
    name = "faulty"
    description = "out = 2a + b, with a knob that injects faults"
    device = "cpu"
    space = SPACE
    seed_genomes = (SPACE.genome({"mode": "ok", "scale": 2, "pad": 0}),)
    shapes = (shape("mission", n=4096, mission=True), shape("odd", n=1001))
    tolerance = Tolerance(max_abs=1e-5, max_rel_l2=1e-6)
    anchor_name = "2 * a + b in torch"
    timing = TimingPlan(warmup=1, min_runs=3, max_runs=20, min_seconds=0.0)

    def build_recipe(self, genome):
        if genome["mode"] == "builder_killed" or genome["mode"] == "builder_killed_once" and _first_time(genome):
            _kill_this_worker()
        flags = ("-O2", "-std=c++17", "-fPIC", "-shared", f"-DMODE={MODES[genome['mode']]}",
                 f"-DSCALE={genome['scale']}.0f", f"-DPAD={genome['pad']}")
        return BuildRecipe(SOURCE.read_text(), SOURCE.name, "c++", flags, "shared_library")

    def make_inputs(self, shape, generator):
        n = shape["n"]
        return (torch.randn(n, generator=generator), torch.randn(n, generator=generator))

    def make_output(self, shape):
        return torch.empty(shape["n"])

    def reference(self, shape, inputs):
        a, b = inputs
        return 2 * a.double() + b.double()

    def load(self, artifact: Path, genome):
        if genome["mode"] == "evaluator_killed_once" and _first_time(genome):
            _kill_this_worker()
        function = ctypes.CDLL(str(artifact)).evo_axpy
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        return function

    def launch(self, kernel, shape, inputs, output):
        a, b = inputs
        kernel(a.data_ptr(), b.data_ptr(), output.data_ptr(), shape["n"])

    def anchor(self, shape, inputs):
        a, b = inputs
        return 2 * a + b


def _first_time(genome) -> bool:
    """True the first time a Ray instance's workers ask this for a genome (a marker file per raylet)."""
    raylet = os.environ.get("RAY_RAYLET_PID")
    if raylet is None:
        raise RuntimeError(f"mode {genome['mode']!r} kills its process: it runs only in a Ray worker")
    marker = Path(tempfile.gettempdir()) / f"evo-faulty-{raylet}" / genome.id
    marker.parent.mkdir(exist_ok=True)
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def _kill_this_worker() -> None:
    if "RAY_RAYLET_PID" not in os.environ:
        raise RuntimeError("refusing to kill a process that is not a Ray worker")
    os.kill(os.getpid(), signal.SIGKILL)


FAMILY = FaultyFamily()
ALSO_FAULTY = FaultyFamily()  # a second family of the same name (the registry refuses an ambiguous name)
