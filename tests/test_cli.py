"""Bad input anywhere: one clear line, exit code 2, nothing written."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.cli import main
from evo.experiment import load_experiment, parse_duration
from evo.fitness import Target


def run_bad(argv, capsys, tmp_path, expected):
    db = tmp_path / "evo.db"
    code = main([*argv, "--db", str(db)] if argv[0] in ("search", "show", "runs", "lineage") else argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert expected in lines[0]
    assert not db.exists() and not list(tmp_path.glob("evo.db*"))


@pytest.mark.parametrize("argv, expected", [
    (["search", "--family", "nope"], "unknown family 'nope'"),
    (["search", "--strategy", "annealing"], "unknown strategy 'annealing'"),
    (["search", "--target", "fast"], "target 'fast' is not a time"),
    (["search", "--target=-3us"], "target '-3us' is not a time"),
    (["search", "--target", "0us"], "target '0us' must be positive"),
    (["search", "--budget", "0"], "must be positive"),
    (["search", "--budget", "ten"], "not an integer"),
    (["search", "--time-budget", "soon"], "is not a duration"),
    (["search", "--population", "-1"], "must be positive"),
    (["search", "--sampler", "tpe"], "--sampler applies to --strategy optuna only"),
    (["search", "--strategy", "optuna", "--sampler", "cmaes"], "unknown Optuna sampler 'cmaes'"),
    (["search", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["search", "--resume", "3"], "no database at"),
    (["search", "--resume", "3", "--family", "cpu_gemm"], "--resume continues a run with its own settings"),
    (["search", "--family", "tests.families.nowhere:FAMILY"], "cannot import"),
    (["search", "--family", "cpu_gemm", "--gate-rounds", "-1"], "gate_rounds must be a whole number >= 0"),
    (["search", "--family", "cpu_gemm", "--mission", "huge"],
     "family 'cpu_gemm' has no shape 'huge'; its shapes: mission, tall, ragged"),
    (["search", "--family", "cpu_gemm@huge"], "family 'cpu_gemm' has no shape 'huge'"),
    (["search", "--family", "cpu_gemm@tall", "--mission", "ragged"], "already names its mission shape"),
    (["search", "--family", "cpu_gemm", "--mission", ""], "mission must be the name of one of the family's shapes"),
    (["search", "--family", "cpu_gemm", "--cold-cache=yes"], "ignored explicit argument 'yes'"),
    (["search", "--resume", "3", "--cold-cache"], "--resume continues a run with its own settings; only --budget "
     "and --time-budget may change (got --cold-cache)"),
    (["show", "1"], "no database at"),
    (["show", "one"], "not an integer"),
    (["lineage", "1"], "no database at"),
    (["lineage", "1", "--format", "pdf"], "--format must be one of html, md, dot, json"),
    (["frobnicate"], "invalid choice"),
    (["search", "--family", "tests.families.broken:FAMILY", "--budget", "3"],
     "family broken does not build: its seed genome fails ("),
    # from the audit of issue 50
    (["search", "--family", "cpu_gemm", "--budget", "\u0663"], "is not an integer (digits 0-9)"),
    (["search", "--family", "cpu_gemm", "--budget", "99999999999"], "more than the store holds"),
    (["search", "--family", "cpu_gemm", "--seed", "99999999999999999999999"], "seed must be a whole number from 0"),
    (["search", "--family", "cpu_gemm", "--seed", "9999999999999999999"], "seed must be a whole number from 0 to"),
    (["search", "--family", "cpu_gemm", "--db="], "--db: an empty value"),
    (["search", "--family", "cpu_gemm", "--ray-address="], "--ray-address: an empty value"),
    (["search", "--family", "cpu_gemm", "x" * 100_000], "characters, cut"),
])
def test_bad_flags(argv, expected, capsys, tmp_path):
    run_bad(argv, capsys, tmp_path, expected)


@pytest.mark.parametrize("text, expected", [
    ("[search]\nfamily = \"cpu_gemm\"\nbudget = \"forty\"\n", "search.budget has the wrong type"),
    ("[search]\nfamilly = \"cpu_gemm\"\n", "unknown key search.familly"),
    ("[search]\nfamily = \"cpu_gemm\"\ncold_cache = \"yes\"\n", "search.cold_cache has the wrong type"),
    ("[search]\nfamily = \"cpu_gemm\"\ncold_cache = 1\n", "search.cold_cache has the wrong type"),
    ("[serch]\n", "unknown section(s) ['serch']"),
    ("[search\nfamily=1", "is not valid TOML"),
    ("[search]\nfamily = \"cpu_gemm\"\n[strategy]\nelitism = 3\n", "no option 'elitism'"),
    ("[search]\nfamily = \"cpu_gemm\"\ntime_budget = \"-5m\"\n", "time_budget"),
    ("[search]\nfamily = \"cpu_gemm\"\nwatchdog_factor = nan\n", "watchdog_factor must be a positive number"),
    ("[search]\nfamily = \"cpu_gemm\"\nwatchdog_factor = 0\n", "watchdog_factor must be a positive number"),
    ("[search]\nfamily = \"cpu_gemm\"\ncache_dir = \"/proc/evo_cache\"\n", "cache_dir '/proc/evo_cache' cannot be written"),
    ("[search]\nfamily = \"cpu_gemm\"\nbudget = 3000000000\n", "budget must be at most 2147483647"),
    ("[search]\nfamily = \"cpu_gemm\"\n[workload]\nname = \"w\"\n[[workload.shapes]]\nm = true\nn = 8\nk = 8\n",
     "dimension 'm' must be a whole number, got True"),
    ("[search]\nfamily = \"cpu_gemm\"\n[workload]\nname = \"w\"\n" + "[[workload.shapes]]\nn = 8\nk = 8\n" * 1001,
     "1001 shapes; a workload takes at most 1000"),
    ("[search]\nfamily = \"cpu_gemm\"\n[workload]\nname = \"w\"\n[[workload.shapes]]\nm = 1000000\nn = 1000000\n"
     "k = 1000000\n", "the anchor (torch.matmul) could not run m1000000_n1000000_k1000000"),
])
def test_bad_experiment_files(text, expected, capsys, tmp_path):
    experiment = tmp_path / "bad.toml"
    experiment.write_text(text)
    run_bad(["search", "--experiment", str(experiment)], capsys, tmp_path, expected)


def test_missing_experiment_file(capsys, tmp_path):
    run_bad(["search", "--experiment", str(tmp_path / "none.toml")], capsys, tmp_path, "does not exist")


def test_bad_database_urls_never_echo_the_password(capsys, tmp_path):
    for url, expected in [("postgresql://me:hunter2@host:port/db", "malformed"),
                          ("nosuch://me:hunter2@host/db", "unknown backend"),
                          ("postgresql+psycopg://me:hunter2@127.0.0.1:1/evo", "cannot open database"),
                          (str(tmp_path / "missing" / "evo.db"), "does not exist")]:
        assert main(["search", "--family", "cpu_gemm", "--budget", "3", "--db", url]) == 2
        err = capsys.readouterr().err
        assert expected in err and "hunter2" not in err and len(err.strip().splitlines()) == 1


def test_outdated_database_is_refused_with_the_upgrade_hint(capsys, tmp_path):
    from evo.db import Database, resolve_url

    db = tmp_path / "old.db"
    database = Database(resolve_url(str(db))).open()
    with database.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0006'")
    assert main(["runs", "--db", str(db)]) == 2
    assert "evo db upgrade" in capsys.readouterr().err


def test_experiment_file_is_read_and_flags_override_it(tmp_path):
    experiment = tmp_path / "e.toml"
    experiment.write_text('[search]\nfamily = "cpu_gemm"\nbudget = 12\ntime_budget = "2m"\ntarget = "0.5x"\n'
                          'mission = "tall"\ncold_cache = true\n[strategy]\nelite = 3\n')
    settings_, options = load_experiment(experiment)
    assert settings_ == {"family": "cpu_gemm", "budget": 12, "time_budget_s": 120.0, "target": "0.5x",
                         "mission": "tall", "cold_cache": True}
    assert options == {"elite": 3}


def test_mission_retargets_a_copy_of_the_family():
    from evo.search import SearchConfig
    from evo.seeds import get_family

    plain, tall = get_family("cpu_gemm"), get_family(SearchConfig("cpu_gemm", mission="tall").family_reference)
    assert tall is get_family("cpu_gemm@tall") and tall.reference_key == "cpu_gemm@tall"
    assert tall.mission_shape.name == "tall" and [s.name for s in tall.shapes] == [s.name for s in plain.shapes]
    assert plain.mission_shape.name == "mission" and plain.reference_key == "cpu_gemm"  # the family itself unchanged
    assert tall.space is plain.space and tall.name == plain.name
    config = SearchConfig("cpu_gemm", mission="tall", budget=3)
    assert SearchConfig.from_dict(config.to_dict()) == config  # stored with the run, to resume


def test_shipped_experiment_files_are_valid():
    from pathlib import Path

    from evo.search import SearchConfig

    files = sorted(Path(__file__).resolve().parents[1].joinpath("experiments").glob("*.toml"))
    assert files
    for path in files:
        settings_, options = load_experiment(path)
        SearchConfig(**settings_, strategy_options=options)


def test_targets_and_durations():
    assert Target.parse("40us").seconds == pytest.approx(40e-6)
    assert Target.parse("2ms").seconds == pytest.approx(2e-3)
    assert Target.parse("0.5x").anchor_ratio == 0.5 and Target.parse("0.5x").resolve(1e-3) == pytest.approx(5e-4)
    assert Target.parse("0.5x").resolve(None) is None
    assert parse_duration("10m", "t") == 600 and parse_duration("1h", "t") == 3600 and parse_duration(90, "t") == 90


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_target_parser_only_raises_value_error(text):
    try:
        target = Target.parse(text)
    except ValueError:
        return
    assert (target.seconds or target.anchor_ratio) > 0


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=10), st.integers(), st.floats(), st.booleans()))
def test_duration_parser_only_raises_value_error(value):
    try:
        assert parse_duration(value, "x") > 0
    except ValueError:
        pass


toml_values = st.one_of(st.integers(-5, 10**6), st.text(max_size=6), st.booleans(), st.floats(allow_nan=False),
                        st.lists(st.integers(), max_size=2))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["family", "budget", "target", "population", "seed", "trials", "time_budget",
                                        "strategy", "bogus", "eval_timeout", "watchdog_factor"]), toml_values,
                          max_size=5))
def test_malformed_experiments_only_raise_value_error(tmp_path_factory, search):
    import json

    from evo.search import SearchConfig

    lines = ["[search]"] + [f"{k} = {json.dumps(v)}" for k, v in search.items()]
    path = tmp_path_factory.mktemp("exp") / "x.toml"
    path.write_text("\n".join(lines) + "\n")
    try:
        settings_, options = load_experiment(path)
        SearchConfig(**{"family": "cpu_gemm", **settings_}, strategy_options=options)
    except ValueError:
        pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without a GPU gets")
def test_the_default_family_needs_a_gpu_and_says_so(capsys, tmp_path):
    db = tmp_path / "evo.db"
    assert main(["search", "--target", "40us", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "family flashcore runs on a CUDA GPU" in err and len(err.strip().splitlines()) == 1
    assert not db.exists()


def test_lineage_of_a_missing_run_or_into_a_directory_is_refused(capsys, tmp_path):
    from evo.db import Database, Store, resolve_url

    db = tmp_path / "evo.db"
    Store(Database(resolve_url(str(db))).open()).create_run(family="cpu_gemm", strategy="evolution", target=None,
                                                           seed=0, config={})
    assert main(["lineage", "7", "--db", str(db), "--out", str(tmp_path / "r.html")]) == 2
    assert "run 7 does not exist" in capsys.readouterr().err
    assert main(["lineage", "1", "--db", str(db), "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_a_file_that_is_not_a_family_a_long_or_reserved_name_a_corrupt_replay_file(capsys, tmp_path, monkeypatch):
    import gzip

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    run_bad(["search", "--family", "./notes.txt", "--budget", "2"], capsys, tmp_path, "notes.txt is not a family")
    run_bad(["new-family", "a" * 300], capsys, tmp_path, "is 300 characters long: at most 64")
    run_bad(["new-family", "int"], capsys, tmp_path, "is a C, C++, CUDA or Python keyword")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"tune_params_keys": ["a"]')[:20])
    run_bad(["replay", "cut.json.gz"], capsys, tmp_path, "not a Kernel Tuner cache file (EOFError")
    (tmp_path / "odd.json.gz").write_bytes(gzip.compress(b'{"tune_params_keys": ["a"], "tune_params": {"a": [1]}, '
                                                         b'"cache": {"1": {"time": 1}}}'))
    run_bad(["replay", "odd.json.gz"], capsys, tmp_path, "not a Kernel Tuner cache file (KeyError")


def test_a_ray_address_where_another_service_answers_is_refused_at_once(capsys, tmp_path):
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the server's own log would be on this process's stderr
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_bad(["search", "--family", "cpu_gemm", "--budget", "2", "--ray-address",
                 f"127.0.0.1:{server.server_address[1]}"], capsys, tmp_path, "but not as a Ray cluster's head does")
    finally:
        server.shutdown()


def test_a_database_from_a_newer_evo_and_a_malformed_one_are_refused_untouched(capsys, tmp_path):
    import sqlite3

    from evo.db import Database, resolve_url

    from evo.db import Store

    newer = tmp_path / "newer.db"
    database = Database(resolve_url(str(newer))).open()
    for _ in range(20):
        Store(database).create_run(family="cpu_gemm", strategy="random", target=None, seed=0, config={"x": "y" * 500})
    database.engine.dispose()
    connection = sqlite3.connect(newer)
    connection.execute("UPDATE alembic_version SET version_num = '0999'")
    connection.commit()
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the file itself
    connection.close()
    for argv in (["db", "upgrade", "--db", str(newer)], ["runs", "--db", str(newer)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "written by a newer evo (schema revision 0999" in err[0], err
    malformed = tmp_path / "malformed.db"
    data = bytearray(newer.read_bytes())
    for index in range(4096, len(data), 7):  # every page after the first garbled
        data[index] = 0x5A
    malformed.write_bytes(bytes(data))
    for argv in (["runs"], ["show", "1"], ["search", "--family", "cpu_gemm", "--budget", "2"]):
        assert main([*argv, "--db", str(malformed)]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert sorted(p.name for p in tmp_path.glob("malformed*")) == ["malformed.db"]


def test_output_that_cannot_be_written_is_one_line_and_a_reader_that_leaves_is_quiet(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "evo.db"
    from evo.db import Database, Store, resolve_url

    store = Store(Database(resolve_url(str(db))).open())
    store.create_run(family="cpu_gemm", strategy="random", target=None, seed=0, config={})
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "evo", "runs", "--db", str(db)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == "error: cannot write evo's output: No space left on device"
    shell = subprocess.run(f"{sys.executable} -m evo runs --db {db} | head -c 10; exit ${{PIPESTATUS[0]}}",
                           shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert shell.returncode in (0, 141) and shell.stderr == "", shell.stderr


def test_evo_runs_from_a_directory_holding_folders_named_as_its_parts(tmp_path):
    """`evo` is the one top-level import name: a user's own db/, seeds/, fitness/ and kernel_genome/ folders in
    the working directory (first on sys.path) shadow nothing of evo's."""
    import subprocess
    import sys

    for name in ("db", "seeds", "fitness", "kernel_genome"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the user\\'s own folder, not evo\\'s')\n")
    script = ("import evo, evo.api; from evo.db import Database; from evo.seeds import get_family\n"
              "from evo.fitness import Status; from evo.kernel_genome import Space\n"
              "assert get_family('cpu_gemm').name == 'cpu_gemm'; print('imports ok')")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "imports ok" in done.stdout, done.stderr[-2000:]
    runs = subprocess.run([sys.executable, "-m", "evo", "runs", "--db", str(tmp_path / "none.db")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert runs.returncode == 0 and "no runs yet" in runs.stdout, runs.stderr[-2000:]


def test_every_search_flag_is_documented_once():
    """docs/USING.md's flag reference holds each `evo search` flag exactly once, and no flag the parser lacks."""
    import argparse
    import re
    from pathlib import Path

    from evo.cli import build_parser

    search = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["search"]
    flags = {o for a in search._actions for o in a.option_strings if o.startswith("--") and o != "--help"
             and not o.startswith("--no-")}
    text = (Path(__file__).resolve().parents[1] / "docs" / "USING.md").read_text()
    section = text.split("## `evo search` flags", 1)[1]
    documented = [flag for line in section.splitlines() if line.startswith("- `--")
                  for flag in re.findall(r"`(--[a-z-]+)", line.split(":", 1)[0]) if not flag.startswith("--no-")]
    assert sorted(documented) == sorted(flags)


def test_each_search_setting_is_declared_once_and_reaches_the_file_and_the_flags(tmp_path):
    """evo/_config.py declares each setting (its experiment key, its flag, its help); the [search] keys and the
    `evo search` flags are made from those declarations, and a file using every key loads."""
    from evo._config import SETTINGS, SearchConfig
    from evo.experiment import SEARCH_KEYS

    assert set(SEARCH_KEYS) == {s.key for s in SETTINGS if s.key}
    values = {"family": '"cpu_gemm"', "mission": '"tall"', "strategy": '"random"', "target": '"1ms"', "budget": "9",
              "time_budget": '"2m"', "population": "4", "seed": "3", "trials": "2", "cold_cache": "true",
              "build_timeout": '"60s"', "eval_timeout": "100", "watchdog_factor": "5", "cache_dir": f'"{tmp_path}"',
              "gate_rounds": "2", "reuse": "false", "warm_start": "true"}
    assert set(values) == set(SEARCH_KEYS)
    experiment = tmp_path / "all.toml"
    experiment.write_text("[search]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    settings, _ = load_experiment(experiment)
    config = SearchConfig(**settings)
    assert (config.time_budget_s, config.eval_timeout_s, config.reuse, config.warm_start) == (120.0, 100.0, False, True)
