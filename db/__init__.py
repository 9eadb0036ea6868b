"""db: SQLAlchemy models, sessions, Alembic migrations, and the store the search writes to."""

from evo.db.memory import Memory, Remembered
from evo.db.session import Database, SchemaError, is_sqlite_file, resolve_url, safe_url
from evo.db.store import EvaluationRow, HistoryEntry, MeasurementRow, NewIndividual, ParentLink, RunInfo, RunLost, RunStatus, Store

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
    "RunStatus",
    "SchemaError",
    "Store",
    "is_sqlite_file",
    "resolve_url",
    "safe_url",
]
