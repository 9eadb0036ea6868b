"""Operations a careful user expects (issue 34): values that start with a dash, databases that are not
evo's or lack their driver, files that cannot be written, Ray addresses that cannot be joined, SIGTERM,
and the exported package's README. Each refusal is one line, exit 2, and writes nothing."""

import errno
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from evo.cli import main
from tests.test_fuzz_input import _listing
from tests.test_search import _reap, _spawn, _wait_for_evaluations, rows


def refused(capsys, args, message, directory):
    """``args`` exit 2 with one line holding ``message`` (or each of a tuple of them), and ``directory`` is as it was (but for the
    content-addressed build cache, which an export fills before it writes)."""
    def listing():
        return {name: data for name, data in _listing(directory).items() if not name.startswith("evo-cache/")}

    before = listing()
    assert main(args) == 2, args
    err = capsys.readouterr().err.strip()
    messages = message if isinstance(message, tuple) else (message,)
    assert all(m in err for m in messages) and len(err.splitlines()) == 1, err
    assert listing() == before, f"{args} wrote something"


def test_option_values_that_start_with_a_dash_reach_their_own_check(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "evo.db")
    refused(capsys, ["search", "--family", "cpu_gemm", "--time-budget", "-1m", "--db", db],
            "--time-budget '-1m' is not a duration", tmp_path)
    refused(capsys, ["search", "--family", "cpu_gemm", "--target", "-1x", "--db", db], "target '-1x'", tmp_path)
    refused(capsys, ["search", "--family", "cpu_gemm", "--budget", "-3", "--db", db], "'-3' must be positive", tmp_path)


