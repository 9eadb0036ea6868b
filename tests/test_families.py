"""A user's own family, found as a folder's path, a Python file or an installed package's entry point
(no PYTHONPATH), searched, listed by `evo families`; a broken one refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evo.cli import main
from evo.seeds import get_family
from tests.test_search import rows

DEMO_SPEC = '''
"""demo: out = a + b in C++, the smallest family there is."""
import ctypes
from pathlib import Path

import torch

from evo.kernel_genome import Choice, Space
from evo.seeds import BuildRecipe, KernelFamily, TimingPlan, Tolerance, shape

SPACE = Space([Choice("unroll", (1, 2, 4, 8), ordered=True, description="unroll of the loop")])


class Demo(KernelFamily):
    name = "demo"
    description = "out = a + b"
    device = "cpu"
    space = SPACE
    seed_genomes = (SPACE.genome({"unroll": 1}),)
    shapes = (shape("mission", n=4096, mission=True), shape("odd", n=1001))
    tolerance = Tolerance(max_abs=1e-6, max_rel_l2=1e-7)
    anchor_name = "torch.add"
    timing = TimingPlan(warmup=1, min_runs=5, max_runs=50, min_seconds=0.0)

    def build_recipe(self, genome):
        source = Path(__file__).with_name("add.cpp").read_text()
        flags = ("-O2", "-fPIC", "-shared", f"-DUNROLL={genome['unroll']}")
        return BuildRecipe(source, "add.cpp", "c++", flags, "shared_library")

    def make_inputs(self, shape, generator):
        return tuple(torch.randn(shape["n"], generator=generator) for _ in range(2))

    def make_output(self, shape):
        return torch.empty(shape["n"])

    def reference(self, shape, inputs):
        return inputs[0].double() + inputs[1].double()

    def load(self, artifact, genome):
        function = ctypes.CDLL(str(artifact)).evo_add
        function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int]
        return function

    def launch(self, kernel, shape, inputs, output):
        kernel(inputs[0].data_ptr(), inputs[1].data_ptr(), output.data_ptr(), shape["n"])

    def anchor(self, shape, inputs):
        return torch.add(*inputs)


FAMILY = Demo()
'''

DEMO_SOURCE = '''extern "C" void evo_add(const float* a, const float* b, float* out, int n) {
#pragma GCC unroll UNROLL
    for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
'''


def demo_folder(parent: Path, name: str = "demo", spec: str = DEMO_SPEC) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "spec.py").write_text(spec)
    (folder / "add.cpp").write_text(DEMO_SOURCE)
    return folder


def test_a_family_folder_is_found_by_its_path_and_named_absolutely(tmp_path, monkeypatch):
    folder = demo_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    family = get_family("./demo")
    assert family.name == "demo" and family.reference_key == str(folder.resolve())
    assert get_family(family.reference_key) is family  # what a Ray worker, elsewhere, passes back
    assert get_family(str(folder / "spec.py")).name == "demo"  # the spec file itself
    assert get_family(f"{folder}:FAMILY") is family
    retargeted = get_family("./demo@odd")
    assert retargeted.mission_shape.name == "odd" and retargeted.reference_key == f"{folder.resolve()}@odd"


@pytest.mark.parametrize("spec, message", [
    ("import torch\nFAMILY = 1 / 0\n", "spec.py raised ZeroDivisionError: division by zero (line 2)"),
    ("import no_such_module_anywhere\n", "spec.py raised ModuleNotFoundError"),
    ("X = 1\n", "defines no FAMILY"),
    ("FAMILY = 42\n", "is not a KernelFamily instance"),
    ("import types\nfrom seeds.cpu_gemm.spec import CpuGemm\nclass Bad(CpuGemm):\n    runtime = types.SimpleNamespace("
     "DEVICE='cpu')\nFAMILY = Bad()\n", "runtime: it lacks make_inputs, make_output, reference, anchor, load, launch"),
])
def test_a_broken_family_folder_is_one_line_and_exit_2(spec, message, tmp_path, monkeypatch, capsys):
    demo_folder(tmp_path, spec=spec)
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--family", "./demo", "--budget", "2", "--db", str(tmp_path / "evo.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "evo.db").exists()
    assert main(["search", "--family", "./nowhere", "--db", str(tmp_path / "evo.db")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_an_installed_packages_family_is_found_by_its_entry_point(tmp_path, monkeypatch, capsys):
    dist = tmp_path / "evo_demo_families-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evo-demo-families\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[evo.families]\nfaulty_installed = tests.families.faulty:FAMILY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_family("faulty_installed").name == "faulty"
    assert get_family("faulty").reference_key == "tests.families.faulty:FAMILY"  # by its own name too
    monkeypatch.chdir(demo_folder(tmp_path).parent)
    assert main(["families"]) == 0
    out = capsys.readouterr().out
    assert "faulty (installed as faulty_installed, cpu)" in out
    # two installed families of one name: refused in one line, naming both
    (dist / "entry_points.txt").write_text("[evo.families]\nfaulty_installed = tests.families.faulty:FAMILY\n"
                                           "faulty_again = tests.families.faulty:ALSO_FAULTY\n")
    import importlib

    from evo.seeds._registry import _cached_family

    importlib.invalidate_caches()
    _cached_family.cache_clear()
    with pytest.raises(ValueError, match="family name 'faulty' is taken by 2 installed families"):
        get_family("faulty")
    assert "./demo (folder here, cpu): out = a + b" in out and "cpu_gemm (built-in, cpu)" in out


@pytest.mark.slow  # a whole search
def test_a_family_folder_is_searched_from_its_directory_without_pythonpath(tmp_path):
    demo_folder(tmp_path)
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "evo", "search", "--family", "./demo", "--budget", "4", "--trials", "1"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (family, status), = rows(tmp_path / "evo.db", "SELECT family, status FROM runs")
    assert family == str((tmp_path / "demo").resolve()) and status == "budget_exhausted"
    statuses = rows(tmp_path / "evo.db", "SELECT status FROM evaluations")
    assert len(statuses) == 4 and all(s == "ok" for (s,) in statuses)  # UNROLL reached its #pragma


SHORT_SPEC = '''
from evo.family import Choice, CppKernel, Scalar, Tensor, shape

FAMILY = CppKernel(
    name="add", source="add.cpp", function="evo_add",
    knobs=[Choice("unroll", (1, 2, 4, 8), ordered=True)],
    constraints=__CONSTRAINTS__,
    shapes=[shape("mission", n=4096, mission=True), shape(__SECOND__)],
    args=[Tensor("a", "n"), Tensor("b", "n"), Tensor("out", "n", output=True), Scalar("n")],
    reference=__REFERENCE__, anchor="torch.add(a, b)",
)
'''


def short_spec(constraints="{}", second='"odd", n=1001', reference='"a + b"') -> str:
    return (SHORT_SPEC.replace("__CONSTRAINTS__", constraints).replace("__SECOND__", second)
            .replace("__REFERENCE__", reference))


def test_the_short_spec_is_a_whole_family(tmp_path, monkeypatch):
    import torch

    demo_folder(tmp_path, spec=short_spec('{"small": "unroll <= 4"}'))
    monkeypatch.chdir(tmp_path)
    family = get_family("./demo")
    assert family.name == "add" and family.space.names == ("unroll",)
    assert [g.as_dict() for g in family.seed_genomes] == [{"unroll": 1}]
    recipe = family.build_recipe(family.space.genome({"unroll": 4}))
    assert "-DUNROLL=4" in recipe.flags and recipe.output == "shared_library"
    shape_ = family.mission_shape
    inputs = family.make_inputs(shape_, torch.Generator().manual_seed(0))
    assert [tuple(t.shape) for t in inputs] == [(4096,), (4096,)] and family.make_output(shape_).shape == (4096,)
    assert torch.equal(family.anchor(shape_, inputs), inputs[0] + inputs[1])
    assert family.reference(shape_, inputs).dtype == torch.float64
    assert family.space.is_valid(family.space.genome({"unroll": 4}))
    with pytest.raises(ValueError, match="violated: unroll <= 4$"):
        family.space.check(family.space.genome({"unroll": 8}))


@pytest.mark.parametrize("spec, message", [
    (short_spec('{"small": "unrol <= 4"}'), "constraint 'small': names ['unrol'], not knobs (knobs: ['unroll'])"),
    (short_spec(second='"odd", m=1001'), "shape 'odd': has no dimension ['n'], which 'a' needs; add it to the shape"),
    (short_spec(reference='"a + c"'), "reference: 'a + c' names ['c']; it may use the inputs ['a', 'b'] and torch"),
    (short_spec().replace('source="add.cpp"', 'source="gone.cpp"'), "source: no file"),
    (short_spec().replace('output=True', 'output=False'), "args: 0 tensors marked output=True; mark exactly one"),
    (short_spec().replace('Tensor("b", "n")', 'Tensor("b", "n", dtype="float8")'), "tensor 'b': dtype 'float8'"),
])
def test_a_bad_short_spec_names_the_family_the_item_and_the_fix(spec, message, tmp_path, monkeypatch, capsys):
    demo_folder(tmp_path, spec=spec)
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--family", "./demo", "--budget", "2", "--db", str(tmp_path / "evo.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert "family 'add', " + message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "evo.db").exists()


@pytest.mark.parametrize("args, message", [
    (["new-family", "9lives"], "must be a C identifier"),
    (["new-family", "demo", "--device", "tpu"], "--device 'tpu'"),
])
def test_new_family_refuses_bad_names_and_devices(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    assert message in capsys.readouterr().err and not any(tmp_path.iterdir())
    (tmp_path / "taken").mkdir()
    assert main(["new-family", "taken"]) == 2 and "already exists" in capsys.readouterr().err


@pytest.mark.slow  # a whole search
def test_new_family_then_search_then_export_then_a_self_check_without_evo(tmp_path):
    """The issue's first line, as a user types it in an empty directory, no PYTHONPATH; the exported
    package's self-check then runs where evo cannot be imported."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}

    def evo(*args):
        done = subprocess.run([sys.executable, "-m", "evo", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout

    evo("new-family", "demo", "--device", "cpu")
    evo("search", "--family", "./demo", "--budget", "8", "--trials", "1")
    evo("export", "1", "--out", "demo_op")
    without_evo = ("import runpy, sys\nfor name in ('evo', 'seeds', 'fitness', 'kernel_genome', 'db'):\n"
                   "    sys.modules[name] = None  # as where evo is not installed\n"
                   "sys.argv = ['selfcheck.py']\nrunpy.run_path('selfcheck.py', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", without_evo], cwd=tmp_path / "demo_op", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "self-check passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    # the op as a user calls it, and as a torch custom op
    call = ("import sys, torch; sys.path.insert(0, '.'); import importlib, glob\n"
            "k = importlib.import_module(glob.glob('demo_*.py')[0][:-3])\n"
            "x, y = torch.randn(5000), torch.randn(5000)\n"
            "assert torch.allclose(k.call(x, y), 2 * x + y)\n"
            "assert torch.allclose(torch.ops.evo.__getattr__(k.__name__)(x, y), 2 * x + y)\n"
            "try:\n    k.call(x.requires_grad_(), y)\nexcept RuntimeError as e:\n    assert 'has no backward' in str(e), e\n"
            "else:\n    raise SystemExit('a gradient was silently dropped')\n"
            "with torch.no_grad():\n    assert torch.allclose(k.call(x, y), 2 * x + y)\nprint('called')\n")
    done = subprocess.run([sys.executable, "-c", call], cwd=tmp_path / "demo_op", env=env, capture_output=True,
                          text=True, timeout=120)
    assert "called" in done.stdout, done.stderr[-2000:]
    assert evo("search", "--experiment", "demo/experiment.toml", "--budget", "2", "--db", "again.db")


@pytest.mark.nvcc
def test_the_cuda_skeleton_builds_and_screens_at_every_knob_value(tmp_path, monkeypatch):
    from evo.fitness import BuildConfig, Builder, Status, screen

    monkeypatch.chdir(tmp_path)
    assert main(["new-family", "softmax", "--device", "cuda"]) == 0
    spec_lines = [line for line in (tmp_path / "softmax" / "spec.py").read_text().splitlines()
                  if line.strip() and not line.startswith(("#", '"""', "    evo ", "own ("))]
    assert len(spec_lines) <= 25  # the bound on a CUDA kernel's Python
    family = get_family("./softmax")
    assert family.device == "cuda" and family.runtime.launch_dims("block", {"THREADS": 256}) == (256,)
    builder = Builder(BuildConfig(tmp_path / "cache"))
    values = {k.name: k.values for k in family.space.knobs}
    genomes = {family.space.genome({**family.seed_genomes[0].as_dict(), name: value})
               for name, domain in values.items() for value in domain}
    for genome in genomes:
        recipe = family.build_recipe(genome)
        built = builder.build(genome.id, recipe)
        assert built.status is Status.OK, (genome.as_dict(), built.message)
        assert screen(built, recipe.output, family.screen_limits).status is Status.OK, genome.as_dict()


def test_a_cuda_short_spec_checks_its_launch_expressions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["new-family", "softmax", "--device", "cuda"]) == 0
    spec = tmp_path / "softmax" / "spec.py"
    spec.write_text(spec.read_text().replace('block="THREADS"', 'block="THREAD"'))
    with pytest.raises(ValueError, match=r"family 'softmax', block: 'THREAD' names \['THREAD'\]: it may use the "
                                         r"dimensions \['cols', 'rows'\] and the knobs in capitals"):
        get_family("./softmax")


@pytest.mark.gpu
def test_the_cuda_skeleton_searched_exported_and_self_checked_on_the_gpu(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    for args in (["new-family", "softmax", "--device", "cuda"], ["search", "--family", "./softmax", "--budget", "16"],
                 ["export", "1", "--out", "op"]):
        done = subprocess.run([sys.executable, "-m", "evo", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode in (0, 3), (args, done.stdout[-3000:], done.stderr[-2000:])
    done = subprocess.run([sys.executable, "selfcheck.py"], cwd=tmp_path / "op", env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "self-check passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_a_family_folder_sent_to_another_node_is_found_in_its_runtime_environment(tmp_path, monkeypatch):
    """On a cluster's other machines the driver's path does not exist: Ray's runtime environment puts the
    folder on the worker's import path (py_modules), and the registry loads that copy."""
    from evo.seeds._registry import family_folder

    shipped = tmp_path / "ray_runtime_resources"
    shipped.mkdir()
    demo_folder(shipped)
    monkeypatch.syspath_prepend(str(shipped))
    family = get_family("/a/path/only/the/driver/has/demo")
    assert family.name == "demo" and "evo_add" in family.build_recipe(family.seed_genomes[0]).source
    assert family_folder(family) == shipped / "demo"
    assert family_folder(get_family("cpu_gemm")) is None


@pytest.mark.parametrize("anchor", ["torch.softmax(x, 0)", "torch.cat([2 * x + y] * 16)"])
def test_an_anchor_that_disagrees_with_the_reference_is_refused_before_a_run(tmp_path, monkeypatch, capsys, anchor):
    """PyTorch's side of every claim is checked first: an anchor computing something else (or 16x the output)
    would make any speedup a false claim; one line, exit 2, no database written."""
    monkeypatch.chdir(tmp_path)
    assert main(["new-family", "demo", "--device", "cpu"]) == 0
    spec = tmp_path / "demo" / "spec.py"
    spec.write_text(spec.read_text().replace('anchor="torch.add(y, x, alpha=2)"', f'anchor="{anchor}"'))
    capsys.readouterr()
    assert main(["search", "--family", "./demo", "--budget", "4", "--db", str(tmp_path / "evo.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the anchor" in err[0] and "at " in err[0], err
    assert not (tmp_path / "evo.db").exists()
