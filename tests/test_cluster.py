"""A Ray cluster of several nodes as a user starts one (`ray start --head`, then `ray start --address`
for each worker node; here the nodes share this machine), with PostgreSQL as the store that searches
on it share. Each node runs in a process group of its own, stopped by the test (never `ray stop`,
which would stop every Ray on the machine)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_search import REPO, _reap, _spawn, rows

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")  # where `ray start` leaves the newest head's address


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _doctor(address: str) -> str:
    done = subprocess.run([sys.executable, "-m", "evo", "doctor", "--ray-address", address], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    return done.stdout + done.stderr


@contextmanager
def ray_cluster(tmp_path: Path, nodes: int = 2, cpus: int = 2):
    """``nodes`` Ray nodes on this machine (a head and workers joined to it); yields the head's address."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    remembered = CURRENT_CLUSTER.read_text() if CURRENT_CLUSTER.exists() else None
    started: list[subprocess.Popen] = []
    try:
        head = ["start", "--head", "--port", str(port), "--num-cpus", str(cpus), "--include-dashboard=false", "--block"]
        worker = ["start", "--address", address, "--num-cpus", str(cpus), "--block"]
        for number, args in enumerate([head] + [worker] * (nodes - 1)):
            with open(tmp_path / f"node{number}.log", "w") as log:
                # a worker node joins the head's token authentication (Ray 2.60's default)
                env = {**os.environ, **({"RAY_AUTH_MODE": "token"} if number else {})}
                started.append(subprocess.Popen(RAY + args, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True, env=env))
            _wait_for(lambda: number or _answers(port), 60, "the head to listen", tmp_path)
        _wait_for(lambda: f"{nodes} node(s)" in _doctor(address), 120, f"{nodes} nodes to join", tmp_path)
        yield address
    finally:
        for process in reversed(started):
            _stop_group(process)
        if remembered is None:
            CURRENT_CLUSTER.unlink(missing_ok=True)
        else:
            CURRENT_CLUSTER.write_text(remembered)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _wait_for(condition, timeout_s: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            tails = {p.name: p.read_text()[-1500:] for p in sorted(logs.glob("node*.log"))}
            raise AssertionError(f"waited {timeout_s:g} s for {what}: {tails}")
        time.sleep(1)


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):  # `ray start --block` may outlive SIGTERM
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_searches_share_a_cluster_of_two_nodes_and_a_postgresql_store(database_url, tmp_path):
    with ray_cluster(tmp_path) as address:
        processes = []
        try:
            for seed in range(2):
                with open(tmp_path / f"search{seed}.log", "w") as log:
                    processes.append(_spawn(["search", "--family", "cpu_gemm", "--budget", "12", "--population", "6",
                                             "--trials", "1", "--seed", str(seed), "--ray-address", address,
                                             "--db", database_url], log))
            codes = [process.wait(300) for process in processes]
        finally:
            for process in processes:
                _reap(process)
        logs = [(tmp_path / f"search{seed}.log").read_text()[-2000:] for seed in range(2)]
        assert codes == [0, 0], logs
        # a family from outside the repository, its folder sent to the workers in Ray's runtime environment
        for args in (["new-family", "outside"], ["search", "--family", "./outside", "--budget", "4", "--trials", "1",
                                                 "--ray-address", address, "--db", "outside.db"]):
            done = subprocess.run([sys.executable, "-m", "evo", *args], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
            assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        assert rows(tmp_path / "outside.db", "SELECT COUNT(*) FROM evaluations WHERE status = 'ok'") == [(4,)]
        # a search without --ray-address starts a Ray of its own, even with a `ray start` cluster here
        with open(tmp_path / "local.log", "w") as log:
            local = _spawn(["search", "--family", "cpu_gemm", "--budget", "2", "--trials", "1",
                            "--db", str(tmp_path / "local.db")], log)
            try:
                assert local.wait(300) == 0, (tmp_path / "local.log").read_text()[-2000:]
            finally:
                _reap(local)
    assert rows(database_url, "SELECT id, status FROM runs ORDER BY id") == [(1, "budget_exhausted"),
                                                                             (2, "budget_exhausted")]
    assert rows(database_url, "SELECT COUNT(*) FROM evaluations") == [(24,)]
    # the builds ran on both nodes' CPUs: each evaluation names the Ray node that compiled it
    nodes = {node for (node,) in rows(database_url, "SELECT build_node FROM evaluations")}
    assert len(nodes) == 2 and all("/" in node for node in nodes), nodes
