"""Shared fixtures: every test gets its own data folder and ledger, so ./data is never touched."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

# One OpenMP and one BLAS thread per test process, as app.py and ui/serve.py give the app: with two xdist
# workers on two cores, scikit-learn's spinning OpenMP threads made k-means fits 10-20x slower under load
# (20 s instead of 1 s for test_limits' MCMC chains). Set before numpy and scikit-learn load them (they read
# these once); subprocesses (batch jobs, spawned writers) inherit them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

pytest_plugins = ["tests.postgres_server"]  # postgres_server and ledger_url fixtures

APP = ROOT / "app.py"


@pytest.fixture(autouse=True)
def isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DPCORE_DATA_DIR and DPCORE_LEDGER_URL at a fresh folder under ``tmp_path``."""
    folder = tmp_path / "dpcore-data"
    folder.mkdir()
    monkeypatch.setenv("DPCORE_DATA_DIR", str(folder))
    monkeypatch.setenv("DPCORE_LEDGER_URL", f"sqlite:///{(folder / 'ledger.db').as_posix()}")
    monkeypatch.setenv("DPCORE_USER", "test-curator")
    return folder


@pytest.fixture(autouse=True)
def main_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore ``__main__`` after each test: an AppTest run makes its script ``__main__``, which a later
    multiprocessing "spawn" child in the same worker would run again (and fail) before its target."""
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])


@pytest.fixture
def app_path() -> str:
    """Path of the dashboard's entry script, for ``AppTest.from_file``."""
    return str(APP)


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """File name -> bytes of every ``st.download_button`` payload produced during AppTest runs."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    captured: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        if filename is not None and isinstance(path_or_data, bytes):
            captured[filename] = path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    return captured


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (2 cores, no web UI) for every Spark test (~15 s to start)."""
    import shutil

    if shutil.which("java") is None:
        pytest.skip("Spark needs Java: apt-get install default-jre-headless")
    from dpcore.outofcore.source import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()
