"""evo.runtime: what an exported op carries (evo_runtime/), importing torch and cuda.bindings only."""

import ast
import subprocess
import sys
from pathlib import Path

from evo import runtime

RUNTIME = Path(runtime.__file__).parent
ALLOWED_TOP = {"torch", "cuda"}  # besides the standard library and the package's own (relative) modules


def _absolute_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add((node.module or "").partition(".")[0])
    return names - {"__future__"}


def test_the_runtime_imports_nothing_but_the_standard_library_torch_and_cuda_bindings():
    modules = sorted(RUNTIME.glob("*.py"))
    assert {p.stem for p in modules} >= {"cuda", "dispatch", "decisions", "op", "queued", "flush", "spec", "protocol"}
    for path in modules:
        foreign = _absolute_imports(path) - ALLOWED_TOP - set(sys.stdlib_module_names)
        assert not foreign, f"{path.name} imports {sorted(foreign)}"


def test_a_copy_of_the_runtime_imports_every_module_where_evo_cannot_be_imported(tmp_path):
    """Copied as an exported package carries it (evo_runtime/), with `import evo` made to fail: every module
    imports, and the op's dispatch table round-trips."""
    package = tmp_path / "evo_runtime"
    package.mkdir()
    for path in RUNTIME.glob("*.py"):
        (package / path.name).write_text(path.read_text())
    names = sorted(p.stem for p in RUNTIME.glob("*.py") if p.stem != "__init__")
    script = (
        "import sys, importlib\n"
        "class NoEvo:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'evo' or name.startswith('evo.'):\n"
        "            raise ImportError('evo must not be imported: ' + name)\n"
        "sys.meta_path.insert(0, NoEvo)\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module('evo_runtime.' + name)\n"
        "from evo_runtime.dispatch import DispatchTable\n"
        "table = DispatchTable([], ('d',), default='k')\n"
        "assert DispatchTable.from_dict(table.to_dict()).to_dict() == table.to_dict()\n"
        "assert not [m for m in sys.modules if m == 'evo' or m.startswith('evo.')]\n"
        "print('runtime ok')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "runtime ok" in done.stdout, done.stderr[-3000:]


def test_a_memory_bound_family_s_tables_give_bytes_a_second_against_the_read_bandwidth():
    """bandwidth.describe, and the workload table's two columns (kernel's and anchor's share of the read
    bandwidth), shown only where the run recorded a read bandwidth."""
    import dataclasses

    from rich.console import Console

    from evo.dispatch import DispatchReport, ShapeChoice
    from evo.progress import dispatch_table_view
    from evo.runtime import bandwidth
    from evo.seeds import get_family

    assert bandwidth.describe(4e6, 1e-6, 5e12) == "4.00 TB/s, 80% of read bandwidth"
    assert bandwidth.describe(4e6, None, 5e12) == "" and bandwidth.describe(0.0, 1e-6, 5e12) == ""
    family = get_family("flashdecode")
    workload = family.workloads[0]
    shape = workload.shapes[0]
    moved = family.bytes_moved(shape)
    row = ShapeChoice(shape.name, dict(shape.dims), 1.0, moved / 4e12, moved / 3e12, 7, "abc", {}, True, False, moved)
    table = DispatchReport(workload, family.fallback_label, (row,), read_bandwidth=5e12)

    def shown(report) -> str:
        console = Console(record=True, width=250)
        console.print(dispatch_table_view(report))
        return console.export_text()

    text = shown(table)
    assert "kernel of read bw" in text and "60%" in text and "80%" in text and "read bandwidth 5.00 TB/s" in text
    assert "of read bw" not in shown(dataclasses.replace(table, read_bandwidth=None))
