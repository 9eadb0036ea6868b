"""`evo export` of vit_gemm: the package carries the family's launcher (grid, shared memory, tensor maps,
the folded bias + pos table) and its inputs and reference, and runs without evo (packaging on the CPU
with nvcc; the real kernel, verified by the evaluator, exported and self-checked on the GPU)."""

import json

import pytest

from evo.seeds import get_family
from tests.exporting import assert_rebuilds, export_stored, export_verified, recorded_pass, run_standalone
from evo.seeds.vit_gemm.designs import CLUSTERED, FOLDED, PINGPONG

FAMILY = get_family("vit_gemm")
OTHER_ANCHORS = ("eager PyTorch (matmul, then + bias and + pos in bf16)", "torch.compile of the same expression")


@pytest.mark.nvcc
def test_the_package_holds_the_launcher_and_needs_no_evo(tmp_path):
    """The evaluation is recorded by hand (no GPU here; the GPU test exports one the evaluator verified):
    what the package holds, that its launch plan is the family's, that it imports without evo and
    refuses bad input, and that build.sh rebuilds the cubin."""
    genome = CLUSTERED
    out = export_stored(FAMILY, genome, recorded_pass(genome, FAMILY.shapes), tmp_path)
    module = f"vit_gemm_{genome.id}"
    assert {p.name for p in out.iterdir()} == {"kernel.cu", "kernel.cubin", "build.sh", f"{module}.py",
                                               "metadata.json", "selfcheck.py", "vit_gemm_launch.py",
                                               "vit_gemm_problem.py", "vit_gemm_timm.py", "evo_family.py", "evo_runtime",
                                               "prepare.py", "README.md"}
    assert "#define CLUSTER 2" in (out / "kernel.cu").read_text()
    from evo.seeds.vit_gemm.launch import blocks, shared_bytes

    plans = {s.name: [blocks(genome, s, 132), shared_bytes(genome)] for s in FAMILY.shapes}
    shown = run_standalone(f"""
        import json, torch
        import {module} as k, vit_gemm_launch as plan
        metadata = json.load(open({str(out / "metadata.json")!r}))
        genome = k.KERNELS[k.OP.table.default]["genome"]  # the one kernel, every shape's default
        print(json.dumps({{s["name"]: [plan.blocks(genome, s, 132), plan.shared_bytes(genome)]
                           for s in metadata["shapes"]}}))
        x, w = torch.randn(2, 196, 768).bfloat16(), torch.randn(768, 768).bfloat16()
        bias, pos = torch.randn(768), torch.randn(196, 768)
        expected = torch.addmm(bias.bfloat16(), x.view(392, 768), w.T).view(2, 196, 768).add_(pos.bfloat16())  # PyTorch's
        assert torch.equal(k.patch_embed(x, w, bias, pos), expected)
        refuses(k.patch_embed, (x, w, bias, pos[:195]))
        """, out, tmp_path, refusals=1)
    lines = shown.splitlines()
    assert json.loads(lines[0]) == plans
    assert lines[1] == "refused: pos must have a row for each of x's P = 196 patches, got 195 rows"
    assert_rebuilds(out)


@pytest.mark.gpu
@pytest.mark.parametrize("genome", [PINGPONG, FOLDED, CLUSTERED], ids=["pingpong", "folded", "clustered"])
def test_exported_kernel_checks_itself_in_a_fresh_process(tmp_path, genome):
    """A genome the evaluator verified, exported: its self-check verifies every shape and times it against
    the three anchors; its patch_embed() takes [B, P, K] or [B * P, K], converts a bf16 bias, runs three
    times in a row on a shape the search never saw, works as a custom op under torch.compile, runs PyTorch's
    computation for fp16 operands, and refuses three bad operands."""
    out, checked = export_verified(FAMILY, genome, tmp_path)
    for name in OTHER_ANCHORS:
        assert checked.count(f"anchor: {name}") == len(FAMILY.shapes)
    run_standalone(f"""
        import torch
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
        half = k.patch_embed(x.half(), w.half(), bias, pos)  # fp16: PyTorch's computation, in fp16
        assert half.dtype == torch.float16 and (half.float() - reference).abs().max().item() < 0.08
        refuses(k.patch_embed, (x, w[:, :192], bias, pos), (x, w, bias, pos[:49]), (x.view(150, 200)[:149], w, bias, pos))
        """, out, tmp_path, refusals=3)
