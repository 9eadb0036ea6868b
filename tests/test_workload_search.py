"""A workload, end to end on the CPU family: search, show, lineage, export, the op's self-check and its
use in a fresh process, resume; and the op's dispatch (a kernel, PyTorch, a shape outside the workload);
tests/test_op.py checks the op's measured decisions, its gradients and torch.compile."""

import json
import subprocess
import sys
import textwrap

import pytest

from evo.db import Database, NewIndividual, Store, resolve_url
from evo.cli import main
from evo.fitness import EvalResult, GateResult, GateRound, ShapeCheck, ShapeTiming, Status
from evo.seeds import get_family
from tests.test_search import REPO, check_store_invariants, rows

CPU = get_family("cpu_gemm")
SMALL = CPU.workload("small")


@pytest.mark.slow
def test_a_workload_search_exported_as_one_op_that_checks_itself(ray_session, tmp_path, capsys):
    db = tmp_path / "evo.db"
    assert main(["search", "--experiment", str(REPO / "experiments" / "cpu_gemm_small.toml"), "--budget", "24",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "workload small (4 shapes), anchor torch.matmul" in out and "geometric-mean" in out
    assert "evaluations a minute; 1 evaluator(s), busy" in out  # the pace, and how busy the evaluator was
    check_store_invariants(db)
    (config,), = rows(db, "SELECT config FROM runs")
    assert json.loads(config)["workload"] == SMALL.to_dict()
    # every timed shape stored per (individual, shape), the anchor timed beside it; the primary always timed
    measured = rows(db, "SELECT shape, complete, verified, anchor_s FROM shape_measurements")
    assert {m[0] for m in measured} <= {s.name for s in SMALL.shapes} and all(m[3] > 0 for m in measured)
    assert all(verified for _, complete, verified, _ in measured if complete)
    ok = rows(db, "SELECT COUNT(*) FROM evaluations WHERE status = 'ok'")[0][0]
    primary = rows(db, f"SELECT COUNT(*) FROM shape_measurements WHERE shape = '{SMALL.primary.name}'")[0][0]
    assert primary == ok and len(measured) < ok * len(SMALL.shapes)  # probes: not every genome at every shape
    assert main(["show", "1", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert all(s.name in shown for s in SMALL.shapes) and "op runs" in shown
    assert main(["lineage", "1", "--db", str(db), "--format", "json", "--out", str(tmp_path / "l.json")]) == 0
    report = json.loads((tmp_path / "l.json").read_text())
    assert [r["shape"] for r in report["dispatch"]["rows"]] == [s.name for s in SMALL.shapes]
    assert main(["lineage", "1", "--db", str(db), "--out", str(tmp_path / "l.html")]) == 0
    assert "Which kernel wins where" in (tmp_path / "l.html").read_text()
    package = tmp_path / "op"
    assert main(["export", "1", "--db", str(db), "--out", str(package)]) == 0
    metadata = json.loads((package / "metadata.json").read_text())
    assert metadata["module"] == "cpu_gemm_small" and [r["shape"] for r in metadata["table"]] == [s.name for s in SMALL.shapes]
    assert set(metadata["kernels"]) == {r["choice"] for r in metadata["table"]} - {"pytorch"}
    check = subprocess.run([sys.executable, str(package / "selfcheck.py")], capture_output=True, text=True,
                           timeout=600, cwd=tmp_path)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    assert check.stdout.count(" ok") == len(SMALL.shapes)
    script = f"""
        import sys, torch
        sys.path.insert(0, {str(package)!r})
        import cpu_gemm_small as k
        for m, n, kk in [(512, 512, 512), (600, 400, 520), (33, 17, 9)]:  # two workload shapes and one outside
            a, b = torch.randn(m, kk), torch.randn(kk, n)
            assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)
            assert torch.allclose(torch.ops.evo.cpu_gemm_small(a, b), a @ b, atol=1e-3, rtol=1e-4)
        assert not any(m == "evo" or m.startswith(("evo.", "seeds", "fitness", "db.")) for m in sys.modules)
        print("op ok")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "op ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_a_per_shape_target_passes_the_gate_at_every_shape(ray_session, tmp_path, capsys):
    """--target applies per shape (here an easy 100x each shape's anchor); once every shape has a kernel
    within it, each winning kernel passes the hard gate at the shapes it wins, and only then is it reached."""
    db = tmp_path / "evo.db"
    assert main(["search", "--family", "cpu_gemm", "--workload", "small", "--target", "100x", "--gate-rounds", "2",
                 "--budget", "40", "--population", "6", "--db", str(db), "--trials", "1"]) == 0
    assert rows(db, "SELECT status FROM runs") == [("target_reached",)]
    gates = rows(db, "SELECT passed, targets, rounds FROM gate_checks WHERE target_s IS NOT NULL")
    gated = {shape for passed, targets, _ in gates if passed for shape, _ in json.loads(targets)}
    assert gated == {s.name for s in SMALL.shapes}
    anchors = {a["shape"]: a["median_s"] for a in json.loads(rows(db, "SELECT anchor FROM runs")[0][0])}
    for passed, targets, rounds in gates:
        for shape, limit in json.loads(targets):
            assert limit == pytest.approx(100 * anchors[shape])  # each shape's target is to its own anchor
        assert not passed or len(json.loads(rounds)) == 2
    assert "hard gate passed" in capsys.readouterr().out


@pytest.mark.slow
def test_a_workload_search_resumes_with_its_board(ray_session, tmp_path):
    db = tmp_path / "evo.db"
    assert main(["search", "--family", "cpu_gemm", "--workload", "small", "--budget", "10", "--population", "5",
                 "--db", str(db), "--trials", "1"]) == 0
    before = rows(db, "SELECT COUNT(*) FROM shape_measurements")[0][0]
    # a winner's confirmation that passed (as one does whenever a kernel beats the anchor) is not the target
    from evo.db import Database, Store, resolve_url
    from evo.fitness import GateResult, GateRound

    store = Store(Database(resolve_url(str(db))).open())
    (individual,), = rows(db, "SELECT id FROM individuals ORDER BY id LIMIT 1")
    store.record_gate(1, individual, GateResult("g", None, True, (GateRound(True, 1e-3, "", (("m512_n512_k512", 1e-3),),
                                                                            (("m512_n512_k512", 2e-3),)),),
                                                "", (("m512_n512_k512", None),)))
    assert main(["search", "--resume", "1", "--budget", "18", "--db", str(db)]) == 0
    genomes = [g for g, in rows(db, "SELECT i.genome_id FROM evaluations e JOIN individuals i ON i.id = e.individual_id")]
    assert len(genomes) == 18 == len(set(genomes))
    assert rows(db, "SELECT COUNT(*) FROM shape_measurements")[0][0] > before
    assert rows(db, "SELECT status FROM runs") == [("budget_exhausted",)]
    check_store_invariants(db)


def export_two_shape_op(tmp_path, confirmation: str | None = "passed"):
    """A workload run recorded by hand (a real kernel, made-up times: it wins at the first shape and loses at
    the second; its confirmation at the first ``confirmation``: passed, failed with rounds that disagree,
    or None) exported as an op: the package's folder and the kernel's genome."""
    workload = {"name": "two", "shapes": [{"name": "wins", "m": 256, "n": 256, "k": 256, "weight": 1.0},
                                          {"name": "loses", "m": 64, "n": 512, "k": 96, "weight": 1.0}]}
    fast = CPU.seed_genomes[0].replace(loop_order="register", rows_per_step=4, vec_width=8, block_k=64)
    store = Store(Database(resolve_url(str(tmp_path / "evo.db"))).open())
    run = store.create_run(family="cpu_gemm", strategy="evolution", target=None, seed=0, config={"workload": workload})
    ids = store.add_individuals(run, [NewIndividual(fast.id, fast.as_dict(), 0, "seed")])
    times = {"wins": (100e-6, 200e-6), "loses": (300e-6, 200e-6)}
    result = EvalResult(fast.id, Status.OK, "", 100e-6,
                        checks=tuple(ShapeCheck(s, True, 0.0, 0.0, 1) for s in ["mission", "tall", "ragged", *times]),
                        timings=tuple(ShapeTiming(s, k, k, 0.0, 10) for s, (k, _) in times.items()),
                        anchor=tuple(ShapeTiming(s, a, a, 0.0, 10) for s, (_, a) in times.items()))
    store.record_evaluation(ids[fast.id], result, {s["name"]: {k: s[k] for k in "mnk"} for s in workload["shapes"]})
    if confirmation is not None:  # three rounds beside the anchor, each faster; failed: the rounds disagree
        spread = (100e-6, 101e-6, 100e-6) if confirmation == "passed" else (100e-6, 150e-6, 100e-6)
        rounds = tuple(GateRound(True, k, "", (("wins", k),), (("wins", 200e-6),)) for k in spread)
        store.record_gate(run, ids[fast.id], GateResult(fast.id, None, confirmation == "passed", rounds,
                                                        "" if confirmation == "passed" else "the rounds disagree",
                                                        (("wins", None),)))
    package = tmp_path / "op"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(package)]) == 0
    return package, fast


@pytest.mark.parametrize("confirmation", ["failed", None])
def test_the_op_never_runs_a_kernel_whose_confirmation_failed_or_never_came(tmp_path, capsys, confirmation):
    package, fast = export_two_shape_op(tmp_path, confirmation)
    metadata = json.loads((package / "metadata.json").read_text())
    assert [(r["shape"], r["choice"]) for r in metadata["table"]] == [("wins", "pytorch"), ("loses", "pytorch")]
    assert main(["show", "1", "--db", str(tmp_path / "evo.db")]) == 0
    shown = capsys.readouterr().out
    assert "evolved kernels win 0 of 2 shapes" in shown
    assert ("PyTorch (kernel unconfirmed)" in shown) == (confirmation is None)  # a failed one is out altogether


def test_the_op_measures_the_winning_kernel_runs_pytorch_where_it_lost_and_decides_shapes_outside(tmp_path, capsys):
    """The exported op of a recorded run: at the shape where the search found its kernel slower, PyTorch
    without a measurement; at the shape where it won, and at a shape outside the workload, the kernel against
    torch.matmul as the call is made here; every result is right; build.sh rebuilds the library."""
    package, fast = export_two_shape_op(tmp_path)
    assert main(["show", "1", "--db", str(tmp_path / "evo.db")]) == 0
    assert "evolved kernels win 1 of 2 shapes" in capsys.readouterr().out
    metadata = json.loads((package / "metadata.json").read_text())
    assert [(r["shape"], r["choice"]) for r in metadata["table"]] == [("wins", fast.id), ("loses", "pytorch")]
    assert sorted(p.name for p in package.iterdir()) == sorted(
        ["README.md", "build.sh", "cpu_gemm_two.py", "evo_family.py", "evo_runtime", "prepare.py",
         f"kernel_{fast.id}.cpp", f"kernel_{fast.id}.so", "metadata.json", "selfcheck.py"])
    script = f"""
        import os, sys, torch
        os.environ["EVO_OP_CACHE"] = {str(tmp_path / "decisions")!r}
        sys.path.insert(0, {str(package)!r})
        import cpu_gemm_two as k
        for (m, n, kk), measured in (((256, 256, 256), True), ((64, 512, 96), False), ((300, 240, 250), True)):
            a, b = torch.randn(m, kk), torch.randn(kk, n)
            assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)
            kernel, why = k.choose(dict(m=m, n=n, k=kk))
            assert kernel in ({fast.id!r}, None) and ("measured here" in why) == measured, why
            assert measured or kernel is None
        print("dispatch ok")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "dispatch ok" in done.stdout, done.stderr[-2000:]
    rebuilt = subprocess.run(["sh", str(package / "build.sh")], capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
