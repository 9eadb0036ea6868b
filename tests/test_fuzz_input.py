"""Malformed input thrown at the parsers (hypothesis): database URLs, genome JSON, and whole
command lines of the commands that read the store. Each either works or is refused with one
line and exit code 2 (``ValueError`` below the CLI); nothing crashes, nothing is written."""

import contextlib
import io
import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evo.db import Database, Store, resolve_url
from evo.cli import main
from evo.seeds import get_family
from tests.conftest import FAULTY

SCHEMES = ["sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg", "mysql", "bogus", "", "sqlite:"]
url_texts = st.one_of(
    st.text(max_size=24),
    st.builds(lambda scheme, rest: f"{scheme}://{rest}", st.sampled_from(SCHEMES),
              st.text(st.characters(codec="ascii"), max_size=24)),
    st.builds(lambda rest, query: f"sqlite:///{rest}?{query}", st.text(max_size=8),
              st.sampled_from(["mode=memory", "mode=ro", "uri=true", "x", "=&="])),
)


@contextlib.contextmanager
def _inside(directory: Path):
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def _listing(directory: Path) -> dict[str, object]:
    """Each file's bytes; an SQLite database's rows instead (WAL checkpoints rewrite its pages)."""
    listing = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or path.name.endswith(("-wal", "-shm")):
            continue
        data = path.read_bytes()
        if data.startswith(b"SQLite format 3\0"):
            with contextlib.closing(sqlite3.connect(path)) as connection:
                data = list(connection.iterdump())
        listing[str(path.relative_to(directory))] = data
    return listing


@settings(max_examples=300, deadline=None)
@given(url_texts)
def test_database_urls_only_raise_value_error(tmp_path_factory, text):
    directory = tmp_path_factory.mktemp("urls")
    with _inside(directory):
        try:
            url = resolve_url(text)
        except ValueError as exc:
            assert "\n" not in str(exc)
            return
    assert url.get_backend_name() != "sqlite" or url.database not in (None, "", ":memory:")
    assert not list(directory.iterdir())  # resolving a URL creates nothing


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                     st.text(max_size=6)),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                        max_size=4),
                           max_leaves=8)
knob_values = st.dictionaries(st.sampled_from(["mode", "scale", "pad", "other"]),
                              st.one_of(json_values, st.sampled_from(["ok", "wrong", 2, 3, 1.0, "2"])), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), json_values.map(json.dumps), knob_values.map(json.dumps)))
def test_genome_json_only_raises_value_error(text):
    space = get_family(FAULTY).space
    try:
        genome = space.genome_from_json(text)
    except ValueError as exc:
        assert str(exc)
        return
    # parsing checks each knob's domain; the constraints are checked apart, and never raise either
    assert space.genome_from_json(genome.to_json()) == genome
    assert all(isinstance(problem, str) for problem in space.violations(genome))


WORDS = ["--db", "--top", "--format", "--out", "--individual", "--bogus", "-h", "1", "2", "0", "-1", "x", "1e3",
         "html", "md", "dot", "json", "pdf", "evo.db", "text.db", "empty.db", "missing.db", "sqlite://", "out",
         "sqlite:///evo.db?mode=memory", "postgresql://u:secret@127.0.0.1:1/x", "bogus://x", "/", ""]
command_lines = st.tuples(
    st.sampled_from([["runs"], ["show"], ["lineage"], ["export"], ["db", "current"], ["families"], ["db"], []]),
    st.lists(st.sampled_from(WORDS) | st.text(max_size=6), max_size=6),
).map(lambda parts: parts[0] + parts[1])


@pytest.fixture(scope="module")
def store_directory(tmp_path_factory):
    """A directory holding an evo database with one (empty) run, a text file and an empty file."""
    directory = tmp_path_factory.mktemp("store")
    Store(Database(resolve_url(str(directory / "evo.db"))).open()).create_run(
        family="cpu_gemm", strategy="evolution", target=None, seed=0, config={})
    (directory / "text.db").write_text("not a database\n")
    (directory / "empty.db").write_bytes(b"")
    return directory


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines)
def test_fuzzed_command_lines_work_or_say_one_line_and_write_nothing(store_directory, monkeypatch, argv):
    monkeypatch.setenv("EVO_DB", "evo.db")
    before = _listing(store_directory)
    out, err = io.StringIO(), io.StringIO()
    with _inside(store_directory), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help prints and exits 0, argparse's own way
            code = exc.code
    assert code in (0, 2), (argv, err.getvalue())
    assert "secret" not in out.getvalue() + err.getvalue()
    if code == 2:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err.getvalue())
        assert _listing(store_directory) == before, argv  # refused: nothing written
    else:
        after = _listing(store_directory)  # a read command may add files (a report, an export) only
        assert {name: after.get(name) for name in before} == before, argv


def test_a_file_that_is_not_an_evo_database_is_refused_in_one_line(store_directory, capsys):
    cases = {"text.db": {"runs": "file is not a database", "db": "file is not a database"},
             "empty.db": {"runs": "is empty: no evo run", "db": None}}  # `db current` of an empty file: none
    for name, expected_by_command in cases.items():
        for argv in (["runs"], ["show", "1"], ["db", "current"]):
            expected = expected_by_command.get(argv[0], expected_by_command["runs"])
            if expected is None:
                assert main([*argv, "--db", str(store_directory / name)]) == 0
                assert "schema revision none" in capsys.readouterr().out
                continue
            assert main([*argv, "--db", str(store_directory / name)]) == 2
            err = capsys.readouterr().err.strip()
            assert expected in err and len(err.splitlines()) == 1, err
    assert (store_directory / "empty.db").stat().st_size == 0  # refusing wrote nothing, not even a header
    assert main(["show", "1", "--db", "sqlite://"]) == 2
    assert "in-memory SQLite database would lose every result" in capsys.readouterr().err