@pytest.mark.parametrize("url, message", [
    ("mysql://u@localhost/db", "needs its driver, which is not installed (MySQLdb)"),
    ("postgresql+pg8000://u@localhost/db", "needs its driver, which is not installed (pg8000)"),
    ("postgresql+asyncpg://u@localhost/db", "asynchronous driver"),
])
def test_a_database_url_without_its_driver_is_one_line(url, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command in (["runs"], ["db", "current"], ["search", "--family", "cpu_gemm", "--budget", "2"]):
        refused(capsys, [*command, "--db", url], message, tmp_path)


def _server_url(**parts) -> str:
    """EVO_TEST_POSTGRES_URL with some of its parts replaced (skips where there is no server)."""
    import os

    from sqlalchemy.engine import make_url

    server = os.environ.get("EVO_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("no PostgreSQL server: set EVO_TEST_POSTGRES_URL (.ci/start-postgres starts one)")
    return make_url(server).set(**parts).render_as_string(hide_password=False)


@pytest.mark.parametrize("parts, cause, fix", [
    ({"database": "no_such_db"}, 'database "no_such_db" does not exist', "create it first"),
    ({"username": "no_such_role"}, 'role "no_such_role" does not exist', "check the user name in the URL"),
    ({"host": "127.0.0.1", "port": 1}, "Connection refused", "start the server, or correct the host and port"),
])
def test_a_database_server_error_names_its_cause_and_its_fix(parts, cause, fix, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = _server_url(**parts)
    for command in (["runs"], ["db", "upgrade"], ["search", "--family", "cpu_gemm", "--budget", "2"]):
        refused(capsys, [*command, "--db", url], (cause, fix), tmp_path)


@pytest.mark.parametrize("message, fix", [
    ('connection failed: FATAL:  password authentication failed for user "evo"', "check the user name and password"),
    ("connection failed: fe_sendauth: no password supplied", "check the user name and password"),
    ("failed to resolve host 'db.example': [Errno -2] Name or service not known", "correct the host name"),
    ("connection failed: timeout expired", "the server did not answer"),
    ("something else entirely", ""),
])
def test_the_fix_named_for_each_database_error_a_user_can_fix(message, fix):
    from evo.db.session import fix_for

    assert fix in fix_for(message) and (fix_for(message) == "") == (fix == "")


def test_a_database_of_another_application_is_never_touched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE customers (name TEXT)")
    for command in (["runs"], ["db", "current"], ["db", "upgrade"], ["show", "1"], ["lineage", "1"],
                    ["export", "1", "--out", str(tmp_path / "out")], ["search", "--family", "cpu_gemm", "--budget", "2"]):
        refused(capsys, [*command, "--db", str(foreign)], "is not evo's: it holds other tables (customers)", tmp_path)
    with sqlite3.connect(foreign) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # never switched to WAL
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == [("customers",)]
    (tmp_path / "junk.db").write_text("not a database")
    refused(capsys, ["runs", "--db", str(tmp_path / "junk.db")], "file is not a database", tmp_path)


@pytest.fixture
def stored(tmp_path):
    """A database with one run of one evaluated cpu_gemm genome (recorded by hand)."""
    from tests.exporting import recorded_pass, store_evaluation
    from evo.seeds import get_family

    family = get_family("cpu_gemm")
    genome = family.seed_genomes[0]
    store_evaluation(tmp_path / "evo.db", "cpu_gemm", genome, recorded_pass(genome, family.shapes))
    return tmp_path / "evo.db"


def test_lineage_and_export_refuse_a_directory_that_does_not_exist(stored, tmp_path, capsys):
    refused(capsys, ["lineage", "1", "--db", str(stored), "--out", str(tmp_path / "no" / "dir" / "x.html")],
            "does not exist", tmp_path)
    refused(capsys, ["export", "1", "--db", str(stored), "--out", str(tmp_path / "no" / "dir" / "pkg")],
            "does not exist", tmp_path)


def test_a_file_system_that_refuses_writes_is_one_line_and_leaves_nothing(stored, tmp_path, monkeypatch, capsys):
    real = Path.write_text

    def read_only(self, *args, **kwargs):
        if self.name == "metadata.json" or self.suffix == ".html":
            raise OSError(errno.EROFS, "Read-only file system")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", read_only)
    refused(capsys, ["export", "1", "--db", str(stored), "--out", str(tmp_path / "pkg")],
            "cannot write the package to", tmp_path)
    assert not (tmp_path / "pkg").exists()
    refused(capsys, ["lineage", "1", "--db", str(stored), "--out", str(tmp_path / "r.html")],
            "cannot write the report", tmp_path)


def test_the_exported_package_has_a_readme(stored, tmp_path):
    assert main(["export", "1", "--db", str(stored), "--out", str(tmp_path / "pkg")]) == 0
    readme = (tmp_path / "pkg" / "README.md").read_text()
    assert "## Calling it" in readme and "k.gemm(a, b)" in readme and "## How it was measured" in readme
    assert "-march=native" in readme and "sh build.sh" in readme


@pytest.mark.parametrize("address, message", [
    ("garbage", "is malformed"), ("127.0.0.1:99999", "is malformed"), ("127.0.0.1:1", "nothing answers"),
])
def test_a_ray_address_that_cannot_be_joined_is_one_line_and_writes_no_run(address, message, tmp_path, monkeypatch,
                                                                             capsys):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "evo.db"
    started = time.monotonic()
    assert main(["search", "--family", "cpu_gemm", "--budget", "2", "--db", str(db), "--ray-address", address]) == 2
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not db.exists() or rows(db, "SELECT COUNT(*) FROM runs") == [(0,)]


@pytest.mark.slow
def test_sigterm_stops_a_search_cleanly_and_it_resumes(ray_session, tmp_path):
    db = tmp_path / "evo.db"
    with open(tmp_path / "search.log", "w") as log:
        process = _spawn(["search", "--family", "cpu_gemm", "--budget", "40", "--population", "4", "--db", str(db),
                          "--trials", "1"], log)
        try:
            _wait_for_evaluations(db, 3, process)
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(60) == 130
        finally:
            _reap(process)
    text = (tmp_path / "search.log").read_text()
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]
    (host, pid, heartbeat), = rows(db, "SELECT host, pid, heartbeat_at FROM runs")  # the driver said where it ran
    assert host == __import__("socket").gethostname() and pid == process.pid and heartbeat is not None
    assert "run 1 is marked interrupted; continue it with `evo search --resume 1`" in text
    assert "Traceback" not in text and "\x1b" not in text.split("interrupted: ")[-1]
    generations = dict(rows(db, "SELECT genome_id, generation FROM individuals"))
    for line in text.splitlines():  # each line's generation is the genome's own, as stored
        if line.startswith("[") and " gen " in line:
            gen, genome = line.split(" gen ")[1].split()[:2]
            assert generations[genome] == int(gen), line
    assert main(["search", "--resume", "1", "--budget", "6", "--db", str(db)]) == 0
    assert rows(db, "SELECT status FROM runs") == [("budget_exhausted",)]


@pytest.mark.slow
def test_sigterm_while_ray_starts_leaves_no_run_behind(tmp_path):
    db = tmp_path / "evo.db"
    with open(tmp_path / "search.log", "w") as log:
        process = _spawn(["search", "--family", "cpu_gemm", "--budget", "40", "--db", str(db), "--trials", "1"], log)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the database's schema is made before Ray starts
                try:
                    rows(db, "SELECT COUNT(*) FROM runs")
                    break
                except sqlite3.OperationalError:
                    time.sleep(0.05)
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(60) == 130
        finally:
            _reap(process)
    statuses = [s for s, in rows(db, "SELECT status FROM runs")]
    assert statuses in ([], ["interrupted"]), statuses  # never left "running"
    assert "Traceback" not in (tmp_path / "search.log").read_text()



INTERRUPTED_MID_COMMIT = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.orm import Session
from evo.api import database_at, open_store

store = open_store(database_at(sys.argv[1], must_exist=False))
run = store.create_run(family="cpu_gemm", strategy="evolution", target=None, seed=0, config={})

def interrupt(signum, frame):  # what evo's SIGTERM handler does
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, interrupt)
commits = []

@event.listens_for(Session, "after_commit")
def terminated_inside_the_commit(session):  # the handler runs at the next bytecode: inside SQLAlchemy
    commits.append(1)
    if len(commits) == 3:
        os.kill(os.getpid(), signal.SIGTERM)

try:
    for i in range(10):
        store.update_run(run, message=f"record {i}")
except KeyboardInterrupt:
    store.update_run(run, status="interrupted", message="stopped by the user")
    print("marked interrupted")
"""


def test_an_interrupt_inside_a_commit_still_marks_the_run_interrupted(tmp_path):
    """SIGTERM handled inside SQLAlchemy's commit left the session unusable: the interrupt came out as
    InvalidRequestError and the row stayed 'running' (seen on the GPU after `timeout` stopped a search)."""
    import subprocess
    import sys

    db = tmp_path / "evo.db"
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_MID_COMMIT, str(db)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert "marked interrupted" in done.stdout, done.stderr[-2000:]
    assert rows(db, "SELECT status, message FROM runs") == [("interrupted", "stopped by the user")]

def test_metadata_is_plain_json(stored, tmp_path):
    assert main(["export", "1", "--db", str(stored), "--out", str(tmp_path / "pkg")]) == 0
    assert json.loads((tmp_path / "pkg" / "metadata.json").read_text())["module"].startswith("cpu_gemm_")


def _run_with(db, status, *, evaluations=0, heard_s_ago=None, host="elsewhere", pid=4242):
    """A run stored by hand with ``status``, ``evaluations`` evaluated seeds' worth of rows, and a heartbeat."""
    from datetime import datetime, timedelta, timezone

    from evo.db import Database, NewIndividual, Store, resolve_url
    from evo.db.models import Run
    from evo.fitness import EvalResult, Status
    from evo.seeds import get_family

    store = Store(Database(resolve_url(str(db))).open())
    run = store.create_run(family="cpu_gemm", strategy="evolution", target=None, seed=0,
                           config={"family": "cpu_gemm", "budget": max(1, evaluations)})
    space = get_family("cpu_gemm").space
    genomes = [space.genome(dict(get_family("cpu_gemm").seed_genomes[0].as_dict(), block_m=8 << i))
               for i in range(evaluations)]
    ids = store.add_individuals(run, [NewIndividual(g.id, g.as_dict(), 0, "seed") for g in genomes])
    for g in genomes:
        store.record_evaluation(ids[g.id], EvalResult(g.id, Status.SCREENED_OUT, "spills", None))
    store.update_run(run, status=status)
    if heard_s_ago is not None:
        with store.database.session() as s:
            row = s.get(Run, run)
            row.host, row.pid = host, pid
            row.heartbeat_at = datetime.now(timezone.utc) - timedelta(seconds=heard_s_ago)
    return run


@pytest.mark.parametrize("status, extra, message", [
    ("running", [], "is running in process 4242 on elsewhere"),
    ("target_reached", ["--budget", "9"], "ended with target reached: there is nothing left to resume"),
    ("space_exhausted", [], "ended with space exhausted"),
    ("budget_exhausted", [], "spent its budget (2 evaluations): give a larger --budget"),
    ("budget_exhausted", ["--budget", "2"], "already has 2 evaluations: --budget 2 leaves it none"),
    ("time_exhausted", [], "ran out of time after 2 evaluations: give a --time-budget"),
    ("interrupted", ["--budget", "1"], "already has 2 evaluations"),
])
def test_resume_refuses_a_run_that_cannot_go_on(status, extra, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "evo.db"
    _run_with(db, status, evaluations=2, heard_s_ago=5 if status == "running" else None)
    before = rows(db, "SELECT status, heartbeat_at FROM runs")
    refused(capsys, ["search", "--resume", "1", "--db", str(db), *extra], message, tmp_path)
    assert rows(db, "SELECT status, heartbeat_at FROM runs") == before


def test_a_run_whose_driver_died_is_shown_as_such(tmp_path, capsys):
    db = tmp_path / "evo.db"
    _run_with(db, "running", heard_s_ago=3600)  # silent for an hour
    _run_with(db, "running", heard_s_ago=1)  # alive, elsewhere
    _run_with(db, "running", heard_s_ago=1, host=__import__("socket").gethostname(), pid=2 ** 22 + 7)  # gone here
    assert main(["runs", "--db", str(db)]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "cpu_gemm" in line]
    assert ["driver died" in line for line in shown] == [True, False, True]
    assert main(["show", "1", "--db", str(db)]) == 0
    assert "its driver, process 4242 on elsewhere, died: `evo search --resume 1` takes it over" in capsys.readouterr().out


def test_a_database_evo_cannot_write_is_read_as_it_is(stored, tmp_path, monkeypatch, capsys):
    """On a read-only mount (here: os.access says no) runs, show, lineage, export and db current read the
    file without writing it, not even WAL's files; search, resume and db upgrade are refused in one line."""
    import hashlib

    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if mode == os.W_OK and str(path).startswith(
        str(tmp_path)) and "out" not in str(path) else real(path, mode, **kw))
    with sqlite3.connect(stored) as connection:  # as a finished search leaves it: its WAL checkpointed
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for leftover in (stored.with_name("evo.db-wal"), stored.with_name("evo.db-shm")):
        leftover.unlink(missing_ok=True)
    digest = hashlib.sha256(stored.read_bytes()).hexdigest()
    for command in (["runs"], ["show", "1"], ["db", "current"], ["lineage", "1", "--out", str(tmp_path / "out.html")],
                    ["export", "1", "--out", str(tmp_path / "out")]):
        assert main([*command, "--db", str(stored)]) == 0, command
    capsys.readouterr()
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == digest
    assert not stored.with_name("evo.db-wal").exists() and not stored.with_name("evo.db-shm").exists()
    for command in (["search", "--family", "cpu_gemm", "--budget", "2"], ["search", "--resume", "1", "--budget", "9"],
                    ["db", "upgrade"]):
        assert main([*command, "--db", str(stored)]) == 2, command
        assert "cannot be written here" in capsys.readouterr().err


def test_an_unsteady_timing_is_taken_again_then_flagged(monkeypatch):
    from evo.fitness import benchmark
    from evo.fitness.benchmark import UNSTABLE_SPREAD, time_runs
    from evo.seeds import TimingPlan

    now = [0.0]  # a clock the runs advance: a shared CI machine's scheduler cannot make a steady run unsteady
    monkeypatch.setattr(benchmark.time, "perf_counter", lambda: now[0])

    def takes(seconds: float) -> None:
        now[0] += seconds

    plan = TimingPlan(warmup=0, min_runs=10, max_runs=10, min_seconds=0.0)
    steady = time_runs(lambda: takes(0.002), "cpu", plan, "s")
    assert not steady.unstable and steady.spread < UNSTABLE_SPREAD and steady.median_s == 0.002
    calls = []

    def bimodal():  # one call in three ten times slower, as on a machine another job shares
        calls.append(1)
        takes(0.02 if len(calls) % 3 == 0 else 0.002)

    flagged = time_runs(bimodal, "cpu", plan, "s")
    assert flagged.unstable and flagged.spread > UNSTABLE_SPREAD and len(calls) == 20  # measured twice


def test_the_hard_gate_fails_rounds_that_disagree(tmp_path, monkeypatch):
    from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, ShapeTiming
    from evo.fitness._gate import GATE_AGREEMENT
    from evo.seeds import get_family

    family = get_family("cpu_gemm")
    genome = family.seed_genomes[0].replace(loop_order="register", rows_per_step=4, vec_width=8, block_k=64)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, family.build_recipe(genome))
    evaluator = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded")
    # all within a 10 ms target, but 1.9..8.9 ms apart; the farthest round, timed again, still far off
    times = iter([1.9e-3, 8.9e-3, 2.0e-3, 6.0e-3])
    monkeypatch.setattr(evaluator, "time_shape", lambda kernel, shape, cutoff_s=None: ShapeTiming(
        shape.name, next(times), 0.0, 0.0, 10))
    result = evaluator.gate(genome, build, [("mission", 10e-3)], rounds=3)
    assert not result.passed and "the rounds disagree at mission: 1900.00..6000.00 us" in result.message
    assert result.message.endswith("1 round(s) timed again") and len(result.rounds) == 3
    assert GATE_AGREEMENT == 0.15
    times = iter([1.9e-3, 8.9e-3, 2.0e-3, 2.1e-3])  # a busy moment: the round taken again agrees
    result = evaluator.gate(genome, build, [("mission", 10e-3)], rounds=3)
    assert result.passed and [r.mission_s for r in result.rounds] == [1.9e-3, 2.1e-3, 2.0e-3]
    times = iter([2.0e-3, 2.0e-3, 9.0e-3, 20e-3])  # timed again over the target: a miss, named by its round
    result = evaluator.gate(genome, build, [("mission", 10e-3)], rounds=3)
    assert not result.passed and result.message.startswith("round 3: 20000.00 us is over the target")


