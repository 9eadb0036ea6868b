"""Engines, sessions and the schema version.

``Database(url)`` validates the URL without touching anything; ``open()`` connects, creates a
new database at the newest schema, and refuses an older schema with the command to upgrade it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")
_SCHEMA_LOCK_KEY = 0x65766F  # "evo": the PostgreSQL advisory lock held while a schema is created
DEFAULT_DB = "evo.db"


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C or SIGTERM arriving in the main thread inside this block is handled as it leaves. An
    interrupt raised inside SQLAlchemy's commit or close can leave the pooled connection mid-transaction:
    the run's next write, the one that marks it interrupted, was then refused or lost (the row stayed
    ``running``). A held signal goes to the handler that was installed before; others threads (the
    heartbeat) are never interrupted by Python and hold nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in INTERRUPTS}
    held = [sig for sig, handler in previous.items() if callable(handler)]  # not ignored, not left to C
    for sig in held:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for sig in held:
            signal.signal(sig, previous[sig])
        if received:
            previous[received[0]](received[0], None)


class SchemaError(Exception):
    """The database's schema is not the one this version of evo uses."""


def resolve_url(value: str | None) -> URL:
    """A SQLAlchemy URL from ``--db``/``EVO_DB``/the default; a bare path means a SQLite file.

    Raises ``ValueError`` (never echoing a password) when the URL is malformed.
    """
    text = value if value else os.environ.get("EVO_DB") or DEFAULT_DB
    if "://" not in text:
        try:
            path = Path(text).expanduser()
        except RuntimeError:  # ~someone who does not exist here
            raise ValueError(f"database path {text!r}: cannot expand its ~ (no such user here)") from None
        if path.is_dir():
            raise ValueError(f"database path {text!r} is a directory")
        if not path.resolve().parent.is_dir():
            raise ValueError(f"database directory {str(path.resolve().parent)!r} does not exist")
        return URL.create("sqlite", database=str(path.resolve()))
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        raise ValueError("database URL is malformed (expected e.g. sqlite:///evo.db or "
                         "postgresql://user@host/db)") from None
    if url.get_backend_name() == "sqlite" and (not is_sqlite_file(url) or url.query.get("mode") == "memory"):
        raise ValueError("an in-memory SQLite database would lose every result when evo exits: "
                         "give a file (sqlite:///evo.db or a path)")
    try:
        dialect = url.get_dialect()
        if getattr(dialect, "is_async", False):
            raise ValueError(f"database URL names an asynchronous driver ({url.drivername!r}); evo needs a synchronous "
                             f"one, e.g. postgresql+psycopg://")
        dialect.import_dbapi()  # the driver itself: missing, it is the user's to install, not a traceback
    except NoSuchModuleError:
        raise ValueError(f"database URL names an unknown backend {url.drivername!r}") from None
    except ImportError as exc:
        hint = ("pip install -e '.[postgres]' (psycopg) or use postgresql+psycopg://" if url.get_backend_name() ==
                "postgresql" else "install it, or use SQLite (a file path) or postgresql+psycopg://")
        raise ValueError(f"database backend {url.drivername!r} needs its driver, which is not installed "
                         f"({exc.name}): {hint}") from None
    return url


