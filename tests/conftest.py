import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

FAULTY = "tests.families.faulty:FAMILY"
# exported ops keep their measured decisions here, not in the home of whoever runs the tests (subprocesses inherit it)
os.environ.setdefault("EVO_OP_CACHE", tempfile.mkdtemp(prefix="evo-op-decisions-"))


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance shared by the tests that need it (the search reuses it)."""
    from evo.fitness import start_ray

    release = start_ray(None)
    yield
    release()


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "artifacts"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Artifacts of each test go to its own directory (the cache is tested explicitly)."""
    monkeypatch.setenv("EVO_CACHE", str(tmp_path / "evo-cache"))
    monkeypatch.delenv("EVO_DB", raising=False)


def have_nvcc() -> bool:
    from evo.fitness.build import compiler_command

    return shutil.which(compiler_command("nvcc")) is not None


def have_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    skip_nvcc = pytest.mark.skip(reason="nvcc is not installed here")
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU here")
    for item in items:
        if "nvcc" in item.keywords and not have_nvcc():
            item.add_marker(skip_nvcc)
        if "gpu" in item.keywords and not have_gpu():
            item.add_marker(skip_gpu)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a new database on the PostgreSQL server whose
    URL is in EVO_TEST_POSTGRES_URL (``.ci/run`` starts one; skipped where there is none)."""
    if request.param == "sqlite":
        yield str(tmp_path / "evo.db")
        return
    server = os.environ.get("EVO_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("no PostgreSQL server: set EVO_TEST_POSTGRES_URL (.ci/start-postgres starts one)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"evo_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(server).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()
