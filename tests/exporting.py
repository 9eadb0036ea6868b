"""What the export tests of the GPU families share: an evaluation stored as a one-individual run and
exported (recorded by hand on a machine without a GPU, or the evaluator's own on the GPU, then
self-checked), and a script using the package in a fresh process, without evo."""

import subprocess
import sys
import textwrap
from pathlib import Path

from evo.db import Database, NewIndividual, Store, resolve_url
from evo.cli import main
from evo.fitness import BuildConfig, Builder, EvalConfig, EvalResult, Evaluator, ShapeCheck, ShapeTiming, Status, screen


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


def export_stored(family, genome, result: EvalResult, tmp_path: Path) -> Path:
    """``result`` stored for ``genome`` as run 1 of a fresh database, and `evo export 1` of it: the package's folder."""
    store_evaluation(tmp_path / "evo.db", family.reference_key, genome, result)
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 0
    return out


def export_verified(family, genome, tmp_path: Path) -> tuple[Path, str]:
    """``genome`` evaluated for real, exported, and its selfcheck.py run in a fresh process: the package's
    folder and the self-check's output, after asserting that it passed with every shape ok."""
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    result = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        genome, build, screen(build, recipe.output, family.screen_limits))
    assert result.status is Status.OK, result.message
    out = export_stored(family, genome, result, tmp_path)
    check = subprocess.run([sys.executable, str(out / "selfcheck.py")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
    print(check.stdout)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    assert check.stdout.count(" ok") == len(family.shapes)
    return out, check.stdout


_PRELUDE = """
import sys
def refuses(function, *cases):
    for args in cases:
        try:
            function(*args)
        except ValueError as error:
            print("refused:", error)
        else:
            raise SystemExit(f"accepted bad operands, case {cases.index(args)}")
"""


_EPILOGUE = """
assert not any(m == "evo" or m.startswith(("evo.", "seeds", "fitness", "db.", "kernel_genome")) for m in sys.modules), \\
    "the package imported evo"
print("standalone ok")
"""


def run_standalone(script: str, out: Path, cwd, refusals: int) -> str:
    """``script`` run in a fresh process with the package ``out`` importable and ``refuses(function,
    *cases)`` defined (each case's call must raise ValueError); asserts that it ends without having
    imported any of evo's packages and that ``refusals`` calls were refused. Its output."""
    body = _PRELUDE + f"sys.path.insert(0, {str(out)!r})\n" + textwrap.dedent(script) + _EPILOGUE
    done = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, cwd=cwd, timeout=600)
    print(done.stdout)
    assert done.returncode == 0 and "standalone ok" in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("refused:") == refusals
    return done.stdout


def assert_rebuilds(out: Path) -> None:
    """The package's build.sh rebuilds its artifact (nvcc from PATH)."""
    rebuilt = subprocess.run(["sh", str(out / "build.sh")], capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
