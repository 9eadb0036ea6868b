import multiprocessing
import sqlite3

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from evo.db import Database, NewIndividual, ParentLink, SchemaError, Store, resolve_url, safe_url
from evo.db.models import Base
from evo.fitness import EvalResult, ShapeTiming, Status


def make_db(tmp_path, name="evo.db"):
    return Database(resolve_url(str(tmp_path / name)))


def test_new_database_is_created_at_the_newest_schema_in_wal_mode(tmp_path):
    database = make_db(tmp_path).open()
    assert database.current_revision() == database.head_revision()
    tables = set(inspect(database.engine).get_table_names())
    assert {"runs", "individuals", "lineage_edges", "evaluations", "alembic_version"} <= tables
    with sqlite3.connect(tmp_path / "evo.db") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrations_match_the_models(database_url):
    database = Database(resolve_url(database_url)).open()
    with database.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


def test_downgrade_and_upgrade_round_trip(database_url):
    from alembic import command

    database = Database(resolve_url(database_url)).open()
    with database.engine.begin() as connection:
        command.downgrade(database._alembic(connection), "base")
    assert database.current_revision() is None
    assert database.upgrade() == (None, database.head_revision())


def test_outdated_schema_is_refused_with_the_upgrade_command(database_url):
    database = Database(resolve_url(database_url)).open()
    with database.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0006'")
    database.dispose()
    with pytest.raises(SchemaError, match="evo db upgrade"):
        Database(resolve_url(database_url)).open()


def _open_after(barrier, url, outcomes):
    barrier.wait()
    try:
        Database(resolve_url(url)).open()
        outcomes.put("ok")
    except Exception as exc:  # reported to the test, which shows it
        outcomes.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_one_new_database_at_once_create_the_schema_once(database_url):
    """Two searches started together on a new database (CI caught `table ... already exists`)."""
    context = multiprocessing.get_context("spawn")
    barrier, outcomes = context.Barrier(6), context.Queue()
    processes = [context.Process(target=_open_after, args=(barrier, database_url, outcomes)) for _ in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert sorted(outcomes.get(timeout=5) for _ in processes) == ["ok"] * 6
    database = Database(resolve_url(database_url)).open(create=False)
    assert database.current_revision() == database.head_revision()


def test_foreign_tables_without_a_version_are_refused(tmp_path):
    with sqlite3.connect(tmp_path / "other.db") as raw:
        raw.execute("CREATE TABLE something (x INTEGER)")
    with pytest.raises(SchemaError, match=r"is not evo.s: it holds other tables \(something\)"):
        make_db(tmp_path, "other.db").open()


def test_urls_are_validated_and_passwords_never_shown(tmp_path):
    with pytest.raises(ValueError, match="malformed"):
        resolve_url("postgresql://user:pw@host:notaport/db")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_url("nosuchdb://host/db")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_url(str(tmp_path / "missing" / "evo.db"))
    url = resolve_url("sqlite:///" + str(tmp_path / "x.db"))
    assert url.get_backend_name() == "sqlite"
    assert "s3cret" not in safe_url(url.set(password="s3cret"))
    if _has("psycopg"):  # the PostgreSQL driver of the test extra
        assert "s3cret" not in safe_url(resolve_url("postgresql+psycopg://me:s3cret@localhost/evo"))


def _has(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def test_store_round_trip_with_lineage_and_evaluations(database_url):
    store = Store(Database(resolve_url(database_url)).open())
    run = store.create_run(family="f", strategy="evolution", target="1ms", seed=3, config={"budget": 4})
    ids = store.add_individuals(run, [
        NewIndividual("aaaa", {"x": 1}, 0, "seed"),
        NewIndividual("bbbb", {"x": 2}, 1, "mutation", (ParentLink("aaaa", "mutation", ("x",)),)),
    ])
    with pytest.raises(ValueError, match="already an individual"):
        store.add_individuals(run, [NewIndividual("aaaa", {"x": 1}, 2, "random")])
    timing = ShapeTiming("mission", 1e-3, 1.2e-3, 1e-4, 10)
    store.record_evaluation(ids["aaaa"], EvalResult("aaaa", Status.OK, "", 1e-3, timings=(timing,), anchor=(timing,)))
    store.record_evaluation(ids["bbbb"], EvalResult("bbbb", Status.INCORRECT, "wrong", None))
    history = store.history(run)
    assert [(h.genome_id, h.status, h.fitness_s) for h in history] == [("aaaa", "ok", 1e-3), ("bbbb", "incorrect", None)]
    assert store.lineage(run) == [(ids["aaaa"], ids["bbbb"], "mutation", ["x"])]
    assert store.failure_counts(run) == {"ok": 1, "incorrect": 1}
    individual, evaluation = store.best(run)[0]
    assert individual.genome_id == "aaaa" and evaluation.timings[0]["median_s"] == 1e-3
    info = store.get_run(run)
    assert info.evaluations == 2 and info.best_fitness_s == 1e-3
    store.update_run(run, status="budget_exhausted")
    assert store.get_run(run).finished_at is not None
    with pytest.raises(ValueError, match="unknown run status"):
        store.update_run(run, status="bogus")


def test_a_driver_whose_run_was_taken_over_stops_at_its_next_write_and_writes_nothing(tmp_path):
    """Two drivers of one run (the first was stopped, `--resume` took the run over): the first one's writes are
    refused, in the transaction that would write them, and nothing of it lands."""
    from evo.db import RunLost

    first, second = Store(make_db(tmp_path).open()), Store(make_db(tmp_path).open())
    run = first.create_run(family="cpu_gemm", strategy="random", target=None, seed=0, config={})
    first.claim(run)
    first.add_individuals(run, [NewIndividual("a", {"x": 1}, 0, "seed")])
    second.claim(run)  # the takeover
    for write in (lambda: first.add_individuals(run, [NewIndividual("b", {"x": 2}, 0, "seed")]),
                  lambda: first.update_run(run, status="failed"), lambda: first.beat(run, "h", 1)):
        with pytest.raises(RunLost, match="taken over by another driver"):
            write()
    assert [h.genome_id for h in second.history(run)] == ["a"] and second.get_run(run).status == "running"
    second.add_individuals(run, [NewIndividual("b", {"x": 2}, 0, "seed")])
    second.update_run(run, status="budget_exhausted")
    assert first.get_run(run).status == "budget_exhausted"  # reading is anyone's
