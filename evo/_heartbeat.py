"""A running search's heartbeat: its driver's host and pid, and every HEARTBEAT_S the time it was last
alive, in the run's row; a run marked running whose heartbeat stopped has lost its driver (`evo runs`
says so, and `--resume` takes it over; one still beating is refused, naming where it runs)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

from evo.db import Store
from evo.db.store import HEARTBEAT_S


class Heartbeat:
    """A thread of its own beats, so that a long gate or compile never looks like a dead driver. A beat
    that fails (a database busy for a moment) is skipped, never the search's end."""

    def __init__(self, store: Store, run_id: int) -> None:
        self.store = store
        self.run_id = run_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"evo-heartbeat-{run_id}", daemon=True)

    def _beat(self) -> None:
        with contextlib.suppress(Exception):
            self.store.beat(self.run_id, socket.gethostname(), os.getpid())

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._beat()

    def start(self) -> "Heartbeat":
        self._beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
