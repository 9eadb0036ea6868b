"""`evo export` of nvfp4_gemm: the package carries the family's launcher (grid, K split, prepass, tensor
maps) and the host formats, and runs without evo (packaging on the CPU with nvcc; the real kernel,
verified by the evaluator, exported and self-checked in a fresh process on the GPU)."""

import json
import subprocess
import sys

import pytest

from evo.cli import main
from fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from seeds import get_family
from tests.exporting import recorded_pass, run_python, store_evaluation
from tests.test_nvfp4_gemm import CLUSTER_L2, ONE_WARPGROUP, PRODUCER

FAMILY = get_family("nvfp4_gemm")


@pytest.mark.nvcc
def test_the_package_holds_the_launcher_and_needs_no_evo(tmp_path):
    """On a machine without a GPU the kernel cannot be verified, so its evaluation is recorded by hand
    here (the GPU test below exports one the evaluator verified): what is checked is what the package
    holds, that its launch plan is the family's, that it imports without evo and refuses bad input."""
    genome = CLUSTER_L2
    shapes = FAMILY.shapes
    store_evaluation(tmp_path / "evo.db", "nvfp4_gemm", genome, recorded_pass(genome, shapes))
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 0
    module = f"nvfp4_gemm_{genome.id}"
    assert {p.name for p in out.iterdir()} == {"kernel.cu", "kernel.cubin", "build.sh", f"{module}.py",
                                               "metadata.json", "selfcheck.py", "nvfp4_launch.py",
                                               "nvfp4_formats.py", "evo_cuda.py", "evo_flush.py"}
    assert "#define SPLIT_CLUSTER_L2 1" in (out / "kernel.cu").read_text()
    # verified as the evaluator verifies: |out - ref| <= 1e-3 + 1e-3 |ref| elementwise
    assert json.loads((out / "metadata.json").read_text())["tolerance"] == dict(max_abs=1e-3, max_rel_l2=1e-3, rtol=1e-3)
    from seeds.nvfp4_gemm.launch import grid, shared_bytes, splits

    fits = {2: 66, 4: 16, 8: 8}
    plans = {s.name: (grid(genome, s, splits(genome, s, 132, fits.__getitem__)), shared_bytes(genome)) for s in shapes}
    done = run_python(f"""
        import json, sys, torch
        sys.path.insert(0, {str(out)!r})
        import {module} as k, nvfp4_launch as plan
        metadata = json.load(open({str(out / "metadata.json")!r}))
        fits = {fits!r}
        got = {{s["name"]: [list(plan.grid(k.GENOME, s, plan.splits(k.GENOME, s, 132, fits.__getitem__))),
                             plan.shared_bytes(k.GENOME)] for s in metadata["shapes"]}}
        print(json.dumps(got))
        a = torch.zeros(128, 1024, dtype=torch.uint8)
        try:
            k.gemm(a, a, torch.zeros(128, 128, dtype=torch.uint8), torch.zeros(128, 128, dtype=torch.uint8))
        except ValueError as error:
            print("refused:", error)
        assert not any(m == "evo" or m.startswith(("evo.", "seeds", "fitness", "db.", "kernel_genome"))
                       for m in sys.modules), "imported evo"
        """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert json.loads(lines[0]) == {name: [list(g), size] for name, (g, size) in plans.items()}
    assert lines[1] == "refused: a must be a uint8 CUDA tensor, got torch.uint8 on cpu"
    rebuilt = subprocess.run(["sh", str(out / "build.sh")], capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("genome", [ONE_WARPGROUP, CLUSTER_L2, PRODUCER], ids=["prepass", "cluster_l2", "producer"])
def test_exported_kernel_checks_itself_in_a_fresh_process(tmp_path, genome):
    """A genome the evaluator verified, exported: its self-check verifies every shape and times it against
    both anchors; its gemm() takes 2-D operands and either scale layout, runs three times in a row on a
    shape the search never saw, works as a custom op under torch.compile, and refuses bad operands."""
    recipe = FAMILY.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    result = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        genome, build, screen(build, recipe.output, FAMILY.screen_limits))
    assert result.status is Status.OK, result.message
    store_evaluation(tmp_path / "evo.db", "nvfp4_gemm", genome, result)
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 0
    check = subprocess.run([sys.executable, str(out / "selfcheck.py")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
    print(check.stdout)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    assert check.stdout.count(" ok") == len(FAMILY.shapes)
    assert check.stdout.count("anchor: bf16 cuBLAS on dequantised operands") == len(FAMILY.shapes)
    done = run_python(f"""
        import sys, torch
        sys.path.insert(0, {str(out)!r})
        import nvfp4_gemm_{genome.id} as k, nvfp4_formats as f
        g = torch.Generator(device="cuda").manual_seed(5)
        a, sfa = f.random_operand(96, 1280, 1, g, "cuda")
        b, sfb = f.random_operand(330, 1280, 1, g, "cuda")
        a, sfa, b, sfb = a[0], sfa[0], b[0], sfb[0]
        reference = f.dequantize(a, sfa).double() @ f.dequantize(b, sfb).double().T
        # the family's tolerance: |c - ref| <= 1e-3 + 1e-3 |ref| elementwise
        close = lambda c: bool(((c.double() - reference).abs() <= 1e-3 + 1e-3 * reference.abs()).all())
        for _ in range(3):
            c = k.gemm(a, b, sfa, sfb)
            assert c.shape == (96, 330) and c.dtype == torch.float16
            assert close(c), (c.double() - reference).abs().max()
        blocked = k.gemm(a, b, f.to_blocked(sfa), f.to_blocked(sfb), blocked=True)
        assert close(blocked)
        op = torch.ops.evo.nvfp4_gemm_{genome.id}
        compiled = torch.compile(lambda *t: op(*t, False).double() * 2, backend="aot_eager", fullgraph=True)
        assert close(compiled(a, b, sfa, sfb) / 2)
        for bad in ((a[:, :100], b, sfa, sfb), (a, b[:, :-64], sfa, sfb), (a, b, sfa[:, :-1], sfb)):
            try:
                k.gemm(*bad)
                raise SystemExit("accepted a bad operand")
            except ValueError as error:
                print("refused:", error)
        print("standalone ok")
        """, tmp_path)
    print(done.stdout)
    assert done.returncode == 0 and "standalone ok" in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("refused:") == 3
