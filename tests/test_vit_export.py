"""`evo export` of vit_gemm: the package carries the family's launcher (grid, shared memory, tensor maps,
the folded bias + pos table) and its inputs and reference, and runs without evo (packaging on the CPU
with nvcc; the real kernel, verified by the evaluator, exported and self-checked on the GPU)."""

import json
import subprocess
import sys

import pytest

from evo.cli import main
from fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from seeds import get_family
from tests.exporting import recorded_pass, run_python, store_evaluation
from tests.test_vit_gemm import CLUSTERED, FOLDED, PINGPONG

FAMILY = get_family("vit_gemm")
OTHER_ANCHORS = ("eager PyTorch (matmul, then + bias and + pos in bf16)", "torch.compile of the same expression")


@pytest.mark.nvcc
def test_the_package_holds_the_launcher_and_needs_no_evo(tmp_path):
    """The evaluation is recorded by hand (no GPU here; the GPU test exports one the evaluator verified):
    what the package holds, that its launch plan is the family's, that it imports without evo and
    refuses bad input, and that build.sh rebuilds the cubin."""
    genome = CLUSTERED
    store_evaluation(tmp_path / "evo.db", "vit_gemm", genome, recorded_pass(genome, FAMILY.shapes))
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 0
    module = f"vit_gemm_{genome.id}"
    assert {p.name for p in out.iterdir()} == {"kernel.cu", "kernel.cubin", "build.sh", f"{module}.py",
                                               "metadata.json", "selfcheck.py", "vit_gemm_launch.py",
                                               "vit_gemm_problem.py", "evo_cuda.py", "evo_flush.py"}
    assert "#define CLUSTER 2" in (out / "kernel.cu").read_text()
    from seeds.vit_gemm.launch import blocks, shared_bytes

    plans = {s.name: [blocks(genome, s, 132), shared_bytes(genome)] for s in FAMILY.shapes}
    done = run_python(f"""
        import json, sys, torch
        sys.path.insert(0, {str(out)!r})
        import {module} as k, vit_gemm_launch as plan
        metadata = json.load(open({str(out / "metadata.json")!r}))
        print(json.dumps({{s["name"]: [plan.blocks(k.GENOME, s, 132), plan.shared_bytes(k.GENOME)]
                           for s in metadata["shapes"]}}))
        x, w = torch.zeros(2, 196, 768, dtype=torch.bfloat16), torch.zeros(768, 768, dtype=torch.bfloat16)
        try:
            k.patch_embed(x, w, torch.zeros(768), torch.zeros(196, 768))
        except ValueError as error:
            print("refused:", error)
        assert not any(m == "evo" or m.startswith(("evo.", "seeds", "fitness", "db.", "kernel_genome"))
                       for m in sys.modules), "imported evo"
        """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert json.loads(lines[0]) == plans
    assert lines[1] == "refused: x must be a bf16 CUDA tensor, got torch.bfloat16 on cpu"
    rebuilt = subprocess.run(["sh", str(out / "build.sh")], capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("genome", [PINGPONG, FOLDED, CLUSTERED], ids=["pingpong", "folded", "clustered"])
def test_exported_kernel_checks_itself_in_a_fresh_process(tmp_path, genome):
    """A genome the evaluator verified, exported: its self-check verifies every shape and times it against
    the three anchors; its patch_embed() takes [B, P, K] or [B * P, K], converts a bf16 bias, runs three
    times in a row on a shape the search never saw, works as a custom op under torch.compile, and
    refuses four bad operands."""
    recipe = FAMILY.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    result = Evaluator(FAMILY, EvalConfig(trials=1), tmp_path / "loaded").evaluate(
        genome, build, screen(build, recipe.output, FAMILY.screen_limits))
    assert result.status is Status.OK, result.message
    store_evaluation(tmp_path / "evo.db", "vit_gemm", genome, result)
    out = tmp_path / "exported"
    assert main(["export", "1", "--db", str(tmp_path / "evo.db"), "--out", str(out)]) == 0
    check = subprocess.run([sys.executable, str(out / "selfcheck.py")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
    print(check.stdout)
    assert check.returncode == 0 and "self-check passed" in check.stdout, check.stdout + check.stderr[-2000:]
    assert check.stdout.count(" ok") == len(FAMILY.shapes)
    for name in OTHER_ANCHORS:
        assert check.stdout.count(f"anchor: {name}") == len(FAMILY.shapes)
    done = run_python(f"""
        import sys, torch
        sys.path.insert(0, {str(out)!r})
        import vit_gemm_{genome.id} as k
        g = torch.Generator(device="cuda").manual_seed(5)
        x = torch.randn(3, 50, 200, device="cuda", generator=g).bfloat16()
        w = (torch.randn(136, 200, device="cuda", generator=g) / 200 ** 0.5).bfloat16()
        bias = torch.randn(136, device="cuda", generator=g).bfloat16()  # converted to fp32 by patch_embed
        pos = torch.randn(50, 136, device="cuda", generator=g)
        reference = x.float() @ w.float().T + bias.float() + pos
        close = lambda c: (c.float() - reference).abs().max().item() < 0.08  # the family's tolerance
        for _ in range(3):
            c = k.patch_embed(x, w, bias, pos)
            assert c.shape == (3, 50, 136) and c.dtype == torch.bfloat16
            assert close(c), (c.float() - reference).abs().max()
        flat = k.patch_embed(x.view(150, 200), w, bias, pos)
        assert flat.shape == (150, 136) and close(flat.view(3, 50, 136))
        op = torch.ops.evo.vit_gemm_{genome.id}
        compiled = torch.compile(lambda *t: op(*t).float() * 2, backend="aot_eager", fullgraph=True)
        assert close(compiled(x, w, bias, pos) / 2)
        for bad in ((x.half(), w, bias, pos), (x, w[:, :192], bias, pos), (x, w, bias, pos[:49]),
                    (x.view(150, 200)[:149], w, bias, pos)):
            try:
                k.patch_embed(*bad)
                raise SystemExit("accepted a bad operand")
            except ValueError as error:
                print("refused:", error)
        print("standalone ok")
        """, tmp_path)
    print(done.stdout)
    assert done.returncode == 0 and "standalone ok" in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("refused:") == 4
