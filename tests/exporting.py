"""What the export tests of the GPU families share: an evaluation stored as a one-individual run, a
Python script run in a fresh process, and a recorded evaluation for a machine without a GPU."""

import subprocess
import sys
import textwrap

from db import Database, NewIndividual, Store, resolve_url
from fitness import EvalResult, ShapeCheck, ShapeTiming, Status


def store_evaluation(db, family, genome, result: EvalResult) -> None:
    """A run of ``family`` (its name) in the database file ``db`` whose one individual, ``genome``, has ``result``."""
    store = Store(Database(resolve_url(str(db))).open())
    run = store.create_run(family=family, strategy="evolution", target=None, seed=0, config={})
    ids = store.add_individuals(run, [NewIndividual(genome.id, genome.as_dict(), 0, "seed")])
    store.record_evaluation(ids[genome.id], result)


def recorded_pass(genome, shapes) -> EvalResult:
    """An evaluation written by hand, passing on every shape: on a machine without a GPU the kernel
    cannot be verified, so the CPU export tests check what the package holds, not the kernel."""
    return EvalResult(genome.id, Status.OK, "", 50e-6, checks=tuple(ShapeCheck(s.name, True, 0.0, 0.0, 1) for s in shapes),
                      timings=tuple(ShapeTiming(s.name, 50e-6, 50e-6, 0.0, 10) for s in shapes),
                      anchor=tuple(ShapeTiming(s.name, 1e-3, 1e-3, 0.0, 10) for s in shapes))


def run_python(script: str, cwd, timeout: int = 600) -> subprocess.CompletedProcess:
    """``script`` (dedented) in a fresh Python process, its output captured."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)