def safe_url(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def is_sqlite_file(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")


CONNECT_TIMEOUT_S = 10  # seconds a database server has to answer before evo gives up on it

# A database server's words for a user's mistake (any one of the patterns; a pattern's words all present),
# and what to do about it.
_FIXES = (
    ((("password authentication failed",), ("no password supplied",), ("authentication failed",)),
     "check the user name and password in the URL (postgresql+psycopg://USER:PASSWORD@HOST:PORT/NAME)"),
    ((("role", "does not exist"),), "check the user name in the URL, or create that role on the server"),
    ((("database", "does not exist"),),
     "create it first (createdb, or CREATE DATABASE on the server), or name one that exists"),
    ((("connection refused",),), "start the server, or correct the host and port in the URL"),
    ((("resolve host",), ("translate host name",), ("name or service not known",)),
     "correct the host name in the URL"),
    ((("timeout expired",), ("timed out",)),
     "the server did not answer: check the host, the port and any firewall between"),
    ((("permission denied",),), "ask the server's administrator for access, or use another database"),
)


def fix_for(reason: str) -> str:
    """"; FIX" for a database error a user can fix, from the server's or driver's message, or ""."""
    lowered = reason.lower()
    for patterns, fix in _FIXES:
        if any(all(word in lowered for word in pattern) for pattern in patterns):
            return f"; {fix}"
    return ""


class Database:
    def __init__(self, url: URL) -> None:
        self.url = url
        self._engine: Engine | None = None
        self._sessions: sessionmaker | None = None
        self.read_only = False  # a SQLite file evo may not write (a read-only mount): read it as it is

    def cannot_write(self) -> bool:
        """A SQLite file that exists but that evo cannot write, or beside which it cannot create WAL's
        files (a read-only mount, or a file or folder without write permission)."""
        if not is_sqlite_file(self.url) or not self.exists():
            return False
        path = Path(self.url.database)
        return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))

    def cannot_create(self) -> str | None:
        """Why a SQLite file that does not exist yet could not be created where it is named (None: it could;
        tried with a scratch file beside it, removed at once)."""
        if not is_sqlite_file(self.url) or self.exists():
            return None
        import tempfile

        try:
            with tempfile.NamedTemporaryFile(dir=Path(self.url.database).parent, prefix=".evo-create-test-"):
                return None
        except OSError as exc:
            return exc.strerror or str(exc)

    @property
    def description(self) -> str:
        return safe_url(self.url)

    def exists(self) -> bool:
        """False only for a SQLite file that has not been created yet."""
        return not is_sqlite_file(self.url) or Path(self.url.database).exists()

    def is_empty_file(self) -> bool:
        """A SQLite file of 0 bytes: no schema, and connecting (WAL mode) would write its header."""
        return is_sqlite_file(self.url) and self.exists() and Path(self.url.database).stat().st_size == 0

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            kwargs = {}
            url = self.url
            if self.url.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 60}
                if self.read_only:  # nothing written, not even WAL's files: SQLite's read-only, immutable mode
                    url = URL.create("sqlite", database=f"file:{Path(self.url.database).as_posix()}?mode=ro&immutable=1",
                                     query={"uri": "true"})
            elif self.url.get_backend_name() == "postgresql" and "connect_timeout" not in self.url.query:
                kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}  # a server that never answers
            engine = create_engine(url, pool_pre_ping=True, **kwargs)
            if self.url.get_backend_name() == "sqlite":
                event.listen(engine, "connect", _sqlite_read_only_pragmas if self.read_only else _sqlite_pragmas)
            self._engine = engine
            self._sessions = sessionmaker(engine, expire_on_commit=False)
        return self._engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One unit of work: commits on success, rolls back on any exception. Ctrl-C and SIGTERM take
        effect once it is over (``interrupts_held``)."""
        self.engine
        with interrupts_held():
            session = self._sessions()
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
            finally:
                session.close()

    # -- schema ---------------------------------------------------------------------------
    def _alembic(self, connection) -> Config:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.set_main_option("sqlalchemy.url", self.url.render_as_string(hide_password=False).replace("%", "%%"))
        config.attributes["connection"] = connection
        return config

    def head_revision(self) -> str:
        return ScriptDirectory(str(MIGRATIONS)).get_current_head()

    def knows(self, revision: str) -> bool:
        """Whether ``revision`` is one of this evo's schema revisions (not a newer evo's)."""
        try:
            return ScriptDirectory(str(MIGRATIONS)).get_revision(revision) is not None
        except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown revision
            return False

    @contextmanager
    def _reporting_connection_errors(self) -> Iterator[None]:
        """An unreachable server, a bad password, a file that is not SQLite: a one-line ``SchemaError``."""
        sidecars = self._sidecars_absent()
        try:
            yield
        except DatabaseError as exc:
            reason = " ".join(str(exc.orig).split())  # one line: drivers' messages span several
            self._remove_sidecars(sidecars)
            raise SchemaError(f"cannot open database {self.description}: {reason}{fix_for(reason)}") from None
        except SchemaError:
            self._remove_sidecars(sidecars)
            raise

    def _sidecars_absent(self) -> list[Path]:
        """A SQLite file's -wal and -shm files that are not there now."""
        if not is_sqlite_file(self.url):
            return []
        base = Path(self.url.database)
        return [path for path in (base.with_name(base.name + "-wal"), base.with_name(base.name + "-shm"))
                if not path.exists()]

    def _remove_sidecars(self, absent: list[Path]) -> None:
        """A database refused leaves nothing beside it: the -wal and -shm files opening it made are removed."""
        if not absent:
            return
        if self._engine is not None:
            self._engine.dispose()
        for path in absent:
            with contextlib.suppress(OSError):
                path.unlink()

    def refuse_a_database_not_evos(self) -> None:
        """SchemaError, having written nothing, when the SQLite file is not a database or is another
        application's (tables, but no evo schema version): evo's own connections would switch it to WAL
        and ``upgrade`` would add evo's tables to it. Read through a read-only connection of its own."""
        if not is_sqlite_file(self.url) or not self.exists() or self.is_empty_file():
            return
        flags = "mode=ro&immutable=1" if self.cannot_write() else "mode=ro"  # immutable: no -shm needed
        sidecars = self._sidecars_absent()
        try:
            with contextlib.closing(sqlite3.connect(f"file:{Path(self.url.database).as_posix()}?{flags}", uri=True)) as c:
                tables = {row[0] for row in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            self._remove_sidecars(sidecars)
            raise SchemaError(f"cannot open database {self.description}: {exc}") from None
        if tables and "alembic_version" not in tables:
            raise SchemaError(f"database {self.description} is not evo's: it holds other tables "
                              f"({', '.join(sorted(tables)[:5])}) and no evo schema; evo leaves it as it is "
                              f"(give --db another file)")

    def current_revision(self) -> str | None:
        self.refuse_a_database_not_evos()
        with self._reporting_connection_errors(), self.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    def upgrade(self) -> tuple[str | None, str]:
        """Migrate to the newest schema; returns (revision before, revision after). A database with
        tables of another application (and no evo schema) is refused, untouched."""
        before = self.current_revision()
        if before is not None and not self.knows(before):
            raise SchemaError(f"database {self.description} was written by a newer evo (schema revision {before}; "
                              f"this evo knows revisions up to {self.head_revision()}): it cannot be upgraded by this "
                              f"one, and is left as it is")
        if before is None:
            with self._reporting_connection_errors(), self.engine.connect() as connection:
                foreign = set(inspect(connection).get_table_names()) - {"alembic_version"}
            if foreign:
                raise SchemaError(f"database {self.description} is not evo's: it holds other tables "
                                  f"({', '.join(sorted(foreign)[:5])}) and no evo schema; evo leaves it as it is")
        with self._reporting_connection_errors(), self.engine.begin() as connection:
            command.upgrade(self._alembic(connection), "head")
        return before, self.head_revision()

    def open(self, *, create: bool = True) -> "Database":
        """Connect; create the schema in an empty database; refuse an outdated one.

        Two processes opening one new database at once (two searches started together) must not
        both create the schema: the look and the creation happen under a lock that spans processes.
        """
        if not create and self.is_empty_file():
            raise SchemaError(f"database {self.description} is empty: no evo run has been stored in it")
        with self._reporting_connection_errors():  # a refusal leaves no -wal or -shm file it made
            return self._open(create)

    def _open(self, create: bool) -> "Database":
        self.refuse_a_database_not_evos()
        with self._reporting_connection_errors(), self._schema_lock(exclusive=create):
            with self.engine.connect() as connection:
                tables = set(inspect(connection).get_table_names())
                current = MigrationContext.configure(connection).get_current_revision()
            head = self.head_revision()
            if current is None and not (tables - {"alembic_version"}):
                if not create:
                    raise SchemaError(f"database {self.description} is empty: no evo run has been stored in it")
                self.upgrade()
                return self
        if current is None:
            raise SchemaError(f"database {self.description} has tables but no evo schema version")
        if current != head and not self.knows(current):
            raise SchemaError(f"database {self.description} was written by a newer evo (schema revision {current}; "
                              f"this evo knows revisions up to {head}): use that evo, or a newer one, with it")
        if current != head:
            raise SchemaError(
                f"database {self.description} has schema revision {current}, this evo needs {head}: "
                f"run `evo db upgrade --db <url>` (back up the file first)")
        return self

    @contextmanager
    def _schema_lock(self, *, exclusive: bool) -> Iterator[None]:
        """Held while the schema is looked at and, in a new database, created.

        SQLite: ``flock`` on the database's directory (SQLite's DDL is not one transaction, so another
        process could otherwise see half a schema). PostgreSQL: a
        session advisory lock. A reader that may not create anything takes no lock.
        """
        if not exclusive:
            yield
        elif is_sqlite_file(self.url):
            # the lock is on the file's directory: opening and closing the database file itself in this
            # process would drop SQLite's own POSIX locks on it (closing any descriptor of a file
            # releases all of the process's fcntl locks on that file), and a lock file would be litter
            directory = os.open(Path(self.url.database).parent, os.O_RDONLY)
            try:
                fcntl.flock(directory, fcntl.LOCK_EX)
                yield
            finally:
                os.close(directory)  # releases the flock
        elif self.url.get_backend_name() == "postgresql":
            with self.engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
                try:
                    yield
                finally:
                    connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _SCHEMA_LOCK_KEY})
                    connection.commit()
        else:
            yield

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


def _sqlite_read_only_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()
