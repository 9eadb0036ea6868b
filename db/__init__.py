"""db: SQLAlchemy models, sessions, Alembic migrations, and the store the search writes to."""

from db.memory import Memory, Remembered
from db.session import Database, SchemaError, is_sqlite_file, resolve_url, safe_url
from db.store import EvaluationRow, HistoryEntry, MeasurementRow, NewIndividual, ParentLink, RunInfo, RunLost, Store

__all__ = [
    "Database",
    "EvaluationRow",
    "HistoryEntry",
    "MeasurementRow",
    "Memory",
    "NewIndividual",
    "ParentLink",
    "Remembered",
    "RunInfo",
    "RunLost",
    "SchemaError",
    "Store",
    "is_sqlite_file",
    "resolve_url",
    "safe_url",
]
