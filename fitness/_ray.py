"""Ray for the pipeline: start a local instance or join a cluster, and say in one line why not."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable


def short_error(exc: BaseException) -> str:
    """An exception's first line, at most 300 characters (its type where it has no text)."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class RayUnavailable(ValueError):
    """Ray could not be reached or joined at the address the user gave (one line, nothing written)."""


_RAY_ADDRESS = re.compile(r"^(?:ray://)?([A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$")


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """RayUnavailable unless ``address`` is ``auto``, or HOST:PORT (or ray://HOST:PORT) where something
    answers a TCP connection within ``timeout_s``: Ray's own join retries an address that nothing
    answers for minutes."""
    if address == "auto":
        return
    match = _RAY_ADDRESS.match(address)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise RayUnavailable(f"Ray address {address!r} is malformed: expected HOST:PORT (a cluster's head, port "
                             f"6379 by default), ray://HOST:PORT or auto")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    try:
        connection = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise RayUnavailable(f"nothing answers at Ray address {address!r} ({exc.strerror or exc}): start a cluster "
                             f"there (`ray start --head --port {port}`) or leave --ray-address out to start a local "
                             f"Ray") from None
    with connection:
        answer = _grpc_answer(connection) if not os.environ.get("RAY_USE_TLS") else "tls"
    if answer != "ok":
        raise RayUnavailable(f"something answers at Ray address {address!r}, but not as a Ray cluster's head does "
                             f"({answer}): give the head's address (`ray status` there prints it), or leave "
                             f"--ray-address out to start a local Ray")


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS frame
_HTTP2_SETTINGS = 4  # a frame's type byte


def _grpc_answer(connection: socket.socket) -> str:
    """Ray's head (its GCS, or the Ray client server) speaks gRPC, HTTP/2: to a client's preface it answers
    with a SETTINGS frame. "ok", or what came back instead (an HTTP/1 server, silence, a closed connection)."""
    try:
        connection.sendall(_HTTP2_PREFACE)
        header = connection.recv(9)
    except OSError as exc:
        return f"no HTTP/2 answer: {exc.strerror or exc}"
    if len(header) >= 4 and header[3] == _HTTP2_SETTINGS:
        return "ok"
    if header.startswith(b"HTTP/"):
        return "an HTTP/1 server"
    return f"no gRPC answer ({header[:16]!r})" if header else "the connection was closed without an answer"


def prepare_to_join() -> None:
    """`ray start --head` (Ray 2.60) turns on token authentication and writes its token to
    ~/.ray/auth_token, but a driver joins with authentication off unless RAY_AUTH_MODE says otherwise, and
    is then refused: where such a token is there and the user has not chosen, use it."""
    if "RAY_AUTH_MODE" not in os.environ and (os.environ.get("RAY_AUTH_TOKEN") or
                                              os.path.exists(os.path.expanduser("~/.ray/auth_token"))):
        os.environ["RAY_AUTH_MODE"] = "token"


@contextlib.contextmanager
def _stderr_held_back():
    """Ray's core writes each retry of a refused join to the process's stderr (file descriptor 2), a
    line a second; while joining, that goes to a scratch file (evo says in one line why a join failed)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def start_ray(address: str | None, ship: Path | None = None) -> Callable[[], None]:
    """Connect to ``address`` or start a local Ray instance; returns how to let go of it. An address
    that cannot be joined is a RayUnavailable. Ray's driver installs its own SIGTERM handler (which
    exits at once); the one in place before (evo's: stop cleanly, as for Ctrl-C) is put back.
    ``ship``: a family's folder, sent to a cluster's workers in Ray's runtime environment (importable
    there by its name; seeds' registry finds it when the folder's path is not on that node)."""
    if address:
        check_ray_address(address)
        prepare_to_join()  # before Ray is imported: it reads its settings then
    import ray

    if ray.is_initialized():
        return lambda: None
    common = dict(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
    # Ray warns on every start that token authentication is on; that is Ray's default, not news.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        if address:
            runtime_env = {"py_modules": [str(ship)]} if ship is not None else None
            with _stderr_held_back():
                ray.init(address=address, runtime_env=runtime_env, **common)
        else:
            # address="local": a new instance of our own, even where `ray start` left a cluster on this machine
            ray.init(address="local", num_cpus=os.cpu_count() or 1, object_store_memory=256 * 1024 * 1024, **common)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        if isinstance(exc, RayUnavailable) or not address:
            raise
        hint = ("; Ray 2.60's token authentication: the cluster's token (~/.ray/auth_token where it was started, "
                "or RAY_AUTH_TOKEN) must be here too, with RAY_AUTH_MODE=token" if os.environ.get("RAY_AUTH_MODE")
                != "token" else "; is its token (RAY_AUTH_TOKEN, or ~/.ray/auth_token) the cluster's?")
        raise RayUnavailable(f"Ray at {address!r} cannot be joined: {short_error(exc)}{hint}") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return ray.shutdown


def node_name() -> str:
    """This host, and in a Ray worker its Ray node (several nodes may share a host)."""
    import platform

    import ray

    if not ray.is_initialized():
        return platform.node()
    return f"{platform.node()}/{ray.get_runtime_context().get_node_id()[:8]}"
