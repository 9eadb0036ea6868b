"""`evo export` of nvfp4_gemm: the package carries the family's launcher (grid, K split, prepass, tensor
maps) and the host formats, and runs without evo (packaging on the CPU with nvcc; the real kernel,
verified by the evaluator, exported and self-checked in a fresh process on the GPU)."""

import json

import pytest

from evo.seeds import get_family
from tests.exporting import assert_rebuilds, export_stored, export_verified, recorded_pass, run_standalone
from evo.seeds.nvfp4_gemm.designs import CLUSTER_L2, ONE_WARPGROUP, PRODUCER

FAMILY = get_family("nvfp4_gemm")


@pytest.mark.nvcc
def test_the_package_holds_the_launcher_and_needs_no_evo(tmp_path):
    """On a machine without a GPU the kernel cannot be verified, so its evaluation is recorded by hand
    here (the GPU test below exports one the evaluator verified): what is checked is what the package
    holds, that its launch plan is the family's, that it imports without evo and refuses bad input."""
    genome = CLUSTER_L2
    shapes = FAMILY.shapes
    out = export_stored(FAMILY, genome, recorded_pass(genome, shapes), tmp_path)
    module = f"nvfp4_gemm_{genome.id}"
    assert {p.name for p in out.iterdir()} == {"kernel.cu", "kernel.cubin", "build.sh", f"{module}.py",
                                               "metadata.json", "selfcheck.py", "nvfp4_launch.py",
                                               "nvfp4_formats.py", "nvfp4_linear.py", "evo_family.py", "evo_runtime",
                                               "prepare.py", "README.md"}
    assert "#define SPLIT_CLUSTER_L2 1" in (out / "kernel.cu").read_text()
    # verified as the evaluator verifies: |out - ref| <= 1e-3 + 1e-3 |ref| elementwise
    assert json.loads((out / "metadata.json").read_text())["tolerance"] == dict(max_abs=1e-3, max_rel_l2=1e-3, rtol=1e-3)
    from evo.seeds.nvfp4_gemm.launch import grid, shared_bytes, splits

    fits = {2: 66, 4: 16, 8: 8}
    plans = {s.name: (grid(genome, s, splits(genome, s, 132, fits.__getitem__)), shared_bytes(genome)) for s in shapes}
    shown = run_standalone(f"""
        import json, torch
        import {module} as k, nvfp4_launch as plan
        metadata = json.load(open({str(out / "metadata.json")!r}))
        fits = {fits!r}
        genome = k.KERNELS[k.OP.table.default]["genome"]  # the one kernel, every shape's default
        got = {{s["name"]: [list(plan.grid(genome, s, plan.splits(genome, s, 132, fits.__getitem__))),
                             plan.shared_bytes(genome)] for s in metadata["shapes"]}}
        print(json.dumps(got))
        a = torch.zeros(128, 1024, dtype=torch.uint8)
        s = torch.full((128, 128), 0x38, dtype=torch.uint8)  # e4m3 1.0
        assert torch.equal(k.gemm(a, a, s, s), torch.zeros(128, 128, dtype=torch.float16))  # on the CPU: PyTorch's
        refuses(k.gemm, (a.float(), a, s, s))
        """, out, tmp_path, refusals=1)
    lines = shown.splitlines()
    assert json.loads(lines[0]) == {name: [list(g), size] for name, (g, size) in plans.items()}
    assert lines[1] == "refused: a must be a uint8 tensor, got torch.float32"
    assert_rebuilds(out)


@pytest.mark.gpu
@pytest.mark.parametrize("genome", [ONE_WARPGROUP, CLUSTER_L2, PRODUCER], ids=["prepass", "cluster_l2", "producer"])
def test_exported_kernel_checks_itself_in_a_fresh_process(tmp_path, genome):
    """A genome the evaluator verified, exported: its self-check verifies every shape and times it against
    both anchors; its gemm() takes 2-D operands and either scale layout, runs three times in a row on a
    shape the search never saw, works as a custom op under torch.compile, and refuses bad operands."""
    out, checked = export_verified(FAMILY, genome, tmp_path)
    assert checked.count("anchor: bf16 cuBLAS matmul on operands dequantised beforehand") == len(FAMILY.shapes)
    run_standalone(f"""
        import torch
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
        refuses(k.gemm, (a[:, :100], b, sfa, sfb), (a, b[:, :-64], sfa, sfb), (a, b, sfa[:, :-1], sfb))
        """, out, tmp_path, refusals=3)


@pytest.mark.nvcc
def test_an_nvfp4_linear_made_from_an_nn_linear(tmp_path):
    """NVFP4Linear(nn.Linear): the weight quantised once, activations per call, the op's gemm (on the CPU here:
    PyTorch's dequantisation + matmul), the bias added; close to the bf16 layer within FP4's error, equal to the
    dequantised product; an input that requires a gradient is refused, loudly."""
    genome = CLUSTER_L2
    out = export_stored(FAMILY, genome, recorded_pass(genome, FAMILY.shapes), tmp_path)
    run_standalone(f"""
        import torch
        import nvfp4_gemm_{genome.id} as k, nvfp4_formats as formats
        torch.manual_seed(0)
        linear = torch.nn.Linear(256, 96).to(torch.bfloat16)
        layer = k.NVFP4Linear(linear)
        x = torch.randn(3, 5, 256).bfloat16()
        with torch.no_grad():
            y, stock = layer(x), linear(x)
        assert y.shape == (3, 5, 96) and y.dtype == torch.bfloat16
        error = lambda a, b: ((a.float() - b.float()).norm() / b.float().norm()).item()
        assert error(y, stock) < 0.2, error(y, stock)  # FP4 values with a scale per 16: about 10% each
        a, sfa = formats.quantize(x.reshape(-1, 256))
        product = formats.dequantize(a, sfa) @ formats.dequantize(layer.weight_packed, layer.weight_scales).T
        assert error(y.reshape(15, 96), product + linear.bias.float()) < 1e-2
        try:
            layer(x.requires_grad_())
        except RuntimeError as refusal:
            assert "no backward" in str(refusal)
        else:
            raise SystemExit("a gradient was silently dropped")
        print("linear ok")
        """, out, tmp_path, refusals=0)
