"""Small parts of the search loop (evo/search.py): a genome's values as a constraint reads them, signals held while a run's
last status is written, and the CPU threads a CPU family's anchor is timed with."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Mapping


class KnobValues(Mapping):
    """A setting's values as a family's ``takes`` reads a genome (item access, ``as_dict``), for a constraint:
    where some knobs are not drawn yet, reading one leaves the constraint undecided as the space expects."""

    def __init__(self, values: Mapping) -> None:
        self._values = values

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def as_dict(self) -> Mapping:
        return self._values


@contextlib.contextmanager
def signals_held():
    """Ctrl-C and SIGTERM wait (in the main thread) while a run's last status is written."""
    held = {signal.SIGINT, signal.SIGTERM}
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def default_threads() -> int:
    """PyTorch's CPU threads in this process (the user's): what a CPU family's anchor is timed with."""
    import torch

    return torch.get_num_threads()
