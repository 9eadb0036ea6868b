"""`evo export`: a verified cpu_gemm kernel as a standalone package, used in a fresh process."""

import json
import subprocess
import sys
import textwrap

import pytest

from evo.db import Database, NewIndividual, Store, resolve_url
from evo.cli import main
from evo.fitness import BuildConfig, Builder, EvalConfig, EvalResult, Evaluator, Status, screen
from evo.seeds import get_family

FAMILY = get_family("cpu_gemm")


@pytest.fixture
def stored_run(tmp_path, cache_dir):
    """A run with the seed and one mutant evaluated for real (no Ray), plus one incorrect individual."""
    db = tmp_path / "evo.db"
    store = Store(Database(resolve_url(str(db))).open())
    run = store.create_run(family="cpu_gemm", strategy="evolution", target=None, seed=0, config={})
    seed = FAMILY.seed_genomes[0]
    fast = seed.replace(loop_order="register", rows_per_step=4, vec_width=8, block_k=64)
    broken = seed.replace(block_m=64)
    ids = store.add_individuals(run, [NewIndividual(g.id, g.as_dict(), 0, origin)
                                      for g, origin in ((seed, "seed"), (fast, "random"), (broken, "random"))])
    builder = Builder(BuildConfig(cache_dir))
    evaluator = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded")
    for genome in (seed, fast):
        recipe = FAMILY.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, FAMILY.screen_limits))
        assert result.status is Status.OK, result.message
        store.record_evaluation(ids[genome.id], result)
    store.record_evaluation(ids[broken.id], EvalResult(broken.id, Status.INCORRECT, "max abs error 3.1", None))
    return db, ids, (seed, fast, broken)


def test_export_runs_standalone_in_a_fresh_process(stored_run, tmp_path, capsys):
    db, ids, (seed, fast, _) = stored_run
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(db), "--out", str(out)]) == 0
    metadata = json.loads((out / "metadata.json").read_text())
    store = Store(Database(resolve_url(str(db))).open(create=False))
    fitness = {i.genome_id: e.fitness_s for i, e in store.best(1, 5)}
    best = min((seed, fast), key=lambda g: fitness[g.id])
    assert metadata["genome_id"] == best.id and metadata["genome"] == best.as_dict()
    assert {"torch", "compiler", "timings", "anchor_timings", "errors", "exported_at", "hardware"} <= set(metadata)
    source = (out / "kernel.cpp").read_text()
    assert f"genome {best.id}" in source and f"#define BLOCK_K {best['block_k']}" in source
    module = metadata["module"]
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(out)!r})
        import {module} as k
        a, b = torch.randn(100, 70), torch.randn(70, 45)
        assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-4, rtol=1e-4)
        op = torch.ops.evo.{module}
        compiled = torch.compile(lambda x, y: op(x, y) * 2, backend="aot_eager", fullgraph=True)
        assert torch.allclose(compiled(a, b), 2 * (a @ b), atol=1e-4, rtol=1e-4)
        assert not any(m == "evo" or m.startswith(("evo.", "seeds", "fitness", "db.")) for m in sys.modules), "imported evo"
        print("standalone ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "standalone ok" in done.stdout, done.stderr[-2000:]
    check = subprocess.run([sys.executable, str(out / "selfcheck.py")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=300)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    assert check.stdout.count(" ok") >= len(FAMILY.shapes)
    rebuilt = subprocess.run(["sh", str(out / "build.sh")], capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr


def test_exporting_an_unverified_or_unknown_individual_is_refused(stored_run, tmp_path, capsys):
    db, ids, (_, _, broken) = stored_run
    out = tmp_path / "nope"
    assert main(["export", "1", "--individual", str(ids[broken.id]), "--db", str(db), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "never passed verification (incorrect)" in err and len(err.strip().splitlines()) == 1
    assert main(["export", "1", "--individual", "99", "--db", str(db), "--out", str(out)]) == 2
    assert "is not part of run 1" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    assert main(["export", "1", "--db", str(db), "--out", str(tmp_path / "full")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert not out.exists() and (tmp_path / "full" / "x").read_text() == "keep"


def test_a_family_without_a_runtime_module_is_refused_in_one_line(tmp_path, capsys):
    """A bare KernelFamily (the faulty test family) searches, but has no standalone runtime module to ship:
    its export is refused with one line naming the fix, exit 2, nothing written."""
    from tests.exporting import recorded_pass, store_evaluation
    from tests.families.faulty import FAMILY as FAULTY

    genome = FAULTY.seed_genomes[0]
    store_evaluation(tmp_path / "evo.db", "tests.families.faulty:FAMILY", genome, recorded_pass(genome, FAULTY.shapes))
    out = tmp_path / "op"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot be exported" in err and "RuntimeFamily" in err, err
    assert not out.exists()


def test_a_runtime_without_the_ops_public_function_is_refused_in_one_line(tmp_path, capsys):
    from tests.exporting import recorded_pass, store_evaluation
    from tests.families.no_public import FAMILY as NO_PUBLIC

    genome = NO_PUBLIC.seed_genomes[0]
    store_evaluation(tmp_path / "evo.db", "tests.families.no_public:FAMILY", genome,
                     recorded_pass(genome, NO_PUBLIC.shapes))
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(tmp_path / "op")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "its runtime lacks PUBLIC, SCHEMA, compute, fake, call_with, USAGE" in err, err
    assert not (tmp_path / "op").exists()


def _scaffold(tmp_path, device, monkeypatch):
    """`evo new-family` of ``device`` (cpu or cuda), as a user writes it, loaded by its folder's path."""
    folder = tmp_path / f"scaffold_{device}"
    folder.mkdir()
    with monkeypatch.context() as here:
        here.chdir(folder)
        assert main(["new-family", f"my{device}", "--device", device]) == 0
    return get_family(str(folder / f"my{device}"))


@pytest.mark.parametrize("name", ["cpu_gemm", "flashcore", "vit_gemm", "nvfp4_gemm", "scaffold_cpu", "scaffold_cuda"])
def test_every_familys_exported_build_sh_builds_what_the_search_built(tmp_path, name, monkeypatch):
    """What the build saw is what build.sh builds: the knobs written out as #defines, and in #pragma lines (where
    compilers leave macros unexpanded: the scaffolds' `#pragma GCC unroll UNROLL`); nvcc compiles only."""
    import shutil

    from tests.exporting import assert_rebuilds, export_stored, recorded_pass

    family = _scaffold(tmp_path, name.split("_")[1], monkeypatch) if name.startswith("scaffold") else get_family(name)
    needs = "nvcc" if family.device == "cuda" else "c++"
    if shutil.which(needs) is None:
        pytest.skip(f"no {needs} here")
    genome = family.seed_genomes[0]
    out = export_stored(family, genome, recorded_pass(genome, family.shapes), tmp_path)
    source = next(out.glob("kernel*.c*"))
    assert "#pragma unroll UNROLL" not in source.read_text() and "#pragma GCC unroll UNROLL" not in source.read_text()
    assert_rebuilds(out)
