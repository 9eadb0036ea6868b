"""A user's family with a mistake in it (the audit of issue 51, on the scaffold `evo new-family` writes): each
ends with one line naming the family's file and exit 2 before a run exists, or, where every genome fails the
same way, with a run stopped early that says how; `evo check` builds and screens without a GPU."""

import shutil

import pytest

from evo.cli import main
from tests.test_search import rows


def scaffold(tmp_path, monkeypatch, device="cpu", name="demo"):
    monkeypatch.chdir(tmp_path)
    assert main(["new-family", name, "--device", device]) == 0
    return tmp_path / name


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new))


MISTAKES = [  # (file, text, replacement, what the one line says)
    ("spec.py", 'reference="2 * x + y"', 'reference="x.nope()"', "its reference raised at ragged: AttributeError"),
    ("spec.py", 'function="demo"', 'function="demo_nope"', "does not load: AttributeError"),
    ("spec.py", 'Tensor("out", "n", output=True)', 'Tensor("out", "n + 1", output=True)',
     "at ragged the output is made (1002,) but the reference gives (1001,)"),
    ("spec.py", 'reference="2 * x + y"', 'reference="(2 * x + y)[:-1]"', "but the reference gives (1000,)"),
    ("spec.py", '"unroll <= block"', '"unroll > block"', "its seed genome"),
    ("spec.py", '"unroll <= block"', '"block < 0"', "breaks a constraint"),
    ("spec.py", 'Choice("unroll", (1, 2, 4, 8)', 'Choice("unroll", ()', "knob 'unroll' has an empty domain"),
    ("spec.py", '"unroll <= block"', '"unrol <= block"', "names ['unrol'], not knobs"),
    ("spec.py", 'anchor="torch.add(y, x, alpha=2)"', 'anchor="torch.add(y, x)"', "fails the family's tolerance"),
    ("demo.cpp", "for (int start", "for (undeclared; int start", "demo.cpp:4:"),
]


@pytest.mark.parametrize("file, old, new, said", MISTAKES, ids=[m[3][:30] for m in MISTAKES])
def test_a_mistake_in_a_family_is_one_line_before_a_run(tmp_path, monkeypatch, capsys, file, old, new, said):
    folder = scaffold(tmp_path, monkeypatch)
    edit(folder / file, old, new)
    capsys.readouterr()
    assert main(["search", "--family", "./demo", "--budget", "8", "--db", str(tmp_path / "evo.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert "demo" in err[0] and not (tmp_path / "evo.db").exists()


@pytest.mark.slow
def test_a_run_whose_first_evaluations_all_fail_one_way_stops_early_and_says_how(ray_session, tmp_path, monkeypatch,
                                                                                capsys):
    folder = scaffold(tmp_path, monkeypatch)
    edit(folder / "demo.cpp", "out[i] = 2.0f * x[i] + y[i];", "out[i] = 0.0f / 0.0f;")  # every genome writes NaN
    db = tmp_path / "evo.db"
    assert main(["search", "--family", "./demo", "--budget", "40", "--db", str(db), "--trials", "1"]) == 5
    out = capsys.readouterr().out
    assert rows(db, "SELECT status FROM runs") == [("all_failed",)]
    assert rows(db, "SELECT COUNT(*) FROM evaluations")[0][0] < 40
    assert "every evaluation failed so" in out and "outputs are NaN/Inf" in out and "e.g. genome" in out
    assert main(["show", "1", "--db", str(db)]) == 0
    assert "failed: incorrect x" in capsys.readouterr().out
    assert main(["search", "--resume", "1", "--budget", "60", "--db", str(db)]) == 2
    assert "fix the family and start a new search" in capsys.readouterr().err


def test_evo_check_builds_the_seed_and_a_sample_and_runs_the_pre_flight(tmp_path, monkeypatch, capsys):
    scaffold(tmp_path, monkeypatch)
    assert main(["check", "./demo", "--sample", "3"]) == 0
    out = capsys.readouterr().out
    assert "4 of 4 built" in out and "pre-flight passed: the reference" in out and out.count(" ok ") >= 4


@pytest.mark.nvcc
@pytest.mark.parametrize("family", ["./softmax", "flashcore", "vit_gemm", "nvfp4_gemm", "vit_gemm_sm100", "nvfp4_gemm_sm100"])
def test_evo_check_screens_a_cuda_family_without_a_gpu(tmp_path, monkeypatch, capsys, family):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc here")
    scaffold(tmp_path, monkeypatch, "cuda", "softmax")
    assert main(["check", family, "--sample", "2", "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "3 of 3 built and within the screen's limits" in out


@pytest.mark.nvcc
def test_evo_check_names_a_compile_error_by_the_familys_own_file_and_line(tmp_path, monkeypatch, capsys):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc here")
    folder = scaffold(tmp_path, monkeypatch, "cuda", "softmax")
    edit(folder / "softmax.cu", "__syncthreads();", "__syncthreads(); undeclared_x = 1;")
    assert main(["check", "./softmax", "--sample", "1", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{folder / 'softmax.cu'}(" in err[0] and "undeclared_x" in err[0], err