def test_the_self_check_says_where_its_times_differ_from_the_exports(tmp_path):
    """selfcheck.py as a package ships it: beside evo_runtime/ (a copy of evo.runtime)."""
    import importlib.util
    import shutil

    from evo import runtime
    from evo.export import RUNTIME_NAME, SELFCHECK

    shutil.copytree(Path(runtime.__file__).parent, tmp_path / RUNTIME_NAME, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(SELFCHECK, tmp_path / "selfcheck.py")
    spec = importlib.util.spec_from_file_location("selfcheck", tmp_path / "selfcheck.py")
    selfcheck = sys.modules["selfcheck"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
    try:
        spec.loader.exec_module(selfcheck)
    finally:
        sys.path.remove(str(tmp_path))
        del sys.modules["selfcheck"]
        for name in [m for m in sys.modules if m.partition(".")[0] == RUNTIME_NAME]:
            del sys.modules[name]
    assert selfcheck._differs("the kernel", 105e-6, 100e-6, 0.02) == ""  # within the spread
    note = selfcheck._differs("the kernel", 12e-3, 114e-6, 0.02)
    assert "12000.00 us here against 114.00 us at export (105.26x" in note
    assert selfcheck._recorded([{"shape": "a", "median_s": 1e-3, "p90_s": 1.2e-3}], "a") == (1e-3, pytest.approx(0.2))


def test_the_loop_asks_early_enough_to_keep_every_evaluator_busy():
    from evo.fitness._pacing import Pacing

    pacing = Pacing()
    ask = dict(population=8, isolated=False)
    # nothing timed yet: the first rule, a batch once the last is built and at most a population is on its way
    assert pacing.wants_batch(building=0, queued=5, in_flight=8, evaluators=2, **ask)
    assert not pacing.wants_batch(building=3, queued=0, in_flight=8, evaluators=2, **ask)
    for _ in range(20):  # a compile takes 2.5 s, an evaluation 0.4 s
        pacing.built(2.5)
        pacing.evaluated(0.4)
    assert pacing.needed(1) == pytest.approx(7.25) and pacing.needed(2) == pytest.approx(14.5)
    # one GPU gets through 7.25 genomes while a batch compiles: 8 compiling are enough
    assert not pacing.wants_batch(building=8, queued=0, in_flight=9, evaluators=1, **ask)
    # two GPUs would run dry: the next batch is asked before this one is built...
    assert pacing.wants_batch(building=8, queued=2, in_flight=12, evaluators=2, **ask)
    # ...but never with more than two populations per evaluator on their way
    assert pacing.wants_batch(building=8, queued=2, in_flight=17, evaluators=2, **ask)
    assert not pacing.wants_batch(building=8, queued=2, in_flight=33, evaluators=2, **ask)
    # a CPU family never compiles beside a timing: the first rule
    assert not pacing.wants_batch(building=8, queued=2, in_flight=12, evaluators=2, population=8, isolated=True)


def test_a_confirmation_beside_the_anchor_asks_its_ratios_to_agree():
    from evo.fitness import GateRound
    from evo.fitness._gate import disagreement

    targets = (("a", None),)
    slowed = [GateRound(True, t, "", (("a", t),), (("a", 2 * t),)) for t in (1e-3, 1.4e-3, 1.1e-3)]
    assert disagreement(slowed, targets) == ""  # the machine slowed both: the ratio held at 0.5
    drifting = [GateRound(True, 1e-3, "", (("a", 1e-3),), (("a", a),)) for a in (2e-3, 1.5e-3)]
    assert "kernel/anchor 0.500..0.667" in disagreement(drifting, targets)
