"""The exported op at run time, on the CPU family: a shape's kernel decided by measurement and kept on disk
for later processes (and several at once), never a kernel that fails verification, nothing measured where
measuring is off, decisions made ahead of time by prepare.py, gradients, and torch.compile(fullgraph=True)."""

import json
import subprocess
import sys
import textwrap

from tests.test_workload_search import export_two_shape_op


def _run(package, cache, body: str, env_extra: str = "") -> str:
    script = (f"import os, sys, torch\nos.environ['EVO_OP_CACHE'] = {str(cache)!r}\n{env_extra}\n"
              f"sys.path.insert(0, {str(package)!r})\nimport cpu_gemm_two as k\n" + textwrap.dedent(body))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_a_decision_is_measured_once_and_kept_for_later_processes(tmp_path):
    package, fast = export_two_shape_op(tmp_path)
    cache = tmp_path / "decisions"
    first = _run(package, cache, """
        a, b = torch.randn(300, 250), torch.randn(250, 240)
        assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)
        print(k.choose(dict(m=300, n=240, k=250)))
    """)
    assert "measured here" in first
    saved = json.loads((cache / "cpu_gemm_two.json").read_text())
    (context, buckets), = saved.items()
    assert "torch" in context and "threads" in context and k_package_id(context)
    record = buckets["k=256,m=304,n=240"]  # each size up to a multiple of 16
    assert record["choice"] in (fast.id, "pytorch") and set(record["times_us"]) == {fast.id, "pytorch"}
    assert record["shape"] == {"m": 300, "n": 240, "k": 250} and record["failed"] == []
    again = _run(package, cache, """
        kernel, why = k.choose(dict(m=290, n=240, k=250))  # the same bucket
        print(kernel, why)
        a, b = torch.randn(290, 250), torch.randn(250, 240)
        assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)
    """)
    assert "decided" in again and "measured here" not in again
    assert again.split()[0] == (record["choice"] if record["choice"] != "pytorch" else "None")


def k_package_id(context: str) -> bool:
    return "package " in context


def test_a_kernel_that_fails_verification_is_never_chosen(tmp_path):
    package, fast = export_two_shape_op(tmp_path)
    shown = _run(package, tmp_path / "decisions", """
        k.family.launch = lambda loaded, dims, inputs, out: out.zero_()  # a kernel that computes nothing
        kernel, why = k.choose(dict(m=300, n=240, k=250))
        assert kernel is None and "failed verification" in why, why
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)  # the workload shape: PyTorch too
        print(k.choose(dict(m=256, n=256, k=256)))
    """)
    assert "None" in shown and "failed verification" in shown


def test_a_measurement_that_fails_leaves_the_call_to_pytorch(tmp_path):
    package, _ = export_two_shape_op(tmp_path)
    shown = _run(package, tmp_path / "decisions", """
        def no_memory(dims, generator):
            raise RuntimeError("out of memory")
        k.family.make_inputs = no_memory
        a, b = torch.randn(300, 250), torch.randn(250, 240)
        assert torch.allclose(k.gemm(a, b), a @ b, atol=1e-3, rtol=1e-4)  # the call itself goes on
        kernel, why = k.choose(dict(m=300, n=240, k=250))
        assert kernel is None and "could not measure" in why, why
        print("failed measurement ok")
    """)
    assert "failed measurement ok" in shown


def test_with_measuring_off_the_op_runs_pytorch_where_nothing_was_decided(tmp_path):
    package, fast = export_two_shape_op(tmp_path)
    shown = _run(package, tmp_path / "decisions", f"""
        kernel, why = k.choose(dict(m=300, n=240, k=250))
        assert kernel is None and "none could be measured" in why, why
        assert k.choose(dict(m=256, n=256, k=256))[0] == {fast.id!r}  # a workload shape: the search's choice
        print("off ok")
    """, env_extra="os.environ['EVO_OP_MEASURE'] = '0'")
    assert "off ok" in shown
    assert not (tmp_path / "decisions" / "cpu_gemm_two.json").exists()


