import os
import shutil

import pytest

FAULTY = "tests.families.faulty:FAMILY"


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance shared by the tests that need it (the search reuses it)."""
    from fitness.workers import start_ray

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
    from fitness.build import compiler_command

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