def test_prepare_decides_ahead_of_time_and_concurrent_writers_lose_nothing(tmp_path):
    package, _ = export_two_shape_op(tmp_path)
    env = {"EVO_OP_CACHE": str(tmp_path / "decisions"), "PATH": "/usr/bin:/bin"}
    ranges = (["m=16:160:16", "n=64", "k=64"], ["m=176:320:16", "n=64", "k=64"])
    running = [subprocess.Popen([sys.executable, str(package / "prepare.py"), *r], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for r in ranges]
    outputs = [p.communicate(timeout=300) for p in running]
    assert all(p.returncode == 0 for p in running), outputs
    assert all("10 bucket(s) decided" in out for out, _ in outputs), outputs
    (buckets,) = json.loads((tmp_path / "decisions" / "cpu_gemm_two.json").read_text()).values()
    assert len(buckets) == 20  # both processes' decisions
    again = subprocess.run([sys.executable, str(package / "prepare.py"), "m=16:320:16", "n=64", "k=64"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.startswith("0 bucket(s) decided"), again.stdout + again.stderr
    bad = subprocess.run([sys.executable, str(package / "prepare.py"), "m=16:8", "n=64", "k=64"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "LOW <= HIGH" in bad.stderr


def test_gradients_and_torch_compile_fullgraph_through_the_public_function(tmp_path):
    package, _ = export_two_shape_op(tmp_path)
    shown = _run(package, tmp_path / "decisions", """
        def check(run, scale=1):
            a, b = torch.randn(256, 256, requires_grad=True), torch.randn(256, 256, requires_grad=True)
            out = run(a, b)
            assert out.grad_fn is not None, "the gradient was dropped"
            out.square().sum().backward()
            a2, b2 = a.detach().requires_grad_(), b.detach().requires_grad_()
            (scale * (a2 @ b2)).square().sum().backward()
            assert torch.allclose(a.grad, a2.grad, rtol=1e-3, atol=1e-2) and torch.allclose(b.grad, b2.grad, rtol=1e-3, atol=1e-2)
        check(k.gemm)
        compiled = torch.compile(lambda a, b: k.gemm(a, b) * 2, backend="aot_eager", fullgraph=True)
        check(compiled, scale=2)
        a, b = torch.randn(300, 250), torch.randn(250, 240)
        assert torch.allclose(compiled(a, b), 2 * (a @ b), atol=1e-3, rtol=1e-4)
        print("gradients ok")
    """)
    assert "gradients ok" in shown


def test_two_packages_in_one_process_each_run_their_own_files(tmp_path):
    """Two exported ops in one process (a model using an attention op and a patch-embedding op, say): each
    package's evo_family.py and evo_runtime/ are its own, though their files have the same names."""
    from evo.cli import main

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first, _ = export_two_shape_op(tmp_path / "one")
    assert main(["export", "1", "--db", str(tmp_path / "one" / "evo.db"), "--out", str(tmp_path / "two" / "op")]) == 0
    text = (first / "evo_family.py").read_text()
    (first / "evo_family.py").write_text(text.replace('"""C = A @ B with the evolved kernel', '"""FIRST. C = A @ B'))
    script = textwrap.dedent(f"""
        import importlib.util, sys, torch
        def load(folder, name):
            spec = importlib.util.spec_from_file_location(name, folder + "/cpu_gemm_two.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        one = load({str(first)!r}, "one")
        two = load({str(tmp_path / "two" / "op")!r}, "two")
        assert one.family is not two.family and one.OP is not two.OP
        assert one.gemm.__doc__.startswith("FIRST") and not two.gemm.__doc__.startswith("FIRST")
        a, b = torch.randn(64, 32), torch.randn(32, 16)
        assert torch.allclose(one.gemm(a, b), a @ b, atol=1e-4) and torch.allclose(two.gemm(a, b), a @ b, atol=1e-4)
        assert "evo_family" not in sys.modules
        print("two ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "two ok" in done.stdout, done.stdout + done.stderr[-3000:]
